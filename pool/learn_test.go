package pool_test

import (
	"math"
	"testing"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/pool"
)

// TestReportingTrainerNotEndedByEstimate: a Trainer with a target that has
// reported progress is not finished when the pool's estimate between
// reports passes its target (the pool's curve says 100 samples/s, it
// trains at 10); only a report reaching the target finishes it. One that
// never reports still finishes on the estimate.
func TestReportingTrainerNotEndedByEstimate(t *testing.T) {
	p := mustNew(t, pool.Config{TFwd: 100})
	p.Join(at(0), []string{"n1", "n2"}, "")
	for _, id := range []string{"R", "Q"} {
		if err := p.Submit(at(0), pool.Spec{ID: id, Min: 1, Max: 1, Curve: linear(1, 100), Samples: 1000}); err != nil {
			t.Fatal(err)
		}
	}
	p.Admit()
	decide(t, p)
	if err := p.Progress(at(1), "R", 10); err != nil {
		t.Fatal(err)
	}
	if _, ok := p.NextCompletion(); !ok {
		t.Fatal("Q, which never reported, has no completion foreseen")
	}
	p.Join(at(60), []string{"n3"}, "") // R's estimate: 10 + 59·100 > 1000
	if _, ok := p.Trainer("Q"); ok {
		t.Fatal("Q, which never reported, did not finish on the estimate")
	}
	r, ok := p.Trainer("R")
	if !ok || r.Status != pool.Running {
		t.Fatalf("R, which reports, ended on the pool's estimate: %+v", r)
	}
	if rem := p.Problem().Trainers[0].Remaining; rem <= 0 {
		t.Fatalf("R's remaining %v: want > 0 (0 would mean no target)", rem)
	}
	if err := p.Progress(at(70), "R", 700); err != nil {
		t.Fatal(err)
	}
	if _, ok := p.Trainer("R"); !ok {
		t.Fatal("R ended on a report short of its target")
	}
	if err := p.Progress(at(100), "R", 1000); err != nil {
		t.Fatal(err)
	}
	var end *pool.Trainer
	for _, c := range p.Changes() {
		if c.Kind == pool.Ended && c.Trainer == "R" {
			end = c.Final
		}
	}
	if end == nil || end.Status != pool.Finished || end.Done != 1000 || !end.Ended.Equal(at(100)) {
		t.Fatalf("R's end %+v: want finished at t100 by its report of 1000", end)
	}
}

// TestLearnFromReports: a Trainer submitted without a curve learns it from
// its progress reports: consecutive reports at one count are an
// observation (none across a rescale), the learned curve plans it, and the
// learner's state survives a save and load.
func TestLearnFromReports(t *testing.T) {
	cfg := pool.Config{TFwd: 100, Learner: alloc.CurveLearner{Settle: 5, MinSample: 1}}
	p := mustNew(t, cfg)
	p.Join(at(0), []string{"n1"}, "")
	if err := p.Submit(at(0), pool.Spec{ID: "L", Min: 1, Max: 2}); err != nil {
		t.Fatal(err)
	}
	p.Admit()
	decide(t, p)
	if c := p.Problem().Trainers[0].Curve; c.Throughput[0] != 1 {
		t.Fatalf("provisional curve %+v: want one sample/s per node", c)
	}
	// 1 node at 40 samples/s, reports every 10 s.
	for s := 0; s <= 100; s += 10 {
		if err := p.Progress(at(s), "L", float64(40*s)); err != nil {
			t.Fatal(err)
		}
	}
	obs := 0
	for _, c := range p.Changes() {
		if c.Kind == pool.CurveUpdated {
			obs++
			if c.Obs.Nodes != 1 || !near(c.Obs.Rate, 40) {
				t.Fatalf("observation %+v: want 1 node at 40/s", c.Obs)
			}
		}
	}
	if obs != 10 {
		t.Fatalf("%d observations from 11 reports, want 10", obs)
	}
	e, ok := p.Estimate("L")
	if !ok {
		t.Fatal("no estimate")
	}
	if r, _ := e.At(1); math.Abs(r/40-1) > 0.01 {
		t.Fatalf("learned rate at 1 node %v, want 40", r)
	}
	if c := p.Problem().Trainers[0].Curve; math.Abs(alloc.Interp(c.Nodes, c.Throughput, 1)/40-1) > 0.01 {
		t.Fatalf("the allocator's curve %+v: want the learned 40/s at 1 node", c)
	}
	// A rescale between two reports: that interval is no observation.
	p.Join(at(101), []string{"n2"}, "")
	decide(t, p)
	p.Changes()
	if err := p.Progress(at(110), "L", 4000+9*70); err != nil {
		t.Fatal(err)
	}
	for _, c := range p.Changes() {
		if c.Kind == pool.CurveUpdated {
			t.Fatalf("an observation across a rescale: %+v", c.Obs)
		}
	}
	q, err := pool.New(cfg, p.State())
	if err != nil {
		t.Fatal(err)
	}
	e2, _ := q.Estimate("L")
	if a, b := e.Points[0].Rate, e2.Points[0].Rate; a != b {
		t.Fatalf("estimate after a reload %v, before %v", b, a)
	}
}

