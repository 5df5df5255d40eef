package sim

import (
	"context"
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
