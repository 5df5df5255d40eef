package alloc

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestLowerEnvelopeIsTheLeastLine: the envelope gridPrune asks gives the
// least of the lines at every x, on random grids of λ as lambdaGrid makes
// them (geometric about a λ*, from 0) and random intercepts, some lines
// never the least, at x from 0 to beyond the nodes.
func TestLowerEnvelopeIsTheLeastLine(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var e lowerEnvelope
	for trial := range 2000 {
		star := math.Exp(rng.NormFloat64() * 5)
		top := star * (1 + 100*rng.Float64())
		lambdas := lambdaGrid(star, top)
		if trial%7 == 0 {
			lambdas = lambdaGrid(0, top)
		}
		b := make([]float64, len(lambdas))
		// Ψ(λ) is convex and decreasing in λ: Σ len·(slope − λ)⁺ over
		// random segments, plus noise on some trials (any lines).
		segs := make([]seg, 1+rng.IntN(50))
		for i := range segs {
			segs[i] = seg{slope: top * rng.Float64(), len: 1 + rng.IntN(100)}
		}
		for g, lam := range lambdas {
			for _, s := range segs {
				b[g] += float64(s.len) * max(0, s.slope-lam)
			}
			if trial%3 == 0 {
				b[g] += top * 1000 * rng.Float64()
			}
		}
		e.build(lambdas, b)
		if !slices.IsSortedFunc(e, func(a, b envLine) int { return cmp.Compare(a.from, b.from) }) {
			t.Fatalf("trial %d: crossings not increasing: %v", trial, e)
		}
		for range 50 {
			x := float64(rng.IntN(20000))
			if rng.IntN(5) == 0 {
				x = float64(rng.IntN(10))
			}
			want := math.Inf(1)
			for g, lam := range lambdas {
				want = min(want, lam*x+b[g])
			}
			if got := e.min(x); got != want && math.Abs(got-want) > 1e-12*math.Max(1, math.Abs(want)) {
				t.Fatalf("trial %d: at x=%v the envelope gives %v, the least line %v", trial, x, got, want)
			}
		}
	}
}

// TestCrossingSlopeGivesTheBisectionsStar: λ* from the selected crossing
// slope is the bisection's on cum, bit for bit, on random envelopes
// (repeated slopes, room from none to all, every segment fitting).
func TestCrossingSlopeGivesTheBisectionsStar(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for trial := range 3000 {
		J := 1 + rng.IntN(30)
		per := make([][]seg, J)
		total, top := 0, 0.0
		for j := range per {
			s := 10 * rng.Float64()
			for range rng.IntN(8) {
				if rng.IntN(4) > 0 {
					s *= rng.Float64()
				}
				if s <= 0 {
					break
				}
				if n := len(per[j]); n > 0 && per[j][n-1].slope <= s {
					continue // strictly decreasing, as envelopes are
				}
				l := 1 + rng.IntN(20)
				per[j] = append(per[j], seg{slope: s, len: l})
				total += l
				top = max(top, s)
			}
			if rng.IntN(3) == 0 && len(per[j]) > 0 {
				// a slope another Trainer has too
				k := rng.IntN(len(per[j]))
				if o := rng.IntN(J); len(per[o]) == 0 {
					per[o] = append(per[o], per[j][k])
					total += per[j][k].len
				}
			}
		}
		room := rng.IntN(total + 3)
		cum := func(lam float64) int {
			n := 0
			for _, segs := range per {
				for _, sg := range segs {
					if sg.slope > lam {
						n += sg.len
					}
				}
			}
			return n
		}
		want := bisectStar(func(m float64) bool { return cum(m) <= room }, top)
		var all []seg
		for _, segs := range per {
			all = append(all, segs...)
		}
		cross := crossingSlope(all, room)
		if got := bisectStar(func(m float64) bool { return m >= cross }, top); got != want {
			t.Fatalf("trial %d: λ* %v from the crossing slope %v, the bisection's %v", trial, got, cross, want)
		}
	}
}

// TestHullRunIsHullAdds: hullRun gives the hull hullAdd gives point by
// point, after hulls of 0, 1 and more points, on random runs: concave,
// convex, flat, and with equal and repeated values (the compare's ties).
// It fails when a dropped point's neighbours are not reloaded, or when
// the last two points are not taken from the hull it is given.
func TestHullRunIsHullAdds(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 12))
	for trial := range 3000 {
		var pre []pt
		for k := range r.IntN(4) {
			pre = append(pre, pt{k, r.Float64() * 10})
		}
		k0 := len(pre) + r.IntN(3)
		vs := make([]float64, r.IntN(60))
		for i := range vs {
			switch trial % 4 {
			case 0: // concave, with noise
				vs[i] = 10*math.Sqrt(float64(i+1)) + r.Float64()
			case 1: // convex
				vs[i] = float64(i*i) * r.Float64()
			case 2: // a few values, repeated
				vs[i] = float64(r.IntN(3))
			default:
				vs[i] = r.NormFloat64()
			}
		}
		var want []pt
		for _, q := range pre {
			want = hullAdd(want, q)
		}
		base := slices.Clone(want)
		for i, v := range vs {
			want = hullAdd(want, pt{k0 + i, v})
		}
		got := hullRun(append(make([]pt, 0, len(base)+len(vs)), base...), k0, vs)
		if !slices.Equal(got, want) {
			t.Fatalf("trial %d: hullRun gives %v, hullAdd %v (hull before %v, points from %d: %v)", trial, got, want, base, k0, vs)
		}
	}
}
