package alloc_test

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/bftrainer/bftrainer/alloc"
)

// truthCurve is a synthetic true scaling curve.
type truthCurve struct {
	name     string
	rate     func(n int) float64
	monotone bool
}

// syntheticTruths draws curves of several families, none of them the
// learner's own model: Amdahl, power law, a drop off one node then a log
// decline, and one that peaks and falls.
func syntheticTruths(r *rand.Rand) []truthCurve {
	t1 := 100 + r.Float64()*5000
	alpha := r.Float64() * 0.02
	beta := 0.8 + r.Float64()*0.2
	drop := r.Float64() * 0.15
	decl := r.Float64() * 0.04
	return []truthCurve{
		{"amdahl", func(n int) float64 { return t1 * float64(n) / (1 + alpha*float64(n-1)) }, true},
		{"power", func(n int) float64 { return t1 * math.Pow(float64(n), beta) }, true},
		{"stepped", func(n int) float64 {
			e := 1 - decl*math.Log2(float64(n))
			if n > 1 {
				e -= drop
			}
			return t1 * float64(n) * e
		}, true},
		{"peaked", func(n int) float64 { x := float64(n - 1); return t1 * float64(n) / (1 + 0.002*x*x) }, false},
	}
}

// trainerSim feeds a learner what a Trainer running at changing counts
// would report: per run, a restart interval (inside the settle window, at a
// fifth of the rate), then intervals of 30–60 s with 5 % Gaussian noise,
// one in twenty of them a straggler at half the rate.
type trainerSim struct {
	r     *rand.Rand
	l     alloc.CurveLearner
	s     *alloc.CurveState
	truth func(int) float64
	noise float64
}

func (ts *trainerSim) run(tb testing.TB, n int, seconds float64) {
	tb.Helper()
	rate0 := ts.truth(n)
	obs := func(o alloc.CurveObs) {
		tb.Helper()
		if err := ts.l.Observe(ts.s, o); err != nil {
			tb.Fatal(err)
		}
	}
	obs(alloc.CurveObs{Nodes: n, Rate: 0.2 * rate0, Duration: 15, Since: 0})
	for since := 15.0; since < seconds; {
		d := 30 + ts.r.Float64()*30
		rate := rate0 * math.Max(0, 1+ts.noise*ts.r.NormFloat64())
		if ts.r.IntN(20) == 0 {
			rate = 0.5 * rate0
		}
		obs(alloc.CurveObs{Nodes: n, Rate: rate, Duration: d, Since: since})
		since += d
	}
}

func mustState(tb testing.TB, min, max int, prior *alloc.Curve) *alloc.CurveState {
	tb.Helper()
	s, err := alloc.NewCurveState(min, max, prior)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// checkSane fails unless every point is a finite rate ≥ 0 with a finite
// SD ≥ 0, and the curve is valid allocator input.
func checkSane(tb testing.TB, e *alloc.CurveEstimate, min, max int) {
	tb.Helper()
	for _, p := range e.Points {
		if !(p.Rate >= 0) || math.IsInf(p.Rate, 0) || !(p.SD >= 0) || math.IsInf(p.SD, 0) {
			tb.Fatalf("point %+v: rate and sd must be finite and ≥ 0", p)
		}
	}
	if !e.Known() {
		return
	}
	p := alloc.Problem{TFwd: 10, Trainers: []alloc.Trainer{{ID: "t", Min: min, Max: max, Curve: e.Curve()}}}
	if err := p.Validate(); err != nil {
		tb.Fatalf("learned curve is not valid allocator input: %v", err)
	}
}

func TestCurveExactObservationsGiveTheTruth(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 1))
	l := alloc.CurveLearner{MaxCounts: 48} // every count kept
	for trial := range 300 {
		max := 1 + r.IntN(48)
		min := r.IntN(max + 1)
		truth := make([]float64, max+1)
		for n := 1; n <= max; n++ {
			switch trial % 3 {
			case 0: // anything, falls included
				truth[n] = r.Float64() * 1000
			case 1: // monotone
				truth[n] = truth[n-1] + r.Float64()*100
			default: // flat stretches and exact ties
				truth[n] = math.Floor(1 + r.Float64()*3)
			}
		}
		var prior *alloc.Curve
		if trial%2 == 1 && max >= 2 {
			prior = &alloc.Curve{Nodes: []int{1, max}, Throughput: []float64{1, float64(2 * max)}}
		}
		s := mustState(t, min, max, prior)
		// Each count four times, in separate runs, in random order.
		order := make([]int, 0, 4*max)
		for n := 1; n <= max; n++ {
			order = append(order, n, n, n, n)
		}
		r.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, n := range order {
			if err := l.Observe(s, alloc.CurveObs{Nodes: n, Rate: truth[n], Duration: 60, Since: 40}); err != nil {
				t.Fatal(err)
			}
		}
		e := l.Estimate(s)
		checkSane(t, &e, min, max)
		c := e.Curve()
		for n := 1; n <= max; n++ {
			if got := alloc.Interp(c.Nodes, c.Throughput, n); math.Abs(got-truth[n]) > 1e-9*math.Max(1, truth[n]) {
				t.Fatalf("trial %d (max %d, prior %v): at %d nodes learned %v, true %v", trial, max, prior != nil, n, got, truth[n])
			}
		}
		for _, p := range e.Points {
			if p.Source&alloc.FromMeasured == 0 || p.SD != 0 {
				t.Fatalf("trial %d: point %+v: want measured with sd 0", trial, p)
			}
		}
	}
}

