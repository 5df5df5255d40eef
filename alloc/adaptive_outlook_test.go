package alloc

import (
	"math"
	"testing"
)

// TestReclaimChancesByHand: with no history the life table is the prior's
// plus the censored ages; the answer must be the model's own π(a, τ), fall
// with age (heavy-tailed prior), and lie in [0, 1].
func TestReclaimChancesByHand(t *testing.T) {
	h := &IdleHistory{}
	ages := []float64{0, 600, 7200}
	got := ReclaimChances(h, ages)
	sv := newSurvival(h, ages)
	for i, a := range ages {
		o := sv.outlook(a)
		_, want := sv.over(&o, priorFreeGap)
		if math.Abs(got[i]-want) > 1e-15 || got[i] < 0 || got[i] > 1 {
			t.Fatalf("age %v: π = %v, want %v in [0, 1]", a, got[i], want)
		}
	}
	// The prior spreads 16 periods log-uniformly over 1 min … 1 day: none
	// ends before a minute, so a node just idle is not reclaimed within τ
	// (60 s, the prior gap) and an older one is, a little.
	if got[0] != 0 || !(got[1] > 0) || !(got[2] < got[1]) {
		t.Fatalf("π = %v: want 0 at age 0, positive at 600 s, smaller at 2 h", got)
	}
}
