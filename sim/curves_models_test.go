package sim_test

import (
	"context"
	"testing"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/sim"
)

// TestReplayCurvesHeldOutModels replays the held-out workloads learned
// (5 % noise) without and with the Trainers' model names (one per shape,
// each Trainer at its own one-node rate: the same shape at another level).
// With models every Trainer finishes, probes stay within 5 % of rescales,
// and the makespan is within 15 % of the given one; run with -v for the
// table (docs/curves.md).
func TestReplayCurvesHeldOutModels(t *testing.T) {
	if testing.Short() {
		t.Skip("replays 5 workloads × 3 modes: not in -short")
	}
	tr := sim.GenerateTrace(sim.DefaultTraceModel(), 7)
	for _, c := range heldOutCases {
		jobs := heldOutWorkload(40, tr.Events[0].Time, c.shapes, 7)
		run := func(mode pool.CurveMode, models bool) sim.Summary {
			t.Helper()
			res, err := sim.Replay(context.Background(), tr, jobs, sim.Options{Solver: alloc.Adaptive{}, Curves: mode, CurveSeed: 1, Models: models})
			if err != nil {
				t.Fatal(err)
			}
			return res.Summary
		}
		given, learned, models := run(pool.CurvesGiven, false), run(pool.CurvesLearned, false), run(pool.CurvesLearned, true)
		pct := func(s sim.Summary) float64 { return 100 * (s.MakespanH/given.MakespanH - 1) }
		t.Logf("heldout %-6s given_h=%.2f learned_h=%.2f (%+.2f %%) models_h=%.2f (%+.2f %%) rescales=%d→%d explore=%d→%d",
			c.name, given.MakespanH, learned.MakespanH, pct(learned), models.MakespanH, pct(models), learned.Rescales, models.Rescales, learned.Probes, models.Probes)
		if models.Finished != len(jobs) {
			t.Fatalf("%s with models: %d of %d finished", c.name, models.Finished, len(jobs))
		}
		if float64(models.Probes) > 0.05*float64(models.Rescales) {
			t.Fatalf("%s with models: %d probes in %d rescales", c.name, models.Probes, models.Rescales)
		}
		if pct(models) > 15 {
			t.Errorf("%s: learned with models %+.1f %% on the given makespan", c.name, pct(models))
		}
	}
}
