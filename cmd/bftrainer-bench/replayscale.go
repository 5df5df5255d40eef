package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"time"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/sim"
)

// scaleReplay is the exascale replay of issue 23: a generated trace of
// Aurora's 10,624 nodes (sim.GenerateTrace with the Summit-fitted model,
// Nodes and Duration changed) and the built-in workload of 1,000
// Trainers (sim.DefaultWorkload, one every 36 s from the trace's start,
// seed 1), every admitted Trainer running at once (MaxTrainers 1,000),
// default semantics, replayed with exact and adaptive. Each prints
//
//	replay trace=generated-<nodes> workload=default-<J>J allocator=<a>
//	       events=<n> decisions=<d> finished=<f> makespan_h=<h>
//	       solve_ms_p50=<ms> solve_ms_p99=<ms> wall_s=<s> gen_s=<s>
//
// wall_s is sim.Replay's own wall time, gen_s generating the trace and
// the workload.
type scaleReplay struct {
	Nodes, Trainers int
	Duration        time.Duration
}

// defaultScaleReplay is Aurora's size: 10,624 nodes, 1,000 Trainers,
// 36 hours of trace (the workload ends after about 25).
var defaultScaleReplay = scaleReplay{Nodes: 10624, Trainers: 1000, Duration: 36 * time.Hour}

// inputs generates the trace and the workload.
func (s scaleReplay) inputs() (*sim.Trace, []sim.Job) {
	m := sim.DefaultTraceModel()
	m.Nodes, m.Duration = s.Nodes, s.Duration
	tr := sim.GenerateTrace(m, 1)
	return tr, sim.DefaultWorkload(s.Trainers, m.Start, 1)
}

// run replays with each solver and prints a line per solver.
func (s scaleReplay) run(ctx context.Context, stdout, stderr io.Writer, solvers []alloc.Solver) error {
	start := time.Now()
	tr, jobs := s.inputs()
	gen := time.Since(start)
	fmt.Fprintf(stderr, "bftrainer-bench: replay: generated %d nodes, %d events, %d Trainers in %.1f s\n", len(tr.Nodes), len(tr.Events), len(jobs), gen.Seconds())
	for _, sv := range solvers {
		opt := sim.Options{Solver: sv, Semantics: alloc.Default, MaxTrainers: s.Trainers}
		res, err := sim.Replay(ctx, tr, jobs, opt)
		if err != nil {
			return fmt.Errorf("replay %s: %w", sv.Name(), err)
		}
		sm := res.Summary
		fmt.Fprintf(stdout, "replay trace=generated-%d workload=default-%dJ allocator=%s events=%d decisions=%d finished=%d makespan_h=%.3f solve_ms_p50=%s solve_ms_p99=%s wall_s=%.2f gen_s=%.2f\n",
			s.Nodes, s.Trainers, sv.Name(), sm.Events, sm.Decisions, sm.Finished, sm.MakespanH,
			fmtMS(sm.SolveMsP50), fmtMS(sm.SolveMsP99), sm.WallS, gen.Seconds())
	}
	return nil
}

// startCPUProfile writes a CPU profile to path until the returned stop.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
