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

// curvesCommand replays, with the adaptive allocator under the default
// semantics, what learning the curves is worth (issue 13): the Summit trace
// with hps-1000J, ImageNet-imgps-1001J and the Pollux-built workload, each
// with the curves as given, learned (the allocator sees only the measured
// rates, with a seeded relative noise, default 5 %; the accounting uses the
// true curves) and linear (scaling assumed linear from the one-node
// throughput), one line each:
//
//	curves trace=summit workload=<w> mode=<given|learned|linear> makespan_h=… mean_jct_h=… e_ovh=… explore_rescales=… rescales=… vs_given_pct=… finished=…/… wall_s=…
//
// vs_given_pct is the makespan's change against the given row of the same
// workload. The Pollux-built workload is replayed with the speedup
// objective (its metric column is the speedup, and a metric the user gives
// cannot be learned). Nothing is fitted to the curves: the learner's defaults, as
// live.
type curvesCommand struct {
	stdout, stderr io.Writer
}

// Run parses the flags, loads the data and replays.
func (c *curvesCommand) Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("curves", flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	data := fs.String("data", "../shared/data", "the shared data `directory` (summit/, workloads/, pollux/)")
	noise := fs.Float64("noise", sim.DefaultCurveNoise, "relative standard deviation of each measured rate (learned)")
	seed := fs.Uint64("seed", 1, "seed of the measurement noise")
	only := fs.String("workload", "", "replay this workload only (hps-1000J, ImageNet-imgps-1001J, pollux-1000J)")
	models := fs.Bool("models", true, "also replay learned with each Trainer's model name (mode=learned-models: planned on the curve of the others of its model)")
	fs.Usage = func() {
		fmt.Fprintf(c.stderr, "usage: bftrainer-bench curves [-data DIR] [-noise 0.05] [-seed 1] [-workload W]\n\n")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	summit, err := openSummit(*data)
	if err != nil {
		return fmt.Errorf("curves: %w", err)
	}
	type curvesRow struct {
		yieldRow
		objective alloc.Objective
	}
	var rows []curvesRow
	for _, w := range []string{"hps-1000J", "ImageNet-imgps-1001J"} {
		if *only != "" && *only != w {
			continue
		}
		jobs, err := readWorkload(*data, w)
		if err != nil {
			return fmt.Errorf("curves: %w", err)
		}
		row, err := windowed("summit", w, summit, jobs)
		if err != nil {
			return fmt.Errorf("curves: %w", err)
		}
		rows = append(rows, curvesRow{row, ""})
	}
	if *only == "" || *only == "pollux-1000J" {
		pollux, err := sim.PolluxWorkload(filepath.Join(*data, "pollux"), 1000, summit.Events[1000].Time, 2*time.Hour)
		if err != nil {
			return fmt.Errorf("curves: %w", err)
		}
		// Its metric column is the speedup (throughput over one node's):
		// the speedup objective, which a learned curve can serve.
		row, err := windowed("summit", "pollux-1000J", summit, pollux)
		if err != nil {
			return fmt.Errorf("curves: %w", err)
		}
		rows = append(rows, curvesRow{row, alloc.Speedup})
	}
	for _, r := range rows {
		given := 0.0
		type curvesMode struct {
			name   string
			mode   pool.CurveMode
			models bool
		}
		modes := []curvesMode{{"given", pool.CurvesGiven, false}, {"learned", pool.CurvesLearned, false}, {"linear", pool.CurvesLinear, false}}
		if *models {
			modes = append(modes, curvesMode{"learned-models", pool.CurvesLearned, true})
		}
		for _, cm := range modes {
			mode := cm.mode
			res, err := sim.Replay(ctx, r.tr, r.jobs, sim.Options{Solver: alloc.Adaptive{}, Objective: r.objective, Curves: mode, CurveNoise: *noise, CurveSeed: *seed, Models: cm.models})
			if err != nil {
				return fmt.Errorf("curves: %s %s %s: %w", r.trace, r.workload, cm.name, err)
			}
			m := res.Summary
			if mode == pool.CurvesGiven {
				given = m.MakespanH
			}
			fmt.Fprintf(c.stdout, "curves trace=%s workload=%s mode=%s makespan_h=%.2f mean_jct_h=%.2f e_ovh=%.3f explore_rescales=%d rescales=%d vs_given_pct=%+.2f finished=%d/%d wall_s=%.1f\n",
				r.trace, r.workload, cm.name, m.MakespanH, m.MeanJCTH, m.EOvh, m.Probes, m.Rescales,
				100*(m.MakespanH/given-1), m.Finished, m.Trainers, m.WallS)
		}
	}
	return nil
}
