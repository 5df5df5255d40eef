package alloc_test

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/alloc/alloctest"
)

var now = time.Date(2021, 2, 10, 20, 21, 15, 0, time.UTC)

// certainIdle is a history in which every idle period ends evenly spread
// over [1024 s, 1152 s): S = 1 up to 1024 s, then falls linearly to 0 at
// 1152 s; and nodes became free every 500 s (τ). A trillion observations
// make the priors and the censored nodes of a small problem negligible
// (below 1e-7 relative).
func certainIdle() *alloc.IdleHistory {
	h := &alloc.IdleHistory{Count: 1e12, Frees: 1e12, Seconds: 500e12}
	h.Ended[alloc.IdleBin(1024)] = 1e12
	return h
}

func nodes(prefix string, n int, idle time.Duration) []alloc.Node {
	out := make([]alloc.Node, n)
	for i := range out {
		out[i] = alloc.Node{Name: fmt.Sprintf("%s%d", prefix, i), Since: now.Add(-idle)}
	}
	return out
}

// linear is 100 samples/s per node up to 4 nodes.
var linear = alloc.Curve{Nodes: []int{0, 4}, Throughput: []float64{0, 400}}

func approxRel(a, b, rel float64) bool { return math.Abs(a-b) <= rel*math.Max(1, math.Abs(b)) }

// TestAdaptiveValuesByHand checks each piece of the adaptive objective on a
// case worked out by hand. Under certainIdle (τ = 500 s) a node idle for
// 1088 s (S = ½) has h = ∫_1088^1152 S / S(1088) = 16/½ = 32 s left, within
// any horizon over 64 s, and is surely reclaimed within it (π = 1); a node
// that has just joined is idle for the whole of any horizon up to 1024 s and
// is never reclaimed within it.
func TestAdaptiveValuesByHand(t *testing.T) {
	held := nodes("old", 2, 1088*time.Second) // one cohort
	free := nodes("new", 3, 0)                // another
	trainer := alloc.Trainer{ID: "a", Min: 1, Max: 4, Curve: linear, RUp: 3, RDown: 2, Held: held}
	p := &alloc.Problem{Trainers: []alloc.Trainer{trainer}, Free: free, Now: now, Idle: certainIdle()}

	// Unknown remaining work: every horizon is τ.
	//   k=1: the older node carries the first step of the curve, 100/s
	//        for 32 s, and its cohort's reclaim costs R_down·O(1) = 200:
	//        3200 − 200 = 3000, less the shrink R_down·r(C=2) = 400.
	//   k=2: 200·32 − 2·200 = 6000, kept as it is.
	//   k=3: + a new node: 100/s for τ = 500 s, no reclaim within it:
	//        6000 + 50000 = 56000, less the growth R_up·r = 600.
	//   k=4: 6000 + 200·500 = 106000, less 600.
	want := []float64{-400, 2600, 6000, 55400, 105400}
	val := p.Prices(alloc.AdaptiveHorizon{})
	for k, w := range want {
		if got := val(0, k); !approxRel(got, w, 1e-6) {
			t.Errorf("unknown work: value of %d nodes = %.6f, want %v", k, got, w)
		}
	}

	// 100,000 samples left: on k nodes it finishes in 1000/k s. The nodes
	// it holds still count over τ (what it does not finish, the next
	// Trainer gets from them), but a node it grows onto only until it
	// finishes: 333.3 s on 3 nodes, 250 s on 4.
	//   k=3: 6000 + 100·333.33 = 39333.33, less 600;
	//   k=4: 6000 + 200·250 = 56000, less 600.
	p.Trainers[0].Remaining = 100000
	val = p.Prices(alloc.AdaptiveHorizon{})
	want = []float64{-400, 2600, 6000, 6000 + 100*1000.0/3 - 600, 56000 - 600}
	for k, w := range want {
		if got := val(0, k); !approxRel(got, w, 1e-6) {
			t.Errorf("100k samples left: value of %d nodes = %.6f, want %v", k, got, w)
		}
	}

	// The reclaim of a cohort within the horizon: the held cohort is sure
	// to go within 64 s; its cost is R_down at the rate of the nodes ranked
	// up to its last, O(2) = 200 on 2 nodes, O(1) on 1: shown above. A
	// cohort that leaves after the horizon costs nothing: with τ = 50 s the
	// old nodes are idle for all of it (their S only falls from 1088 s on
	// to 1152 s: h = ∫_1088^1138 S/S(1088) = 50 − ½·50·(50/64) = 30.47 s,
	// π = 1 − S(1138)/S(1088) = 50/64).
	short := certainIdle()
	short.Seconds = 50e12
	p.Idle = short
	p.Trainers[0].Remaining = 0
	val = p.Prices(alloc.AdaptiveHorizon{})
	h := 50 - 0.5*50*(50.0/64)
	if got, w := val(0, 2), 200*h-2*200*(50.0/64); !approxRel(got, w, 1e-6) {
		t.Errorf("τ 50 s: value of 2 nodes = %.6f, want %v", got, w)
	}

	// The minimum: with Min 2 the metric is 0 below 2 nodes, so the
	// second node carries O(2) = 200 and the first nothing.
	q := &alloc.Problem{Now: now, Idle: certainIdle(), Free: nodes("new", 3, 0),
		Trainers: []alloc.Trainer{{ID: "m", Min: 2, Max: 4, Curve: linear, RUp: 3, RDown: 2}}}
	val = q.Prices(alloc.AdaptiveHorizon{})
	for k, w := range map[int]float64{2: 200 * 500, 3: 300 * 500} {
		if got := val(0, k); !approxRel(got, w, 1e-6) {
			t.Errorf("min 2: value of %d nodes = %.6f, want %v", k, got, w)
		}
	}
}

