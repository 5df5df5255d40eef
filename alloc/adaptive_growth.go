package alloc

import (
	"math"
	"sync"
)

// The growth counts of a Trainer, cohort by cohort (issue 23).
//
// gains valued a Trainer's counts one at a time: for each count k it
// gathered the blocks of k's set and walked them (gainOf), O(blocks) a
// count, with the set's blocks copied again each time. Above the current
// size C the sets are nested: count C+d holds every held node and the
// first d added ones, so its blocks are those of the largest count's set
// (the full merge of held and added blocks) with the added nodes past
// the d-th left out. A block of that merge therefore has, at count C+d,
//
//   - its start rank: the held nodes before it in the merge, plus the
//     added nodes before it, at most d;
//   - its size: all of it if held; min(n, d − added nodes before it) if
//     added, and nothing when that is ≤ 0 (not yet in the set);
//
// and its cohort is the same at every count: a held block alone, an
// added one alone, or a held block followed by an added one of its age
// (the merge puts held nodes first among equal ages; two held blocks, or
// two added ones, in a row are of different ages, being maximal runs).
//
// growthGains turns the loops round: cohorts outside, counts inside. Each
// count's value receives the same terms, in the same order (its cohorts
// in rank order), with the same arithmetic as gainOf — the same numbers
// bit for bit (TestGrowthGainsMatchWalk, its "lookups" case) — but no set
// is gathered or copied per count, and a cohort's survival lookups for
// all counts run as one loop over its outlook (column), without a call
// per lookup. That is one lookup per cohort and count, since the horizon
// min(τ, T(k)) moves with k. For a Trainer of sumsFrom growth counts or
// more, a cohort's terms go to running sums from the count on which its
// coefficients stop moving (adaptive_sums.go), and the block a count
// holds in part is valued from its own quadratic (oneTerm): a few
// multiply-adds a count instead of a lookup per cohort, the same values
// to rounding (10⁻¹¹ of the Trainer's largest value in the tests), not
// bit for bit.

// growthGains sets out[k] for the counts k = C+1..hi (hi = len(out)−1) of
// Trainer j from full, the blocks of the set of count hi (ts.blocks(hi)),
// with rates[i] = O'(i) and speed[i] = P(i), its arrays taken from sc. It
// reports false, leaving out untouched, if full's cohorts are not of the
// shapes above (then gainOf must value those counts); summed is how many
// terms it summed (adaptive_sums.go).
func (m *adaptiveModel) growthGains(j int, full []block, rates, speed, out []float64, sc *scratch) (ok bool, summed int) {
	t := &m.p.Trainers[j]
	C := len(t.Held)
	hi := len(out) - 1
	D := hi - C
	// Check the cohorts' shapes first: out is untouched on false.
	for i := 0; i < len(full); {
		e := i + 1
		for e < len(full) && full[e].o.age == full[i].o.age {
			e++
		}
		if e-i > 2 || (e-i == 2 && (full[i].o.added || !full[i+1].o.added)) {
			return false, 0
		}
		i = e
	}
	// grown[d]: the horizon of the nodes count C+d grows onto (gainOf's);
	// hmin, hmax: the least and greatest of them (compares, not min and
	// max: the builtins' NaN and signed-zero rules cost more than the
	// loop; finish is never NaN).
	grown := sc.takeDirty(D + 1)
	hmin, hmax := math.Inf(1), math.Inf(-1)
	for d := 1; d <= D; d++ {
		H := m.gap
		if P := speed[C+d]; t.Remaining > 0 && P > 0 {
			if finish := t.Remaining / P; finish < H {
				H = finish
			}
		}
		grown[d] = H
		if H < hmin {
			hmin = H
		}
		if H > hmax {
			hmax = H
		}
	}
	g := out[C:] // g[d]: count C+d
	rDown := t.RDown
	// From sumsFrom growth counts, a cohort's terms of fixed coefficients
	// go to the running sums (adaptive_sums.go): sumAt(from, o...) says
	// whether they may, and the counts before from are valued here.
	sums := D >= sumsFrom
	var terms []sumTerm
	var konst []float64
	if sums {
		konst = sc.take(D + 2)
	}
	sumAt := func(from int, os ...*nodeOutlook) bool {
		if !sums || from > D {
			return false
		}
		for _, o := range os {
			if !m.summable(o, hmin, hmax) {
				return false
			}
		}
		return true
	}
	// h, pi: one cohort's block over every count's horizon (column);
	// h2: the added block after a held one. Each count's entries are
	// written for the cohort before they are read.
	h, pi, h2 := sc.takeDirty(D+1), sc.takeDirty(D+1), sc.takeDirty(D+1)
	heldBefore, addedBefore := 0, 0
	for i := 0; i < len(full); {
		f := full[i]
		var s2 *block // the added block of f's age after a held f
		if i+1 < len(full) && full[i+1].o.age == f.o.age {
			s2 = &full[i+1]
		}
		if !f.o.added {
			// A held block: in every count's set, after the first
			// min(addedBefore, d) added nodes. From the count past them
			// (and past s2) its ranks are fixed.
			hTau := f.o.hTau
			stop := D + 1 // the first count summed
			from := max(1, addedBefore)
			outlooks := []*nodeOutlook{f.o}
			if s2 != nil {
				from = addedBefore + s2.n
				outlooks = append(outlooks, s2.o)
			}
			if sumAt(from, outlooks...) {
				stop = from
				start := heldBefore + addedBefore
				mid := start + f.n
				end := mid
				if s2 != nil {
					end += s2.n
				}
				konst[from] += (rates[mid] - rates[start]) * hTau
				terms = append(terms, sumTerm{o: f.o, bp: rDown * rates[end] / f.o.s, from: from})
				if end > mid {
					terms = append(terms, sumTerm{o: s2.o, ah: (rates[end] - rates[mid]) / s2.o.s, from: from})
				}
			}
			m.column(f.o, grown[:stop], 1, h, pi)
			if s2 != nil {
				m.column(s2.o, grown[:stop], addedBefore+1, h2, nil)
			}
			for d := 1; d < stop; d++ {
				start := heldBefore + min(addedBefore, d)
				mid := start + f.n
				end := mid
				if s2 != nil && d > addedBefore {
					end += min(s2.n, d-addedBefore)
				}
				v := g[d]
				v -= rDown * rates[end] * pi[d]
				v += (rates[mid] - rates[start]) * hTau
				if end > mid {
					v += (rates[end] - rates[mid]) * h2[d]
				}
				g[d] = v
			}
		} else {
			// An added block alone: in the sets of the counts past the
			// added nodes before it, all at once from there; whole from
			// the count that holds all of it.
			start := heldBefore + addedBefore
			stop := D + 1
			if from := addedBefore + f.n; sumAt(from, f.o) {
				stop = from
				end := start + f.n
				terms = append(terms, sumTerm{o: f.o, ah: (rates[end] - rates[start]) / f.o.s, bp: rDown * rates[end] / f.o.s, from: from})
			}
			if stop < D+1 || sumAt(1, f.o) {
				// The counts that hold part of it: its own quadratic.
				one := m.oneTerm(f.o)
				for d := addedBefore + 1; d < stop; d++ {
					end := start + min(f.n, d-addedBefore)
					hd, pd := one.at(grown[d])
					g[d] += (rates[end]-rates[start])*hd - rDown*rates[end]*pd
				}
			} else {
				m.column(f.o, grown[:stop], addedBefore+1, h, pi)
				for d := addedBefore + 1; d < stop; d++ {
					end := start + min(f.n, d-addedBefore)
					v := g[d]
					v -= rDown * rates[end] * pi[d]
					v += (rates[end] - rates[start]) * h[d]
					g[d] = v
				}
			}
		}
		if f.o.added {
			addedBefore += f.n
		} else {
			heldBefore += f.n
		}
		i++
		if s2 != nil {
			addedBefore += s2.n
			i++
		}
	}
	if sums {
		m.sweep(terms, konst, grown, g)
	}
	return true, len(terms)
}

