package alloc

import (
	"context"
	"slices"
)

// EqualShare is the reference's baseline allocator (re_allocate_ndf):
//
//  1. each Trainer's quota is q = ⌊N/J⌋ capped at its maximum, but 0 when
//     q ≤ its minimum — including q equal to the minimum, a quirk of the
//     reference kept on purpose;
//  2. the leftover nodes go first come first served, in Trainer order, up
//     to each maximum, skipping a Trainer that would stay below its
//     minimum;
//  3. every Trainer then moves to its quota.
//
// It ignores the rescale costs and the Reference step limit, as the
// reference does; nodes are placed by Place.
type EqualShare struct{}

// Name returns "heuristic".
func (EqualShare) Name() string { return "heuristic" }

// Solve returns the equal-share plan.
func (EqualShare) Solve(_ context.Context, p *Problem) (*Plan, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	J, N := len(p.Trainers), p.Size()
	counts := make([]int, J)
	if J == 0 {
		return newPlan(p, "heuristic", counts), nil
	}
	q := N / J
	left := N
	for j := range p.Trainers {
		t := &p.Trainers[j]
		if q > t.Min {
			counts[j] = min(q, t.MaxNodes())
		}
		left -= counts[j]
	}
	for j := range p.Trainers {
		if left <= 0 {
			break
		}
		t := &p.Trainers[j]
		if counts[j] < t.MaxNodes() {
			inc := min(t.MaxNodes()-counts[j], left)
			if counts[j]+inc < t.Min {
				continue
			}
			counts[j] += inc
			left -= inc
		}
	}
	pl := newPlan(p, "heuristic", counts)
	pl.NoStepLimit = true
	return pl, nil
}

// Greedy is a marginal-gain allocator: starting from nothing, it
// repeatedly gives the best-paying block of nodes (the move, among every
// Trainer's next feasible sizes, with the highest objective gain per node)
// until no move gains. It honours every constraint but is not optimal:
// the value of a size is not concave (bounds, rescale costs).
type Greedy struct{}

// Name returns "greedy".
func (Greedy) Name() string { return "greedy" }

// Solve returns the greedy plan.
func (Greedy) Solve(_ context.Context, p *Problem) (*Plan, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	J, N := len(p.Trainers), p.Size()
	step := p.StepLimit()
	chs := make([]choices, J)
	counts := make([]int, J)
	used := 0
	for j := range chs {
		chs[j] = trainerChoices(p, j, N, step, p.Value, nil, true)
		if !chs[j].zero {
			// 0 is not allowed (Reference step limit): start at the
			// smallest feasible size.
			lo := chs[j].maxK + 1
			if chs[j].cur > 0 {
				lo = chs[j].cur
			}
			for _, pc := range chs[j].pieces {
				lo = min(lo, pc.a)
			}
			counts[j] = lo
			used += lo
		}
	}
	if used > N {
		return Keep(p, "greedy", Infeasible, "no feasible allocation under the step limit; kept the current one"), nil
	}
	for {
		bestJ, bestK, bestRate := -1, 0, 0.0
		for j := range chs {
			k0 := counts[j]
			v0 := p.Value(j, k0)
			for _, k := range candidates(&chs[j], k0) {
				if k-k0 > N-used {
					break
				}
				rate := (p.Value(j, k) - v0) / float64(k-k0)
				if rate > bestRate*(1+1e-12) && rate > 0 {
					bestJ, bestK, bestRate = j, k, rate
				}
			}
		}
		if bestJ < 0 {
			break
		}
		used += bestK - counts[bestJ]
		counts[bestJ] = bestK
	}
	return newPlan(p, "greedy", counts), nil
}

// candidates returns the feasible sizes above k0 where the marginal rate
// can change: piece ends, the current size and its neighbour, ascending.
func candidates(ch *choices, k0 int) []int {
	var ks []int
	if ch.cur > k0 {
		ks = append(ks, ch.cur)
	}
	for _, pc := range ch.pieces {
		ks = append(ks, pc.a, pc.b)
	}
	ks = slices.DeleteFunc(ks, func(k int) bool { return k <= k0 })
	slices.Sort(ks)
	return slices.Compact(ks)
}
