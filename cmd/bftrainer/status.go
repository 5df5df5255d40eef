package main

import (
	"github.com/urfave/cli/v2"

	"github.com/bftrainer/bftrainer/sidecar"
)

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "show the idle pool and the Trainers now",
		Description: `The pool as the next round will see it (events recorded since the last
round included, counted as unfolded events): idle nodes, free or lent to
Trainers, nodes completing their last job (or, as Slurm's sinfo says,
planned: held for a pending job's planned start), and the admitted
Trainers, running or waiting (holding no node, so nothing of them runs) —
and how far to trust it: a "stale" line each for hook records not yet in
the history, events no reconciler has folded, no reconciler running
while work waits, hooks failing in the last hour, a database that cannot
be written. It decides nothing and needs no solver.

  bftrainer status
  bftrainer status --format json

csv is "field,value" rows (a Trainer's fields as trainers.N.FIELD), for
scripts and monitoring; docs/metrics.md has the same figures for
Prometheus.`,
		Flags: []cli.Flag{formatFlag(fmtTable, fmtJSON, fmtCSV)},
		Action: coreAction(func(c *cli.Context, core *sidecar.Core, _ Config) error {
			st, err := core.Status(c.Context)
			if err != nil {
				return err
			}
			return writeRecord(c.App.Writer, st, c.String("format"))
		}),
	}
}
