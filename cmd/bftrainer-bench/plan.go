package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"path/filepath"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/sim"
)

// planCommand replays hps-1000J on the Theta 2022 SWF log re-simulated
// with FCFS + EASY backfill, shifted into its first busy week, with the
// scheduler's plan (the head's reservation, from requested walltimes) off
// and on, and on with walltime requests ×2 for the plan only (a wrong
// plan). One line each:
//
//	yield trace=theta-easy workload=hps-1000J allocator=adaptive plan=on|off walltime_x=1|2 reclaims_planned=… reclaims_surprise=… preempt_loss=… move_loss=… rescale_loss=… makespan_h=… finished=…/…
type planCommand struct {
	stdout, stderr io.Writer
}

// Run parses the flags, re-simulates and replays.
func (c *planCommand) Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("plan", flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	data := fs.String("data", "../shared/data", "the shared data `directory` (theta/, workloads/)")
	horizon := fs.String("horizon", "", "which planned nodes the allocator prices with a short horizon: '' none, stable, priced (pool.PlanHorizon)")
	why := fs.Bool("why", false, "after each row, a 'surprises' line splitting the kills by why no plan moved the Trainer first (sim.SurpriseCauses)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	hps, err := readWorkload(*data, "hps-1000J")
	if err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	path := filepath.Join(*data, "theta/theta_2022.swf")
	for _, run := range []struct {
		scale float64
		plan  string
	}{{1, "off"}, {1, "head"}, {1, "all"}, {2, "head"}, {2, "all"}} {
		depth := 1
		if run.plan == "all" {
			depth = sim.DefaultPlanDepth
		}
		tr, _, err := sim.OpenEASYTracePlan(path, run.scale, depth)
		if err != nil {
			return fmt.Errorf("plan: %w", err)
		}
		week, ok := sim.BusyWeek(tr)
		if !ok {
			return fmt.Errorf("plan: theta easy: no busy week")
		}
		jobs := sim.ShiftWorkload(hps, week)
		opt := sim.Options{Solver: alloc.Adaptive{}, Plan: run.plan != "off", PlanHorizon: pool.PlanHorizon(*horizon)}
		var ex *sim.SurpriseExplainer
		if *why {
			ex = sim.NewSurpriseExplainer(tr)
			opt.OnChange = ex.Observe
		}
		res, err := sim.Replay(ctx, tr.Window(sim.StartEvent(tr, jobs)), jobs, opt)
		if err != nil {
			return fmt.Errorf("plan: %w", err)
		}
		m := res.Summary
		on := run.plan
		fmt.Fprintf(c.stdout, "yield trace=theta-easy workload=hps-1000J allocator=%s plan=%s walltime_x=%g reclaims_planned=%d reclaims_surprise=%d preempt_loss=%.4g move_loss=%.4g rescale_loss=%.4g makespan_h=%.2f finished=%d/%d\n",
			m.Allocator, on, run.scale, m.ReclaimsPlanned, m.ReclaimsSurprise, m.PreemptLoss, m.MoveLoss, m.RescaleLoss, m.MakespanH, m.Finished, m.Trainers)
		if ex != nil {
			fmt.Fprintf(c.stdout, "surprises plan=%s walltime_x=%g %s\n", on, run.scale, ex.Causes)
		}
	}
	return nil
}
