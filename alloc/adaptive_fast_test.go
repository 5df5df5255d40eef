package alloc_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/alloc/alloctest"
	"github.com/bftrainer/bftrainer/internal/allocbefore"
)

// oracleProblem draws a random adaptive problem and then, by the draw, one
// of the pricing's edge cases: no idle history, no clock, planned starts
// on some nodes (past, within and beyond the horizons), Trainers near
// their end (little work left), every node its own cohort, and curves
// with superlinear stretches and plateaus (alloctest's curves already
// have arbitrary slopes, zero ones among them).
func oracleProblem(r *rand.Rand, trainers, nodes, nmax int) *alloc.Problem {
	o := adaptiveOptions(r, trainers, nodes)
	o.MaxNodes = nmax
	o.Breaks = 1 + r.IntN(8)
	p := alloctest.Problem(r, o)
	if r.IntN(5) == 0 {
		p.Idle = nil
	}
	if r.IntN(6) == 0 {
		p.Now = time.Time{}
	}
	all := [][]alloc.Node{p.Free}
	for j := range p.Trainers {
		all = append(all, p.Trainers[j].Held)
	}
	distinct := r.IntN(4) == 0
	planned := r.IntN(3) == 0
	for _, ns := range all {
		for i := range ns {
			if distinct {
				ns[i].Since = ns[i].Since.Add(-time.Duration(r.IntN(5000)) * time.Second)
			}
			if planned && r.IntN(4) == 0 {
				ns[i].Until = p.Now.Add(time.Duration(r.IntN(4000)-500) * time.Second)
			}
		}
	}
	for j := range p.Trainers {
		t := &p.Trainers[j]
		if r.IntN(4) == 0 {
			// Near its end: a few seconds to a minute of work at its top rate.
			t.Remaining = t.Curve.Throughput[len(t.Curve.Throughput)-1] * (1 + 60*r.Float64())
		}
	}
	return p
}

// TestAdaptiveGainsMatchOracle holds the block evaluation of the adaptive
// gains to the node-by-node one it replaced (internal/allocbefore), every
// Trainer and count, on random problems with N_max from 1 to N.
func TestAdaptiveGainsMatchOracle(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 1))
	worst := 0.0
	for i := range 1502 {
		n := 1 + r.IntN(300)
		p := oracleProblem(r, 1+r.IntN(6), n, 1+r.IntN(n))
		if i >= 1500 {
			// Every node its own cohort at N_max = N: a Trainer priced
			// on many blocks.
			p = alloctest.SummitCohorts(3, 1500, 1500, 1, uint64(i))
		}
		got, want := alloc.AdaptiveHorizon{}.Gains(p), allocbefore.AdaptiveGains(p)
		for j := range p.Trainers {
			tr := &p.Trainers[j]
			top := max(min(tr.MaxNodes(), p.Size()), len(tr.Held)) + 2 // past it: counts no solver takes
			for k := 0; k <= top; k++ {
				g, w := got(j, k), want(j, k)
				if d := math.Abs(g-w) / math.Max(1, math.Abs(w)); d > worst {
					worst = d
				}
				if !approxRel(g, w, 1e-12) {
					t.Fatalf("problem %d: trainer %d, %d nodes: gain %v, oracle %v", i, j, k, g, w)
				}
			}
		}
	}
	t.Logf("largest relative difference %.3g", worst)
}

// TestAdaptiveMatchesOracle solves random problems with Adaptive and with
// the previous implementation (old pricing, old DP): the same objective,
// and the same counts where the old one's are the only optimum (checked
// by the objective: equal counts, or a tie in value).
func TestAdaptiveMatchesOracle(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 2))
	for i := range 600 {
		n := 1 + r.IntN(400)
		p := oracleProblem(r, 1+r.IntN(12), n, 1+r.IntN(n))
		checkAgainstOracle(t, i, p)
	}
	for seed := uint64(1); seed <= 4; seed++ {
		checkAgainstOracle(t, int(seed), alloctest.SummitCohorts(8+int(seed), 600, []int{64, 600}[seed%2], int(1+seed%2*15), seed))
	}
	// Large enough that the Trainers' values are built on all cores
	// (perTrainer), every node its own cohort.
	checkAgainstOracle(t, 99, alloctest.SummitCohorts(12, 1500, 1500, 1, 7))
	// Large N_max with plateaus and superlinear stretches, and many
	// Trainers on a large pool (relax's λ* and its rounding rounds).
	for i, c := range largeCases(r) {
		checkAgainstOracle(t, 1000+i, c)
	}
}

