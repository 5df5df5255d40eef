package allocbefore

import (
	"github.com/bftrainer/bftrainer/alloc"
	"math"
	"slices"
)

// The exact DP visits every capacity of every stage; most of them cannot
// lie on an optimal path. The LP relaxation bounds that: replace each
// Trainer's value by its concave envelope and the best split of c nodes
// over a set of Trainers is a greedy fill by decreasing slope, G(c), an
// upper bound that is concave in c. Capacity c at stage j can lie on an
// optimal path only if G_{≤j}(c) + G_{>j}(N−c) reaches the value of some
// feasible solution (the LP's own, rounded down); the capacities that do
// form an interval, and the DP computes only that. Pruning never removes
// an optimal path: along one, the prefix is worth at most G_{≤j}(c_j) and
// the suffix, using at most N−c_j nodes, at most G_{>j}(N−c_j).

// seg is one segment of a concave envelope: len more nodes, each worth
// slope.
type seg struct {
	slope float64
	len   int
	owner int // Trainer index, for rounding
}

// envelope returns the concave envelope of a Trainer's value over its
// feasible counts: the smallest feasible count k0, its value, and the
// segments of positive slope after it, slopes decreasing.
func (ch *choices) envelope(owner int) (k0 int, v0 float64, segs []seg, ok bool) {
	type pt struct {
		k int
		v float64
	}
	var pts []pt
	if ch.zero {
		pts = append(pts, pt{0, ch.zeroV})
	}
	for _, pc := range ch.pieces {
		pts = append(pts, pt{pc.a, pc.alpha + pc.beta*float64(pc.a)}, pt{pc.b, pc.alpha + pc.beta*float64(pc.b)})
	}
	if ch.cur > 0 {
		pts = append(pts, pt{ch.cur, ch.curV})
	}
	for i, v := range ch.table {
		pts = append(pts, pt{ch.lo + i, v})
	}
	if len(pts) == 0 {
		return 0, 0, nil, false
	}
	slices.SortFunc(pts, func(a, b pt) int { return a.k - b.k })
	// Upper hull, left to right (monotone chain).
	hull := pts[:0:0]
	for _, q := range pts {
		if n := len(hull); n > 0 && hull[n-1].k == q.k {
			if q.v > hull[n-1].v {
				hull = hull[:n-1]
			} else {
				continue
			}
		}
		for len(hull) >= 2 {
			a, b := hull[len(hull)-2], hull[len(hull)-1]
			// b is under the chord a–q: drop it.
			if (b.v-a.v)*float64(q.k-a.k) <= (q.v-a.v)*float64(b.k-a.k) {
				hull = hull[:len(hull)-1]
				continue
			}
			break
		}
		hull = append(hull, q)
	}
	k0, v0 = hull[0].k, hull[0].v
	for i := 1; i < len(hull); i++ {
		d := hull[i].k - hull[i-1].k
		s := (hull[i].v - hull[i-1].v) / float64(d)
		if s <= 0 {
			break
		}
		segs = append(segs, seg{slope: s, len: d, owner: owner})
	}
	return k0, v0, segs, true
}

// lpFill writes G(c) for c = from, from+1, … into out, where G is the LP
// relaxation of the Trainers whose index is in [ownLo, ownHi): all of them
// at their smallest feasible counts (k0 nodes, worth v0), then the
// segments of the slope-sorted list segs by decreasing slope. −Inf below k0.
func lpFill(k0 int, v0 float64, segs []seg, ownLo, ownHi int, from int, out []float64) {
	c, i := from, 0
	for ; i < len(out) && c < k0; i, c = i+1, c+1 {
		out[i] = math.Inf(-1)
	}
	v, used, s, taken := v0, k0, 0, 0
	for ; i < len(out); i, c = i+1, c+1 {
		for used < c && s < len(segs) {
			if o := segs[s].owner; o < ownLo || o >= ownHi {
				s++
				continue
			}
			step := min(c-used, segs[s].len-taken)
			v += float64(step) * segs[s].slope
			used += step
			taken += step
			if taken == segs[s].len {
				s, taken = s+1, 0
			}
		}
		out[i] = v
	}
}

// envelopes returns every Trainer's smallest feasible count and its value,
// and all their envelope segments in one list sorted by decreasing slope
// (stable: by Trainer, then along its envelope); ok is false if some
// Trainer has no feasible count.
func envelopes(chs []choices) (k0 []int, v0 []float64, all []seg, ok bool) {
	k0, v0 = make([]int, len(chs)), make([]float64, len(chs))
	for j := range chs {
		var segs []seg
		if k0[j], v0[j], segs, ok = chs[j].envelope(j); !ok {
			return nil, nil, nil, false
		}
		all = append(all, segs...)
	}
	slices.SortStableFunc(all, func(a, b seg) int {
		switch {
		case a.slope > b.slope:
			return -1
		case a.slope < b.slope:
			return 1
		}
		return 0
	})
	return k0, v0, all, true
}

// roundDown returns feasible counts from the LP relaxation at capacity n,
// given envelopes' output: whole segments by decreasing slope while they
// fit; a Trainer whose segment does not fit takes none of its later ones
// (its envelope is a sequence).
func roundDown(k0 []int, all []seg, n int) []int {
	counts := slices.Clone(k0)
	used := 0
	for _, k := range k0 {
		used += k
	}
	if used > n {
		return nil
	}
	closed := make([]bool, len(k0))
	for _, s := range all {
		if closed[s.owner] {
			continue
		}
		if used+s.len > n {
			closed[s.owner] = true
			continue
		}
		counts[s.owner] += s.len
		used += s.len
	}
	return counts
}

// prune returns, per stage j = 1..J, the capacities [from[j], to[j]]
// (within [L[j], U[j]]) that can lie on an optimal path; from > to means
// none. ok is false when no bound applies (then every capacity counts).
func prune(p *alloc.Problem, chs []choices, L, U []int, tol float64, val valueFunc) (from, to []int, ok bool) {
	J, N := len(chs), p.Size()
	k0, v0, all, ok := envelopes(chs)
	if !ok {
		return nil, nil, false
	}
	counts := roundDown(k0, all, N)
	if counts == nil {
		return nil, nil, false
	}
	lb := 0.0
	for j, k := range counts {
		lb += val(j, k)
	}
	// Prefix sums of the smallest counts; the prefix and suffix bounds of
	// each stage filter the one slope-sorted list by owner.
	k0s := make([]int, J+1) // k0s[j]: Σ k0 of Trainers before j
	v0s := make([]float64, J+1)
	for j := range chs {
		k0s[j+1], v0s[j+1] = k0s[j]+k0[j], v0s[j]+v0[j]
	}
	from, to = make([]int, J+1), make([]int, J+1)
	var gp, gs []float64
	for j := 1; j <= J; j++ {
		lo, hi := L[j], U[j]
		w := hi - lo + 1
		gp = slices.Grow(gp[:0], w)[:w]
		gs = slices.Grow(gs[:0], w)[:w]
		lpFill(k0s[j], v0s[j], all, 0, j, lo, gp)
		// Suffix (Trainers j..J-1, 0-based) at capacity N−c, c from hi down.
		lpFill(k0s[J]-k0s[j], v0s[J]-v0s[j], all, j, J, N-hi, gs)
		from[j], to[j] = hi+1, lo-1
		for i := 0; i < w; i++ {
			c := lo + i
			if gp[i]+gs[hi-c] >= lb-tol {
				from[j] = min(from[j], c)
				to[j] = max(to[j], c)
			}
		}
	}
	return from, to, true
}
