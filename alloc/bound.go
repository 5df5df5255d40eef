package alloc

import (
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
	pts := make([]pt, 0, 2+2*len(ch.pieces)+len(ch.table))
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
	if byK := func(a, b pt) int { return a.k - b.k }; !slices.IsSortedFunc(pts, byK) {
		slices.SortStableFunc(pts, byK)
	}
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

// unitTree holds a subset of the slope-sorted segments (by rank in the
// sorted list) in a Fenwick tree of their node counts and values, so that
// the greedy fill of x nodes, G's value less the smallest counts', is a
// descent of O(log S) instead of a scan of the list.
type unitTree struct {
	segs  []seg
	units []int     // Fenwick, 1-based
	value []float64 // Fenwick, 1-based
	high  int       // the largest power of two ≤ len(segs)
}

func newUnitTree(segs []seg) *unitTree {
	t := &unitTree{segs: segs, units: make([]int, len(segs)+1), value: make([]float64, len(segs)+1), high: 1}
	for t.high*2 <= len(segs) {
		t.high *= 2
	}
	return t
}

// fillAll puts every segment in the tree, in O(S).
func (t *unitTree) fillAll() {
	for r, sg := range t.segs {
		t.units[r+1] += sg.len
		t.value[r+1] += float64(sg.len) * sg.slope
		if up := (r + 1) + (r+1)&-(r+1); up < len(t.units) {
			t.units[up] += t.units[r+1]
			t.value[up] += t.value[r+1]
		}
	}
}

// add puts segment r in the tree (sign 1) or takes it out (sign −1).
func (t *unitTree) add(r, sign int) {
	u := sign * t.segs[r].len
	v := float64(u) * t.segs[r].slope
	for i := r + 1; i < len(t.units); i += i & -i {
		t.units[i] += u
		t.value[i] += v
	}
}

// fill returns the value of the best x nodes of the segments in the tree
// (all of them if they hold fewer) and the slope of the node after them
// (0 when none is left).
func (t *unitTree) fill(x int) (v, next float64) {
	pos, left := 0, x
	for step := t.high; step > 0 && len(t.segs) > 0; step >>= 1 {
		if q := pos + step; q < len(t.units) && t.units[q] <= left {
			pos, left = q, left-t.units[q]
			v += t.value[q]
		}
	}
	// Segments before rank pos are taken whole; rank pos holds more than
	// left nodes (or the list is used up).
	if pos < len(t.segs) {
		v += float64(left) * t.segs[pos].slope
		next = t.segs[pos].slope
	}
	return v, next
}

// envelopes returns every Trainer's smallest feasible count and its value,
// and all their envelope segments in one list sorted by decreasing slope
// (stable: by Trainer, then along its envelope); ok is false if some
// Trainer has no feasible count.
func envelopes(chs []choices) (k0 []int, v0 []float64, all []seg, ok bool) {
	k0, v0 = make([]int, len(chs)), make([]float64, len(chs))
	per := make([][]seg, len(chs))
	okj := make([]bool, len(chs))
	work := 0
	for j := range chs {
		work += len(chs[j].table)
	}
	perTrainer(len(chs), work, func(j int) { k0[j], v0[j], per[j], okj[j] = chs[j].envelope(j) })
	n := 0
	for j := range chs {
		if !okj[j] {
			return nil, nil, nil, false
		}
		n += len(per[j])
	}
	all = make([]seg, 0, n)
	for _, segs := range per {
		all = append(all, segs...)
	}
	// One Trainer's envelope slopes strictly decrease, so ordering equal
	// slopes by Trainer is the stable order, with an unstable sort.
	slices.SortFunc(all, func(a, b seg) int {
		switch {
		case a.slope > b.slope:
			return -1
		case a.slope < b.slope:
			return 1
		}
		return a.owner - b.owner
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
func prune(p *Problem, chs []choices, L, U []int, tol float64, val valueFunc) (from, to []int, ok bool) {
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
	// each stage are fills of the Trainers before it and from it on, kept
	// in two trees that Trainer j−1's segments move between.
	k0s := make([]int, J+1) // k0s[j]: Σ k0 of Trainers before j
	v0s := make([]float64, J+1)
	for j := range chs {
		k0s[j+1], v0s[j+1] = k0s[j]+k0[j], v0s[j]+v0[j]
	}
	byOwner := make([][]int, J)
	pre, suf := newUnitTree(all), newUnitTree(all)
	for r, sg := range all {
		byOwner[sg.owner] = append(byOwner[sg.owner], r)
	}
	suf.fillAll()
	from, to = make([]int, J+1), make([]int, J+1)
	for j := 1; j <= J; j++ {
		for _, r := range byOwner[j-1] {
			pre.add(r, 1)
			suf.add(r, -1)
		}
		b := stageBound{pre: pre, suf: suf, n: N, k0p: k0s[j], v0p: v0s[j], k0s: k0s[J] - k0s[j], v0s: v0s[J] - v0s[j]}
		from[j], to[j] = b.interval(L[j], U[j], lb-tol)
	}
	return from, to, true
}

// stageBound is the LP bound of one stage at capacity c: the Trainers
// before it filling c nodes, plus those from it on filling the N − c left,
// f(c) = G_pre(c) + G_suf(N − c). Each G is concave (a fill by
// decreasing slope), so f is concave and {c : f(c) ≥ lb} an interval:
// found by binary searches for f's peak (where its increments turn
// non-positive) and for lb on either side, O(log N · log S) a stage.
type stageBound struct {
	pre, suf *unitTree
	n        int
	k0p, k0s int
	v0p, v0s float64
}

func (b *stageBound) f(c int) float64 {
	vp, _ := b.pre.fill(c - b.k0p)
	vs, _ := b.suf.fill(b.n - c - b.k0s)
	return b.v0p + vp + b.v0s + vs
}

// rising reports whether f(c+1) > f(c).
func (b *stageBound) rising(c int) bool {
	_, up := b.pre.fill(c - b.k0p)             // the prefix's next node
	_, down := b.suf.fill(b.n - c - 1 - b.k0s) // the suffix's last node at N−c
	return up > down
}

// interval returns the capacities of [lo, hi] where f ≥ lb (from > to if
// none).
func (b *stageBound) interval(lo, hi int, lb float64) (from, to int) {
	lo, hi = max(lo, b.k0p), min(hi, b.n-b.k0s) // where f is finite
	if lo > hi {
		return hi + 1, lo - 1
	}
	// The peak: the first c whose increment is not positive.
	a, z := lo, hi
	for a < z {
		if m := a + (z-a)/2; b.rising(m) {
			a = m + 1
		} else {
			z = m
		}
	}
	peak := a
	if b.f(peak) < lb {
		return hi + 1, lo - 1
	}
	a, z = lo, peak // the first c with f(c) ≥ lb: f rises up to the peak
	for a < z {
		if m := a + (z-a)/2; b.f(m) >= lb {
			z = m
		} else {
			a = m + 1
		}
	}
	from = a
	a, z = peak, hi // the last: f falls after it
	for a < z {
		if m := a + (z-a+1)/2; b.f(m) >= lb {
			a = m
		} else {
			z = m - 1
		}
	}
	return from, a
}
