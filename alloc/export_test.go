package alloc

// PricedAdditionAges returns the idle ages AdaptiveHorizon prices Trainer
// j's growth by delta nodes on, oldest first (for tests of the bound).
func PricedAdditionAges(p *Problem, j, delta int) []float64 {
	m := newAdaptiveModel(p, nil)
	ts := m.sets(j, len(p.Trainers[j].Held)+delta)
	out := make([]float64, len(ts.added))
	for i, o := range ts.added {
		out[i] = o.age
	}
	return out
}

// GrowthGainsAgainstWalk values every growth count k = C+1..hi of every
// Trainer both ways — growthGains (cohorts outside, counts inside) and
// the count-by-count walk (ts.blocks, gainOf) — and returns the largest
// difference relative to the Trainer's largest value (at least 1: a
// value near 0 may be a difference of terms far larger), how many Trainers
// growthGains declined (it reports false on a merge of another shape),
// how many counts were compared and how many terms growthGains summed.
func GrowthGainsAgainstWalk(p *Problem) (worst float64, declined, counts, summed int) {
	m := newAdaptiveModel(p, nil)
	for j := range p.Trainers {
		_, hi := p.boundsIn(j, m.size)
		hi = max(hi, len(p.Trainers[j].Held))
		C := len(p.Trainers[j].Held)
		if C >= hi {
			continue
		}
		rates, speed := m.rates(j, hi, nil)
		ts := trainerSets{held: m.heldOutlooks(j), youngFirst: p.Semantics == Reference}
		held, added := blocksOf(ts.held), m.addedBlocks(j, hi-C)
		out := make([]float64, hi+1)
		ok, n := m.growthGains(j, ts.blocks(hi, held, added, nil), rates, speed, out, nil)
		if !ok {
			declined++
			continue
		}
		summed += n
		diff, size := 0.0, 1.0
		for k := C + 1; k <= hi; k++ {
			w := m.gainOf(j, k, ts.blocks(k, held, added, nil), rates, speed[k])
			diff, size = max(diff, abs(out[k]-w)), max(size, abs(w))
			counts++
		}
		worst = max(worst, diff/size)
	}
	return worst, declined, counts, summed
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// ExactRounding is the value of the feasible rounding exact's windows are
// pruned against (relax's lb), and false when no bound applies.
func ExactRounding(p *Problem) (float64, bool) {
	chs := make([]choices, len(p.Trainers))
	for j := range chs {
		chs[j] = trainerChoices(p, j, p.Size(), p.StepLimit(), p.Value, nil, true)
	}
	r, ok := relax(p, chs, p.Value)
	return r.lb, ok
}

// CountsWithNarrow is optimalCounts (adaptive's pricing, or exact's) with
// the narrow windows' ptol at rel of mag (+Inf: the wide windows only);
// wide reports that the narrow windows' choice was not kept.
func CountsWithNarrow(p *Problem, adaptive bool, rel float64) (counts []int, ok, wide bool) {
	if adaptive {
		val, rows, done := p.priceRows(AdaptiveHorizon{}, nil)
		defer done()
		return solveCounts(p, val, rows, false, rel)
	}
	return solveCounts(p, p.Value, nil, true, rel)
}

// SetSumsFrom sets the number of growth counts from which growthGains sums
// terms (sumsFrom) and returns a func that restores it.
func SetSumsFrom(n int) (restore func()) {
	old := sumsFrom
	sumsFrom = n
	return func() { sumsFrom = old }
}

// KeptPlaceRefs returns how many node pointers Place's kept lists still
// hold and how much room they have (a kept list must not keep the last
// Problem alive).
func KeptPlaceRefs() (live, room int) {
	r := refsKept.take()
	defer refsKept.give(r, func(r *placeRefs) int { return cap(r.pool) + cap(r.merged) })
	for _, l := range [][]*Node{r.held, r.released, r.pool, r.back, r.merged} {
		for _, n := range l[:cap(l)] {
			if n != nil {
				live++
			}
		}
		room += cap(l)
	}
	return live, room
}
