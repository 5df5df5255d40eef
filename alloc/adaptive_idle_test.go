package alloc

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestIdleBinEdges(t *testing.T) {
	for _, c := range []struct {
		x    float64
		bin  int
		edge float64
	}{
		{0, 0, 0}, {0.5, 0, 0}, {1, 1, 1}, {1.124, 1, 1}, {1.125, 2, 1.125},
		{8, 25, 8}, {8.99, 25, 8}, {9, 26, 9}, {12, 29, 12}, {16, 33, 16}, {17.9, 33, 16},
		{1024, 81, 1024}, {1151, 81, 1024}, {1152, 82, 1152},
		{math.Ldexp(1, 24), IdleBins - 1, 0}, {1e12, IdleBins - 1, 0}, {math.NaN(), 0, 0},
	} {
		b := IdleBin(c.x)
		if b != c.bin {
			t.Errorf("IdleBin(%v) = %d, want %d", c.x, b, c.bin)
			continue
		}
		if c.edge != 0 && idleEdge(b) != c.edge {
			t.Errorf("idleEdge(%d) = %v, want %v", b, idleEdge(b), c.edge)
		}
	}
	for b := 1; b < IdleBins; b++ {
		if lo, hi := idleEdge(b), idleEdge(b+1); IdleBin(lo) != b || IdleBin(math.Nextafter(hi, 0)) != b {
			t.Fatalf("bin %d = [%v, %v) does not map back", b, lo, hi)
		}
	}
}

