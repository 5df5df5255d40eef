package alloc

import (
	"cmp"
	"math"
	"math/bits"
	"runtime"
	"slices"
	"sort"
	"sync"
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
//
// G itself is not computed: by weak duality each fill is at most
// λ·x + Σ len·(slope − λ)⁺ for every λ ≥ 0, and the windows bound it by the
// least of these lines over a grid of λ around the LP's multiplier λ*
// (gridPrune). That is never below G, so it prunes no more than G would;
// it costs O(S) for the grid's sums and O(J·Γ·log N) for the windows (Γ
// the grid's size), where G's own fills cost a sort of all S segments
// and two Fenwick trees over them, O(S log S).

// pt is a point of a Trainer's value: count k, value v.
type pt struct {
	k int
	v float64
}

// ptsPool holds envelope's points from one Trainer to the next.
var ptsPool = sync.Pool{New: func() any { return new([]pt) }}

// seg is one segment of a concave envelope: len more nodes, each worth
// slope.
type seg struct {
	slope float64
	len   int
}

// envelope returns the concave envelope of a Trainer's value over its
// feasible counts: the smallest feasible count k0, its value, and the
// segments of positive slope after it, slopes decreasing.
// The segments go to dst (its capacity at least ch.points()), and their
// running lengths to lens (at least one longer): lens[i] = Σ len of
// segs[:i], written in the same pass.
func (ch *choices) envelope(dst []seg, lens []int) (k0 int, v0 float64, segs []seg, ok bool) {
	// The hull in a buffer of the pool's (a table's points are 170 kB at
	// N_max = 10,624).
	buf := ptsPool.Get().(*[]pt)
	pts := sized(*buf, ch.points())[:0]
	defer func() {
		*buf = pts[:0]
		ptsPool.Put(buf)
	}()
	var hull []pt
	if len(ch.pieces) == 0 && (ch.cur <= 0 || ch.table != nil && ch.cur >= ch.lo && ch.cur <= ch.maxK) {
		// 0, then the table's counts (the current size among them):
		// already in order, read where they are.
		hull = pts[:0]
		table, lo := ch.table, ch.lo
		if ch.zero {
			hull = append(hull, pt{0, ch.zeroV})
			if len(table) > 0 && lo == 0 { // count 0 again: hullAdd keeps the larger
				hull, table, lo = hullAdd(hull, pt{0, table[0]}), table[1:], 1
			}
		}
		hull = hullRun(hull, lo, table)
	} else {
		// The points, then the hull in place.
		if ch.zero {
			pts = append(pts, pt{0, ch.zeroV})
		}
		for _, pc := range ch.pieces {
			pts = append(pts, pt{pc.a, pc.alpha + pc.beta*float64(pc.a)}, pt{pc.b, pc.alpha + pc.beta*float64(pc.b)})
		}
		// A table holds the current size's value too (the same val(j, C)):
		// adding it again would only unsort the points.
		if ch.cur > 0 && (ch.table == nil || ch.cur < ch.lo || ch.cur > ch.maxK) {
			pts = append(pts, pt{ch.cur, ch.curV})
		}
		for i, v := range ch.table {
			pts = append(pts, pt{ch.lo + i, v})
		}
		if byK := func(a, b pt) int { return a.k - b.k }; !slices.IsSortedFunc(pts, byK) {
			slices.SortStableFunc(pts, byK)
		}
		// The hull never holds more points than have been read.
		hull = pts[:0]
		for _, q := range pts {
			hull = hullAdd(hull, q)
		}
	}
	if len(hull) == 0 {
		return 0, 0, nil, false
	}
	k0, v0 = hull[0].k, hull[0].v
	segs = dst[:0]
	lens[0] = 0
	for i := 1; i < len(hull); i++ {
		d := hull[i].k - hull[i-1].k
		s := hull[i].v - hull[i-1].v
		if d != 1 { // x/1 is x
			s /= float64(d)
		}
		if s <= 0 {
			break
		}
		segs = append(segs, seg{slope: s, len: d})
		lens[i] = hull[i].k - k0
	}
	return k0, v0, segs, true
}

// points is the most points envelope reads of ch.
func (ch *choices) points() int { return 2 + 2*len(ch.pieces) + len(ch.table) }

// hullAdd adds q, at a count no lower than the hull's last, to an upper
// hull built left to right (monotone chain).
func hullAdd(hull []pt, q pt) []pt {
	if n := len(hull); n > 0 && hull[n-1].k == q.k {
		if q.v <= hull[n-1].v {
			return hull
		}
		hull = hull[:n-1]
	}
	for len(hull) >= 2 && under(hull[len(hull)-2], hull[len(hull)-1], q) {
		hull = hull[:len(hull)-1]
	}
	return append(hull, q)
}

// under reports whether b is on or under the chord a–q (a.k < b.k < q.k):
// the upper hull drops it.
func under(a, b, q pt) bool {
	return (b.v-a.v)*float64(q.k-a.k) <= (q.v-a.v)*float64(b.k-a.k)
}

// hullRun adds the points (k0+i, vs[i]) to hull, as hullAdd would one by
// one (the same compares, the same hull), with the hull's last two points
// held in registers: the common point, one that drops none, then costs
// one compare. The hull's last count must be below k0, and its capacity
// room for every point.
func hullRun(hull []pt, k0 int, vs []float64) []pt {
	n := len(hull)
	hull = hull[:n+len(vs)]
	var a, b pt // hull[n-2] and hull[n-1], where there are such
	if n >= 1 {
		b = hull[n-1]
	}
	if n >= 2 {
		a = hull[n-2]
	}
	for i, v := range vs {
		q := pt{k0 + i, v}
		for n >= 2 && under(a, b, q) {
			n--
			b = a
			if n >= 2 {
				a = hull[n-2]
			}
		}
		hull[n] = q
		n++
		a, b = b, q
	}
	return hull[:n]
}

// relaxation is the LP relaxation the windows are bounded with: each
// Trainer's envelope (its smallest feasible count k0, the value there v0,
// the segments per after it), the multiplier λ* at capacity N, the
// largest slope top, and lb, the value of a feasible solution. The
// windows themselves are gridPrune's, per stage j = 1..J the capacities
// that can lie on an optimal path.
type relaxation struct {
	k0        []int
	v0        []float64
	per       [][]seg
	star, top float64
	lb        float64
	buf       *segBuf // per's storage and the DP's, kept (segKept)
}

// relax builds the relaxation; false when no bound applies (then every
// capacity counts).
//
// λ*, the LP's multiplier at capacity N, is found by bisection on the
// nodes the segments of slope > λ hold (a binary search per Trainer, no
// global sort); the lower bound is the value of a feasible rounding: every
// segment above λ*, then the rest by rounds (rounding).
func relax(p *Problem, chs []choices, val valueFunc) (r relaxation, ok bool) {
	J, N := len(chs), p.Size()
	k0, v0 := make([]int, J), make([]float64, J)
	per := make([][]seg, J)
	okj := make([]bool, J)
	work := 0
	// Trainer j's segments (at most its points less one) and their
	// running lengths go to its own stretch of one buffer, kept (segKept).
	at := make([]int, J+1)
	for j := range chs {
		work += len(chs[j].table)
		at[j+1] = at[j] + chs[j].points()
	}
	r.buf = segKept.take()
	r.buf.segs = sized(r.buf.segs, at[J])
	r.buf.lens = sized(r.buf.lens, at[J]+J)
	// lens[j][i]: Σ len of per[j][:i].
	lens := make([][]int, J)
	perTrainer(J, work, func(j int) {
		l := r.buf.lens[at[j]+j : at[j+1]+j+1]
		k0[j], v0[j], per[j], okj[j] = chs[j].envelope(r.buf.segs[at[j]:at[j+1]:at[j+1]], l)
		lens[j] = l[:len(per[j])+1]
	})
	base := 0
	top := 0.0
	for j := range J {
		if !okj[j] {
			return r, false
		}
		base += k0[j]
		if len(per[j]) > 0 {
			top = max(top, per[j][0].slope)
		}
	}
	if base > N {
		return r, false
	}
	// above(λ): the nodes of the segments of slope > λ, per Trainer.
	above := func(j int, lam float64) int { return segsAbove(per[j], lam) }
	cum := func(lam float64) int {
		n := base
		for j := range J {
			n += lens[j][above(j, lam)]
		}
		return n
	}
	// λ*: the least λ (to bisection precision) whose fill fits in N.
	// cum(m) ≤ N holds exactly for m at or above the slope where the
	// greedy fill crosses N (cum changes only at slopes), so where a
	// selection over the S segments costs less than the bisection's J
	// binary searches a round (many Trainers of few segments, as in a
	// replay), that slope is selected and the bisection replayed on it:
	// the same λ*, bit for bit.
	fits := func(m float64) bool { return cum(m) <= N }
	S, searches := 0, 0
	for j := range J {
		S += len(per[j])
		searches += bits.Len(uint(len(per[j])))
	}
	if S < 40*searches {
		cross := crossingOf(per, lens, N-base, &r.buf.all)
		fits = func(m float64) bool { return m >= cross }
	}
	star := bisectStar(fits, top)
	// A feasible rounding: every segment above λ*, then rounds of the
	// rest (rounding).
	counts := slices.Clone(k0)
	next := make([]int, J)
	used := base
	for j := range J {
		next[j] = above(j, star)
		counts[j] += lens[j][next[j]]
		used += lens[j][next[j]]
	}
	lb := rounding(chs, per, counts, next, N-used, val)
	return relaxation{k0: k0, v0: v0, per: per, star: star, top: top, lb: lb, buf: r.buf}, true
}

// rounding completes a feasible rounding of the relaxation and returns
// its value: from counts (Trainer j has taken its segments before
// next[j]; left nodes remain), rounds of each open Trainer's next segment
// by decreasing slope while it fits (a Trainer whose next one does not
// fit takes none of its later ones: its envelope is a sequence).
//
// Closing a Trainer whose segment does not fit lets later rounds give the
// nodes left to segments of lower slope. So, at each close, the other
// completion is tried too: the closed Trainer takes the nodes left along
// its segment, at their true value, and the rest keep what they have; the
// better of the two is returned. On the exascale instances (issue 23) the
// rounds alone fell 10⁻⁴ short of the optimum (four Trainers' first node
// each where four more of one Trainer's linear piece were worth more),
// and the windows, which keep every capacity whose bound reaches this
// value, were 18 times wider than with the optimum's (367,965 capacities
// against 20,404 at 1,000 × 10,624). Either completion is a feasible
// solution (every count within its Trainer's lo..maxK, or an envelope
// point; the nodes within N) valued by val, so the result is at most the
// optimum and prunes no optimal path.
func rounding(chs []choices, per [][]seg, counts, next []int, left int, val valueFunc) float64 {
	// run is the rounds' value so far, cur each Trainer's part of it.
	cur := make([]float64, len(chs))
	run := 0.0
	for j, k := range counts {
		cur[j] = val(j, k)
		run += cur[j]
	}
	best := math.Inf(-1) // the best other completion
	open := make([]int, 0, len(chs))
	for j := range chs {
		if next[j] < len(per[j]) {
			open = append(open, j)
		}
	}
	for len(open) > 0 && left > 0 {
		slices.SortFunc(open, func(a, b int) int {
			sa, sb := per[a][next[a]].slope, per[b][next[b]].slope
			switch {
			case sa > sb:
				return -1
			case sa < sb:
				return 1
			}
			return a - b
		})
		kept := open[:0]
		for _, j := range open {
			sg := per[j][next[j]]
			if sg.len > left {
				// Closed; or the nodes left along its segment.
				if k := counts[j] + left; left > 0 && k >= chs[j].lo && k <= chs[j].maxK {
					best = max(best, run-cur[j]+val(j, k))
				}
				continue
			}
			counts[j] += sg.len
			left -= sg.len
			v := val(j, counts[j])
			run += v - cur[j]
			cur[j] = v
			if next[j]++; next[j] < len(per[j]) {
				kept = append(kept, j)
			}
		}
		open = kept
	}
	return max(run, best)
}

// bisectStar is relax's bisection for λ* on [0, top]: the least λ, to
// 1e-12 relative, at which fits holds (fits is monotone, true at top).
func bisectStar(fits func(float64) bool, top float64) float64 {
	lo, hi := 0.0, top
	if fits(0) {
		hi = 0
	}
	for range 64 {
		if hi-lo <= 1e-12*hi {
			break
		}
		m := (lo + hi) / 2
		if fits(m) {
			hi = m
		} else {
			lo = m
		}
	}
	return hi
}

// crossingOf returns crossingSlope over the segments of every per[j]
// (slopes decreasing; lens[j][i] = Σ len of per[j][:i]), which it does
// not reorder. Few segments are copied into *buf and selected. Of many
// (a selection's copy and passes took 1.4 ms alone at 1,000 × 10,624
// (512), issue 23), a sample says where the crossing lies, two slopes
// hi ≥ lo are taken about it, and each Trainer's segments above hi are
// counted, and those in [lo, hi] found, by binary search; only those are
// copied and selected. When the crossing is not within them (a sample
// far from the whole), every segment is. The crossing slope is the one v
// with Σ len over slope > v ≤ room < Σ len over slope ≥ v, so it is the
// same value whichever segments are selected to find it.
func crossingOf(per [][]seg, lens [][]int, room int, buf *[]seg) float64 {
	S := 0
	for _, segs := range per {
		S += len(segs)
	}
	all := func() float64 {
		all := sized(*buf, S)[:0]
		for _, segs := range per {
			all = append(all, segs...)
		}
		*buf = all
		return crossingSlope(all, room)
	}
	if S < 16*crossingSample {
		return all()
	}
	total := 0
	for j := range per {
		total += lens[j][len(per[j])]
	}
	if total <= room {
		return 0
	}
	// Every (S/crossingSample)-th segment, by slope decreasing.
	sample := make([]seg, 0, crossingSample+1)
	stride, next, at := S/crossingSample, 0, 0
	for _, segs := range per {
		for ; next < at+len(segs); next += stride {
			sample = append(sample, segs[next-at])
		}
		at += len(segs)
	}
	slices.SortFunc(sample, func(a, b seg) int { return cmp.Compare(b.slope, a.slope) })
	// The sample's crossing at its share of room, and a margin of a few
	// standard deviations of its position on either side.
	sampled := 0
	for _, sg := range sample {
		sampled += sg.len
	}
	want, i := float64(room)/float64(total)*float64(sampled), 0
	for c := 0; i < len(sample)-1 && float64(c+sample[i].len) <= want; i++ {
		c += sample[i].len
	}
	margin := 4 * int(math.Sqrt(float64(len(sample))))
	hi, lo := sample[max(0, i-margin)].slope, sample[min(len(sample)-1, i+margin)].slope
	// Above hi: counted; [lo, hi]: copied.
	above, mid := 0, (*buf)[:0]
	for j, segs := range per {
		a := segsAbove(segs, hi)
		b := a + sort.Search(len(segs)-a, func(i int) bool { return segs[a+i].slope < lo })
		above += lens[j][a]
		mid = append(mid, segs[a:b]...)
	}
	*buf = mid
	midLen := 0
	for _, sg := range mid {
		midLen += sg.len
	}
	if above > room || above+midLen <= room {
		return all() // the crossing is above hi or below lo
	}
	return crossingSlope(mid, room-above)
}

// segsAbove is how many of segs (slopes decreasing) have a slope above
// lam.
func segsAbove(segs []seg, lam float64) int {
	return sort.Search(len(segs), func(i int) bool { return segs[i].slope <= lam })
}

// crossingSample is how many segments crossingOf samples.
const crossingSample = 2048

// crossingSlope returns the slope v at which a greedy fill of room nodes
// by decreasing slope crosses: Σ len over slope > v ≤ room < Σ len over
// slope ≥ v; 0 when every segment fits. It reorders segs (a three-way
// quickselect weighted by len: O(S) expected).
func crossingSlope(segs []seg, room int) float64 {
	total := 0
	for _, sg := range segs {
		total += sg.len
	}
	if total <= room {
		return 0
	}
	for {
		p := segs[len(segs)/2].slope
		// [0, gt): slope > p, [gt, lt): slope == p, [lt, n): slope < p.
		gt, i, lt := 0, 0, len(segs)
		for i < lt {
			switch v := segs[i].slope; {
			case v > p:
				segs[gt], segs[i] = segs[i], segs[gt]
				gt++
				i++
			case v < p:
				lt--
				segs[lt], segs[i] = segs[i], segs[lt]
			default:
				i++
			}
		}
		above, equal := 0, 0
		for _, sg := range segs[:gt] {
			above += sg.len
		}
		for _, sg := range segs[gt:lt] {
			equal += sg.len
		}
		switch {
		case above > room:
			segs = segs[:gt]
		case above+equal > room:
			return p
		default:
			room -= above + equal
			segs = segs[lt:]
		}
	}
}

// lambdaGrid returns the λ of the windows' lines: 0, the largest slope top,
// and, geometric about λ* (or below top when λ* is 0, every segment
// fitting), λ*·(1 ± 2^−m) for m = 0..39 and λ*·2^m up to top.
func lambdaGrid(star, top float64) []float64 {
	lambdas := []float64{0, top}
	if star > 0 {
		for m := range 40 {
			d := math.Ldexp(star, -m)
			lambdas = append(lambdas, star-d, star+d)
		}
		for x := 2 * star; x < top; x *= 2 {
			lambdas = append(lambdas, x)
		}
	} else {
		for m := range 40 {
			lambdas = append(lambdas, math.Ldexp(top, -m))
		}
	}
	slices.Sort(lambdas)
	lambdas = slices.Compact(lambdas)
	for len(lambdas) > 0 && lambdas[0] < 0 {
		lambdas = lambdas[1:]
	}
	return lambdas
}

// parallelStages is the number of stages from which gridPrune finds
// their windows on two goroutines.
const parallelStages = 128

// gridPrune is the windows from a bound by lines: for any λ ≥ 0 the
// best x nodes of a set of envelope segments are worth at most
// λ·x + Σ len·(slope − λ)⁺ (weak duality of the greedy fill), so with a
// grid of λ the stage bound is
//
//	f(c) ≤ v0p + v0s + min_g [λ_g·(c−k0p) + Ψ_pre(g)] + min_g [λ_g·(N−c−k0s) + Ψ_suf(g)]
//
// with Ψ(g) = Σ over the stage's Trainers of Σ len·(slope − λ_g)⁺,
// prefix sums over Trainers. The right side is concave in c (a sum of
// minima of lines), so {c : bound ≥ lb} is an interval, found by binary
// searches for its peak and for lb on either side (concaveInterval). It
// is never below f, so it prunes no optimal
// path; it is tight where the grid holds the fills' marginal slopes,
// which along an optimal path are near λ*: hence lambdaGrid. Measured on the exascale
// instances, its windows are within 3 % of G's (issue 23).
func gridPrune(k0 []int, v0 []float64, lambdas []float64, per [][]seg, N int, L, U []int, lb float64, keep *[]float64) (from, to []int) {
	J := len(k0)
	G := len(lambdas)
	// psi[j*G+g]: Σ over Trainers before j of Σ len·(slope − λ_g)⁺, in
	// keep's array.
	psi := zeros(keep, (J+1)*G)
	// Each Trainer's own terms first, on all cores (a walk over its
	// segments: every count at N_max 10,624), then the running sums:
	// row j+1 = row j + Trainer j's terms, the same additions as one
	// serial pass.
	work := 0
	for j := range J {
		work += len(per[j])
	}
	perTrainer(J, work, func(j int) {
		next := psi[(j+1)*G : (j+2)*G]
		// segments by decreasing slope, λ by increasing: walk from the
		// largest λ down, adding the segments above it.
		a, l, i := 0.0, 0, 0
		segs := per[j]
		for g := G - 1; g >= 0; g-- {
			for i < len(segs) && segs[i].slope > lambdas[g] {
				a += float64(segs[i].len) * segs[i].slope
				l += segs[i].len
				i++
			}
			next[g] = a - lambdas[g]*float64(l)
		}
	})
	for j := range J {
		row, next := psi[j*G:(j+1)*G], psi[(j+1)*G:(j+2)*G]
		for g := range next {
			next[g] = row[g] + next[g]
		}
	}
	k0s := make([]int, J+1)
	v0s := make([]float64, J+1)
	for j := range J {
		k0s[j+1], v0s[j+1] = k0s[j]+k0[j], v0s[j]+v0[j]
	}
	total := psi[J*G:]
	from, to = make([]int, J+1), make([]int, J+1)
	// Each stage's window is its own: on a large problem, the stages in
	// two halves on two goroutines, each with its envelopes.
	windows := func(lo, hi int) {
		suf := make([]float64, G)
		var hp, hs lowerEnvelope
		for j := lo; j < hi; j++ {
			pre := psi[j*G : (j+1)*G]
			for g := range G {
				suf[g] = total[g] - pre[g]
			}
			k0p, k0q := k0s[j], k0s[J]-k0s[j]
			v := v0s[J]
			hp.build(lambdas, pre)
			hs.build(lambdas, suf)
			f := func(c int) float64 { return v + hp.min(float64(c-k0p)) + hs.min(float64(N-c-k0q)) }
			from[j], to[j] = concaveInterval(f, max(L[j], k0p), min(U[j], N-k0q), lb)
		}
	}
	if J < parallelStages || runtime.GOMAXPROCS(0) < 2 {
		windows(1, J+1)
		return from, to
	}
	mid := 1 + J/2
	var wg sync.WaitGroup
	wg.Go(func() { windows(1, mid) })
	windows(mid, J+1)
	wg.Wait()
	return from, to
}

// lowerEnvelope is the lower envelope of the lines λ_g·x + b_g: the
// lines that are the least somewhere, by decreasing slope (the order in
// which they are the least as x grows), each with the x where it takes
// over. gridPrune asks the least of its Γ lines some 6·log N times
// a stage; the envelope, built in O(Γ), answers each in O(log Γ) instead
// of O(Γ) (the replay at 10,624 nodes spent over half its time in those
// minima, issue 23).
type lowerEnvelope []envLine

// envLine is one line of an envelope and the x from which it is the
// least (−∞ for the first).
type envLine struct{ slope, icpt, from float64 }

// build makes the envelope of λ_g·x + b_g, the λ increasing.
func (e *lowerEnvelope) build(lambdas, b []float64) {
	ls := (*e)[:0]
	for g := len(lambdas) - 1; g >= 0; g-- {
		m, c := lambdas[g], b[g]
		from := math.Inf(-1)
		for n := len(ls); n > 0; n = len(ls) {
			// The new line, of a smaller slope, is below the last one
			// from x; the last one is useless if that is not after it
			// became the least.
			last := ls[n-1]
			x := (c - last.icpt) / (last.slope - m)
			if x <= last.from {
				ls = ls[:n-1]
				continue
			}
			from = x
			break
		}
		ls = append(ls, envLine{slope: m, icpt: c, from: from})
	}
	*e = ls
}

// min returns the least of the lines at x. Rounding may put x on the
// wrong side of a crossing by an ulp, so the neighbours of the line
// found are asked too: the value is the least line's.
func (e lowerEnvelope) min(x float64) float64 {
	// The first line from which x is not past: e[i−1] is the least (or e[i] at a tie).
	a, z := 0, len(e)
	for a < z {
		if m := a + (z-a)/2; e[m].from < x {
			a = m + 1
		} else {
			z = m
		}
	}
	best := math.Inf(1)
	for k := max(0, a-2); k <= min(len(e)-1, a); k++ {
		best = min(best, e[k].slope*x+e[k].icpt)
	}
	return best
}

// concaveInterval returns the c of [lo, hi] where the concave f is ≥ lb
// (from > to if none).
func concaveInterval(f func(int) float64, lo, hi int, lb float64) (from, to int) {
	if lo > hi {
		return hi + 1, lo - 1
	}
	a, z := lo, hi
	for a < z {
		if m := a + (z-a)/2; f(m+1) > f(m) {
			a = m + 1
		} else {
			z = m
		}
	}
	peak := a
	if f(peak) < lb {
		return hi + 1, lo - 1
	}
	a, z = lo, peak
	for a < z {
		if m := a + (z-a)/2; f(m) >= lb {
			z = m
		} else {
			a = m + 1
		}
	}
	from = a
	a, z = peak, hi
	for a < z {
		if m := a + (z-a+1)/2; f(m) >= lb {
			a = m
		} else {
			z = m - 1
		}
	}
	return from, a
}
