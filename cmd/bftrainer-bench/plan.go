package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/sim"
)

// planCommand replays hps-1000J on the Theta 2022 SWF log re-simulated
// with FCFS + EASY backfill, shifted into its first busy week, with the
// scheduler's plan (from requested walltimes) off, for the head only and
// for every queued job a backfill pass plans (all), and both with
// walltime requests ×2 for the plan only (a wrong plan); each with the
// paper's costs (a kill costs R_down, as a shrink) and with a stated kill
// loss. One line each:
//
//	yield trace=theta-easy workload=hps-1000J allocator=adaptive plan=off|head|all walltime_x=1|2 kill_loss_s=… reclaims_planned=… reclaims_surprise=… preempt_loss=… move_loss=… rescale_loss=… makespan_h=… finished=…/…
type planCommand struct {
	stdout, stderr io.Writer
}

// Run parses the flags, re-simulates and replays.
func (c *planCommand) Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("plan", flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	data := fs.String("data", "../shared/data", "the shared data `directory` (theta/, workloads/)")
	horizon := fs.String("horizon", "", "which planned nodes the allocator prices with a short horizon: '' none, stable, priced (pool.PlanHorizon)")
	kill := fs.Duration("kill-loss", 5*time.Minute, "the stated kill loss of the second row of each pair: progress a reclaim's kill loses beyond R_down (5m: half of a 10-minute checkpoint interval); each row runs with 0 (the paper's model) and with it")
	why := fs.Bool("why", false, "after each row, a 'surprises' line splitting the kills by why no plan moved the Trainer first (sim.SurpriseCauses)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	hps, err := readWorkload(*data, "hps-1000J")
	if err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	path := filepath.Join(*data, "theta/theta_2022.swf")
	type row struct {
		scale float64
		plan  string
		kill  time.Duration
	}
	var rows []row
	for _, k := range []time.Duration{0, *kill} {
		rows = append(rows, []row{{1, "off", k}, {1, "head", k}, {1, "all", k}, {2, "head", k}, {2, "all", k}}...)
	}
	for _, run := range rows {
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
		opt := sim.Options{Solver: alloc.Adaptive{}, Plan: run.plan != "off", PlanHorizon: pool.PlanHorizon(*horizon), KillLoss: run.kill}
		var ex *sim.SurpriseExplainer
		if *why {
			ex = sim.NewSurpriseExplainer(tr)
			opt.OnChange = ex.Observe
		}
		r, err := sim.Inputs{Trace: tr, Jobs: jobs}.Resolve()
		if err != nil {
			return fmt.Errorf("plan: %w", err)
		}
		res, err := r.Replay(ctx, opt, "")
		if err != nil {
			return fmt.Errorf("plan: %w", err)
		}
		m := res.Summary
		on := run.plan
		fmt.Fprintf(c.stdout, "yield trace=theta-easy workload=hps-1000J allocator=%s plan=%s walltime_x=%g kill_loss_s=%g reclaims_planned=%d reclaims_surprise=%d preempt_loss=%.4g move_loss=%.4g rescale_loss=%.4g makespan_h=%.2f finished=%d/%d\n",
			m.Allocator, on, run.scale, run.kill.Seconds(), m.ReclaimsPlanned, m.ReclaimsSurprise, m.PreemptLoss, m.MoveLoss, m.RescaleLoss, m.MakespanH, m.Finished, m.Trainers)
		if ex != nil {
			fmt.Fprintf(c.stdout, "surprises plan=%s walltime_x=%g kill_loss_s=%g %s\n", on, run.scale, run.kill.Seconds(), ex.Causes)
		}
	}
	return nil
}