// TestAdaptivePricesGrowthByPosition: a Trainer's growth is priced on the
// free nodes past those the Trainers before it could take.
func TestAdaptivePricesGrowthByPosition(t *testing.T) {
	free := append(nodes("old", 2, 1088*time.Second), nodes("new", 2, 0)...)
	p := &alloc.Problem{Now: now, Idle: certainIdle(), Free: free, Trainers: []alloc.Trainer{
		{ID: "a", Min: 1, Max: 2, Curve: linear},
		{ID: "full", Min: 1, Max: 1, Curve: linear, Held: nodes("h", 1, 0)}, // at its maximum: takes nothing
		{ID: "b", Min: 1, Max: 2, Curve: linear},
	}}
	val := p.Prices(alloc.AdaptiveHorizon{})
	// a is first: priced on the two oldest free nodes (32 s each left).
	if got, want := val(0, 2), 200*32.0; !approxRel(got, want, 1e-6) {
		t.Errorf("a on 2 nodes: %v, want %v", got, want)
	}
	// b comes after a, which can take 2: priced on the new ones, idle for
	// the whole of τ = 500 s.
	if got, want := val(2, 2), 200*500.0; !approxRel(got, want, 1e-6) {
		t.Errorf("b on 2 nodes: %v, want %v", got, want)
	}
	// Place gives a the old nodes and b the new ones, as priced.
	pl, err := alloc.Adaptive{}.Solve(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if err := alloc.Check(p, pl); err != nil {
		t.Fatal(err)
	}
	if got := pl.Trainers[2].Add; !slices.Equal(got, []string{"new0", "new1"}) {
		t.Errorf("b takes %v, want new0 new1 (plan %+v)", got, pl.Trainers)
	}
}

func adaptiveOptions(r *rand.Rand, trainers, nodes int) alloctest.Options {
	return alloctest.Options{
		Trainers:  trainers,
		Nodes:     nodes,
		Semantics: alloc.Semantics(r.IntN(2)),
		Objective: []alloc.Objective{alloc.Throughput, alloc.Speedup, alloc.Metric}[r.IntN(3)],
		Adaptive:  true,
	}
}

// bruteForceWith enumerates every count vector under a pricing (nil: the
// paper's objective).
func bruteForceWith(p *alloc.Problem, pr alloc.Pricing) (float64, bool) {
	val := p.Prices(pr)
	best, found := math.Inf(-1), false
	var rec func(j, used int, sum float64)
	rec = func(j, used int, sum float64) {
		if j == len(p.Trainers) {
			found = true
			best = max(best, sum)
			return
		}
		for k := 0; used+k <= p.Size(); k++ {
			if p.Feasible(j, k) {
				rec(j+1, used+k, sum+val(j, k))
			}
		}
	}
	rec(0, 0, 0)
	return best, found
}

func TestAdaptiveMatchesBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(12, 1))
	for i := range 3000 {
		p := alloctest.Problem(r, adaptiveOptions(r, 1+r.IntN(4), r.IntN(9)))
		want, feasible := bruteForceWith(p, alloc.AdaptiveHorizon{})
		pl, err := alloc.Adaptive{}.Solve(context.Background(), p)
		if err != nil {
			t.Fatalf("problem %d: %v", i, err)
		}
		if !feasible {
			if pl.Status != alloc.Infeasible {
				t.Fatalf("problem %d: brute force finds no feasible counts, adaptive says %v", i, pl.Status)
			}
			continue
		}
		if err := alloc.Check(p, pl); err != nil {
			t.Fatalf("problem %d: %v", i, err)
		}
		if got := pl.Objective; !approxRel(got, want, 1e-9) {
			t.Fatalf("problem %d: adaptive %v, brute force %v, counts %v", i, got, want, pl.Counts())
		}
	}
}

// naiveDPWith is the textbook O(J·N·N) knapsack over counts under a
// pricing (nil: the paper's objective).
func naiveDPWith(p *alloc.Problem, pr alloc.Pricing) float64 {
	val := p.Prices(pr)
	N := p.Size()
	prev := make([]float64, N+1)
	for j := range p.Trainers {
		cur := make([]float64, N+1)
		for c := 0; c <= N; c++ {
			cur[c] = math.Inf(-1)
			for k := 0; k <= c; k++ {
				if p.Feasible(j, k) {
					cur[c] = max(cur[c], prev[c-k]+val(j, k))
				}
			}
		}
		prev = cur
	}
	return prev[N]
}

