package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/bftrainer/bftrainer/names"
	"github.com/bftrainer/bftrainer/sidecar"
)

// schedulerFlag is --scheduler: a registered scheduler instead of
// hooks.scheduler.
func schedulerFlag() *cli.StringFlag {
	f := choiceFlag("scheduler", "NAME", schedulers().Names(), "", "the scheduler to ask")
	f.DefaultText = "hooks.scheduler, else " + schedulers().Names()[0]
	return f
}

func syncCommand() *cli.Command {
	return &cli.Command{
		Name:  "sync",
		Usage: "reconcile the pool with the scheduler's own view of idle nodes",
		Description: `Asks the scheduler which nodes are exactly idle, with its own node listing
(Slurm: sinfo -h -N -o '%N %t', state exactly "idle", not "comp" or
"idle*"; the program is set per scheduler in the [scheduler] table),
records what the pool has wrong — leaves for nodes the scheduler uses,
releases for nodes it says are idle, which the re-plan joins once the
listing confirms them (lifting a fence a missed epilog left) — and
re-plans. The journal is recorded before the scheduler is asked, and
whatever is recorded about a node after that wins over sync. Run it at
boot, from cron, or after a controller restart: hooks are not a reliable
event stream (a crashed node runs no epilog).

  bftrainer sync
  bftrainer sync --scheduler lsf --no-reconcile`,
		Flags: []cli.Flag{
			schedulerFlag(),
			&cli.BoolFlag{Name: "no-reconcile", Usage: "record only; do not re-plan now"},
		},
		Action: coreAction(func(c *cli.Context, core *sidecar.Core, _ Config) error {
			joined, left, err := core.Sync(c.Context, c.String("scheduler"), c.Bool("no-reconcile"))
			if joined != nil || left != nil || err == nil {
				fmt.Fprintf(c.App.Writer, "joined %d %s\nleft %d %s\n", len(joined), names.CompressHostlist(joined), len(left), names.CompressHostlist(left))
			}
			return err
		}),
	}
}
