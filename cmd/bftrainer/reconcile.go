package main

import (
	"github.com/urfave/cli/v2"

	"github.com/bftrainer/bftrainer/sidecar"
)

func reconcileCommand() *cli.Command {
	return &cli.Command{
		Name:  "reconcile",
		Usage: "record the hooks' journal, fold events into the pool, re-plan, and apply the plan (one at a time)",
		Description: `Every round first records what the hooks left in the journal (exactly
once, with their timestamps), then the spool's requests, then folds,
decides and applies. Run it as a service
(contrib/slurm/bftrainer-reconcile.service):

  bftrainer reconcile --watch

Hooks that run as root also start one detached after each event
(hooks.spawn_reconciler). Only one reconciler runs at a time (a lock
beside the database); a second one exits at once, and the running one
picks up the new events. After every round it writes the Prometheus
metrics file, when metrics.textfile is set (docs/metrics.md).`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "watch", Usage: "keep running: reconcile whenever events or spooled requests arrive"},
			&cli.DurationFlag{Name: "interval", Usage: "with --watch, how often to look (`DURATION`)", DefaultText: "reconciler.interval"},
			&cli.BoolFlag{Name: "no-scheduler", Usage: "do not ask the scheduler whether released nodes are idle: take the releases' word"},
		},
		Action: coreAction(func(c *cli.Context, core *sidecar.Core, cfg Config) error {
			if !c.Bool("watch") {
				return core.Reconcile(c.Context, c.Bool("no-scheduler"))
			}
			every := cfg.Reconciler.Interval.Duration
			if c.IsSet("interval") {
				every = c.Duration("interval")
			}
			return core.Watch(c.Context, every, c.Bool("no-scheduler"))
		}),
	}
}
