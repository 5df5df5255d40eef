package alloc

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
)

// Exact is the default solver: optimal over node counts, then Place.
//
// The objective is separable over Trainers and the only coupling is
// Σ n_j ≤ N, so the optimum is a multiple-choice knapsack solved by
// dynamic programming over (Trainer, nodes used). A naive DP costs
// O(J·N·N_max), too slow at Summit scale with N_max = N; instead each
// Trainer's value is split into the pieces where it is linear in k
// (between curve breakpoints, and on either side of its current size C,
// where the rescale cost jumps), and on a linear piece
//
//	max_k dp[c−k] + α + β·k  =  α + β·c + max_m (dp[m] − β·m),  m = c−k
//
// is a sliding-window maximum, kept in a monotone deque: O(J·S·N) for S
// pieces per Trainer. Capacities are also trimmed to those that can still
// matter (below what the earlier Trainers can use, above what the later
// ones must leave), which cuts the work when Σ N_max is near N.
//
// Ties (equal objective within 1e-12 relative) keep a Trainer's current
// size, then prefer the smaller count.
type Exact struct{}

// Name returns "exact".
func (Exact) Name() string { return "exact" }

// Solve returns the optimal plan, or an Infeasible plan that keeps the
// current allocation when no allocation is feasible.
func (Exact) Solve(_ context.Context, p *Problem) (*Plan, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	counts, ok := OptimalCounts(p)
	if !ok {
		return Keep(p, "exact", Infeasible, "no feasible allocation under the step limit; kept the current one"), nil
	}
	return newPlan(p, "exact", counts), nil
}

// parallelWork is the number of counts to value from which per-Trainer
// work is spread over the cores.
const parallelWork = 1 << 14

