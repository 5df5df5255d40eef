package sim

import (
	"context"
	"slices"
	"testing"
)

// TestSurpriseCausesByHand: on 4 nodes a Trainer holds the idle nodes.
// J2 needs all 4 and is planned at J1's requested end (100 s); J1 ends at
// 50 s, so J2 lands early and kills the Trainer: head_early. J3, 1 node,
// submitted at 20 s when nothing waits, starts at once: at_submit. When
// J1 ends as requested, J2 lands as planned and the Trainer moves first.
func TestSurpriseCausesByHand(t *testing.T) {
	jobs := []Job{{ID: "T", RUp: 1, RDown: 5, Min: 1, Max: 4, Samples: 1e9,
		Nodes: []int{1, 2, 3, 4}, Throughput: []float64{10, 20, 30, 40}, Metric: []float64{10, 20, 30, 40}}}
	explain := func(lines ...string) SurpriseCauses {
		t.Helper()
		l := mustReadSWF(t, lines...)
		tr, _, err := l.EASYTracePlanned(4, 1)
		if err != nil {
			t.Fatal(err)
		}
		js := []Job{jobs[0]}
		js[0].Submit = l.Time(0)
		ex := NewSurpriseExplainer(tr)
		if _, err := Replay(context.Background(), tr, js, Options{Plan: true, OnChange: ex.Observe}); err != nil {
			t.Fatal(err)
		}
		return ex.Causes
	}
	// J1 holds 2 nodes, planned to 100 s, ends at 50 s; J2 (all 4) is planned at 100 s.
	if c := explain(swfLine(1, 0, 0, 50, 2, 2, 100), swfLine(2, 1, 0, 10, 4, 4, 10)); c.HeadEarly != 1 || c.Total() != 1 {
		t.Errorf("head early: %v, want head_early=1 alone", c)
	}
	// J1 holds 2 nodes; J3 (1 node) arrives at 20 s with an empty queue and starts.
	if c := explain(swfLine(1, 0, 0, 100, 2, 2, 100), swfLine(3, 20, 0, 10, 1, 1, 10)); c.AtSubmit != 1 || c.Total() != 1 {
		t.Errorf("at submit: %v, want at_submit=1 alone", c)
	}
	// J1 as planned (100 s), J2 lands on time on its planned nodes: moved, no surprise.
	if c := explain(swfLine(1, 0, 0, 100, 2, 2, 100), swfLine(2, 1, 0, 10, 4, 4, 10)); c.Total() != 0 {
		t.Errorf("on time: %v, want no surprise", c)
	}
}

// TestEASYPlanBeyondHeadByHand: on 8 nodes J1 holds 2 to 50 s and J2 4 to
// 100 s (as requested); the head H needs 7 (planned at 100 s, on 1 of the
// 2 idle nodes) and B, behind it, 3 for 40 s: it does not fit now, and a
// backfill pass plans it at 50 s on J1's 2 nodes and 1 idle one (the
// other idle node, since it starts first: the top of the free stack). At
// 50 s EASY backfills B there. A Trainer on the idle nodes is moved off
// B's node first with the plan beyond the head, and killed with the head's
// plan alone (a backfill, which no head-only plan shows).
func TestEASYPlanBeyondHeadByHand(t *testing.T) {
	l := mustReadSWF(t, swfLine(1, 0, 0, 50, 2, 2, 50), swfLine(2, 0, 0, 100, 4, 4, 100),
		swfLine(3, 1, 0, 10, 7, 7, 10), swfLine(4, 2, 0, 40, 3, 3, 40))
	all, _, err := l.EASYTracePlan(8, 1, DefaultPlanDepth)
	if err != nil {
		t.Fatal(err)
	}
	tp, _ := planAt(all.Plans, 0, l.Time(2))
	if tp == nil || len(tp.Nodes) != 1 || !tp.Start.Equal(l.Time(100)) || len(tp.Beyond) != 1 ||
		!tp.Beyond[0].Start.Equal(l.Time(50)) || len(tp.Beyond[0].Nodes) != 1 || tp.Beyond[0].Nodes[0] == tp.Nodes[0] {
		t.Fatalf("plan at 2 s: %+v, want the head at 100 s on 1 idle node and B at 50 s on the other", tp)
	}
	var b *TraceStart
	for i := range all.Starts {
		if all.Starts[i].At.Equal(l.Time(50)) {
			b = &all.Starts[i]
		}
	}
	if b == nil || b.How != StartBackfill || !slices.Contains(b.Nodes, tp.Beyond[0].Nodes[0]) {
		t.Fatalf("start at 50 s: %+v, want B backfilled on its planned idle node %d", b, tp.Beyond[0].Nodes[0])
	}
	head, _, err := l.EASYTracePlanned(8, 1)
	if err != nil {
		t.Fatal(err)
	}
	if hp, _ := planAt(head.Plans, 0, l.Time(2)); hp == nil || len(hp.Beyond) != 0 {
		t.Fatalf("head-only plan at 2 s: %+v, want nothing beyond the head", hp)
	}
	jobs := []Job{{ID: "T", Submit: l.Time(0), RUp: 1, RDown: 5, Min: 1, Max: 2, Samples: 1e9,
		Nodes: []int{1, 2}, Throughput: []float64{10, 20}, Metric: []float64{10, 20}}}
	run := func(tr *Trace) (Summary, SurpriseCauses) {
		ex := NewSurpriseExplainer(tr)
		res, err := Replay(context.Background(), tr, jobs, Options{Plan: true, Check: true, OnChange: ex.Observe})
		if err != nil {
			t.Fatal(err)
		}
		return res.Summary, ex.Causes
	}
	if s, c := run(head); s.ReclaimsSurprise < 1 || c.Backfill != 1 {
		t.Errorf("head-only plan: surprise %d, causes %v, want B's backfill a surprise", s.ReclaimsSurprise, c)
	}
	if s, c := run(all); s.ReclaimsPlanned < 1 || c.Backfill != 0 {
		t.Errorf("plan beyond the head: planned %d, causes %v, want B's node vacated first", s.ReclaimsPlanned, c)
	}
}
