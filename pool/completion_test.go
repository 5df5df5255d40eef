package pool_test

import (
	"testing"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/pool"
)

// TestCompletionBetweenEvents: a Trainer is seen to finish at the moment
// its samples are reached, not at the next event, and its nodes are free
// then; every figure by hand.
func TestCompletionBetweenEvents(t *testing.T) {
	p := mustNew(t, pool.Config{TFwd: 100})
	p.Join(at(0), []string{"n1", "n2"}, "")
	if err := p.Submit(at(0), pool.Spec{ID: "T", Min: 1, Max: 2, Curve: linear(2, 10), RUp: 2, RDown: 1, Samples: 500}); err != nil {
		t.Fatal(err)
	}
	p.Admit()
	decide(t, p) // 0 → 2 nodes, 20 samples/s; starting from 0 costs nothing
	if _, ok := p.NextCompletion(); !ok {
		t.Fatal("no completion foreseen")
	}
	p.Leave(at(10), []string{"n2"}, "job") // +200; reclaim −R_down·20 = −20 → 180
	decide(t, p)                           // keeps 1 node: 10/s
	// 320 left at 10/s: 32 s from t10.
	got, ok := p.NextCompletion()
	if want := at(42); !ok || !got.Equal(want) {
		t.Fatalf("next completion %v (%v), want %v", got, ok, want)
	}
	if r := p.Problem().Trainers[0].Remaining; !near(r, 320) {
		t.Fatalf("remaining %v, want 320", r)
	}
	p.Join(at(20), []string{"n2"}, "") // +100 → 280
	decide(t, p)                       // grows back to 2: books R_up·P(1) = 20, 20/s
	// 500 − 280 + 20 owed = 240 left at 20/s: 12 s from t20.
	got, _ = p.NextCompletion()
	if want := at(32); !got.Equal(want) {
		t.Fatalf("next completion %v, want %v", got, want)
	}
	if r := p.Problem().Trainers[0].Remaining; !near(r, 240) {
		t.Fatalf("remaining %v, want 240 (the rescale cost it owes included)", r)
	}
	p.Advance(got)
	if len(p.Running()) != 0 {
		t.Fatalf("still running at its completion: %+v", p.Running()[0])
	}
	var end *pool.Trainer
	for _, c := range p.Changes() {
		if c.Kind == pool.Ended {
			end = c.Final
		}
	}
	if end == nil || end.Status != pool.Finished || !end.Ended.Equal(at(32)) || !near(end.Done, 500) {
		t.Fatalf("ended %+v, want finished at t32 with 500 samples", end)
	}
	tot := p.Totals()
	if tot.Overshoot > 1e-6 || !near(tot.Samples, 500) {
		t.Fatalf("overshoot %v, samples %v; want 0, 500", tot.Overshoot, tot.Samples)
	}
	// Held: 2·10 + 1·10 + 2·12 = 54 node-seconds; the nodes are free at t32.
	if !near(tot.UsedNodeSeconds, 54) || len(p.Free()) != 2 {
		t.Fatalf("used %v node-s, %d free; want 54, 2", tot.UsedNodeSeconds, len(p.Free()))
	}
}

// TestOvershootAtEvents: seen only at an event, the same Trainer books the
// samples past its target as overshoot.
func TestOvershootAtEvents(t *testing.T) {
	p := mustNew(t, pool.Config{TFwd: 100})
	p.Join(at(0), []string{"n1"}, "")
	if err := p.Submit(at(0), pool.Spec{ID: "T", Min: 1, Max: 1, Curve: linear(1, 10), Samples: 95}); err != nil {
		t.Fatal(err)
	}
	p.Admit()
	decide(t, p)
	p.Join(at(10), []string{"n2"}, "") // 100 ≥ 95: finished, 5 past it
	if len(p.Running()) != 0 {
		t.Fatal("not finished at the event")
	}
	if tot := p.Totals(); !near(tot.Overshoot, 5) || !near(tot.Samples, 95) {
		t.Fatalf("overshoot %v, samples %v; want 5, 95", tot.Overshoot, tot.Samples)
	}
}

