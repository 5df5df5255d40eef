package alloc

import (
	"context"
	"math"
	"slices"
	"sync"
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

// stage computes one Trainer's DP stage over part of its capacity range.
type stage struct {
	ch   *choices
	ext  []float64 // previous stage's dp at m, indexed m-base
	base int
	lo   int       // first capacity of the stage; cur and best index c-lo
	cur  []float64 // dp value per capacity
	best []int32   // count chosen per capacity
	tol  float64
}

// run fills cur and best for capacities c0..c1: for each c, the best count
// among 0, the current size, and every linear piece (the front of its
// deque). Ties keep the current size, then prefer fewer nodes.
func (s *stage) run(d *deques, c0, c1 int) {
	ch, ext, base, tol := s.ch, s.ext, s.base, s.tol
	dqM, dqH := d.m, d.h
	np := len(ch.pieces)
	for q := range np {
		d.w[q] = window{head: q * d.stride, tail: q * d.stride, next: max(base, c0-ch.pieces[q].b)}
	}
	C := ch.cur
	for c := c0; c <= c1; c++ {
		bv, bk := math.Inf(-1), -1
		if ch.zero && c >= base {
			bv, bk = ext[c-base]+ch.zeroV, 0
		}
		if C > 0 && c-C >= base {
			if v := ext[c-C-base] + ch.curV; v > bv-tol {
				bv, bk = v, C // a tie keeps the current size
			}
		}
		for q := range np {
			pc, w := &ch.pieces[q], &d.w[q]
			beta := pc.beta
			for top := c - pc.a; w.next <= top; w.next++ {
				hv := ext[w.next-base] - beta*float64(w.next)
				// Pop dominated m; on a tie keep the larger m (fewer nodes).
				t := w.tail
				for t > w.head && dqH[t-1] <= hv+tol {
					t--
				}
				dqM[t], dqH[t] = int32(w.next), hv
				w.tail = t + 1
			}
			for w.tail > w.head && int(dqM[w.head]) < c-pc.b {
				w.head++
			}
			if w.tail > w.head {
				v := pc.alpha + beta*float64(c) + dqH[w.head]
				k := c - int(dqM[w.head])
				// Better, or a tie that prefers fewer nodes (never
				// displacing the current size).
				if v > bv+tol || (v >= bv-tol && bk != C && k < bk) {
					bv, bk = v, k
				}
			}
		}
		s.cur[c-s.lo], s.best[c-s.lo] = bv, int32(bk)
	}
}

// choices describes the counts one Trainer may take.
type choices struct {
	zero   bool    // 0 is feasible
	zeroV  float64 // value at 0
	cur    int     // current size C, or -1 if C is not a feasible count (or is 0)
	curV   float64
	pieces []piece // feasible counts other than 0 and C, in increasing order
	maxK   int     // largest feasible count
}

func trainerChoices(p *Problem, j, step int) choices {
	t := &p.Trainers[j]
	c := len(t.Held)
	lo, hi := p.bounds(j)
	lo, hi = max(lo, c-step), min(hi, c+step)
	ch := choices{cur: -1}
	if c <= step {
		ch.zero, ch.zeroV = true, p.Value(j, 0)
	}
	if lo > hi {
		return ch
	}
	ch.maxK = hi
	if c >= lo && c <= hi {
		ch.cur, ch.curV = c, p.Value(j, c)
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
		va := p.Value(j, a)
		beta := 0.0
		if b > a {
			beta = (p.Value(j, b) - va) / float64(b-a)
		}
		ch.pieces = append(ch.pieces, piece{a: a, b: b, alpha: va - beta*float64(a), beta: beta})
	}
	return ch
}

// OptimalCounts returns node counts maximising the Problem's objective, and
// false if no feasible counts exist. The Problem must be valid.
func OptimalCounts(p *Problem) ([]int, bool) {
	J, N := len(p.Trainers), p.Size()
	step := p.StepLimit()
	chs := make([]choices, J)
	scale := 1.0
	for j := range chs {
		chs[j] = trainerChoices(p, j, step)
		scale += math.Abs(chs[j].zeroV) + math.Abs(chs[j].curV)
		for _, pc := range chs[j].pieces {
			scale += math.Abs(pc.alpha) + math.Abs(pc.beta)*float64(pc.b)
		}
		if !chs[j].zero && chs[j].maxK == 0 {
			return nil, false
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

	off := make([]int, J+1) // offset of stage j's choices in pick
	for j := 1; j <= J; j++ {
		off[j] = off[j-1] + U[j-1] - L[j-1] + 1
	}
	pick := make([]int32, off[J]+U[J]-L[J]+1)
	width := 1
	maxPieces := 0
	for j := 0; j <= J; j++ {
		width = max(width, U[j]-L[j]+1)
		if j < J {
			maxPieces = max(maxPieces, len(chs[j].pieces))
		}
	}
	// Buffers reused across stages: dp values of the previous and current
	// stage, and the previous stage extended (constant above its U).
	prev := make([]float64, 1, width) // dp_0 over [0, 0]
	cur := make([]float64, 0, width)
	ext := make([]float64, 0, N+1)
	// Large stages are split in two halves run on two goroutines (the
	// halves read the previous stage only); each half has its own deques.
	parts := 1
	if width >= parallelWidth {
		parts = 2
	}
	ws := make([]deques, parts)
	for i := range ws {
		ws[i] = newDeques(maxPieces, N+2)
	}
	prevL, prevU := 0, 0
	var wg sync.WaitGroup
	for j := 1; j <= J; j++ {
		ch := &chs[j-1]
		lo, hi := L[j], U[j]
		cur = cur[:hi-lo+1]
		best := pick[off[j] : off[j]+hi-lo+1]
		// ext[m-prevL] = dp_{j-1}(m) for m in [prevL, hi].
		ext = append(ext[:0], prev...)
		for m := prevU + 1; m <= hi; m++ {
			ext = append(ext, prev[len(prev)-1])
		}
		st := stage{ch: ch, ext: ext, base: prevL, lo: lo, cur: cur, best: best, tol: tol}
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
		prev, cur = cur, prev[:0]
		prevL, prevU = lo, hi
	}
	if math.IsInf(prev[len(prev)-1], -1) {
		return nil, false
	}
	counts := make([]int, J)
	c := U[J]
	for j := J; j >= 1; j-- {
		k := int(pick[off[j]+c-L[j]])
		counts[j-1] = k
		c = min(c-k, U[j-1])
	}
	return counts, true
}
