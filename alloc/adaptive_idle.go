package alloc

import (
	"math"
	"time"
)

// The distribution of idle periods: how long a node, once idle, stays idle.
// The pool records every idle period that ends (IdleHistory); at a decision
// the nodes idle now are the periods still running, right-censored at their
// age. A life table over both, with a weak prior, gives the survival
// function S(x) = P(an idle period lasts more than x seconds), and from it
// what Adaptive needs of a node idle for a seconds, over the next T seconds:
//
//	expected idle time   h(a, T) = ∫_0^T S(a+s) ds / S(a)
//	reclaim probability  π(a, T) = 1 − S(a+T)/S(a)
//
// Idle periods are heavy-tailed (a node idle for an hour is likelier to stay
// idle another hour than one that has just joined), which is why a node's
// age matters; nothing here assumes a shape. Lengths are kept in bins of a
// geometric grid, eight per doubling (each about 9 % wide) from 1 s to 2^24 s
// (194 days), so recording is O(1), a decision costs O(bins + nodes), and
// within a bin S is taken as linear (deaths spread evenly).

const (
	binsPerOctave = 8
	idleOctaves   = 24
	// IdleBins is the number of length bins: [0, 1 s), then eight per
	// doubling up to 2^24 s; longer periods count in the last bin.
	IdleBins = 1 + binsPerOctave*idleOctaves
)

// The prior, before the pool has seen enough idle periods: priorWeight
// pseudo-observations of ended periods spread log-uniformly between
// priorLow and priorHigh. It is not fitted to any machine: it says only
// that idle periods last from minutes to a day, with a median of about
// 38 min, and weighs as much as 16 observed periods, so a pool that has seen
// a few hundred idle periods is ruled by what it saw.
const (
	priorWeight = 16.0
	priorLow    = 60.0    // 1 minute
	priorHigh   = 86400.0 // 1 day
)

// IdleHistory counts the idle periods a pool has seen end, by length (the
// pool's own history, never the future of a trace). The zero value is empty.
// It is a plain value (an array, no slice): copying it copies it.
type IdleHistory struct {
	// Ended[b] counts ended periods whose length falls in bin b (see
	// IdleBin).
	Ended [IdleBins]float64 `json:"ended"`
	// Count is the number of ended periods recorded.
	Count int `json:"count"`
	// Frees is the number of moments at which nodes became free to take
	// (nodes joined the pool, or a Trainer ended and freed its own), and
	// Seconds how long the pool has been watching: Seconds/Frees is the
	// mean time between two chances to place nodes anew.
	Frees   int     `json:"frees"`
	Seconds float64 `json:"seconds"`
}

// The prior of the time between two moments nodes become free, before the
// pool has seen any: priorFrees pseudo-moments a minute apart (not fitted to
// any machine; a few real ones outweigh it).
const (
	priorFrees   = 4.0
	priorFreeGap = 60.0
)

// FreeGap is the mean time in seconds between two moments at which nodes
// became free, from what was observed and the prior.
func (h *IdleHistory) FreeGap() float64 {
	if h == nil {
		return priorFreeGap
	}
	return (h.Seconds + priorFrees*priorFreeGap) / (float64(h.Frees) + priorFrees)
}

// Add records an idle period of the given length in seconds (negative
// lengths count as 0).
func (h *IdleHistory) Add(seconds float64) {
	h.Ended[IdleBin(seconds)]++
	h.Count++
}

// IdleBin returns the bin of a length in seconds: 0 for [0, 1 s), then bin
// 1+8e+s for [2^e·(1+s/8), 2^e·(1+(s+1)/8)).
//
// It reads the bin off the number's bits: for seconds = 2^e·(1+f) ≥ 1,
// e is the binary exponent and s = ⌊8f⌋ the top three bits of the
// fraction (the same as ⌊(2·frac − 1)·8⌋ of math.Frexp's frac, exactly:
// both are exact operations on the same bits). The adaptive gains ask it
// once per cohort and count, millions of times a solve at N_max = N
// (issue 23), where Frexp's normalisation cost a fifth of the time.
func IdleBin(seconds float64) int {
	if !(seconds >= 1) { // also NaN
		return 0
	}
	bits := math.Float64bits(seconds) // ≥ 1: positive and normal
	e := int(bits>>52) - 1023
	if e >= idleOctaves { // also +Inf
		return IdleBins - 1
	}
	s := int(bits>>(52-3)) & (binsPerOctave - 1)
	return 1 + binsPerOctave*e + s
}

// idleEdge returns the lower edge of bin b in seconds; idleEdge(IdleBins) is
// the top of the grid.
func idleEdge(b int) float64 {
	if b <= 0 {
		return 0
	}
	e, s := (b-1)/binsPerOctave, (b-1)%binsPerOctave
	return math.Ldexp(1+float64(s)/binsPerOctave, e)
}

// priorMass returns the prior's pseudo-observations in each bin.
func priorMass() []float64 {
	out := make([]float64, IdleBins)
	lo, hi := math.Log(priorLow), math.Log(priorHigh)
	for b := 1; b < IdleBins; b++ {
		a, z := math.Log(idleEdge(b)), math.Log(idleEdge(b+1))
		if w := min(z, hi) - max(a, lo); w > 0 {
			out[b] = priorWeight * w / (hi - lo)
		}
	}
	return out
}

var prior = priorMass()

