package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/bftrainer/bftrainer/names"
	"github.com/bftrainer/bftrainer/sidecar"
	"github.com/bftrainer/bftrainer/store"
)

func nodeCommand() *cli.Command {
	flags := []cli.Flag{
		&cli.StringFlag{Name: "job", Usage: "scheduler `JOB` id the change belongs to (guards against late events)"},
		&cli.BoolFlag{Name: "no-reconcile", Usage: "record only; do not re-plan now"},
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
			{Name: "join", Usage: "nodes are exactly idle: add them to the pool", ArgsUsage: "NODES…", Flags: flags,
				Action: func(c *cli.Context) error { return nodeAction(c, store.KindJoin) }},
			{Name: "leave", Usage: "the scheduler takes nodes: remove them from the pool", ArgsUsage: "NODES…", Flags: flags,
				Action: func(c *cli.Context) error { return nodeAction(c, store.KindLeave) }},
		},
	}
}

func expandArgs(args []string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, a := range args {
		names, err := names.ExpandHostlist(a)
		if err != nil {
			return nil, usageError{err}
		}
		for _, n := range names {
			if !seen[n] {
				seen[n] = true
				out = append(out, n)
			}
		}
	}
	return out, nil
}

func nodeAction(c *cli.Context, kind string) error {
	if c.NArg() == 0 {
		return usagef("node %s: name at least one node (e.g. n[1-4])", kind)
	}
	nodes, err := expandArgs(c.Args().Slice())
	if err != nil {
		return err
	}
	job := c.String("job")
	if job != "" {
		if err := names.ValidateJob(job); err != nil {
			return usageError{err}
		}
	}
	cfg, err := configFrom(c)
	if err != nil {
		return err
	}
	db, err := openDB(c.Context, cfg)
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.Append(c.Context, store.Event{At: time.Now(), Kind: kind, Source: "cli", Context: "node " + kind,
		Job: job, User: currentUser(), Nodes: nodes}); err != nil {
		return err
	}
	fmt.Fprintf(c.App.ErrWriter, "bftrainer: recorded %s of %d node(s)\n", kind, len(nodes))
	if c.Bool("no-reconcile") {
		return nil
	}
	return reconcileNow(c, cfg, db)
}

// reconcileNow runs a reconciler in this process (it returns at once if
// another one holds the lock; that one sees the new events).
func reconcileNow(c *cli.Context, cfg Config, db *store.DB) error {
	r, err := reconciler(cfg, db, false)
	if err != nil {
		return err
	}
	return r.Run(c.Context)
}

func syncCommand() *cli.Command {
	return &cli.Command{
		Name:  "sync",
		Usage: "reconcile the pool with the scheduler's own view of idle nodes",
		Description: `Asks the scheduler which nodes are exactly idle (Slurm: sinfo -h -N -o '%N %t',
state exactly "idle", not "comp" or "idle*"; LSF: bhosts -w; PBS:
pbsnodes -a), records joins and leaves for what the pool has wrong, and
re-plans. Run it at boot, from cron, or after a controller restart: hooks
are not a reliable event stream (a crashed node runs no epilog).`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "scheduler", Usage: "a registered scheduler: " + strings.Join(schedulers().Names(), ", ") + " (default hooks.scheduler, else " + schedulers().Names()[0] + ")"},
			&cli.BoolFlag{Name: "no-reconcile", Usage: "record only; do not re-plan now"},
		},
		Action: func(c *cli.Context) error {
			cfg, err := configFrom(c)
			if err != nil {
				return err
			}
			if s := c.String("scheduler"); s != "" {
				if err := schedulers().Validate(s); err != nil {
					return usagef("--scheduler %w", err)
				}
				cfg.Hooks.Scheduler = s
			}
			q, ok := schedulerQuery(cfg)
			if !ok {
				return withHint(fmt.Errorf("sync: the scheduler's node listing is not installed"),
					"set its program in the [scheduler] table of %s", configFile(cfg))
			}
			db, err := openDB(c.Context, cfg)
			if err != nil {
				return err
			}
			defer db.Close()
			joined, left, err := sidecar.Sync(c.Context, db, poolConfig(cfg), q, time.Now(), currentUser())
			if err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "joined %d %s\nleft %d %s\n", len(joined), names.CompressHostlist(joined), len(left), names.CompressHostlist(left))
			if c.Bool("no-reconcile") {
				return nil
			}
			r, err := reconciler(cfg, db, true)
			if err != nil {
				return err
			}
			return r.Run(c.Context)
		},
	}
}
