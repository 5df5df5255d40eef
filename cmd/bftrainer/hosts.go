package main

import (
	"github.com/urfave/cli/v2"

	"github.com/bftrainer/bftrainer/sidecar"
)

func hostsCommand() *cli.Command {
	return &cli.Command{
		Name:      "hosts",
		Usage:     "print a Trainer's nodes as host:slots lines (Elastic Horovod's --host-discovery-script)",
		ArgsUsage: "TRAINER",
		Description: `horovodrun --host-discovery-script calls this every second:

  horovodrun --host-discovery-script "bftrainer hosts my-trainer" ...

  bftrainer hosts my-trainer

It prints one "node:slots" line per node the Trainer holds now (nothing
when it holds none) and exits 0; an unknown Trainer exits 1. It prints
the host file the runner replaces atomically each round
(trainer.state_dir/hosts/TRAINER), or, when there is none, the database.`,
		Action: coreAction(func(c *cli.Context, core *sidecar.Core, _ Config) error {
			id, err := trainerArg(c)
			if err != nil {
				return err
			}
			b, err := core.Hosts(c.Context, id)
			if err != nil {
				return err
			}
			_, err = c.App.Writer.Write(b)
			return err
		}),
	}
}