func TestCurveConvergesUnderNoiseAndOutliers(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 2))
	var l alloc.CurveLearner
	for trial := range 20 {
		for _, tc := range syntheticTruths(r) {
			s := mustState(t, 1, 64, nil)
			ts := &trainerSim{r: r, l: l, s: s, truth: tc.rate, noise: 0.05}
			// A random walk over counts, as an idle pool would give.
			n := 1 + r.IntN(64)
			for range 300 {
				n = min(64, max(1, n+r.IntN(17)-8))
				ts.run(t, n, 120+r.Float64()*780)
			}
			e := l.Estimate(s)
			checkSane(t, &e, 1, 64)
			// A sample pools one or two intervals of 5 % noise.
			if e.Noise < 0.025 || e.Noise > 0.06 {
				t.Errorf("%s trial %d: learned noise per sample %.3f, want 0.035–0.05", tc.name, trial, e.Noise)
			}
			worst := 0.0
			prev := 0.0
			for _, p := range e.Points {
				rel := p.Rate/tc.rate(p.Nodes) - 1
				if p.Source&alloc.FromMeasured != 0 {
					worst = math.Max(worst, math.Abs(rel))
				}
				if tc.monotone && p.Rate < prev {
					t.Errorf("%s trial %d: learned curve falls at %d nodes (%.1f after %.1f) though the truth rises", tc.name, trial, p.Nodes, p.Rate, prev)
				}
				prev = p.Rate
			}
			if worst > 0.06 {
				t.Errorf("%s trial %d: a measured count is %.1f %% off the truth", tc.name, trial, 100*worst)
			}
			if !tc.monotone {
				// The fall past the peak is measured, hence kept.
				if r22, _ := e.At(22); func() float64 { r64, _ := e.At(64); return r64 }() > 0.8*r22 {
					t.Errorf("%s trial %d: the measured fall past the peak was pooled away", tc.name, trial)
				}
			}
		}
	}
}

func TestCurveOutliersDoNotSwingIt(t *testing.T) {
	var l alloc.CurveLearner
	s := mustState(t, 1, 8, nil)
	obs := func(o alloc.CurveObs) {
		t.Helper()
		if err := l.Observe(s, o); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 12 {
		obs(alloc.CurveObs{Nodes: 4, Rate: 1000 * (1 + 0.03*float64(i%3-1)), Duration: 60, Since: 60 + 60*float64(i)})
	}
	before, _ := l.Estimate(s).At(4)
	// A straggler, a stall, a restart interval and an absurd spike.
	obs(alloc.CurveObs{Nodes: 4, Rate: 500, Duration: 60, Since: 2000})
	obs(alloc.CurveObs{Nodes: 4, Rate: 0, Duration: 60, Since: 3000})
	obs(alloc.CurveObs{Nodes: 4, Rate: 100, Duration: 20, Since: 0})
	obs(alloc.CurveObs{Nodes: 4, Rate: 1e6, Duration: 60, Since: 4000})
	e := l.Estimate(s)
	after, _ := e.At(4)
	if math.Abs(after/before-1) > 0.01 {
		t.Fatalf("outliers moved the rate at 4 nodes from %.1f to %.1f", before, after)
	}
}

func TestCurveNeverNegativeOnJunk(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 3))
	var l alloc.CurveLearner
	for trial := range 200 {
		max := 1 + r.IntN(100)
		s := mustState(t, r.IntN(max+1), max, nil)
		for range r.IntN(200) {
			o := alloc.CurveObs{
				Nodes:    1 + r.IntN(max),
				Rate:     []float64{0, 1e-9, r.Float64(), r.Float64() * 1e9, 1e300}[r.IntN(5)],
				Duration: []float64{1e-6, 1, 30, 1e5}[r.IntN(4)],
				Since:    []float64{0, 10, 100, 1e7}[r.IntN(4)],
			}
			if err := l.Observe(s, o); err != nil {
				t.Fatal(err)
			}
		}
		e := l.Estimate(s)
		if len(s.Counts) > 0 && !e.Known() {
			t.Fatalf("trial %d: observed but not known: %+v", trial, s)
		}
		checkSane(t, &e, s.Min, max)
	}
}