// TestGivenCurveStandsUntilSettled: a Trainer submitted with a curve is
// planned with it while its only measurements lie inside settle windows
// (restarts), and with the learned estimate once one is settled.
func TestGivenCurveStandsUntilSettled(t *testing.T) {
	p := mustNew(t, pool.Config{TFwd: 100, Learner: alloc.CurveLearner{Settle: 30, MinSample: 1}})
	p.Join(at(0), []string{"n1"}, "")
	if err := p.Submit(at(0), pool.Spec{ID: "G", Min: 1, Max: 1, Curve: linear(1, 100)}); err != nil {
		t.Fatal(err)
	}
	p.Admit()
	decide(t, p)
	for s := 0; s <= 20; s += 10 { // restarting: 5 samples/s
		if err := p.Progress(at(s), "G", float64(5*s)); err != nil {
			t.Fatal(err)
		}
	}
	if c := p.Problem().Trainers[0].Curve; alloc.Interp(c.Nodes, c.Throughput, 1) != 100 {
		t.Fatalf("curve %+v while only restarts were measured: want the given 100/s", c)
	}
	for s := 30; s <= 90; s += 10 { // settled: 50 samples/s
		if err := p.Progress(at(s), "G", float64(100+50*(s-20))); err != nil {
			t.Fatal(err)
		}
	}
	if r := alloc.Interp(p.Problem().Trainers[0].Curve.Nodes, p.Problem().Trainers[0].Curve.Throughput, 1); r >= 100 || r < 40 {
		t.Fatalf("learned rate %v after settled reports of 50/s: want it between the measurement and the prior", r)
	}
}

// grownLearner is a learning Trainer "L" that ran at 40 samples/s on one
// node for 100 s (reports every 10 s that say so) and was grown to two at
// t101; report sends its reports from then on, each d more samples, on
// the count given (0: not said).
func grownLearner(t *testing.T, settle float64) (p *pool.Pool, report func(s int, d float64, on int)) {
	t.Helper()
	p = mustNew(t, pool.Config{TFwd: 100, Learner: alloc.CurveLearner{Settle: settle, MinSample: 1}})
	p.Join(at(0), []string{"n1"}, "")
	if err := p.Submit(at(0), pool.Spec{ID: "L", Min: 1, Max: 2}); err != nil {
		t.Fatal(err)
	}
	p.Admit()
	decide(t, p)
	done := 0.0
	report = func(s int, d float64, on int) {
		t.Helper()
		done += d
		if err := p.ProgressOn(at(s), "L", done, on); err != nil {
			t.Fatal(err)
		}
	}
	for s := 0; s <= 100; s += 10 {
		report(s, 400, 1)
	}
	p.Join(at(101), []string{"n2"}, "")
	decide(t, p)
	if got := len(p.Running()[0].Nodes); got != 2 {
		t.Fatalf("grown to %d nodes, want 2", got)
	}
	p.Changes()
	return p, report
}

// TestSettleAfterARestart: after a grow, a Trainer's restart and its first
// slow steps are no settled rate of the new count, however long they
// take. Without the count in its reports, the settle window counts from
// the first report that shows progress after the change (a restart that
// outlasts the window: torchrun re-forming its world on a loaded machine).
// With it (ProgressOn), reports on the old size — torchrun keeps training
// there until its next rendezvous, then stalls while it restarts — are no
// observation, the interval across the restart is none, and the window
// starts at the first report on the new count.
func TestSettleAfterARestart(t *testing.T) {
	const settle = 5
	for _, tt := range []struct {
		name    string
		reports func(report func(s int, d float64, on int))
	}{
		{"count not said", func(report func(int, float64, int)) {
			report(102, 0, 0)  // restarting
			report(110, 0, 0)  // still restarting, past the settle window
			report(112, 10, 0) // the first steps, slow: 5/s
			for s := 114; s <= 140; s += 2 {
				report(s, 160, 0) // 80/s
			}
		}},
		{"count said", func(report func(int, float64, int)) {
			for s := 102; s <= 115; s++ {
				report(s, 40, 1) // still at world 1
			}
			report(126, 10, 2) // restarted at 2 after a 10 s stall; its first steps
			for s := 128; s <= 150; s += 2 {
				report(s, 160, 2) // 80/s
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, report := grownLearner(t, settle)
			tt.reports(report)
			settled := 0
			for _, c := range p.Changes() {
				if c.Kind != pool.CurveUpdated {
					continue
				}
				if c.Obs.Nodes != 2 {
					t.Fatalf("an observation of %d nodes while the Trainer held 2: %+v", c.Obs.Nodes, c.Obs)
				}
				if c.Obs.Since >= settle {
					settled++
					if !near(c.Obs.Rate, 80) {
						t.Fatalf("a settled observation at 2 nodes %+v: want only the steady 80/s", c.Obs)
					}
				}
			}
			if settled == 0 {
				t.Fatal("no settled observation at 2 nodes after the steady progress")
			}
			e, _ := p.Estimate("L")
			if r, _ := e.At(2); math.Abs(r/80-1) > 0.02 {
				t.Fatalf("learned rate at 2 nodes %v, want 80", r)
			}
		})
	}
}

// TestOneNodeTrainerWithoutCurve: a Trainer of one node at most can be
// submitted without a curve (its provisional curve is a single point) and
// learns its rate there.
func TestOneNodeTrainerWithoutCurve(t *testing.T) {
	p := mustNew(t, pool.Config{TFwd: 100, Learner: alloc.CurveLearner{Settle: 5, MinSample: 1}})
	p.Join(at(0), []string{"n1", "n2"}, "")
	if err := p.Submit(at(0), pool.Spec{ID: "one", Min: 1, Max: 1}); err != nil {
		t.Fatalf("submit with --max 1 and no curve: %v", err)
	}
	p.Admit()
	decide(t, p)
	if got := len(p.Running()[0].Nodes); got != 1 {
		t.Fatalf("holds %d nodes, want 1", got)
	}
	for s := 0; s <= 60; s += 10 {
		if err := p.Progress(at(s), "one", float64(25*s)); err != nil {
			t.Fatal(err)
		}
	}
	e, _ := p.Estimate("one")
	if r, _ := e.At(1); math.Abs(r/25-1) > 0.02 {
		t.Fatalf("learned rate at 1 node %v, want 25", r)
	}
}
