package alloc

import (
	"fmt"
	"math"
	"slices"
	"sync"
)

// The count DP as it was before the sparse and concave stages (commit
// bc90ab6), kept as the oracle of the property tests.

// optimalCounts maximises Σ_j val(j, k_j) over feasible counts (see
// trainerChoices for linear).
func oracleOptimalCounts(p *Problem, val valueFunc, linear bool) ([]int, bool) {
	J, N := len(p.Trainers), p.Size()
	step := p.StepLimit()
	chs := make([]choices, J)
	scale := 1.0
	for j := range chs {
		chs[j] = trainerChoices(p, j, step, val, linear)
		scale += math.Abs(chs[j].zeroV) + math.Abs(chs[j].curV)
		for _, pc := range chs[j].pieces {
			scale += math.Abs(pc.alpha) + math.Abs(pc.beta)*float64(pc.b)
		}
		for _, v := range chs[j].table {
			scale += math.Abs(v)
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
	// Capacities that can lie on an optimal path (LP bounds): stage j
	// keeps values for [F[j], T[j]] only; outside is −Inf, above U[j] the
	// value at U[j].
	F, T := slices.Clone(L), slices.Clone(U)
	if from, to, ok := prune(p, chs, L, U, 1e-9*scale, val); ok {
		for j := 1; j <= J; j++ {
			F[j], T[j] = max(L[j], from[j]), min(U[j], to[j])
		}
	}
	width, maxPieces, maxLen, total := 1, 0, 0, 0
	for j := 0; j <= J; j++ {
		width = max(width, T[j]-F[j]+1)
		total += max(0, T[j]-F[j]+1)
		if j < J {
			maxPieces = max(maxPieces, len(chs[j].pieces))
			for _, pc := range chs[j].pieces {
				maxLen = max(maxLen, pc.b-pc.a+1)
			}
		}
	}
	// Every stage's values are kept for the walk back.
	buf := make([]float64, total)
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
		// A piece pushes at most width + its length values per stage.
		ws[i] = newDeques(maxPieces, width+maxLen+2)
	}
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
		st := stage{ch: &chs[j-1], ext: ext, base: base, lo: lo, cur: dps[j]}
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
		return nil, false
	}
	// Walk back: at each stage pick a count that attains the stage's
	// value (within the tolerance), keeping the current size on a tie,
	// then preferring fewer nodes.
	counts := make([]int, J)
	c := U[J]
	for j := J; j >= 1; j-- {
		ch := &chs[j-1]
		target := at(j, c)
		best := -1
		consider := func(k int, v float64) {
			switch {
			case v < target-tol || math.IsInf(v, -1):
			case best < 0, k == ch.cur && best != ch.cur:
				best = k
			case best == ch.cur:
			case k < best:
				best = k
			}
		}
		if ch.zero {
			consider(0, at(j-1, c)+ch.zeroV)
		}
		for k := ch.lo; k <= min(ch.maxK, c); k++ {
			consider(k, at(j-1, c-k)+val(j-1, k))
		}
		if best < 0 {
			panic(fmt.Sprintf("alloc: exact: no count attains stage %d value %v at capacity %d", j, target, c))
		}
		counts[j-1] = best
		c = min(c-best, U[j-1])
	}
	return counts, true
}