func TestCurveObservationValidation(t *testing.T) {
	var l alloc.CurveLearner
	s := mustState(t, 1, 4, nil)
	for _, tt := range []struct {
		name string
		o    alloc.CurveObs
	}{
		{"zero nodes", alloc.CurveObs{Nodes: 0, Rate: 1, Duration: 1}},
		{"negative rate", alloc.CurveObs{Nodes: 1, Rate: -1, Duration: 1}},
		{"nan rate", alloc.CurveObs{Nodes: 1, Rate: math.NaN(), Duration: 1}},
		{"zero duration", alloc.CurveObs{Nodes: 1, Rate: 1, Duration: 0}},
		{"negative since", alloc.CurveObs{Nodes: 1, Rate: 1, Duration: 1, Since: -1}},
	} {
		if err := l.Observe(s, tt.o); err == nil {
			t.Errorf("%s: accepted %+v", tt.name, tt.o)
		}
	}
	if len(s.Counts) != 0 || s.Seq != 0 {
		t.Fatalf("rejected observations changed the state: %+v", s)
	}
	if _, err := alloc.NewCurveState(3, 2, nil); err == nil {
		t.Error("bounds 3..2 accepted")
	}
	if _, err := alloc.NewCurveState(1, 4, &alloc.Curve{Nodes: []int{2, 1}, Throughput: []float64{1, 2}}); err == nil {
		t.Error("a prior with decreasing node counts accepted")
	}
}

func TestCurveStateBoundedAndRoundTrips(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 4))
	l := alloc.CurveLearner{Window: 5, MaxCounts: 7}
	s := mustState(t, 1, 200, &alloc.Curve{Nodes: []int{1, 100}, Throughput: []float64{5, 400}, Metric: []float64{1, 2}})
	ts := &trainerSim{r: r, l: l, s: s, truth: func(n int) float64 { return 10 * math.Pow(float64(n), 0.9) }, noise: 0.05}
	for range 2000 {
		ts.run(t, 1+r.IntN(200), 200)
		if len(s.Counts) > 7 {
			t.Fatalf("%d counts kept, limit 7", len(s.Counts))
		}
		for _, c := range s.Counts {
			if len(c.Rates) > 5 || len(c.Rates) != len(c.Seconds) {
				t.Fatalf("count %d keeps %d rates, %d weights, limit 5", c.Nodes, len(c.Rates), len(c.Seconds))
			}
		}
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 4096 {
		t.Errorf("state is %d bytes of JSON", len(b))
	}
	var back alloc.CurveState
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if want, got := l.Estimate(s), l.Estimate(&back); !reflect.DeepEqual(want, got) {
		t.Fatalf("estimate after a JSON round trip differs:\n%+v\n%+v", want, got)
	}
	if e := l.Estimate(s); !e.HasMetric || e.Curve().Metric == nil {
		t.Fatal("the prior's metric column was lost")
	}
}

func TestCurveUncertaintyGrowsWithDistance(t *testing.T) {
	var l alloc.CurveLearner
	s := mustState(t, 1, 256, nil)
	ts := &trainerSim{r: rand.New(rand.NewPCG(13, 5)), l: l, s: s, truth: func(n int) float64 { return 100 * float64(n) / (1 + 0.01*float64(n-1)) }, noise: 0.05}
	for _, n := range []int{2, 3, 4} {
		ts.run(t, n, 1200)
	}
	e := l.Estimate(s)
	prev := 0.0
	for _, p := range e.Points {
		if p.Nodes <= 4 {
			continue
		}
		if p.Source != alloc.FromModel {
			t.Fatalf("point %+v should come from the model", p)
		}
		if p.SD < prev || p.SD == prev && p.SD < 1 { // 1: the cap, a factor e
			t.Fatalf("sd at %d nodes %.3f, not above %.3f nearer the measured counts", p.Nodes, p.SD, prev)
		}
		prev = p.SD
	}
	if _, sd1 := e.At(1); sd1 <= 0 {
		t.Fatalf("sd at 1 node (unmeasured) is %v", sd1)
	}
}

