package sim

import (
	"context"
	"testing"
)

// TestEASYPlanByHand: on 4 nodes J1 holds 2 for 100 s (as it asked), and
// J2 needs all 4 from t=1: its reservation starts at 100 on the 2 nodes
// idle now, and a Trainer there is moved off before J2 lands when the
// replay gives the pool the plan (a graceful move, no reclaim), and
// killed when it does not. Asking the plan with requests twice as long
// plans J2 at 200: too late, the reclaim is a surprise again.
func TestEASYPlanByHand(t *testing.T) {
	l := mustReadSWF(t, swfLine(1, 0, 0, 100, 2, 2, 100), swfLine(2, 1, 0, 10, 4, 4, 10))
	tr, _, err := l.EASYTracePlanned(4, 1)
	if err != nil {
		t.Fatal(err)
	}
	tp, _ := planAt(tr.Plans, 0, l.Time(1))
	if tp == nil || len(tp.Nodes) != 2 || !tp.Start.Equal(l.Time(100)) {
		t.Fatalf("plan at 1 s: %+v, want J2 at 100 s on the 2 idle nodes (plans %+v)", tp, tr.Plans)
	}
	idle := map[string]bool{}
	for _, n := range tp.Nodes {
		idle[tr.Nodes[n]] = true
	}
	for _, n := range tr.Nodes[2:] {
		if !idle[n] {
			t.Fatalf("plan names %v, want the idle nodes %v", tp.Nodes, tr.Nodes[2:])
		}
	}
	jobs := []Job{{ID: "T", Submit: l.Time(0), RUp: 1, RDown: 5, Min: 1, Max: 2, Samples: 1e9,
		Nodes: []int{1, 2}, Throughput: []float64{10, 20}, Metric: []float64{10, 20}}}
	run := func(tr *Trace, plan bool) Summary {
		res, err := Replay(context.Background(), tr, jobs, Options{Plan: plan, Check: true})
		if err != nil {
			t.Fatal(err)
		}
		return res.Summary
	}
	if s := run(tr, true); s.ReclaimsPlanned != 1 || s.ReclaimsSurprise != 0 || s.PreemptLoss != 0 {
		t.Errorf("plan on: planned %d surprise %d preempt loss %v, want 1, 0, 0", s.ReclaimsPlanned, s.ReclaimsSurprise, s.PreemptLoss)
	}
	if s := run(tr, false); s.ReclaimsPlanned != 0 || s.ReclaimsSurprise != 1 {
		t.Errorf("plan off: planned %d surprise %d, want 0, 1", s.ReclaimsPlanned, s.ReclaimsSurprise)
	}
	wrong, _, err := l.EASYTracePlanned(4, 2)
	if err != nil {
		t.Fatal(err)
	}
	if s := run(wrong, true); s.ReclaimsPlanned != 0 || s.ReclaimsSurprise != 1 {
		t.Errorf("wrong plan: planned %d surprise %d, want 0, 1 (it never keeps the node from J2)", s.ReclaimsPlanned, s.ReclaimsSurprise)
	}
}