// largeCases draws problems at large N_max (up to 2,500 nodes, N_max = N
// or N/2, curves of up to 8 breakpoints: plateaus and superlinear
// stretches among them) and with up to 150 Trainers.
func largeCases(r *rand.Rand) []*alloc.Problem {
	var out []*alloc.Problem
	for range 6 {
		n := 1000 + r.IntN(1500)
		p := oracleProblem(r, 2+r.IntN(6), n, []int{n, n / 2}[r.IntN(2)])
		out = append(out, p)
	}
	for range 3 {
		n := 1000 + r.IntN(1000)
		out = append(out, oracleProblem(r, 80+r.IntN(70), n, 16+r.IntN(200)))
	}
	return out
}

func checkAgainstOracle(t *testing.T, i int, p *alloc.Problem) {
	t.Helper()
	want, ok := allocbefore.AdaptiveCounts(p)
	pl, err := alloc.Adaptive{}.Solve(context.Background(), p)
	if err != nil {
		t.Fatalf("problem %d: %v", i, err)
	}
	if !ok {
		if pl.Status != alloc.Infeasible {
			t.Fatalf("problem %d: oracle infeasible, adaptive %v", i, pl.Status)
		}
		return
	}
	if err := alloc.Check(p, pl); err != nil {
		t.Fatalf("problem %d: %v", i, err)
	}
	wantObj := p.ObjectiveWith(alloc.AdaptiveHorizon{}, want)
	if !approxRel(pl.Objective, wantObj, 1e-9) {
		t.Fatalf("problem %d: adaptive %v (counts %v), oracle %v (counts %v)", i, pl.Objective, pl.Counts(), wantObj, want)
	}
}

// TestExactMatchesOracle solves random problems with Exact and with the
// previous implementation: the same objective, and the same counts (the
// DP and its tie rule are unchanged; only the pruning bound is computed
// otherwise).
func TestExactMatchesOracle(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 3))
	for i := range 600 {
		n := 1 + r.IntN(400)
		p := oracleProblem(r, 1+r.IntN(12), n, 1+r.IntN(n))
		want, ok := allocbefore.ExactCounts(p)
		pl, err := alloc.Exact{}.Solve(context.Background(), p)
		if err != nil {
			t.Fatalf("problem %d: %v", i, err)
		}
		if !ok {
			if pl.Status != alloc.Infeasible {
				t.Fatalf("problem %d: oracle infeasible, exact %v", i, pl.Status)
			}
			continue
		}
		if wantObj := p.ObjectiveOf(want); !approxRel(pl.Objective, wantObj, 1e-9) {
			t.Fatalf("problem %d: exact %v (counts %v), oracle %v (counts %v)", i, pl.Objective, pl.Counts(), wantObj, want)
		}
	}
	for i, p := range largeCases(r) {
		want, ok := allocbefore.ExactCounts(p)
		pl, err := alloc.Exact{}.Solve(context.Background(), p)
		if err != nil || !ok {
			t.Fatalf("large problem %d: %v (oracle feasible %v)", i, err, ok)
		}
		if wantObj := p.ObjectiveOf(want); !approxRel(pl.Objective, wantObj, 1e-9) {
			t.Fatalf("large problem %d: exact %v, oracle %v", i, pl.Objective, wantObj)
		}
	}
}

// BenchmarkAdaptiveBefore times the previous implementation
// (internal/allocbefore) on BenchmarkAdaptive's instances, for a ratio
// measured in the same run.
func BenchmarkAdaptiveBefore(b *testing.B) {
	for _, c := range []struct{ J, N, nmax, cohort int }{
		{10, 400, 64, 16}, {10, 4654, 64, 16}, {100, 4734, 64, 16}, {100, 4734, 64, 1}, {100, 4734, 4734, 16},
	} {
		p := alloctest.SummitCohorts(c.J, c.N, c.nmax, c.cohort, 1)
		b.Run(fmt.Sprintf("J=%d/N=%d/Nmax=%d/cohort=%d", c.J, c.N, c.nmax, c.cohort), func(b *testing.B) {
			for b.Loop() {
				allocbefore.AdaptiveCounts(p)
			}
		})
	}
}