func TestCurvePriorIsCalibratedAndRefined(t *testing.T) {
	var l alloc.CurveLearner
	truth := func(n int) float64 { return 50 * float64(n) / (1 + 0.02*float64(n-1)) }
	// The user is twice too optimistic, with the right shape.
	prior := &alloc.Curve{Nodes: []int{1, 2, 4, 8, 16, 32}, Throughput: []float64{}}
	for _, n := range prior.Nodes {
		prior.Throughput = append(prior.Throughput, 2*truth(n))
	}
	s := mustState(t, 1, 32, prior)
	e := l.Estimate(s)
	if got := e.Curve(); !reflect.DeepEqual(got.Throughput[len(got.Throughput)-1], prior.Throughput[5]) {
		t.Fatalf("with nothing measured the curve is not the prior: %+v", got)
	}
	if _, sd := e.At(32); sd != 1 {
		t.Fatalf("prior sd %v, want hypot(PriorSD 0.25, level 1) capped at 1", sd)
	}
	ts := &trainerSim{r: rand.New(rand.NewPCG(13, 6)), l: l, s: s, truth: truth, noise: 0.05}
	ts.run(t, 2, 1200)
	ts.run(t, 4, 1200)
	e = l.Estimate(s)
	for _, n := range []int{8, 16, 32} {
		got, sd := e.At(n)
		if math.Abs(got/truth(n)-1) > 0.1 {
			t.Errorf("at %d nodes %.1f, true %.1f, prior %.1f: the level was not calibrated", n, got, truth(n), 2*truth(n))
		}
		if sd >= 0.35 {
			t.Errorf("at %d nodes sd %.3f: measuring did not narrow the prior (%.3f)", n, sd, math.Hypot(0.25, 1))
		}
	}
}

// TestSettingsIdempotent: settings filled in once stay as they are when a
// method fills them in again — a negative setting (none) stays 0 rather
// than turning into the default on the second pass.
func TestSettingsIdempotent(t *testing.T) {
	l := alloc.CurveLearner{Settle: -1, MinSample: 1}.Settings()
	if l.Settle != 0 || l.Settings().Settle != 0 {
		t.Fatalf("settle %v after Settings twice, want 0", l.Settings().Settle)
	}
	s, err := alloc.NewCurveState(1, 4, nil)
	if err != nil {
		t.Fatal(err)
	}
	// With no settle window, an interval right after a rescale is settled.
	if err := l.Observe(s, alloc.CurveObs{Nodes: 1, Rate: 10, Duration: 5, Since: 0}); err != nil {
		t.Fatal(err)
	}
	if s.Counts[0].Unsettled || s.Counts[0].Seconds[0] != 5 {
		t.Fatalf("count %+v: want one settled sample of 5 s", s.Counts[0])
	}
}

// TestUnsettledIsALowerBound: a count measured only inside a settle window
// (a restart) is a loose lower bound: below what the settled counts
// predict there, the prediction stands; above, the measurement does.
func TestUnsettledIsALowerBound(t *testing.T) {
	l := alloc.CurveLearner{Settle: 30, MinSample: 10}
	s, err := alloc.NewCurveState(1, 4, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k := range 6 {
		if err := l.Observe(s, alloc.CurveObs{Nodes: 1, Rate: 100 * (1 + 0.01*float64(k%3-1)), Duration: 10, Since: 30 + 10*float64(k)}); err != nil {
			t.Fatal(err)
		}
	}
	// Growing to 2: 10 s into its restart it has done a tenth of its rate.
	if err := l.Observe(s, alloc.CurveObs{Nodes: 2, Rate: 20, Duration: 10, Since: 0}); err != nil {
		t.Fatal(err)
	}
	e := l.Estimate(s)
	r1, _ := e.At(1)
	if r2, _ := e.At(2); r2 < r1 {
		t.Fatalf("after a restart sample of 20/s at 2 nodes, the estimate there is %v, below 1 node's %v: a restart would shrink it back", r2, r1)
	}
	// One above the prediction is kept.
	s2, _ := alloc.NewCurveState(1, 4, nil)
	for k := range 6 {
		l.Observe(s2, alloc.CurveObs{Nodes: 1, Rate: 100, Duration: 10, Since: 30 + 10*float64(k)})
	}
	l.Observe(s2, alloc.CurveObs{Nodes: 2, Rate: 260, Duration: 10, Since: 0})
	if r2, _ := l.Estimate(s2).At(2); math.Abs(r2/260-1) > 0.01 {
		t.Fatalf("an unsettled 260/s at 2 nodes, above the model's 200, estimated %v", r2)
	}
}