// perTrainer calls f(j) for j = 0..n−1, on GOMAXPROCS goroutines when work
// is at least parallelWork; f must touch only Trainer j's own data.
func perTrainer(n, work int, f func(j int)) {
	procs := min(runtime.GOMAXPROCS(0), n)
	if work < parallelWork || procs < 2 {
		for j := range n {
			f(j)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range procs {
		wg.Go(func() {
			for j := int(next.Add(1)) - 1; j < n; j = int(next.Add(1)) - 1 {
				f(j)
			}
		})
	}
	wg.Wait()
}

// magnitudes returns the sum of the |value| of ch's choices (a piece's as
// |α| + |β|·b) and its largest |value|.
func (ch *choices) magnitudes() (sum, largest float64) {
	sum = math.Abs(ch.zeroV) + math.Abs(ch.curV)
	m := max(math.Abs(ch.zeroV), math.Abs(ch.curV))
	for _, pc := range ch.pieces {
		sum += math.Abs(pc.alpha) + math.Abs(pc.beta)*float64(pc.b)
		m = max(m, math.Abs(pc.alpha+pc.beta*float64(pc.a)), math.Abs(pc.alpha+pc.beta*float64(pc.b)))
	}
	for _, v := range ch.table {
		a := math.Abs(v)
		sum += a
		if a > m { // not max: its NaN rules cost more (values are never NaN)
			m = a
		}
	}
	return sum, m
}

// piece is a run of counts [a, b] on which a Trainer's value is α + β·k.
type piece struct {
	a, b        int
	alpha, beta float64
}

// parallelWidth is the stage width from which a stage is split across two
// goroutines: below it the hand-off costs more than it saves.
const parallelWidth = 1024

// deques holds one monotone deque per piece: m ascending, h(m) = dp(m) −
// β·m descending, in m[q*stride:], h[q*stride:].
type deques struct {
	stride int
	m      []int32
	h      []float64
	w      []window
}

// window is one piece's deque bounds [head, tail) and the next m to push.
type window struct{ head, tail, next int }

func newDeques(pieces, stride int) deques {
	return deques{stride: stride, m: make([]int32, pieces*stride), h: make([]float64, pieces*stride), w: make([]window, pieces)}
}

// stage computes one Trainer's DP values over part of its capacity range.
// Only values: the counts are recovered afterwards, one stage at a time,
// so the hot loops carry no argmax bookkeeping.
type stage struct {
	ch   *choices
	ext  []float64 // previous stage's dp at m, indexed m-base
	base int
	lo   int       // first capacity of the stage; cur indexes c-lo
	cur  []float64 // dp value per capacity
	// top is the largest m at which ext can be finite: a tabled count k
	// is tried at capacity c only from c−top.
	top int
	// pieces are the choices' pieces that hold a count the stage can
	// take, k = c − m for c in [lo, its last capacity] and m in
	// [base, top]: at N_max 10,624 a Trainer's curve has 16 pieces, and
	// most lie outside a stage's window of counts.
	pieces []piece
}

// run fills cur for capacities c0..c1.
func (s *stage) run(d *deques, c0, c1 int) {
	ch, ext, base, pieces := s.ch, s.ext, s.base, s.pieces
	dqM, dqH := d.m, d.h
	np := len(pieces)
	for q := range np {
		d.w[q] = window{head: q * d.stride, tail: q * d.stride, next: max(base, c0-pieces[q].b)}
	}
	C := ch.cur
	for c := c0; c <= c1; c++ {
		bv := math.Inf(-1)
		if ch.zero && c >= base {
			bv = ext[c-base] + ch.zeroV
		}
		if C > 0 && c-C >= base {
			bv = max(bv, ext[c-C-base]+ch.curV)
		}
		if tab := ch.table; tab != nil {
			// Every count its own value: max over k of dp(c−k) + v(k).
			// A compare, not max: the builtin's NaN and signed-zero rules
			// cost more than the addition in this, the tabled DP's
			// innermost loop; the values are never NaN.
			k0, k1 := max(ch.lo, c-s.top), min(ch.maxK, c-base)
			if k0 <= k1 {
				e, t := ext[c-k1-base:c-k0-base+1], tab[k0-ch.lo:k1-ch.lo+1]
				for i, n := 0, len(t); i < n; i++ {
					if v := e[n-1-i] + t[i]; v > bv {
						bv = v
					}
				}
			}
		}
		for q := range np {
			pc, w := &pieces[q], &d.w[q]
			beta := pc.beta
			for top := c - pc.a; w.next <= top; w.next++ {
				hv := ext[w.next-base] - beta*float64(w.next)
				t := w.tail
				for t > w.head && dqH[t-1] <= hv {
					t--
				}
				dqM[t], dqH[t] = int32(w.next), hv
				w.tail = t + 1
			}
			for w.tail > w.head && int(dqM[w.head]) < c-pc.b {
				w.head++
			}
			if w.tail > w.head {
				if v := pc.alpha + beta*float64(c) + dqH[w.head]; v > bv {
					bv = v
				}
			}
		}
		s.cur[c-s.lo] = bv
	}
}

// choices describes the counts one Trainer may take.
type choices struct {
	zero   bool    // 0 is feasible
	zeroV  float64 // value at 0
	cur    int     // current size C, or -1 if C is not a feasible count (or is 0)
	curV   float64
	pieces []piece // feasible counts other than 0 and C, in increasing order
	// table, when set instead of pieces, holds the value of every count
	// lo..maxK (C included).
	table []float64
	maxK  int // largest feasible count
	lo    int // smallest feasible count above 0 (maxK+1 if none)
}

// valueFunc is an objective term: Trainer j's value on k nodes.
type valueFunc func(j, k int) float64

// rowFunc returns Trainer j's values on lo..lo+n−1 nodes: a valueFunc's
// numbers, a Trainer's counts at a time, in a table it owns.
type rowFunc func(j, lo, n int) []float64

// trainerChoices describes Trainer j's feasible counts and their values.
// With linear set, val is linear between the curve's breakpoints and on
// either side of the current size (Problem.Value is), so runs of counts
// become pieces; otherwise the value of every count is kept in a table.
func trainerChoices(p *Problem, j, n, step int, val valueFunc, rows rowFunc, linear bool) choices {
	t := &p.Trainers[j]
	c := len(t.Held)
	lo, hi := p.boundsIn(j, n)
	lo, hi = max(lo, c-step), min(hi, c+step)
	ch := choices{cur: -1, lo: 1}
	if c <= step {
		ch.zero, ch.zeroV = true, val(j, 0)
	}
	if lo > hi {
		return ch
	}
	ch.maxK, ch.lo = hi, lo
	if !linear {
		// The table first: with rows, val then reads it for these counts.
		if rows != nil {
			ch.table = rows(j, lo, hi-lo+1)
		} else {
			ch.table = make([]float64, hi-lo+1)
			for k := lo; k <= hi; k++ {
				ch.table[k-lo] = val(j, k)
			}
		}
	}
	if c >= lo && c <= hi {
		ch.cur, ch.curV = c, val(j, c)
	}
	if !linear {
		return ch
	}
	// Breakpoints where the value's slope may change.
	cuts := []int{lo, hi + 1}
	for _, n := range t.Curve.Nodes {
		if n > lo && n <= hi {
			cuts = append(cuts, n)
		}
	}
	if c > lo && c <= hi {
		cuts = append(cuts, c)
	}
	if c+1 > lo && c+1 <= hi {
		cuts = append(cuts, c+1)
	}
	slices.Sort(cuts)
	cuts = slices.Compact(cuts)
	for i := 0; i+1 < len(cuts); i++ {
		a, b := cuts[i], cuts[i+1]-1
		if a == c && b == c {
			continue // the current size is handled on its own
		}
		va := val(j, a)
		beta := 0.0
		if b > a {
			beta = (val(j, b) - va) / float64(b-a)
		}
		ch.pieces = append(ch.pieces, piece{a: a, b: b, alpha: va - beta*float64(a), beta: beta})
	}
	return ch
}

// OptimalCounts returns node counts maximising the Problem's objective, and
// false if no feasible counts exist. The Problem must be valid.
func OptimalCounts(p *Problem) ([]int, bool) {
	return optimalCounts(p, p.Value, nil, true)
}

// optimalCounts maximises Σ_j val(j, k_j) over feasible counts (see
// trainerChoices for linear; rows, if not nil, gives val's tables).
func optimalCounts(p *Problem, val valueFunc, rows rowFunc, linear bool) ([]int, bool) {
	counts, ok, _ := solveCounts(p, val, rows, linear, narrowRel)
	return counts, ok
}

// narrowRel is the narrow windows' ptol, relative to mag (below).
const narrowRel = 1e-8

// solveCounts is optimalCounts with the narrow windows' ptol at rel of
// mag (at least 4 tol; +Inf: the wide windows only); wide reports that
// the narrow windows' choice was not kept.
func solveCounts(p *Problem, val valueFunc, rows rowFunc, linear bool, rel float64) (counts []int, ok, wide bool) {
	J, N := len(p.Trainers), p.Size()
	step := p.StepLimit()
	chs := make([]choices, J)
	// Each Trainer's choices (with linear unset, a value per count) are
	// its own: built on all cores when there are many counts to value.
	work := 0
	if !linear {
		for j := range chs {
			_, hi := p.boundsIn(j, N)
			work += hi
		}
	}
	// scale sums every |value| (the tolerances' old measure, kept for the
	// walk back's ties); mag sums each Trainer's largest |value|, the size
	// of a solution's value. Each Trainer's part is summed beside its
	// choices, the parts then in Trainer order: the same sum on any
	// number of cores (a serial sum over every value took 1–2 ms at
	// exascale size, issue 23).
	scales, mags := make([]float64, J), make([]float64, J)
	perTrainer(J, work, func(j int) {
		chs[j] = trainerChoices(p, j, N, step, val, rows, linear)
		scales[j], mags[j] = chs[j].magnitudes()
	})
	scale, mag := 1.0, 1.0
	for j := range chs {
		scale += scales[j]
		mag += mags[j]
		if ch := &chs[j]; !ch.zero && ch.maxK == 0 {
			return nil, false, false
		}
	}
	tol := 1e-12 * scale

	// Capacity range per stage: dp_j is constant above U[j] (the first j
	// Trainers cannot use more), and capacities below L[j] are never read
	// (the later Trainers cannot use what would be left).
	U := make([]int, J+1)
	L := make([]int, J+1)
	for j := 1; j <= J; j++ {
		U[j] = min(N, U[j-1]+chs[j-1].maxK)
	}
	suffix := 0
	for j := J; j >= 0; j-- {
		L[j] = min(max(0, N-suffix), U[j])
		if j > 0 {
			suffix += chs[j-1].maxK
		}
	}
	// Capacities that can lie on an optimal path (LP bounds): stage j
	// keeps values for [F[j], T[j]] only; outside is −Inf, above U[j] the
	// value at U[j]. The windows keep every capacity whose bound comes
	// within ptol of the rounding's value.
	r, bounded := relax(p, chs, val)
	defer r.release()
	windows := func(ptol float64) (F, T []int) {
		F, T = slices.Clone(L), slices.Clone(U)
		if bounded {
			from, to := gridPrune(r.k0, r.v0, lambdaGrid(r.star, r.top), r.per, N, L, U, r.lb-ptol, &r.buf.psi)
			for j := 1; j <= J; j++ {
				F[j], T[j] = max(L[j], from[j]), min(U[j], to[j])
			}
		}
		return F, T
	}
	// The walk back takes, at each stage, the preferred count among those
	// within tol of the stage's value, so its choice may fall short of the
	// optimum by up to a tol a stage; the wide ptol (1e-9 of scale, 1,000
	// tols) keeps the capacities of every such choice for up to 1,000
	// Trainers. scale sums every |value|, so with a value for each count
	// it grows with N_max (2·10¹³ at 1,000 × 10,624 (512), where a
	// solution is worth 7·10⁹), and so did the windows (issue 23). So the
	// DP runs first on narrow windows, ptol narrowRel of mag, and keeps
	// their choice when it falls short of their optimum by at most
	// narrow − 2·tol. It is then the wide windows' choice: a path through
	// a capacity the narrow windows drop is worth less than the rounding
	// minus narrow, so less than the optimum minus narrow; a count the
	// walk back would take at some stage in the wide DP (attaining there
	// within tol) completes, with the choice's later counts, a path worth
	// at least the optimum minus the deficit minus tol, more than that. So
	// every count that attains in the wide DP attains in the narrow one,
	// on the same values. Otherwise the wide windows decide, as before.
	widePtol := 1e-9 * scale
	narrow := min(widePtol, max(rel*mag, 4*tol))
	F, T := windows(narrow)
	counts, deficit, ok := walkDP(chs, val, U, F, T, tol, &r.buf.dp)
	if narrow < widePtol && (!ok || deficit+2*tol > narrow) {
		F, T = windows(widePtol)
		counts, _, ok = walkDP(chs, val, U, F, T, tol, &r.buf.dp)
		return counts, ok, true
	}
	return counts, ok, false
}

// walkDP runs the DP over stages 1..J on the windows [F[j], T[j]] and
// walks back its counts, with the tie rule below; deficit is how far
// their value falls short of the DP's optimum, false when no counts fit.
// The stages' values go to keep's array (grown if it is short).
func walkDP(chs []choices, val valueFunc, U, F, T []int, tol float64, keep *[]float64) (counts []int, deficit float64, ok bool) {
	J, N := len(chs), U[len(U)-1] // N: the most nodes the stages can use
	width, maxPieces, maxLen, total, span := 1, 0, 0, 0, 0
	for j := 0; j <= J; j++ {
		width = max(width, T[j]-F[j]+1)
		total += max(0, T[j]-F[j]+1)
		if j > 0 {
			span = max(span, T[j]-F[j-1]+1)
		}
		if j < J {
			maxPieces = max(maxPieces, len(chs[j].pieces))
			for _, pc := range chs[j].pieces {
				maxLen = max(maxLen, pc.b-pc.a+1)
			}
		}
	}
	// Every stage's values are kept for the walk back, in keep's array.
	buf := zeros(keep, total)
	dps := make([][]float64, J+1)
	for j := 0; j <= J; j++ {
		n := max(0, T[j]-F[j]+1)
		dps[j], buf = buf[:n], buf[n:]
	}
	at := func(j, m int) float64 {
		m = min(m, U[j])
		if m < F[j] || m > T[j] {
			return math.Inf(-1)
		}
		return dps[j][m-F[j]]
	}
	ext := make([]float64, 0, N+1)
	// Large stages are split in two halves run on two goroutines (the
	// halves read the previous stage only); each half has its own deques.
	parts := 1
	if width >= parallelWidth {
		parts = 2
	}
	ws := make([]deques, parts)
	for i := range ws {
		// A piece pushes at most width + its length values per stage,
		// and at most the m of the stage's ext, [F[j−1], T[j]].
		ws[i] = newDeques(maxPieces, min(width+maxLen, span)+2)
	}
	pieces := make([]piece, 0, maxPieces)
	var wg sync.WaitGroup
	for j := 1; j <= J; j++ {
		lo, hi := F[j], T[j]
		if lo > hi {
			continue
		}
		// ext[m-base] = dp_{j-1}(m) for m in [base, hi].
		base := F[j-1]
		ext = ext[:0]
		for m := base; m <= hi; m++ {
			ext = append(ext, at(j-1, m))
		}
		st := stage{ch: &chs[j-1], ext: ext, base: base, lo: lo, cur: dps[j], top: hi}
		if T[j-1] < U[j-1] {
			st.top = T[j-1] // above it the previous stage is −Inf
		}
		pieces = pieces[:0]
		for _, pc := range chs[j-1].pieces {
			if pc.b >= lo-st.top && pc.a <= hi-base {
				pieces = append(pieces, pc)
			}
		}
		st.pieces = pieces
		if parts == 1 || hi-lo+1 < parallelWidth {
			st.run(&ws[0], lo, hi)
		} else {
			mid := lo + (hi-lo+1)/2
			wg.Add(1)
			go func() {
				defer wg.Done()
				st.run(&ws[1], mid, hi)
			}()
			st.run(&ws[0], lo, mid-1)
			wg.Wait()
		}
	}
	if math.IsInf(at(J, U[J]), -1) {
		return nil, 0, false
	}
	// Walk back: at each stage pick a count that attains the stage's
	// value (within the tolerance), keeping the current size on a tie,
	// then preferring fewer nodes. So the current size is tried first,
	// then the counts upwards until one attains: only counts whose
	// remainder c−k lies in the previous stage's window can, and the
	// counts scanned are at most the chosen one's, O(N + J) values in all
	// (every count up to the stage's capacity was valued before, O(J·N)
	// at N_max = N, issue 23).
	counts = make([]int, J)
	c := U[J]
	deficit = at(J, c)
	for j := J; j >= 1; j-- {
		ch := &chs[j-1]
		target := at(j, c)
		attains := func(k int) bool {
			prev := at(j-1, c-k)
			if math.IsInf(prev, -1) {
				return false
			}
			v := prev
			if k == 0 {
				v += ch.zeroV
			} else {
				v += val(j-1, k)
			}
			return !(v < target-tol || math.IsInf(v, -1))
		}
		best := -1
		switch {
		case ch.cur > 0 && ch.cur <= c && attains(ch.cur):
			best = ch.cur
		case ch.zero && attains(0):
			best = 0
		default:
			// c−k ≥ F[j−1], and c−k ≤ T[j−1] unless the previous
			// stage's window reaches U[j−1] (above it, its value there).
			from, to := ch.lo, min(ch.maxK, c, c-F[j-1])
			if T[j-1] < U[j-1] {
				from = max(from, c-T[j-1])
			}
			for k := from; k <= to; k++ {
				if attains(k) {
					best = k
					break
				}
			}
		}
		if best < 0 {
			panic(fmt.Sprintf("alloc: exact: no count attains stage %d value %v at capacity %d", j, target, c))
		}
		counts[j-1] = best
		c = min(c-best, U[j-1])
		if best == 0 {
			deficit -= ch.zeroV
		} else {
			deficit -= val(j-1, best)
		}
	}
	return counts, deficit, true
}