// TestGrowthGainsMatchWalk: growthGains gives the count-by-count walk's
// values on random problems (oracleProblem's edge cases: no idle history,
// no clock, planned starts past, within and beyond the horizons, Trainers
// near their end, every node its own cohort, curves with superlinear
// stretches and plateaus, N_max from 1 to N, both semantics) and
// Summit-like pools: bit for bit where it values each cohort at each
// count (the running sums off), and to 10⁻¹¹ of the Trainer's largest
// |value| with every term it may sum summed (sumsFrom 1). It fails when the start
// rank ignores the count, when a planned start is not cut, when a
// division in column becomes a multiplication by the reciprocal, and with
// the sums on when a term's constant, coefficient or bin is wrong.
func TestGrowthGainsMatchWalk(t *testing.T) {
	for _, c := range []struct {
		name      string
		sumsFrom  int
		tolerance float64
	}{{"lookups", math.MaxInt, 0}, {"sums", 1, 1e-11}} {
		t.Run(c.name, func(t *testing.T) {
			defer alloc.SetSumsFrom(c.sumsFrom)()
			r := rand.New(rand.NewPCG(23, 7))
			total, summed, worstAll := 0, 0, 0.0
			for i := range 1203 {
				n := 1 + r.IntN(300)
				p := oracleProblem(r, 1+r.IntN(6), n, 1+r.IntN(n))
				switch i {
				case 1200:
					p = alloctest.SummitCohorts(5, 2000, 2000, 1, 3)
				case 1201:
					p = alloctest.SummitCohorts(20, 3000, 3000, 16, 4)
				case 1202:
					p = alloctest.SummitCohorts(40, 3000, 64, 4, 5)
				}
				if i%3 == 0 {
					fallingTail(p)
				}
				if i%5 == 1 {
					pastTheTable(p)
				}
				worst, declined, counts, s := alloc.GrowthGainsAgainstWalk(p)
				if worst > c.tolerance || declined != 0 {
					t.Fatalf("problem %d: largest relative difference %v from the walk, %d Trainers declined", i, worst, declined)
				}
				total += counts
				summed += s
				worstAll = max(worstAll, worst)
			}
			if total < 100000 {
				t.Fatalf("only %d growth counts compared", total)
			}
			if (c.sumsFrom == 1) != (summed > 0) {
				t.Fatalf("%d terms summed with sumsFrom %d", summed, c.sumsFrom)
			}
			t.Logf("%d growth counts, %d terms summed, largest relative difference %.3g", total, summed, worstAll)
		})
	}
}

// fallingTail makes each Trainer's throughput fall past its curve's
// middle point (a curve whose rate drops as nodes are added), so that
// T(k) = Remaining/P(k), and with it the horizon of growth, rises with
// the count.
func fallingTail(p *alloc.Problem) {
	for j := range p.Trainers {
		c := &p.Trainers[j].Curve
		for i := len(c.Throughput)/2 + 1; i < len(c.Throughput); i++ {
			c.Throughput[i] = c.Throughput[i-1] * 0.6
		}
	}
}

// pastTheTable makes every node two days older than drawn and the pool's
// horizon τ days long, so that a node's age plus its horizon can pass the
// life table's last edge (the oldest node's bin), where S(a) decays at the
// observed hazard instead.
func pastTheTable(p *alloc.Problem) {
	if p.Idle == nil || p.Now.IsZero() {
		return
	}
	idle := *p.Idle
	idle.Frees = max(idle.Frees, 1)
	idle.Seconds = float64(idle.Frees) * 3e5
	p.Idle = &idle
	all := [][]alloc.Node{p.Free}
	for j := range p.Trainers {
		all = append(all, p.Trainers[j].Held)
	}
	for _, ns := range all {
		for i := range ns {
			ns[i].Since = ns[i].Since.Add(-48 * time.Hour)
		}
	}
}

