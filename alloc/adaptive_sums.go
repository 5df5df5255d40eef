package alloc

import "slices"

// Running sums for the growth counts (issue 23, eighth pass).
//
// growthGains valued every cohort at every growth count: one survival
// lookup per cohort and count, because the horizon H(d) = min(τ, T(C+d))
// moves with the count. But a cohort's coefficients stop moving once the
// count has taken all of it: an added block from the count that holds it
// whole, a held block from the count past the added nodes ranked before
// it. From there its term is
//
//	α·h(a, H) − β·π(a, H) = α·(∫S(a+H) − ∫S(a))/S(a) − β·(1 − S(a+H)/S(a))
//
// with α and β fixed, and within one bin of the life table S is linear in
// a+H and ∫S quadratic, so the term is a quadratic in H. The sum of every
// such term is then a quadratic in H as long as no term's a+H leaves its
// bin: sweep keeps that quadratic and the interval of H where it holds,
// and builds it again only when H leaves the interval. A term that joins
// while H is within it is expanded about the same H0 and added, its
// bin's interval cut from the quadratic's. A count then costs two
// multiply-adds where it cost a lookup per cohort; the rebuilds cost
// O(terms) each, as many as there are bin crossings (a bin is an eighth
// of an octave, so a term whose a+H moves over a decade of seconds
// crosses about 27), and a join O(1). At 100 × 10,624, 709 of a solve's
// 763 rebuilds were joins, 158,396 terms expanded in all (twelfth pass).
//
// The quadratic is centred on the rebuild's H0, each term expanded about
// its own offset into its bin u0 = a+H0 − edge (0 ≤ u0 < the bin's
// width), so that nothing large cancels: the values agree with the
// lookups' to a few ulps of the terms, not bit for bit, which is why
// small Trainers (fewer than sumsFrom growth counts, the replays' N_max
// 64 among them) keep the lookups. A term whose horizon a planned start
// cuts, of an age the table cannot speak for (S(a) = 0), or whose a+H
// may pass the table's top (the exponential tail) is never summed.

// sumsFrom is the number of growth counts from which growthGains sums the
// terms of fixed coefficients (a var for the tests).
var sumsFrom = 256

// sumTerm is α·h(a, H) − β·π(a, H) for a node outlook o, from count from
// on; ah and bp are α/S(a) and β/S(a).
type sumTerm struct {
	o      *nodeOutlook
	ah, bp float64
	from   int
}

// summable reports whether o's term can be summed over every horizon in
// [hmin, hmax]: none cut by a plan, within the life table, S(a) > 0. The
// caller passes the least and greatest horizon of all the growth counts,
// which bound those of the counts the term is summed over.
func (m *adaptiveModel) summable(o *nodeOutlook, hmin, hmax float64) bool {
	return o.s > 0 && o.until >= hmax && o.age+hmin > 0 && o.age+hmax < m.sv.edge[m.sv.end]
}

// sweep adds to g[d], d = 1..len(grown)−1, the terms active at d (from ≤
// d) at horizon grown[d], and the constants konst summed up to d (konst[d]
// joins at d). It sorts terms by from (stably).
func (m *adaptiveModel) sweep(terms []sumTerm, konst, grown, g []float64) {
	slices.SortStableFunc(terms, func(a, b sumTerm) int { return a.from - b.from })
	active := 0
	k := 0.0
	var h0, p0, p1, p2 float64
	lo, hi := 1.0, 0.0 // empty: the first active count rebuilds
	for d := 1; d < len(grown); d++ {
		k += konst[d]
		H := grown[d]
		first := active
		for active < len(terms) && terms[active].from <= d {
			active++
		}
		if active == 0 {
			g[d] += k
			continue
		}
		if active > first && H >= lo && H < hi {
			// Terms join a quadratic that holds at H: theirs, about the
			// same H0, are added to it.
			_, q0, q1, q2, qlo, qhi := m.expand(terms[first:active], h0)
			p0, p1, p2 = p0+q0, p1+q1, p2+q2
			lo, hi = max(lo, qlo), min(hi, qhi)
		}
		if !(H >= lo && H < hi) {
			h0, p0, p1, p2, lo, hi = m.expand(terms[:active], H)
		}
		e := H - h0
		g[d] += k + (p0 + e*(p1+e*p2))
	}
}

// expand returns the terms' sum as p0 + e·p1 + e²·p2, e = H − H0, and the
// interval [lo, hi) of H within which every term stays in its bin.
func (m *adaptiveModel) expand(terms []sumTerm, H0 float64) (h0, p0, p1, p2, lo, hi float64) {
	lo, hi = -1e308, 1e308
	for i := range terms {
		t := &terms[i]
		a := t.o.age
		b := m.sv.bin(a + H0)
		// α·(cum(x) − ∫S(a))/S(a) + β·(S(x) − S(a))/S(a), and its first
		// and second derivatives in H (over 2).
		p0 += t.ah*(b.cum-t.o.cum) + t.bp*(b.s-t.o.s)
		p1 += t.ah*b.s + t.bp*b.slope
		p2 += t.ah * b.slope / 2
		lo = max(lo, b.lo-a)
		hi = min(hi, b.hi-a)
	}
	return H0, p0, p1, p2, lo, hi
}

// inBin is S and ∫S at x, and the bin of the life table x is in: its
// edges lo and hi and the slope of S within it.
type inBin struct{ s, cum, lo, hi, slope float64 }

// bin returns x's inBin; x must be within the table (0 < x < its top).
func (sv *survival) bin(x float64) inBin {
	b := IdleBin(x)
	r0, r1 := &sv.rows[b], &sv.rows[b+1]
	slope := (r1.s - r0.s) / (r1.edge - r0.edge)
	u := x - r0.edge
	s := r0.s + slope*u
	return inBin{s: s, cum: r0.cum + (r0.s+s)/2*u, lo: r0.edge, hi: r1.edge, slope: slope}
}

// oneTerm evaluates h(a, H) and π(a, H) of one outlook the way expand sums
// terms: from a quadratic in H about the last H0, rebuilt when H leaves
// the bin it was built in. For a block whose coefficients still move with
// the count (the added block a count holds in part), where a sum cannot
// take it. The outlook must be summable over every H it is asked for.
type oneTerm struct {
	m                  *adaptiveModel
	o                  *nodeOutlook
	h0, lo, hi         float64
	h, h1, h2, pi, pi1 float64
}

func (m *adaptiveModel) oneTerm(o *nodeOutlook) oneTerm {
	return oneTerm{m: m, o: o, lo: 1, hi: 0}
}

// at returns h(a, H) and π(a, H).
func (t *oneTerm) at(H float64) (h, pi float64) {
	if !(H >= t.lo && H < t.hi) {
		a := t.o.age
		b := t.m.sv.bin(a + H)
		inv := 1 / t.o.s
		t.h0, t.lo, t.hi = H, b.lo-a, b.hi-a
		t.h, t.h1, t.h2 = (b.cum-t.o.cum)*inv, b.s*inv, b.slope/2*inv
		t.pi, t.pi1 = (t.o.s-b.s)*inv, -b.slope*inv
	}
	e := H - t.h0
	return t.h + e*(t.h1+e*t.h2), t.pi + e*t.pi1
}