// TestNextAdmission: a queued Trainer's submit time is a moment to decide
// only while a slot is free.
func TestNextAdmission(t *testing.T) {
	p := mustNew(t, pool.Config{TFwd: 10, MaxTrainers: 1})
	p.Join(at(0), []string{"n1"}, "")
	for i, id := range []string{"a", "b"} {
		if err := p.Submit(at(0), pool.Spec{ID: id, Min: 1, Max: 1, Curve: linear(1, 1), Submit: at(30 * (i + 1))}); err != nil {
			t.Fatal(err)
		}
	}
	got, ok := p.NextAdmission()
	if !ok || !got.Equal(at(30)) {
		t.Fatalf("next admission %v (%v), want t30", got, ok)
	}
	p.Advance(got)
	if r := p.Running(); len(r) != 1 || r[0].ID != "a" || !r[0].Admitted.Equal(at(30)) {
		t.Fatalf("running %v, want a admitted at t30", ids(r))
	}
	if _, ok := p.NextAdmission(); ok {
		t.Fatal("a moment to admit b while the one slot is taken")
	}
}

// TestIdleHistoryRecordsWhatEnded: an idle period is recorded when its node
// leaves, by length; a moment nodes come free (a join, a Trainer ending
// with nodes) is counted; the clock the history has watched too.
func TestIdleHistoryRecordsWhatEnded(t *testing.T) {
	p := mustNew(t, pool.Config{TFwd: 10})
	p.Join(at(0), []string{"n1", "n2"}, "")
	if err := p.Submit(at(0), pool.Spec{ID: "T", Min: 1, Max: 1, Curve: linear(1, 1)}); err != nil {
		t.Fatal(err)
	}
	p.Admit()
	decide(t, p)
	p.Leave(at(100), []string{"n2"}, "j") // n2 was idle 100 s (n1 or n2 held: either way)
	p.Join(at(150), []string{"n3"}, "")
	if err := p.End(at(200), "T", pool.Finished, "exited"); err != nil {
		t.Fatal(err)
	}
	h := p.Totals().Idle
	if h.Count != 1 || h.Ended[alloc.IdleBin(100)] != 1 {
		t.Fatalf("ended periods %d, bin of 100 s %v; want 1, 1", h.Count, h.Ended[alloc.IdleBin(100)])
	}
	if h.Frees != 3 || !near(h.Seconds, 200) {
		t.Fatalf("frees %d over %v s, want 3 over 200 s", h.Frees, h.Seconds)
	}
	if got, want := h.FreeGap(), (200+4*60.0)/(3+4); !near(got, want) {
		t.Fatalf("free gap %v, want %v (the prior's 4 pseudo-moments a minute apart included)", got, want)
	}
	if pr := p.Problem(); pr.Idle == nil || pr.Idle.Count != 1 || !pr.Now.Equal(at(200)) {
		t.Fatalf("problem idle %+v now %v", pr.Idle, pr.Now)
	}
}

// TestCompletionTooFar: a completion beyond what a time.Duration holds
// (1e12 samples at 10 a second: 3,000 years) is none, not a moment before
// now (the float's conversion wrapped, and a replay decided at that past
// moment for ever).
func TestCompletionTooFar(t *testing.T) {
	p := mustNew(t, pool.Config{TFwd: 100})
	p.Join(at(0), []string{"n1"}, "")
	if err := p.Submit(at(0), pool.Spec{ID: "T", Min: 1, Max: 1, Curve: linear(1, 10), Samples: 1e12}); err != nil {
		t.Fatal(err)
	}
	p.Admit()
	decide(t, p)
	if got, ok := p.NextCompletion(); ok {
		t.Fatalf("next completion %v, want none", got)
	}
}