// TestNarrowWindowsKeepTheCounts: the DP on narrow windows, kept when its
// walk back's deficit certifies it, gives exactly the counts of the wide
// windows alone (the tie rule's choice, not only the same objective), on
// random problems under both pricings; and with the narrow ptol at its
// least (4 tols), where the certificate often fails, the fallback gives
// them too.
func TestNarrowWindowsKeepTheCounts(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 7))
	var problems []*alloc.Problem
	for range 500 {
		n := 1 + r.IntN(300)
		problems = append(problems, oracleProblem(r, 1+r.IntN(40), n, 1+r.IntN(n)))
	}
	problems = append(problems, largeCases(r)...)
	problems = append(problems, alloctest.Summit(200, 3000, 128, 3), alloctest.SummitCohorts(60, 2000, 2000, 1, 4))
	// Ties the walk back takes at every stage, that narrow windows cut:
	// ten Trainers with no node, each worth 10⁶ + 2·10⁻⁵ on one, then ten
	// on two nodes each (all the nodes), worth 10⁶ on one. Moving a node
	// from one of the latter to one of the former gains 2·10⁻⁵, within the
	// tie tolerance (4·10⁻⁵ here), so the tie rule keeps every current
	// size, 2·10⁻⁴ short of the optimum; narrow windows at 4 tols drop the
	// capacity that choice leaves the first ten (none), and the walk back
	// on them moves some nodes: the certificate must fail there.
	ties := &alloc.Problem{TFwd: 1e6, Objective: alloc.Throughput}
	for j := range 20 {
		t := alloc.Trainer{ID: fmt.Sprintf("t%02d", j), Min: 1, Max: 2,
			Curve: alloc.Curve{Nodes: []int{0, 1, 2}, Throughput: []float64{0, 1, 2}}}
		if j < 10 {
			t.Max, t.Curve = 1, alloc.Curve{Nodes: []int{0, 1}, Throughput: []float64{0, 1 + 2e-11}}
		} else {
			t.Held = []alloc.Node{{Name: fmt.Sprintf("a%02d", j), Order: 2 * j}, {Name: fmt.Sprintf("b%02d", j), Order: 2*j + 1}}
		}
		ties.Trainers = append(ties.Trainers, t)
	}
	want, _, _ := alloc.CountsWithNarrow(ties, false, math.Inf(1))
	for j, k := range want {
		if k != min(j/10*2, 2) {
			t.Fatalf("the ties' problem: the wide windows' counts %v, want the first ten on 0 and the rest kept on 2", want)
		}
	}
	problems = append(problems, ties)
	narrowed, fellBack := 0, 0
	for i, p := range problems {
		for _, adaptive := range []bool{true, false} {
			want, wantOK, _ := alloc.CountsWithNarrow(p, adaptive, math.Inf(1))
			for _, rel := range []float64{0, 1e-8} {
				got, ok, wide := alloc.CountsWithNarrow(p, adaptive, rel)
				if ok != wantOK || !slices.Equal(got, want) {
					t.Fatalf("problem %d (adaptive %v, rel %g, fell back %v): counts %v (ok %v), the wide windows' %v (ok %v)", i, adaptive, rel, wide, got, ok, want, wantOK)
				}
				if wide {
					fellBack++
				} else {
					narrowed++
				}
			}
		}
	}
	t.Logf("%d solves kept the narrow windows' counts, %d fell back", narrowed, fellBack)
	if fellBack == 0 || narrowed == 0 {
		t.Errorf("both paths must be taken: %d narrow, %d fell back", narrowed, fellBack)
	}
}

// TestKeptBuffersShareNothing: solves running at once, and solves after
// others of other sizes, give the plans a lone solve gives, though the
// tables and segments of one solve are kept for the next (kept.go).
func TestKeptBuffersShareNothing(t *testing.T) {
	problems := []*alloc.Problem{
		alloctest.SummitCohorts(30, 3000, 3000, 1, 8),
		alloctest.Summit(200, 3000, 128, 9),
		alloctest.SummitCohorts(5, 800, 800, 4, 10),
	}
	solvers := []alloc.Solver{alloc.Adaptive{}, alloc.Exact{}}
	want := make([][]*alloc.Plan, len(solvers))
	for s, sv := range solvers {
		for _, p := range problems {
			pl, err := sv.Solve(context.Background(), p)
			if err != nil {
				t.Fatal(err)
			}
			want[s] = append(want[s], pl)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for g := range 4 {
		wg.Go(func() {
			for i := range 6 {
				s, n := (g+i)%len(solvers), (g*7+i)%len(problems)
				got, err := solvers[s].Solve(context.Background(), problems[n])
				if err != nil {
					errs <- err.Error()
					return
				}
				if !reflect.DeepEqual(got, want[s][n]) {
					errs <- fmt.Sprintf("%s on problem %d (goroutine %d, round %d): objective %v, alone %v", solvers[s].Name(), n, g, i, got.Objective, want[s][n].Objective)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
