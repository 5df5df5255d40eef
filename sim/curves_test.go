package sim_test

import (
	"context"
	"reflect"
	"testing"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/sim"
)

// TestReplayCurveModes: on a generated trace and the built-in workload,
// each curve mode replays every Trainer to its end; a learned replay is
// deterministic for its seed and differs with another; its probes stay
// within the learner's bound (5 % of rescales); linear never probes; and
// with the learner's measurements exact (no noise) the learned replay's
// makespan is within 10 % of the given one's.
func TestReplayCurveModes(t *testing.T) {
	tr := sim.GenerateTrace(sim.DefaultTraceModel(), 3)
	jobs := sim.DefaultWorkload(12, tr.Events[0].Time, 3)
	run := func(mode pool.CurveMode, noise float64, seed uint64) sim.Summary {
		t.Helper()
		res, err := sim.Replay(context.Background(), tr, jobs, sim.Options{Solver: alloc.Adaptive{}, Curves: mode, CurveNoise: noise, CurveSeed: seed, Check: true})
		if err != nil {
			t.Fatal(err)
		}
		s := res.Summary
		s.WallS, s.SolveMsP50, s.SolveMsP99 = 0, 0, 0
		if s.Finished != len(jobs) {
			t.Fatalf("%s: %d of %d finished", mode, s.Finished, len(jobs))
		}
		return s
	}
	given := run(pool.CurvesGiven, 0, 1)
	if given.Curves != "" || given.Probes != 0 {
		t.Fatalf("given: curves %q, probes %d: want neither", given.Curves, given.Probes)
	}
	a, b, c := run(pool.CurvesLearned, 0, 1), run(pool.CurvesLearned, 0, 1), run(pool.CurvesLearned, 0, 2)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("the same seed replayed differently:\n%+v\n%+v", a, b)
	}
	if reflect.DeepEqual(a, c) {
		t.Fatal("another seed replayed the same: is the noise drawn at all?")
	}
	if a.Curves != "learned" || a.CurveNoise != sim.DefaultCurveNoise {
		t.Fatalf("learned summary: curves %q, noise %v", a.Curves, a.CurveNoise)
	}
	if float64(a.Probes) > 0.05*float64(a.Rescales) {
		t.Fatalf("%d probes in %d rescales", a.Probes, a.Rescales)
	}
	if l := run(pool.CurvesLinear, 0, 1); l.Probes != 0 || l.Curves != "linear" {
		t.Fatalf("linear: curves %q, probes %d", l.Curves, l.Probes)
	}
	exact := run(pool.CurvesLearned, -1, 1)
	if r := exact.MakespanH / given.MakespanH; r > 1.10 {
		t.Fatalf("learned from exact measurements: makespan %.2f h, given %.2f h (%+.1f %%)", exact.MakespanH, given.MakespanH, 100*(r-1))
	}
	t.Logf("makespan: given %.2f h, learned %.2f h (exact %.2f h), linear probes 0, learned probes %d of %d rescales",
		given.MakespanH, a.MakespanH, exact.MakespanH, a.Probes, a.Rescales)
}