// column sets h[d], pi[d] = m.over(o, grown[d]) for d = d0..len(grown)−1
// (pi nil: h only). The common case — a horizon other than τ, a node
// without a plan within it, of positive survival, ending within the life
// table — is over's arithmetic written out, so that the loop runs without
// a call per count (over → capped → survival.over → survival.at); the
// rest goes through over.
func (m *adaptiveModel) column(o *nodeOutlook, grown []float64, d0 int, h, pi []float64) {
	sv := m.sv
	top, rows := sv.edge[sv.end], sv.rows
	plain := o.s > 0
	for d := d0; d < len(grown); d++ {
		H := grown[d]
		x := o.age + H
		var hd, pd float64
		if plain && H != m.gap && o.until >= H && x > 0 && x < top {
			// survival.at(x), then survival.over's ratios.
			b := IdleBin(x)
			r0, r1 := &rows[b], &rows[b+1]
			lo, w := r0.edge, r1.edge-r0.edge
			f := (x - lo) / w
			s0, s1 := r0.s, r1.s
			s := s0 + (s1-s0)*f
			cum := r0.cum + (s0+s)/2*(x-lo)
			hd, pd = (cum-o.cum)/o.s, 1-s/o.s
		} else {
			hd, pd = m.over(o, H)
		}
		h[d] = hd
		if pi != nil {
			pi[d] = pd
		}
	}
}

// scratch holds the arrays a Trainer's counts are valued with (rates,
// speeds, horizons, survival columns: hi+1 values each, a few hundred kB
// a Trainer at N_max = 10,624) for reuse: by the next Trainer valued on
// the same core, and by the next solve (scratchPool). Made for every
// Trainer, they and the envelope's points (ptsPool) were 70 of the 127 MB
// a solve at 100 × 10,624 allocated, and cost the collector's work.
type scratch struct {
	buf  []float64
	used int
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// reset gives the whole scratch back: the arrays taken before must no
// longer be used.
func (s *scratch) reset() { s.used = 0 }

// take returns n zeros, as make does; from a nil scratch, made.
func (s *scratch) take(n int) []float64 {
	out := s.takeDirty(n)
	if s != nil {
		clear(out)
	}
	return out
}

// takeDirty returns n values that may be left from earlier arrays, for an
// array whose every entry read is written first (clearing the arrays of
// a Trainer at N_max = 10,624 took ~1 ms of CPU a solve at 100 × 10,624).
func (s *scratch) takeDirty(n int) []float64 {
	if s == nil {
		return make([]float64, n)
	}
	if len(s.buf)-s.used < n {
		// The arrays taken so far keep the old buffer.
		s.buf, s.used = make([]float64, max(2*len(s.buf), 8*n)), 0
	}
	out := s.buf[s.used : s.used+n : s.used+n]
	s.used += n
	return out
}
