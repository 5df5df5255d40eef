// Package allocbefore is alloc's adaptive and exact count solvers as they
// were before the exascale work (commit bc90ab6): the adaptive pricing walked
// node by node for every count, the DP visiting every count of a tabled
// Trainer. It is kept, unchanged but for the package boundary, as the
// oracle of alloc's property tests and as the peer bftrainer-bench times
// the new solvers against (before_ms). Nothing else may use it.
package allocbefore

import (
	"github.com/bftrainer/bftrainer/alloc"
)

// AdaptiveCounts returns the counts the old alloc.Adaptive chose, and
// false when no allocation is feasible.
func AdaptiveCounts(p *alloc.Problem) ([]int, bool) {
	return optimalCounts(p, prices(p, adaptiveHorizon{}.Gains(p)), false)
}

// AdaptiveSolve is the old alloc.Adaptive's Solve for a timing that
// compares with the new one's: validation, the counts, and placement
// (alloc.PlaceWith, unchanged) priced by the values the counts were chosen
// on. It returns the counts, and false when no allocation is feasible.
func AdaptiveSolve(p *alloc.Problem) ([]int, bool, error) {
	if err := p.Validate(); err != nil {
		return nil, false, err
	}
	g := adaptiveHorizon{}.Gains(p)
	counts, ok := optimalCounts(p, prices(p, g), false)
	if ok {
		alloc.PlaceWith(p, madeGains{g}, counts)
	}
	return counts, ok, nil
}

// ExactSolve is AdaptiveSolve for the old alloc.Exact.
func ExactSolve(p *alloc.Problem) ([]int, bool, error) {
	if err := p.Validate(); err != nil {
		return nil, false, err
	}
	counts, ok := optimalCounts(p, p.Value, true)
	if ok {
		alloc.PlaceWith(p, nil, counts)
	}
	return counts, ok, nil
}

// madeGains is an alloc.Pricing whose gains are already computed.
type madeGains struct{ g func(j, k int) float64 }

func (madeGains) Name() string { return "adaptive" }

func (m madeGains) Gains(*alloc.Problem) func(j, k int) float64 { return m.g }

// ExactCounts returns the counts the old alloc.Exact chose, and false
// when no allocation is feasible.
func ExactCounts(p *alloc.Problem) ([]int, bool) {
	return optimalCounts(p, p.Value, true)
}

// AdaptiveGains is the old alloc.AdaptiveHorizon's Gains.
func AdaptiveGains(p *alloc.Problem) func(j, k int) float64 {
	return adaptiveHorizon{}.Gains(p)
}

// prices is alloc.Problem.Prices for a gain function.
func prices(p *alloc.Problem, gain func(j, k int) float64) valueFunc {
	return func(j, k int) float64 {
		t := &p.Trainers[j]
		c := len(t.Held)
		v := gain(j, k)
		r := t.Rate(p.Goal(), c)
		switch {
		case k > c:
			v -= t.RUp * r
		case k < c:
			v -= t.RDown * r
		}
		return t.Priority() * v
	}
}

func bounds(p *alloc.Problem, j int) (lo, hi int) {
	t := &p.Trainers[j]
	lo = max(t.Min, 1)
	hi = min(t.MaxNodes(), p.Size())
	return lo, hi
}
