package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/alloc/milp"
	"github.com/bftrainer/bftrainer/sim"
)

// replayCommand times a whole replay of the Summit trace with the paper's
// hps-shufflenet-1000J workload (reference semantics, T_fwd 10, 10
// Trainers), and prints per allocator:
//
//	replay trace=summit workload=hps-1000J allocator=<a> events=<n> wall_s=<s> [load_s=<s>]
//
// events are the trace rows the replay goes through (it stops when the
// last Trainer finishes); wall_s is sim.Replay's own wall time, reading
// the files is load_s. CBC is too slow to replay every event on a
// 2-core machine, so it replays the first -cbc-prefix events and its
// time is extrapolated linearly to the exact run's event count, marked
// prefix_events=<k> extrapolated=true. With -scale it runs only the
// exascale replay instead (scaleReplay).
type replayCommand struct {
	stdout, stderr io.Writer
}

// cbcSolver is the CBC allocator the bench times: the same solver
// "bftrainer replay --allocator cbc" uses.
func cbcSolver(limit time.Duration) (alloc.Solver, error) {
	b := milp.CBC{}
	if err := b.Available(); err != nil {
		return nil, err
	}
	return milp.Solver{Backend: b, TimeLimit: limit}, nil
}

// Run parses the flags, loads the data and times each allocator.
func (c *replayCommand) Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	data := fs.String("data", "../shared/data", "the shared data `directory` (summit/, workloads/)")
	prefix := fs.Int("cbc-prefix", 200, "events CBC replays before extrapolating (0: skip CBC)")
	limit := fs.Duration("cbc-limit", 10*time.Second, "CBC's time limit per decision")
	scale := fs.Bool("scale", false, "only the exascale replay: a generated 10,624-node trace, 1,000 Trainers, exact and adaptive (scaleReplay)")
	scaleHours := fs.Float64("scale-hours", defaultScaleReplay.Duration.Hours(), "with -scale, the generated trace's length in hours")
	scaleOnly := fs.String("scale-only", "", "with -scale, only this allocator (exact or adaptive)")
	cpuProfile := fs.String("cpuprofile", "", "with -scale, write a CPU profile of the replays to `FILE`")
	fs.Usage = func() {
		fmt.Fprintf(c.stderr, "usage: bftrainer-bench replay [-data DIR] [-cbc-prefix 200] [-cbc-limit 10s] [-scale [-scale-hours 96] [-scale-only exact|adaptive] [-cpuprofile FILE]]\n\n")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *scale {
		s := defaultScaleReplay
		s.Duration = time.Duration(*scaleHours * float64(time.Hour))
		solvers := []alloc.Solver{alloc.Exact{}, alloc.Adaptive{}}
		if *scaleOnly != "" {
			solvers = slices.DeleteFunc(solvers, func(sv alloc.Solver) bool { return sv.Name() != *scaleOnly })
			if len(solvers) == 0 {
				return fmt.Errorf("replay: -scale-only %q: want exact or adaptive: %w", *scaleOnly, errUsage)
			}
		}
		if *cpuProfile != "" {
			stop, err := startCPUProfile(*cpuProfile)
			if err != nil {
				return fmt.Errorf("replay: %w", err)
			}
			defer stop()
		}
		return s.run(ctx, c.stdout, c.stderr, solvers)
	}
	start := time.Now()
	r, err := summitInputs(*data, workloadFile["hps-1000J"]).Resolve()
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	w, jobs := r.Trace, r.Jobs
	load := time.Since(start)
	const head = "replay trace=summit workload=hps-1000J"
	opt := sim.Options{Semantics: alloc.Reference}

	res, err := sim.Replay(ctx, w, jobs, opt)
	if err != nil {
		return fmt.Errorf("replay: exact: %w", err)
	}
	full := res.Summary.Events
	fmt.Fprintf(c.stdout, "%s allocator=exact events=%d wall_s=%.3f load_s=%.3f\n", head, full, res.Summary.WallS, load.Seconds())

	if *prefix <= 0 {
		return nil
	}
	cbc, err := cbcSolver(*limit)
	if err != nil {
		fmt.Fprintf(c.stderr, "bftrainer-bench: replay: cbc skipped: %v\n", err)
		return nil
	}
	k := min(*prefix, len(w.Events))
	short := &sim.Trace{Nodes: w.Nodes, Events: w.Events[:k], Source: w.Source}
	fmt.Fprintf(c.stderr, "bftrainer-bench: replay: cbc on the first %d events (limit %v per decision)…\n", k, *limit)
	opt.Solver = cbc
	res, err = sim.Replay(ctx, short, jobs, opt)
	if err != nil {
		return fmt.Errorf("replay: cbc: %w", err)
	}
	done := res.Summary.Events
	fmt.Fprintf(c.stdout, "%s allocator=cbc events=%d wall_s=%.1f prefix_events=%d extrapolated=true kept=%d\n",
		head, full, res.Summary.WallS*float64(full)/float64(done), done, res.Summary.Kept)
	return nil
}
