package main

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/sim"
)

// TestOrderTallyByHand: four nodes join one after another (index 0 first),
// then one leave takes the youngest two (indices 2 and 3). Under
// youngest-first they stand at ranks 0 and 1 of 4; under lowest index at 2
// and 3; a uniform choice of 2 among 4 puts each in the first 2 half the
// time.
func TestOrderTallyByHand(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	tr := &sim.Trace{
		Nodes: []string{"a01n01", "a01n02", "a02n01", "a02n02"},
		Events: []sim.Event{
			{Time: at(0), Joined: []int32{0}},
			{Time: at(100), Joined: []int32{1}},
			{Time: at(200), Joined: []int32{2}},
			{Time: at(300), Joined: []int32{3}},
			{Time: at(400), Left: []int32{2, 3}},
		},
	}
	got := tallyOrders(tr)
	idx := func(name string) int { return slices.Index(orderNames[:], name) }
	for _, tc := range []struct {
		order          string
		meanRank, lift float64
	}{
		// Mid-ranks 0 and 1: ((0+0.5)+(1+0.5))/4/2; both in the first 2.
		{"young", 0.25, 2},
		{"old", 0.75, 0},
		{"index", 0.75, 0},
		// Nothing taken before: all tie at mid-rank 1.5, a share of ½.
		{"history", 0.5, 1},
		// Rack a02 holds both taken nodes; by occupancy the racks tie.
		{"rack-full", 0.5, 1},
	} {
		st := got.stats[0][idx(tc.order)]
		if st.leaves != 2 {
			t.Fatalf("%s: %d leaves, want 2", tc.order, st.leaves)
		}
		if r := st.rank / 2; math.Abs(r-tc.meanRank) > 1e-12 {
			t.Errorf("%s: mean rank %v, want %v", tc.order, r, tc.meanRank)
		}
		if l := st.hit / st.uniformHit; math.Abs(l-tc.lift) > 1e-12 {
			t.Errorf("%s: lift %v, want %v", tc.order, l, tc.lift)
		}
	}
	// Four idle nodes are scarce (fewer than 640).
	if st := got.stats[1][idx("young")]; st.leaves != 2 {
		t.Fatalf("scarce: %d leaves, want 2", st.leaves)
	}
	// The calibration saw 2 nodes taken, youngest first, in the bins of
	// quantiles 1/8 and 3/8, and expected 2 in all.
	taken, expected := 0.0, 0.0
	for b := range rankBins {
		taken += got.cal.taken[b]
		expected += got.cal.expected[b]
	}
	if taken != 2 || math.Abs(expected-2) > 1e-9 || got.cal.taken[1] != 1 || got.cal.taken[3] != 1 {
		t.Fatalf("calibration: taken %v (%v), expected %v; want 2 in bins 1 and 3, 2", taken, got.cal.taken, expected)
	}
}
