package main

import (
	"github.com/urfave/cli/v2"

	"github.com/bftrainer/bftrainer/sidecar"
)

func nodeCommand() *cli.Command {
	flags := []cli.Flag{
		&cli.StringFlag{Name: "job", Usage: "scheduler `JOB` id the change belongs to (guards against late events)"},
		&cli.BoolFlag{Name: "no-reconcile", Usage: "record only; do not re-plan now"},
	}
	action := func(join bool) cli.ActionFunc {
		return coreAction(func(c *cli.Context, core *sidecar.Core, _ Config) error {
			nodes, err := core.Nodes(c.Context, join, c.Args().Slice(), c.String("job"), c.Bool("no-reconcile"))
			if len(nodes) > 0 {
				say(c.App.ErrWriter, "recorded %s of %d node(s)", c.Command.Name, len(nodes))
			}
			return err
		})
	}
	return &cli.Command{
		Name:  "node",
		Usage: "record nodes joining or leaving the idle pool (for any scheduler, or by hand)",
		Description: `NODES are names or Slurm hostlist expressions (n[01-16],gpu3).

  bftrainer node join n[1-4]          # these nodes are exactly idle: lend them
  bftrainer node leave n3 --job 1234  # the scheduler takes n3 for job 1234

"leave" is what a scheduler's prolog does; it does not kill processes
(the node's own prolog does). After recording, a re-plan runs unless
--no-reconcile.`,
		Subcommands: []*cli.Command{
			{Name: "join", Usage: "nodes are exactly idle: add them to the pool", ArgsUsage: "NODES…", Flags: flags, Action: action(true),
				Description: `NODES are names or Slurm hostlist expressions. They must be exactly idle:
the scheduler runs nothing on them and will not until it takes them back
(then "node leave", or its prolog hook, says so).

  bftrainer node join n[1-4] gpu3`},
			{Name: "leave", Usage: "the scheduler takes nodes: remove them from the pool", ArgsUsage: "NODES…", Flags: flags, Action: action(false),
				Description: `What a scheduler's controller prolog does: the nodes leave the pool, and
the Trainers that held them lose them at the next round. It does not kill
processes (the node's own prolog does). --job guards against late events:
a later join or release of another job does not undo it.

  bftrainer node leave n3 --job 1234`},
		},
	}
}
