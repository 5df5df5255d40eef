package alloc

// PricedAdditionAges returns the idle ages AdaptiveHorizon prices Trainer
// j's growth by delta nodes on, oldest first (for tests of the bound).
func PricedAdditionAges(p *Problem, j, delta int) []float64 {
	m := newAdaptiveModel(p)
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
// absolute difference and how many Trainers growthGains declined (it
// reports false on a merge of another shape).
func GrowthGainsAgainstWalk(p *Problem) (worst float64, declined, counts int) {
	m := newAdaptiveModel(p)
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
		if !m.growthGains(j, ts.blocks(hi, held, added, nil), rates, speed, out, nil) {
			declined++
			continue
		}
		for k := C + 1; k <= hi; k++ {
			w := m.gainOf(j, k, ts.blocks(k, held, added, nil), rates, speed[k])
			worst = max(worst, abs(out[k]-w))
			counts++
		}
	}
	return worst, declined, counts
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
		chs[j] = trainerChoices(p, j, p.Size(), p.StepLimit(), p.Value, true)
	}
	r, ok := relax(p, chs, p.Value)
	return r.lb, ok
}

// CountsWithNarrow is optimalCounts (adaptive's pricing, or exact's) with
// the narrow windows' ptol at rel of mag (+Inf: the wide windows only);
// wide reports that the narrow windows' choice was not kept.
func CountsWithNarrow(p *Problem, adaptive bool, rel float64) (counts []int, ok, wide bool) {
	if adaptive {
		return solveCounts(p, p.Prices(AdaptiveHorizon{}), false, rel)
	}
	return solveCounts(p, p.Value, true, rel)
}
