package alloc_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/alloc/alloctest"
)

// bruteForce enumerates every count vector under the paper's objective.
func bruteForce(p *alloc.Problem) (float64, bool) { return bruteForceWith(p, nil) }

func TestExactMatchesBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 3000; i++ {
		o := alloctest.Options{
			Trainers:  1 + r.IntN(4),
			Nodes:     r.IntN(9),
			Semantics: alloc.Semantics(r.IntN(2)),
			Objective: []alloc.Objective{alloc.Throughput, alloc.Speedup, alloc.Metric}[r.IntN(3)],
		}
		p := alloctest.Problem(r, o)
		want, feasible := bruteForce(p)
		pl, err := alloc.Exact{}.Solve(context.Background(), p)
		if err != nil {
			t.Fatalf("problem %d: %v", i, err)
		}
		if !feasible {
			if pl.Status != alloc.Infeasible {
				t.Fatalf("problem %d: brute force finds no feasible counts, exact says %v", i, pl.Status)
			}
			continue
		}
		if pl.Status != alloc.Optimal {
			t.Fatalf("problem %d: status %v, brute force found %v", i, pl.Status, want)
		}
		if err := alloc.Check(p, pl); err != nil {
			t.Fatalf("problem %d: %v", i, err)
		}
		if got := pl.Objective; math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
			t.Fatalf("problem %d (%+v): exact %v, brute force %v, counts %v", i, o, got, want, pl.Counts())
		}
	}
}

func TestHeuristicsAreFeasible(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 2000; i++ {
		p := alloctest.Problem(r, alloctest.Options{Trainers: 1 + r.IntN(6), Nodes: r.IntN(40), Semantics: alloc.Semantics(r.IntN(2))})
		opt, ok := alloc.OptimalCounts(p)
		for _, s := range []alloc.Solver{alloc.EqualShare{}, alloc.Greedy{}} {
			pl, err := s.Solve(context.Background(), p)
			if err != nil {
				t.Fatalf("%s problem %d: %v", s.Name(), i, err)
			}
			if err := alloc.Check(p, pl); err != nil {
				t.Fatalf("%s problem %d: %v", s.Name(), i, err)
			}
			if ok && pl.Status == alloc.Optimal && !pl.NoStepLimit {
				if best := p.ObjectiveOf(opt); pl.Objective > best+1e-9*math.Max(1, math.Abs(best)) {
					t.Fatalf("%s problem %d: objective %v beats the optimum %v", s.Name(), i, pl.Objective, best)
				}
			}
		}
	}
}

// naiveDP is the textbook O(J·N·N) knapsack over counts, the oracle for
// problems too large to enumerate.
func naiveDP(p *alloc.Problem) float64 { return naiveDPWith(p, nil) }

func TestExactMatchesNaiveDPLarge(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 24; i++ {
		o := alloctest.Options{
			Trainers:  1 + r.IntN(8),
			Nodes:     300 + r.IntN(1800),
			Semantics: alloc.Semantics(r.IntN(2)),
			Breaks:    1 + r.IntN(8),
		}
		if r.IntN(2) == 0 {
			o.MaxNodes = 1 + r.IntN(200)
		}
		p := alloctest.Problem(r, o)
		want := naiveDP(p)
		pl, err := alloc.Exact{}.Solve(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		if math.IsInf(want, -1) {
			if pl.Status != alloc.Infeasible {
				t.Fatalf("problem %d: naive DP infeasible, exact %v", i, pl.Status)
			}
			continue
		}
		if err := alloc.Check(p, pl); err != nil {
			t.Fatalf("problem %d: %v", i, err)
		}
		if got := pl.Objective; math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
			t.Fatalf("problem %d (%+v): exact %v, naive DP %v", i, o, got, want)
		}
	}
}

func TestExplainNamesTheReason(t *testing.T) {
	lin := alloc.Curve{Nodes: []int{0, 1, 2, 4}, Throughput: []float64{0, 10, 20, 40}}
	held := func(n int) []alloc.Node {
		var out []alloc.Node
		for i := 0; i < n; i++ {
			out = append(out, alloc.Node{Name: fmt.Sprintf("h%d", i)})
		}
		return out
	}
	free := func(n int) []alloc.Node {
		var out []alloc.Node
		for i := 0; i < n; i++ {
			out = append(out, alloc.Node{Name: fmt.Sprintf("f%d", i)})
		}
		return out
	}
	for _, c := range []struct {
		name string
		p    alloc.Problem
		want string
	}{
		{"at max", alloc.Problem{TFwd: 10, Free: free(6), Trainers: []alloc.Trainer{{ID: "a", Min: 1, Max: 4, Curve: lin}}}, "its maximum"},
		{"too few nodes", alloc.Problem{TFwd: 10, Free: free(2), Trainers: []alloc.Trainer{{ID: "a", Min: 3, Max: 4, Curve: lin}}}, "needs at least 3"},
		{"rescale not worth it", alloc.Problem{TFwd: 1, Free: free(2), Trainers: []alloc.Trainer{{ID: "a", Min: 1, Max: 4, Curve: lin, RUp: 100, Held: held(1)}}}, "less than the rescale cost"},
		{"nodes worth more elsewhere", alloc.Problem{TFwd: 10, Free: free(3), Trainers: []alloc.Trainer{
			{ID: "a", Min: 1, Max: 4, Curve: lin}, {ID: "b", Min: 1, Max: 4, Curve: alloc.Curve{Nodes: []int{0, 4}, Throughput: []float64{0, 400}}}}}, "worth more where it is"},
	} {
		pl, err := alloc.Exact{}.Solve(context.Background(), &c.p)
		if err != nil {
			t.Fatal(err)
		}
		why := alloc.Explain(&c.p, pl)
		if !strings.Contains(why[0], c.want) {
			t.Errorf("%s: %q does not say %q", c.name, why[0], c.want)
		}
	}
}

