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

// TestCrossingOfIsCrossingSlope: crossingOf gives crossingSlope's slope on
// every Trainer's segments copied together, and leaves them as they
// were: on envelopes of few segments (copied whole), of many (sampled),
// with room from none to all, and where the sample's share of room is
// far from the whole's (one long segment unsampled), so that the
// crossing lies outside the sampled bracket. It fails when a crossing
// outside the bracket is not looked for among all the segments.
func TestCrossingOfIsCrossingSlope(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 13))
	for trial := range 150 {
		J := 1 + rng.IntN(100)
		per := make([][]seg, J)
		lens := make([][]int, J)
		total := 0
		for j := range per {
			n := rng.IntN(1 + []int{10, 400, 3000}[trial%3])
			s := 1 + 100*rng.Float64()
			for range n {
				per[j] = append(per[j], seg{slope: s, len: 1 + rng.IntN([]int{1, 3, 50}[rng.IntN(3)])})
				// Strictly decreasing; some slopes other Trainers share.
				if rng.IntN(2) == 0 {
					s = math.Nextafter(s*(1-rng.Float64()/float64(n)), 0)
				} else {
					s = math.Nextafter(math.Floor(s*4)/4, 0)
				}
			}
			if trial%7 == 0 && j == 0 {
				// A long segment at the bottom: the crossing of most rooms.
				per[j] = append(per[j], seg{slope: 1e-9, len: 1 << 24})
			}
			lens[j] = make([]int, len(per[j])+1)
			for i, sg := range per[j] {
				lens[j][i+1] = lens[j][i] + sg.len
			}
			total += lens[j][len(per[j])]
		}
		before := make([][]seg, J)
		var all []seg
		for j := range per {
			before[j] = slices.Clone(per[j])
			all = append(all, per[j]...)
		}
		var buf []seg
		for _, room := range []int{0, 1, rng.IntN(total + 1), total / 2, total - 1, total, total + 5} {
			want := crossingSlope(slices.Clone(all), room)
			if got := crossingOf(per, lens, room, &buf); got != want {
				t.Fatalf("trial %d (%d segments), room %d of %d: crossingOf %v, crossingSlope %v", trial, len(all), room, total, got, want)
			}
		}
		for j := range per {
			if !slices.Equal(per[j], before[j]) {
				t.Fatalf("trial %d: Trainer %d's segments reordered", trial, j)
			}
		}
	}
}
