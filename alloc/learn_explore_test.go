package alloc_test

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/bftrainer/bftrainer/alloc"
)

// measuredAt returns a state for a Trainer of bounds 1..max measured for
// twenty minutes at each of counts, on the curve rate.
func measuredAt(tb testing.TB, l alloc.CurveLearner, seed uint64, max int, rate func(int) float64, counts ...int) *alloc.CurveState {
	tb.Helper()
	s := mustState(tb, 1, max, nil)
	ts := &trainerSim{r: rand.New(rand.NewPCG(seed, 7)), l: l, s: s, truth: rate, noise: 0.05}
	for _, n := range counts {
		ts.run(tb, n, 1200)
	}
	return s
}

func amdahl(t1, alpha float64) func(int) float64 {
	return func(n int) float64 { return t1 * float64(n) / (1 + alpha*float64(n-1)) }
}

// checkProbe fails unless a returned probe is one the rule allows.
func checkProbe(tb testing.TB, s *alloc.CurveState, e alloc.CurveEstimate, x alloc.ProbeSituation, p alloc.CurveProbe) {
	tb.Helper()
	if p.Nodes == 0 {
		if !strings.HasPrefix(p.Reason, "no probe: ") {
			tb.Fatalf("no probe, reason %q", p.Reason)
		}
		return
	}
	if p.Nodes == x.Held || p.Nodes < max(s.Min, 1) || p.Nodes > min(s.Max, x.Avail) {
		tb.Fatalf("probe %d nodes outside bounds %d..%d, avail %d, or at the current %d", p.Nodes, s.Min, s.Max, x.Avail, x.Held)
	}
	if !(p.Gain > p.Cost) || p.Cost < 0 || p.Bonus > p.Gain {
		tb.Fatalf("probe %+v: want gain > cost ≥ 0, bonus ≤ gain", p)
	}
	if _, sd := e.At(p.Nodes); sd < alloc.DefaultCurveLearner().ProbeMinSD && e.Points != nil {
		tb.Fatalf("probe of a known count: %+v, sd %v", p, sd)
	}
}

func TestExploreNeverExceedsItsBound(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 1))
	totalProbes, totalRescales := 0, 0
	for seq := range 120 {
		l := alloc.CurveLearner{
			ProbeEvery:    1 + r.IntN(10),
			ProbeInterval: float64(r.IntN(600)),
			ProbeShare:    []float64{0.02, 0.05, 0.2, 0.5, 1}[r.IntN(5)],
			Settle:        -1,
		}
		cfg := l
		if cfg.ProbeInterval == 0 {
			cfg.ProbeInterval = 1800 // zero means the default
		}
		max := 2 + r.IntN(80)
		truth := amdahl(10+r.Float64()*1000, r.Float64()*0.05)
		s := measuredAt(t, l, uint64(seq), max, truth, 1+r.IntN(max))
		now, lastProbe, lastProbeAt, probes := 0.0, -1, math.Inf(-1), 0
		held := 1 + r.IntN(max)
		for d := range 250 {
			now += 1 + r.Float64()*120
			x := alloc.ProbeSituation{
				Now: now, Held: held, Avail: held + r.IntN(max+1),
				RUp: r.Float64() * 30, RDown: r.Float64() * 30,
				Remaining: []float64{0, 1e6, 1e9}[r.IntN(3)],
				Horizon:   []float64{0, 10, 600, 1e5}[r.IntN(4)],
				Objective: []alloc.Objective{alloc.Throughput, alloc.Speedup, alloc.Metric}[r.IntN(3)],
			}
			if r.IntN(10) == 0 {
				x.Held = 0
			}
			e := l.Estimate(s)
			p := l.Explore(s, &e, x)
			checkProbe(t, s, e, x, p)
			probed := p.Nodes > 0 && r.IntN(2) == 0 // the allocator may decline
			rescaled := probed || r.IntN(3) == 0
			next := held
			switch {
			case probed:
				next = p.Nodes
				if d-lastProbe < cfg.ProbeEvery && lastProbe >= 0 || d+1 < cfg.ProbeEvery {
					t.Fatalf("seq %d: probe at decision %d, previous at %d, every %d", seq, d, lastProbe, cfg.ProbeEvery)
				}
				if now-lastProbeAt < cfg.ProbeInterval {
					t.Fatalf("seq %d: probe at %.0f s, previous at %.0f s, interval %.0f", seq, now, lastProbeAt, cfg.ProbeInterval)
				}
				lastProbe, lastProbeAt = d, now
				probes++
			case rescaled:
				next = 1 + r.IntN(max)
			}
			s.Decided(now, rescaled, probed)
			if float64(s.Probes) > cfg.ProbeShare*float64(s.Rescales)+1e-9 {
				t.Fatalf("seq %d: %d probes in %d rescales, share %v", seq, s.Probes, s.Rescales, cfg.ProbeShare)
			}
			if next != held || r.IntN(4) == 0 {
				held = next
				if err := l.Observe(s, alloc.CurveObs{Nodes: held, Rate: truth(held) * (1 + 0.05*r.NormFloat64()), Duration: 30 + r.Float64()*60, Since: 0}); err != nil {
					t.Fatal(err)
				}
			}
		}
		if s.Probes != probes {
			t.Fatalf("seq %d: ledger says %d probes, %d made", seq, s.Probes, probes)
		}
		totalProbes += s.Probes
		totalRescales += s.Rescales
	}
	if totalProbes == 0 {
		t.Fatal("no sequence ever probed: the bound was never exercised")
	}
	t.Logf("%d probes in %d rescales", totalProbes, totalRescales)
}

