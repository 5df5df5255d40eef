package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/names"
	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/sidecar"
)

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "show the idle pool and the Trainers now",
		Action: coreAction(func(c *cli.Context, core *sidecar.Core, cfg Config) error {
			st, err := core.Status(c.Context)
			if err != nil {
				return err
			}
			p := st.Pool
			var idle, pending, busy []string
			held := 0
			for _, n := range p.State().Nodes {
				switch n.State {
				case pool.Idle:
					idle = append(idle, n.Name)
					if n.Trainer != "" {
						held++
					}
				case pool.Pending:
					pending = append(pending, n.Name)
				case pool.Busy:
					busy = append(busy, n.Name)
				}
			}
			w := c.App.Writer
			fmt.Fprintf(w, "database:   %s\n", core.Database())
			fmt.Fprintf(w, "idle:       %d (%d held by Trainers, %d free) %s\n", len(idle), held, len(idle)-held, names.CompressHostlist(idle))
			fmt.Fprintf(w, "completing: %d %s\n", len(pending), names.CompressHostlist(pending))
			fmt.Fprintf(w, "busy:       %d\n", len(busy))
			fmt.Fprintf(w, "contained:  %s (this machine's Trainer processes)\n", nodeContainment(cfg))
			running := "running"
			if !st.Starts {
				running = `planned (trainer.transport = "none": nothing is started)`
			}
			fmt.Fprintf(w, "trainers:   %d %s, %d queued (max %d)\n", len(p.Running()), running, len(p.Queued()), cfg.Pool.MaxTrainers)
			for _, t := range p.Running() {
				fmt.Fprintf(w, "  %-20s %-10s %3d nodes %s\n", t.ID, t.Owner, len(t.Nodes), names.CompressHostlist(alloc.Names(t.Nodes)))
			}
			for _, s := range st.Stale {
				fmt.Fprintf(w, "stale:      %s\n", s)
			}
			return nil
		}),
	}
}
