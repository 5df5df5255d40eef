package alloc_test

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/alloc/alloctest"
)

// busyState returns a state as a Trainer of 1..64 nodes has after hours in
// a fluctuating pool: every count kept holds a full window.
func busyState(b *testing.B, l alloc.CurveLearner) *alloc.CurveState {
	s := mustState(b, 1, 64, nil)
	r := rand.New(rand.NewPCG(5, 5))
	ts := &trainerSim{r: r, l: l, s: s, truth: amdahl(3000, 0.01), noise: 0.05}
	n := 32
	for range 400 {
		n = min(64, max(1, n+r.IntN(17)-8))
		ts.run(b, n, 600)
	}
	return s
}

// BenchmarkCurveLearner measures the estimator's cost per observation, per
// curve query (Estimate and Curve) and per exploration, and reports each as
// a ratio to one exact solve of a 10-Trainer, 400-node decision measured in
// the same run (timings are noisy on a shared machine; ratios less so).
func BenchmarkCurveLearner(b *testing.B) {
	var l alloc.CurveLearner
	p := alloctest.Summit(10, 400, 64, 1)
	var solve float64
	b.Run("exact-solve-J10-N400", func(b *testing.B) {
		for b.Loop() {
			if _, err := (alloc.Exact{}).Solve(context.Background(), p); err != nil {
				b.Fatal(err)
			}
		}
		solve = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	})
	ratio := func(b *testing.B) {
		if solve > 0 {
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/solve, "x-solve")
		}
	}
	b.Run("observe", func(b *testing.B) {
		s := busyState(b, l)
		o := alloc.CurveObs{Nodes: 17, Rate: 40000, Duration: 45}
		for b.Loop() {
			o.Since += o.Duration
			if err := l.Observe(s, o); err != nil {
				b.Fatal(err)
			}
		}
		ratio(b)
	})
	b.Run("estimate+curve", func(b *testing.B) {
		s := busyState(b, l)
		for b.Loop() {
			e := l.Estimate(s)
			_ = e.Curve()
		}
		ratio(b)
	})
	b.Run("explore", func(b *testing.B) {
		s := busyState(b, l)
		e := l.Estimate(s)
		x := alloc.ProbeSituation{Now: 1e6, Held: 20, Avail: 64, RUp: 18, RDown: 12, Horizon: 3600}
		for b.Loop() {
			_ = l.Explore(s, &e, x)
		}
		ratio(b)
	})
}