func TestAdaptiveMatchesNaiveDPLarge(t *testing.T) {
	r := rand.New(rand.NewPCG(12, 2))
	for i := range 24 {
		o := adaptiveOptions(r, 1+r.IntN(8), 300+r.IntN(1500))
		o.Breaks = 1 + r.IntN(8)
		if r.IntN(2) == 0 {
			o.MaxNodes = 1 + r.IntN(200)
		}
		p := alloctest.Problem(r, o)
		want := naiveDPWith(p, alloc.AdaptiveHorizon{})
		pl, err := alloc.Adaptive{}.Solve(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		if math.IsInf(want, -1) {
			if pl.Status != alloc.Infeasible {
				t.Fatalf("problem %d: naive DP infeasible, adaptive %v", i, pl.Status)
			}
			continue
		}
		if err := alloc.Check(p, pl); err != nil {
			t.Fatalf("problem %d: %v", i, err)
		}
		if !approxRel(pl.Objective, want, 1e-9) {
			t.Fatalf("problem %d: adaptive %v, naive DP %v", i, pl.Objective, want)
		}
	}
	for seed := uint64(1); seed <= 6; seed++ {
		p := alloctest.Summit(6+int(seed%5), 150+int(seed)*40, []int{64, 300}[seed%2], seed)
		want := naiveDPWith(p, alloc.AdaptiveHorizon{})
		pl, err := alloc.Adaptive{}.Solve(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		if err := alloc.Check(p, pl); err != nil {
			t.Fatalf("summit seed %d: %v", seed, err)
		}
		if !approxRel(pl.Objective, want, 1e-9) {
			t.Fatalf("summit seed %d: adaptive %v, naive DP %v", seed, pl.Objective, want)
		}
	}
}

// TestAdaptivePricedSetBoundsPlacement checks the claim the exactness rests
// on (AdaptiveHorizon): every Trainer that grows gets, from Place, nodes at
// least as old, one by one in age order, as those its count was priced on.
func TestAdaptivePricedSetBoundsPlacement(t *testing.T) {
	r := rand.New(rand.NewPCG(12, 3))
	grew := 0
	for i := range 2000 {
		p := alloctest.Problem(r, adaptiveOptions(r, 1+r.IntN(6), r.IntN(40)))
		p.Semantics = alloc.Default
		pl, err := alloc.Adaptive{}.Solve(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		since := map[string]time.Time{}
		for _, n := range p.Free {
			since[n.Name] = n.Since
		}
		for _, tr := range p.Trainers {
			for _, n := range tr.Held {
				since[n.Name] = n.Since
			}
		}
		for j, a := range pl.Trainers {
			if len(a.Add) == 0 {
				continue
			}
			grew++
			priced := alloc.PricedAdditionAges(p, j, len(a.Add))
			got := make([]float64, len(a.Add))
			for k, name := range a.Add {
				got[k] = p.Now.Sub(since[name]).Seconds()
			}
			slices.SortFunc(got, func(x, y float64) int { return cmp.Compare(y, x) }) // oldest first
			for k := range got {
				if got[k] < priced[k] {
					t.Fatalf("problem %d: trainer %s's %d-th oldest added node is %v s idle, priced as %v s",
						i, a.ID, k+1, got[k], priced[k])
				}
			}
		}
	}
	if grew < 500 {
		t.Fatalf("only %d growths in 2000 problems: the test checks too little", grew)
	}
}

func TestAdaptiveIsDeterministic(t *testing.T) {
	p := alloctest.Summit(20, 1200, 64, 3)
	first, err := alloc.Adaptive{}.Solve(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		pl, _ := alloc.Adaptive{}.Solve(context.Background(), p)
		if !slices.Equal(pl.Counts(), first.Counts()) || pl.Objective != first.Objective {
			t.Fatalf("counts %v objective %v, then %v %v", first.Counts(), first.Objective, pl.Counts(), pl.Objective)
		}
		for j := range pl.Trainers {
			if !slices.Equal(pl.Trainers[j].Nodes, first.Trainers[j].Nodes) {
				t.Fatalf("trainer %d's nodes differ between runs", j)
			}
		}
	}
}

func BenchmarkAdaptive(b *testing.B) {
	for _, c := range []struct{ J, N, nmax, cohort int }{
		{10, 400, 64, 16}, {10, 4654, 64, 16}, {100, 4734, 64, 16}, {100, 4734, 64, 1}, {100, 4734, 4734, 16},
	} {
		p := alloctest.SummitCohorts(c.J, c.N, c.nmax, c.cohort, 1)
		b.Run(fmt.Sprintf("J=%d/N=%d/Nmax=%d/cohort=%d", c.J, c.N, c.nmax, c.cohort), func(b *testing.B) {
			for b.Loop() {
				if _, err := (alloc.Adaptive{}).Solve(context.Background(), p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
