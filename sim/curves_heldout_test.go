package sim_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/sim"
)

// heldOutShapes are scaling curves made up for this test, none from the
// project's data and none of the learner's model family exactly: speedup
// at n nodes.
var heldOutShapes = []struct {
	name    string
	speedup func(n float64) float64
}{
	// Amdahl's law, 3 % serial.
	{"amdahl", func(n float64) float64 { return 1 / (0.03 + 0.97/n) }},
	// Communication-bound: a cost growing as n^1.5 makes it peak near 10
	// nodes and fall beyond.
	{"peak", func(n float64) float64 { return n / (1 + 0.04*math.Pow(n-1, 1.5)) }},
	// Super-flat: a fourth of the speedup's octaves.
	{"flat", func(n float64) float64 { return math.Pow(n, 0.25) }},
	// Near-linear within a group of 4 nodes, a tenth as good across groups.
	{"knee", func(n float64) float64 { return min(n, 4+0.1*(n-4)) }},
}

// heldOutCases are the held-out workloads: each shape alone, and all
// four mixed (indices into heldOutShapes).
var heldOutCases = []struct {
	name   string
	shapes []int
}{
	{"amdahl", []int{0}}, {"peak", []int{1}}, {"flat", []int{2}}, {"knee", []int{3}}, {"mixed", []int{0, 1, 2, 3}},
}

// heldOutWorkload is n Trainers of the shapes above in turn, 36 s apart,
// each at a one-node rate drawn from 200–5000 samples/s, with work for
// an hour at 8 nodes of linear scaling.
func heldOutWorkload(n int, start time.Time, shapes []int, seed uint64) []sim.Job {
	r := rand.New(rand.NewPCG(seed, 0x4e1d))
	counts := []int{1, 2, 3, 4, 6, 8, 12, 16, 24, 32}
	var jobs []sim.Job
	for i := range n {
		sh := heldOutShapes[shapes[i%len(shapes)]]
		one := 200 * math.Pow(25, r.Float64())
		j := sim.Job{
			ID: fmt.Sprintf("H%03d-%s", i, sh.name), Model: sh.name, Submit: start.Add(time.Duration(i) * 36 * time.Second),
			RUp: 17 + 2*r.Float64(), RDown: 11 + 2*r.Float64(), Min: 1, Max: 32,
			Samples: one * 8 * 3600, Nodes: []int{0}, Throughput: []float64{0},
		}
		for _, c := range counts {
			j.Nodes = append(j.Nodes, c)
			j.Throughput = append(j.Throughput, one*sh.speedup(float64(c)))
		}
		j.Metric = append([]float64(nil), j.Throughput...)
		jobs = append(jobs, j)
	}
	return jobs
}

// TestReplayCurvesHeldOut replays, on a generated trace, workloads of
// made-up curves (each shape alone, and all mixed) with the curves given,
// learned (exact and 5 % noise; and with 5 % noise and the Trainers' model
// names, one per shape, each Trainer at its own one-node rate: the same
// shape at another level) and linear. Every Trainer finishes given and
// learned (linear may not, within the trace: its makespan is then the
// hours replayed), probes stay within 5 % of rescales, and learning from
// exact measurements, and with models, is within 15 % of the given
// makespan on each; run with -v for the table (the figures docs/curves.md
// quotes).
func TestReplayCurvesHeldOut(t *testing.T) {
	if testing.Short() {
		t.Skip("replays 5 workloads × 5 modes: not in -short")
	}
	tr := sim.GenerateTrace(sim.DefaultTraceModel(), 7)
	for _, c := range heldOutCases {
		jobs := heldOutWorkload(40, tr.Events[0].Time, c.shapes, 7)
		run := func(mode pool.CurveMode, noise float64, models bool) sim.Summary {
			t.Helper()
			res, err := sim.Replay(context.Background(), tr, jobs, sim.Options{Solver: alloc.Adaptive{}, Curves: mode, CurveNoise: noise, CurveSeed: 1, Models: models})
			if err != nil {
				t.Fatal(err)
			}
			s := res.Summary
			if s.Finished != len(jobs) && mode != pool.CurvesLinear {
				t.Fatalf("%s %s (models %v): %d of %d finished", c.name, mode, models, s.Finished, len(jobs))
			}
			if float64(s.Probes) > 0.05*float64(s.Rescales) {
				t.Fatalf("%s %s (models %v): %d probes in %d rescales", c.name, mode, models, s.Probes, s.Rescales)
			}
			return s
		}
		given, exact, noisy, linear := run(pool.CurvesGiven, 0, false), run(pool.CurvesLearned, -1, false), run(pool.CurvesLearned, 0, false), run(pool.CurvesLinear, 0, false)
		models := run(pool.CurvesLearned, 0, true)
		pct := func(s sim.Summary) float64 { return 100 * (s.MakespanH/given.MakespanH - 1) }
		t.Logf("heldout %-6s given_h=%.2f learned_h=%.2f (%+.2f %%) exact_h=%.2f (%+.2f %%) models_h=%.2f (%+.2f %%) linear_h=%.2f (%+.2f %%, %d/%d finished) explore=%d/%d, with models %d/%d",
			c.name, given.MakespanH, noisy.MakespanH, pct(noisy), exact.MakespanH, pct(exact), models.MakespanH, pct(models), linear.MakespanH, pct(linear), linear.Finished, len(jobs),
			noisy.Probes, noisy.Rescales, models.Probes, models.Rescales)
		if pct(exact) > 15 {
			t.Errorf("%s: learned from exact measurements %+.1f %% on the given makespan", c.name, pct(exact))
		}
		if pct(models) > 15 {
			t.Errorf("%s: learned with models %+.1f %% on the given makespan", c.name, pct(models))
		}
	}
}