func TestExplorePricesTheProbe(t *testing.T) {
	l := alloc.CurveLearner{ProbeEvery: 1}
	truth := amdahl(1000, 0.01)
	s := measuredAt(t, l, 1, 64, truth, 8, 8)
	for range 25 {
		s.Decided(0, true, false) // enough rescales for the share
	}
	e := l.Estimate(s)
	base := alloc.ProbeSituation{Now: 1e5, Held: 8, Avail: 64, RUp: 18, RDown: 12, Horizon: 3600}
	p := l.Explore(s, &e, base)
	checkProbe(t, s, e, base, p)
	if p.Nodes == 0 {
		t.Fatalf("an hour's use of a count known to ±%v is worth a probe: %s", func() float64 { _, sd := e.At(64); return sd }(), p.Reason)
	}
	rC, _ := e.At(8)
	mu, _ := e.At(p.Nodes)
	back := base.RDown
	if p.Nodes < 8 {
		back = base.RUp
	}
	if math.Abs(p.Bonus-(p.Gain-back*mu)) > 1e-6*p.Gain {
		t.Fatalf("bonus %v, want gain − R_back·μ = %v", p.Bonus, p.Gain-back*mu)
	}
	if p.Nodes > 8 && math.Abs(p.Cost-(base.RUp*rC+base.RDown*mu)) > 1e-6*p.Cost {
		t.Fatalf("cost %v, want R_up·r_C + R_down·μ = %v", p.Cost, base.RUp*rC+base.RDown*mu)
	}
	for _, tt := range []struct {
		name string
		edit func(*alloc.ProbeSituation)
		want string
	}{
		{"a short horizon", func(x *alloc.ProbeSituation) { x.Horizon = 5 }, "outweighs"},
		{"no horizon", func(x *alloc.ProbeSituation) { x.Horizon = 0 }, "horizon"},
		{"dear rescales", func(x *alloc.ProbeSituation) { x.RUp, x.RDown = 1e5, 1e5 }, "outweighs"},
		{"little work left", func(x *alloc.ProbeSituation) { x.Remaining = 1000 }, "outweighs"},
		{"not running", func(x *alloc.ProbeSituation) { x.Held = 0 }, "not running"},
		{"the metric objective", func(x *alloc.ProbeSituation) { x.Objective = alloc.Metric }, "metric"},
		{"no free nodes", func(x *alloc.ProbeSituation) { x.Avail = 8 }, "no room"},
	} {
		x := base
		tt.edit(&x)
		if q := l.Explore(s, &e, x); q.Nodes != 0 || !strings.Contains(q.Reason, tt.want) {
			t.Errorf("%s: probe %+v, want none because of %q", tt.name, q, tt.want)
		}
	}
	x := base
	x.Avail = 12
	if q := l.Explore(s, &e, x); q.Nodes > 12 {
		t.Errorf("probe %d nodes with 12 available", q.Nodes)
	}
	// Every count measured well: nothing left to learn.
	known := measuredAt(t, l, 2, 8, truth, 1, 2, 3, 4, 5, 6, 7, 8)
	for range 25 {
		known.Decided(0, true, false)
	}
	ek := l.Estimate(known)
	if q := l.Explore(known, &ek, alloc.ProbeSituation{Now: 1e5, Held: 4, Avail: 8, RUp: 1, RDown: 1, Horizon: 1e6}); q.Nodes != 0 {
		t.Errorf("probe %+v of a curve known everywhere (sd at 8: %v)", q, ek.Points[len(ek.Points)-1].SD)
	}
}

func TestOptimisticCurveRaisesOnlyTheProbe(t *testing.T) {
	var l alloc.CurveLearner
	s := measuredAt(t, l, 3, 64, amdahl(500, 0.02), 4, 16)
	e := l.Estimate(s)
	c := e.Curve()
	for _, n := range []int{1, 5, 24, 63, 64} {
		p := alloc.CurveProbe{Nodes: n, Bonus: 5000}
		o := e.Optimistic(p, 10)
		tr := alloc.Trainer{ID: "t", Min: 1, Max: 64, Curve: o}
		if err := (&alloc.Problem{TFwd: 10, Trainers: []alloc.Trainer{tr}}).Validate(); err != nil {
			t.Fatal(err)
		}
		for k := 1; k <= 64; k++ {
			want := alloc.Interp(c.Nodes, c.Throughput, k)
			if k == n {
				want += p.Bonus / 10
			}
			if got := alloc.Interp(o.Nodes, o.Throughput, k); math.Abs(got-want) > 1e-9*want {
				t.Fatalf("probe %d: at %d nodes %v, want %v", n, k, got, want)
			}
		}
	}
	if o := e.Optimistic(alloc.CurveProbe{}, 10); len(o.Nodes) != len(c.Nodes) {
		t.Fatal("without a probe the curve changed")
	}
}