// survival is the life table of one decision: S and its integral at the bin
// edges, and an exponential tail past the data.
type survival struct {
	edge []float64 // edge[b], b = 0..IdleBins
	s    []float64 // S(edge[b])
	cum  []float64 // ∫_0^edge[b] S
	// rows holds edge, s and cum side by side, for at: one cache line a
	// lookup instead of three (it runs once per cohort and count).
	rows []svRow
	// Past end (the first edge where no observation is at risk, or the top
	// of the grid) S decays exponentially at the observed mean hazard:
	// ended periods over the total time observed idle.
	end    int
	hazard float64
}

// newSurvival builds the life table from ended periods (with the prior)
// and the ages of the nodes idle now (censored: still running). Within a
// bin a censored period counts half at risk (the actuarial rule).
func newSurvival(h *IdleHistory, ages []float64) *survival {
	d := make([]float64, IdleBins)
	copy(d, prior)
	if h != nil {
		for b, n := range h.Ended {
			d[b] += n
		}
	}
	c := make([]float64, IdleBins)
	for _, a := range ages {
		c[IdleBin(a)]++
	}
	return lifeTable(d, c)
}

// lifeTable builds the survival function from d[b] periods ended and c[b]
// censored (still running) in each bin.
func lifeTable(d, c []float64) *survival {
	sv := &survival{
		edge: make([]float64, IdleBins+1),
		s:    make([]float64, IdleBins+1),
		cum:  make([]float64, IdleBins+1),
		end:  IdleBins,
	}
	for b := range sv.edge {
		sv.edge[b] = idleEdge(b)
	}
	risk := 0.0
	deaths, exposure := 0.0, 0.0
	for b := range IdleBins {
		risk += d[b] + c[b]
		mid := (sv.edge[b] + sv.edge[b+1]) / 2
		deaths += d[b]
		exposure += (d[b] + c[b]) * mid
	}
	if exposure > 0 {
		sv.hazard = deaths / exposure
	}
	sv.s[0] = 1
	for b := range IdleBins {
		q := 0.0
		if at := risk - c[b]/2; at > 0 {
			q = min(1, d[b]/at)
		} else if sv.end == IdleBins {
			sv.end = b // nobody left at risk: the tail takes over
		}
		risk -= d[b] + c[b]
		sv.s[b+1] = sv.s[b] * (1 - q)
		sv.cum[b+1] = sv.cum[b] + (sv.s[b]+sv.s[b+1])/2*(sv.edge[b+1]-sv.edge[b])
	}
	sv.rows = make([]svRow, IdleBins+1)
	for b := range sv.rows {
		sv.rows[b] = svRow{edge: sv.edge[b], s: sv.s[b], cum: sv.cum[b]}
	}
	return sv
}

// svRow is one edge of the life table: the edge, S there and ∫S up to it.
type svRow struct{ edge, s, cum float64 }

// at returns S(x) and ∫_0^x S.
func (sv *survival) at(x float64) (s, cum float64) {
	if x <= 0 {
		return 1, 0
	}
	top := sv.edge[sv.end]
	if x >= top {
		s0, c0 := sv.s[sv.end], sv.cum[sv.end]
		if sv.hazard <= 0 {
			return s0, c0 + s0*(x-top)
		}
		e := math.Exp(-sv.hazard * (x - top))
		return s0 * e, c0 + s0*(1-e)/sv.hazard
	}
	b := IdleBin(x)
	r0, r1 := &sv.rows[b], &sv.rows[b+1]
	lo, w := r0.edge, r1.edge-r0.edge
	f := (x - lo) / w
	s0, s1 := r0.s, r1.s
	s = s0 + (s1-s0)*f
	cum = r0.cum + (s0+s)/2*(x-lo)
	return s, cum
}

// tailTotal is ∫_0^∞ S.
func (sv *survival) tailTotal() float64 {
	s0, c0 := sv.s[sv.end], sv.cum[sv.end]
	if s0 == 0 {
		return c0
	}
	if sv.hazard <= 0 {
		return math.Inf(1)
	}
	return c0 + s0/sv.hazard
}

// nodeOutlook is one node age's S(a) and ∫_0^a S, evaluated once.
type nodeOutlook struct {
	age, s, cum float64
	added       bool // a node the Trainer would grow onto (see AdaptiveHorizon)
	// until is the seconds from the decision to the node's planned main
	// job (Node.Until), +Inf without a plan.
	until float64
	// h and pi over the pool's horizon τ, the horizon of most terms.
	hTau, piTau float64
}

func (sv *survival) outlook(age float64) nodeOutlook {
	s, cum := sv.at(age)
	return nodeOutlook{age: age, s: s, cum: cum}
}

// over returns, for a node of this outlook and a horizon of T seconds
// (+Inf: for as long as it stays idle), h(a, T), its expected idle time
// within T, and π(a, T), the probability it is reclaimed within T. A node
// older than anything the table can speak for (S(a) = 0) is given the tail:
// an exponential residual at the observed mean hazard.
func (sv *survival) over(o *nodeOutlook, T float64) (h, pi float64) {
	if o.s <= 0 {
		if sv.hazard <= 0 {
			return T, 0
		}
		if math.IsInf(T, 1) {
			return 1 / sv.hazard, 1
		}
		e := math.Exp(-sv.hazard * T)
		return (1 - e) / sv.hazard, 1 - e
	}
	if math.IsInf(T, 1) {
		return (sv.tailTotal() - o.cum) / o.s, 1
	}
	s, cum := sv.at(o.age + T)
	return (cum - o.cum) / o.s, 1 - s/o.s
}

// ageSeconds is how long a node idle since since has been idle at now, in
// seconds (0 if since is later).
func ageSeconds(now, since time.Time) float64 {
	if d := now.Sub(since); d > 0 {
		return d.Seconds()
	}
	return 0
}