// TestExactSummitLikeMatchesNaiveDP checks the LP pruning on the shape it
// is built for: many Trainers with measured concave-ish curves.
func TestExactSummitLikeMatchesNaiveDP(t *testing.T) {
	for seed := uint64(1); seed <= 12; seed++ {
		for _, sem := range []alloc.Semantics{alloc.Default, alloc.Reference} {
			p := alloctest.Summit(6+int(seed%5), 150+int(seed)*40, []int{64, 300}[seed%2], seed)
			p.Semantics = sem
			want := naiveDP(p)
			pl, err := alloc.Exact{}.Solve(context.Background(), p)
			if err != nil {
				t.Fatal(err)
			}
			if err := alloc.Check(p, pl); err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
			if got := pl.Objective; math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
				t.Fatalf("seed %d %v: exact %v, naive DP %v", seed, sem, got, want)
			}
		}
	}
}

// TestRoundingTakesPartOfAClosedSegment: exact's windows keep the
// capacities whose bound reaches a feasible rounding's value, so a
// rounding far below the optimum widens them (issue 23). Twelve nodes;
// Trainer a is linear to 16 nodes at 10 a node, four others are worth 5
// on their one node. a's only segment does not fit, and the rounds alone
// give the twelve nodes' best remainder to the four (20); taking the
// twelve along a's segment is worth 120, the optimum.
func TestRoundingTakesPartOfAClosedSegment(t *testing.T) {
	p := &alloc.Problem{TFwd: 1, Objective: alloc.Throughput}
	for i := range 12 {
		p.Free = append(p.Free, alloc.Node{Name: fmt.Sprintf("n%02d", i), Order: i})
	}
	p.Trainers = append(p.Trainers, alloc.Trainer{ID: "a", Min: 1, Max: 16, Curve: alloc.Curve{Nodes: []int{0, 8, 16}, Throughput: []float64{0, 80, 160}}})
	for _, id := range []string{"b", "c", "d", "e"} {
		p.Trainers = append(p.Trainers, alloc.Trainer{ID: id, Min: 1, Max: 1, Curve: alloc.Curve{Nodes: []int{0, 1}, Throughput: []float64{0, 5}}})
	}
	lb, ok := alloc.ExactRounding(p)
	if !ok {
		t.Fatal("no bound")
	}
	pl, err := alloc.Exact{}.Solve(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if pl.Objective != 120 || pl.Counts()[0] != 12 {
		t.Fatalf("exact: objective %v, counts %v; want 120 with a on 12", pl.Objective, pl.Counts())
	}
	if lb != 120 {
		t.Errorf("rounding %v, want 120 (a on the twelve nodes)", lb)
	}
}

// TestRoundingIsFeasible: the rounding is a solution's value, never above
// the optimum (above it, the windows would prune the optimal path), on
// random problems of every objective and semantics, and on the exascale
// instances, where it now reaches the optimum.
func TestRoundingIsFeasible(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 1))
	check := func(name string, p *alloc.Problem) (lb, opt float64) {
		t.Helper()
		lb, ok := alloc.ExactRounding(p)
		pl, err := alloc.Exact{}.Solve(context.Background(), p)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !ok || pl.Status != alloc.Optimal {
			return lb, math.NaN()
		}
		if lb > pl.Objective+1e-9*math.Max(1, math.Abs(pl.Objective)) {
			t.Fatalf("%s: rounding %v above the optimum %v", name, lb, pl.Objective)
		}
		return lb, pl.Objective
	}
	for i := range 2000 {
		n := r.IntN(40)
		o := alloctest.Options{
			Trainers:  1 + r.IntN(8),
			Nodes:     n,
			MaxNodes:  1 + r.IntN(max(1, n)),
			Semantics: alloc.Semantics(r.IntN(2)),
			Objective: []alloc.Objective{alloc.Throughput, alloc.Speedup, alloc.Metric}[r.IntN(3)],
		}
		check(fmt.Sprintf("problem %d (%+v)", i, o), alloctest.Problem(r, o))
	}
	for _, c := range []struct{ J, N, nmax int }{{1000, 10624, 64}, {1000, 10624, 512}, {10, 4654, 4654}} {
		name := fmt.Sprintf("summit %d×%d (%d)", c.J, c.N, c.nmax)
		lb, opt := check(name, alloctest.Summit(c.J, c.N, c.nmax, 1))
		if math.Abs(lb-opt) > 1e-12*opt {
			t.Errorf("%s: rounding %v, optimum %v", name, lb, opt)
		}
	}
}