// TestPriorIsLogUniform: the prior's mass is priorWeight, all between a
// minute and a day, and half of it below their geometric mean.
func TestPriorIsLogUniform(t *testing.T) {
	total, below := 0.0, 0.0
	mid := math.Sqrt(priorLow * priorHigh)
	for b, w := range prior {
		total += w
		if w > 0 && (idleEdge(b+1) <= priorLow || idleEdge(b) >= priorHigh) {
			t.Fatalf("prior mass %v in bin %d outside [1 min, 1 day]", w, b)
		}
		if idleEdge(b+1) <= mid {
			below += w
		} else if idleEdge(b) < mid {
			below += w * (math.Log(mid) - math.Log(idleEdge(b))) / (math.Log(idleEdge(b+1)) - math.Log(idleEdge(b)))
		}
	}
	if math.Abs(total-priorWeight) > 1e-9 || math.Abs(below-priorWeight/2) > 1e-9 {
		t.Fatalf("prior mass %v (want %v), %v below %v s (want half)", total, priorWeight, below, mid)
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// TestLifeTableByHand: two periods end in [8, 9) s and two in [16, 18) s,
// spread evenly in their bins, so S falls linearly 1 → ½ over [8, 9), stays
// ½ to 16 and falls to 0 at 18; ∫S = 8 + ¾ + 3½ + ½ = 12.75, the mean of
// 8.5, 8.5, 17 and 17.
func TestLifeTableByHand(t *testing.T) {
	d := make([]float64, IdleBins)
	d[IdleBin(8)], d[IdleBin(16)] = 2, 2
	sv := lifeTable(d, make([]float64, IdleBins))
	for _, c := range []struct{ x, s, cum float64 }{
		{0, 1, 0}, {4, 1, 4}, {8, 1, 8}, {8.5, 0.75, 8.4375}, {9, 0.5, 8.75}, {12, 0.5, 10.25},
		{16, 0.5, 12.25}, {17, 0.25, 12.625}, {18, 0, 12.75}, {1000, 0, 12.75},
	} {
		if s, cum := sv.at(c.x); !near(s, c.s) || !near(cum, c.cum) {
			t.Errorf("S(%v), ∫S = %v, %v; want %v, %v", c.x, s, cum, c.s, c.cum)
		}
	}
	if got := sv.tailTotal(); !near(got, 12.75) {
		t.Errorf("∫_0^∞ S = %v, want 12.75", got)
	}
	// A node idle 10 s: the periods still running end at 17 s, on average.
	o := sv.outlook(10)
	if h, pi := sv.over(&o, math.Inf(1)); !near(h, 7) || pi != 1 {
		t.Errorf("h(10, ∞), π = %v, %v; want 7, 1", h, pi)
	}
	// Within the next 7 s: idle 6 s (to 16) + ¾·1 s; reclaimed by 17 s with
	// probability 1 − S(17)/S(10) = ½.
	if h, pi := sv.over(&o, 7); !near(h, 6.75) || !near(pi, 0.5) {
		t.Errorf("h(10, 7), π = %v, %v; want 6.75, 0.5", h, pi)
	}

	// A period still running at 12 s (censored in [12, 13)) counts half at
	// risk there, survives it, and is out before 16: the two at 16–18 are
	// then the whole risk set, S(18) = 0 all the same, and before 12 the
	// five periods give S(9) = 1 − 2/5 = 0.6.
	c := make([]float64, IdleBins)
	c[IdleBin(12)] = 1
	sv = lifeTable(d, c)
	if s, _ := sv.at(9); !near(s, 0.6) {
		t.Errorf("with a censored period: S(9) = %v, want 0.6", s)
	}
	if s, _ := sv.at(16); !near(s, 0.6) {
		t.Errorf("with a censored period: S(16) = %v, want 0.6", s)
	}
	if s, _ := sv.at(18); s != 0 {
		t.Errorf("with a censored period: S(18) = %v, want 0", s)
	}
}

// TestLifeTableTail: past the last observation at risk, S decays at the
// observed mean hazard (deaths over time observed, at bin midpoints).
func TestLifeTableTail(t *testing.T) {
	d := make([]float64, IdleBins)
	c := make([]float64, IdleBins)
	d[IdleBin(8)] = 1  // one ended at about 8.5 s
	c[IdleBin(16)] = 1 // one still running at 16 s
	sv := lifeTable(d, c)
	hazard := 1 / (8.5 + 17) // 1 death in 25.5 s observed
	if !near(sv.hazard, hazard) {
		t.Fatalf("hazard %v, want %v", sv.hazard, hazard)
	}
	// The data end at 18 s with S = ½ (one of two died in [8, 9)).
	if top := sv.edge[sv.end]; top != 18 {
		t.Fatalf("data end at %v, want 18", top)
	}
	s, _ := sv.at(18 + 10)
	if want := 0.5 * math.Exp(-hazard*10); !near(s, want) {
		t.Fatalf("S(28) = %v, want %v", s, want)
	}
	// A node idle 30 s: memoryless from there.
	o := sv.outlook(30)
	if h, _ := sv.over(&o, math.Inf(1)); !near(h, 1/hazard) {
		t.Fatalf("h(30, ∞) = %v, want %v", h, 1/hazard)
	}
}

// idleBinFrexp is IdleBin as it was first written, by math.Frexp: the
// reference its reading of the bits must agree with.
func idleBinFrexp(seconds float64) int {
	if !(seconds >= 1) {
		return 0
	}
	frac, exp := math.Frexp(seconds)
	e := exp - 1
	if e >= idleOctaves {
		return IdleBins - 1
	}
	return 1 + binsPerOctave*e + int((2*frac-1)*binsPerOctave)
}

// TestIdleBinMatchesFrexp: IdleBin reads the same bin as the Frexp
// reference at every bin edge and its neighbouring floats, at the ends of
// the grid, at the special values, and at random lengths over the grid.
// (+Inf, which Frexp does not split, is the last bin.)
func TestIdleBinMatchesFrexp(t *testing.T) {
	if b := IdleBin(math.Inf(1)); b != IdleBins-1 {
		t.Fatalf("IdleBin(+Inf) = %d, want the last bin %d", b, IdleBins-1)
	}
	xs := []float64{math.Inf(-1), math.NaN(), 0, math.Copysign(0, -1), -1, 0.999999, math.MaxFloat64, math.SmallestNonzeroFloat64}
	for b := 1; b <= IdleBins+8; b++ {
		e := math.Ldexp(1+float64((b-1)%binsPerOctave)/binsPerOctave, (b-1)/binsPerOctave)
		xs = append(xs, e, math.Nextafter(e, 0), math.Nextafter(e, math.Inf(1)))
	}
	r := rand.New(rand.NewPCG(23, 5))
	for range 200000 {
		xs = append(xs, math.Exp2(26*r.Float64()-1), 1e9*r.Float64())
	}
	for _, x := range xs {
		if got, want := IdleBin(x), idleBinFrexp(x); got != want {
			t.Fatalf("IdleBin(%v) = %d, the Frexp reference %d", x, got, want)
		}
	}
}
