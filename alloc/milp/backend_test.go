package milp_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/alloc/alloctest"
	"github.com/bftrainer/bftrainer/alloc/milp"
)

// requireBackend skips the test, with the backend's install hint, when its
// solver program is absent.
func requireBackend(tb testing.TB, b milp.Backend) milp.Backend {
	tb.Helper()
	if err := b.Available(); err != nil {
		tb.Skipf("skipping: %v", err)
	}
	return b
}

// nodePlanWith turns decoded node sets into a Plan for alloc.Check, with
// the objective under pr: Add and Release are the differences from the
// held nodes.
func nodePlanWith(p *alloc.Problem, pr alloc.Pricing, name string, counts []int, sets [][]string) *alloc.Plan {
	val := p.Prices(pr)
	pl := &alloc.Plan{Solver: name, Status: alloc.Optimal, Objective: p.ObjectiveWith(pr, counts), Pricing: pr}
	for j := range p.Trainers {
		t := &p.Trainers[j]
		a := alloc.Assignment{ID: t.ID, From: len(t.Held), To: counts[j], Nodes: sets[j], Value: val(j, counts[j])}
		held := make(map[string]bool, len(t.Held))
		for _, n := range t.Held {
			held[n.Name] = true
		}
		in := make(map[string]bool, len(sets[j]))
		for _, n := range sets[j] {
			in[n] = true
			if !held[n] {
				a.Add = append(a.Add, n)
			}
		}
		for _, n := range t.Held {
			if !in[n.Name] {
				a.Release = append(a.Release, n.Name)
			}
		}
		pl.Trainers = append(pl.Trainers, a)
	}
	return pl
}

func approx(a, b, rel float64) bool {
	return math.Abs(a-b) <= rel*math.Max(1, math.Max(math.Abs(a), math.Abs(b)))
}

// checkAgainstExact solves p's node-level MILP with b and checks the
// answer at node level (alloc.Check) and against alloc.Exact's objective.
// It returns the solver's status.
func checkAgainstExact(t *testing.T, b milp.Backend, p *alloc.Problem) milp.Status {
	t.Helper()
	return checkAgainst(t, b, p, alloc.Exact{}, nil)
}

// checkAgainst solves p's node-level MILP under the pricing pr with b and
// checks the answer at node level (alloc.Check) and against the objective
// of the exact solver s, which maximises the same. A CBC answer worse than
// s's checked plan is re-solved without preprocessing (see
// withoutPreprocessing); any other disagreement fails.
func checkAgainst(t *testing.T, b milp.Backend, p *alloc.Problem, s alloc.Solver, pr alloc.Pricing) milp.Status {
	t.Helper()
	ctx := context.Background()
	want, err := s.Solve(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	m := milp.BuildPriced(p, pr)
	sol, err := b.Solve(ctx, m, milp.Options{TimeLimit: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if sol.Status == milp.Optimal && b.Name() == "cbc" && want.Status == alloc.Optimal && sol.Objective < want.Objective*(1-1e-7)-1e-7 {
		preprocessingMisses.Add(1)
		t.Logf("cbc: objective %.12g below %s's %.12g: re-solving without preprocessing", sol.Objective, s.Name(), want.Objective)
		if sol, err = withoutPreprocessing(t).Solve(ctx, m, milp.Options{TimeLimit: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	if want.Status == alloc.Infeasible {
		if sol.Status != milp.Infeasible {
			t.Fatalf("%s: infeasible; %s: %v (%s)", s.Name(), b.Name(), sol.Status, sol.Message)
		}
		return sol.Status
	}
	if sol.Status != milp.Optimal {
		t.Fatalf("%s: %v with objective %v; %s: %v (%s)", s.Name(), want.Counts(), want.Objective, b.Name(), sol.Status, sol.Message)
	}
	counts, sets, err := m.Decode(sol.Values)
	if err != nil {
		t.Fatal(err)
	}
	if err := alloc.Check(p, nodePlanWith(p, pr, b.Name(), counts, sets)); err != nil {
		t.Fatalf("%s's node sets %v: %v", b.Name(), sets, err)
	}
	if got := p.ObjectiveWith(pr, counts); !approx(got, want.Objective, 1e-9) {
		t.Fatalf("%s: counts %v objective %.12g; %s: counts %v objective %.12g", b.Name(), counts, got, s.Name(), want.Counts(), want.Objective)
	}
	// The solver's own objective is printed to 8 decimals.
	if !approx(sol.Objective, want.Objective, 1e-7) {
		t.Fatalf("%s reports objective %.12g, %s %.12g", b.Name(), sol.Objective, s.Name(), want.Objective)
	}
	return sol.Status
}

// randomProblems returns nDefault problems under Default semantics, then
// nReference under Reference: 1–5 Trainers, 0–16 nodes, every objective,
// numbers rounded so the MPS file holds them exactly.
func randomProblems(seed uint64, nDefault, nReference int) []*alloc.Problem {
	r := rand.New(rand.NewPCG(seed, 2106))
	objs := []alloc.Objective{alloc.Throughput, alloc.Speedup, alloc.Metric}
	var ps []*alloc.Problem
	for i := range nDefault + nReference {
		sem := alloc.Default
		if i >= nDefault {
			sem = alloc.Reference
		}
		ps = append(ps, alloctest.Problem(r, alloctest.Options{
			Trainers:  1 + r.IntN(5),
			Nodes:     r.IntN(17),
			Semantics: sem,
			Objective: objs[r.IntN(len(objs))],
			Nice:      true,
		}))
	}
	return ps
}

// propertyTest runs checkAgainstExact on random problems, two at a time
// (parallel sub-tests; go test's -parallel defaults to GOMAXPROCS).
func propertyTest(t *testing.T, b milp.Backend, nDefault, nReference int) {
	ps := randomProblems(12091, nDefault, nReference)
	var optimal, infeasible, sameAsDefault atomic.Int64
	start := time.Now()
	t.Run("problems", func(t *testing.T) {
		for i, p := range ps {
			t.Run(fmt.Sprintf("%s-%03d", p.Semantics, i), func(t *testing.T) {
				t.Parallel()
				switch checkAgainstExact(t, b, p) {
				case milp.Optimal:
					optimal.Add(1)
				case milp.Infeasible:
					infeasible.Add(1)
				}
				if p.Semantics == alloc.Reference {
					q := *p
					q.Semantics = alloc.Default
					a, _ := alloc.OptimalCounts(p)
					c, _ := alloc.OptimalCounts(&q)
					if approx(p.ObjectiveOf(a), q.ObjectiveOf(c), 1e-12) {
						sameAsDefault.Add(1)
					}
				}
			})
		}
	})
	t.Logf("%s: %d problems (%d default, %d reference semantics): %d optimal, %d infeasible; %d reference optima equal the default one; %v",
		b.Name(), len(ps), nDefault, nReference, optimal.Load(), infeasible.Load(), sameAsDefault.Load(), time.Since(start).Round(time.Millisecond))
}

// TestCBCMatchesExact is the proof that the node-level MILP is the model
// Exact solves: on 550 random problems CBC's node sets satisfy every
// constraint and their objective equals Exact's to 1e-9.
func TestCBCMatchesExact(t *testing.T) {
	b := requireBackend(t, milp.CBC{})
	if testing.Short() {
		propertyTest(t, b, 30, 20)
		return
	}
	propertyTest(t, b, 300, 250)
}

// wasmHiGHS is HiGHS compiled to WebAssembly through this repository's
// driver (installed by "npm ci --prefix alloc/milp/highs-wasm", as .ci/run
// does).
func wasmHiGHS(tb testing.TB) milp.HiGHS {
	tb.Helper()
	path, err := filepath.Abs(filepath.Join("highs-wasm", "bftrainer-highs.mjs"))
	if err != nil {
		tb.Fatal(err)
	}
	return milp.HiGHS{Path: path}
}

// TestHiGHSMatchesExact is TestCBCMatchesExact for HiGHS: the WebAssembly
// build through the driver, and the native highs program where one is on
// PATH. The driver starts node for each problem (0.2–0.4 s), so it runs
// fewer problems than CBC.
func TestHiGHSMatchesExact(t *testing.T) {
	t.Run("wasm", func(t *testing.T) {
		b := requireBackend(t, wasmHiGHS(t))
		if testing.Short() {
			propertyTest(t, b, 12, 8)
			return
		}
		propertyTest(t, b, 60, 40)
	})
	t.Run("native", func(t *testing.T) {
		propertyTest(t, requireBackend(t, milp.HiGHS{Path: "highs"}), 60, 40)
	})
}

func TestGurobiMatchesExact(t *testing.T) {
	propertyTest(t, requireBackend(t, milp.Gurobi{}), 60, 40)
}

// TestSolverPlans runs the alloc.Solver adapter: its plans pass
// alloc.Check and match Exact's objective.
func TestSolverPlans(t *testing.T) {
	s := milp.Solver{Backend: requireBackend(t, milp.CBC{}), TimeLimit: time.Minute}
	if got, want := s.Name(), "cbc"; got != want {
		t.Fatalf("Name() = %q, want %q", got, want)
	}
	solverPlans(t, s, alloc.Exact{}, randomProblems(7, 20, 20))
	// No Trainers: nothing to run.
	pl, err := s.Solve(context.Background(), &alloc.Problem{TFwd: 10, Free: []alloc.Node{{Name: "a"}}})
	if err != nil || pl.Status != alloc.Optimal || len(pl.Trainers) != 0 {
		t.Fatalf("no trainers: %+v, %v", pl, err)
	}
}

// solverPlans runs the alloc.Solver adapter s on the problems: its plans
// pass alloc.Check and are worth what the exact solver's are, whose
// objective s.Pricing states. A CBC plan worth less than the exact one's is
// re-solved without preprocessing (see withoutPreprocessing).
func solverPlans(t *testing.T, s milp.Solver, exact alloc.Solver, ps []*alloc.Problem) {
	t.Helper()
	ctx := context.Background()
	for i, p := range ps {
		want, err := exact.Solve(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		pl, err := s.Solve(ctx, p)
		if err != nil {
			t.Fatalf("problem %d: %v", i, err)
		}
		if pl.Status == alloc.Optimal && want.Status == alloc.Optimal && pl.Objective < want.Objective*(1-1e-9)-1e-9 {
			t.Logf("problem %d: cbc objective %.12g below %s's %.12g: re-solving without preprocessing", i, pl.Objective, exact.Name(), want.Objective)
			s2 := s
			s2.Backend = withoutPreprocessing(t)
			if pl, err = s2.Solve(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
		if pl.Status != want.Status {
			t.Fatalf("problem %d: status %v (%s), %s %v", i, pl.Status, pl.Note, exact.Name(), want.Status)
		}
		if err := alloc.Check(p, pl); err != nil {
			t.Fatalf("problem %d: %v", i, err)
		}
		if !approx(pl.Objective, want.Objective, 1e-9) {
			t.Fatalf("problem %d: objective %v, %s %v", i, pl.Objective, exact.Name(), want.Objective)
		}
	}
}

// TestInfeasible: under Reference semantics a Trainer holding more nodes
// than its curve allows, and unable to shrink within the step limit,
// makes the problem infeasible for CBC as for Exact.
func TestInfeasible(t *testing.T) {
	b := requireBackend(t, milp.CBC{})
	var held []alloc.Node
	for i := range 4 {
		held = append(held, alloc.Node{Name: fmt.Sprintf("n%d", i), Order: i})
	}
	p := &alloc.Problem{
		TFwd:      10,
		Semantics: alloc.Reference,
		Trainers: []alloc.Trainer{{
			ID: "t0", Min: 1, Max: 4, RUp: 1, RDown: 1,
			Curve: alloc.Curve{Nodes: []int{0, 1}, Throughput: []float64{0, 5}}, // MaxNodes 1
			Held:  held,
		}},
	}
	if got := checkAgainstExact(t, b, p); got != milp.Infeasible {
		t.Fatalf("status %v, want infeasible", got)
	}
	pl, err := milp.Solver{Backend: b}.Solve(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if pl.Status != alloc.Infeasible || pl.Note == "" {
		t.Fatalf("plan %v (%q), want infeasible with a note", pl.Status, pl.Note)
	}
	if err := alloc.Check(p, pl); err != nil {
		t.Fatal(err)
	}
	// Under Default semantics it may shrink to 1 node.
	p.Semantics = alloc.Default
	if got := checkAgainstExact(t, b, p); got != milp.Optimal {
		t.Fatalf("default semantics: status %v, want optimal", got)
	}
}

// TestTimeLimitKeepsCurrent: a problem CBC cannot finish in a second
// keeps the current allocation, with a note, soon after the limit.
func TestTimeLimitKeepsCurrent(t *testing.T) {
	b := requireBackend(t, milp.CBC{})
	p := alloctest.Summit(10, 2000, 64, 3)
	tests := []struct {
		name  string
		limit time.Duration
	}{
		{"1s", time.Second},
		// Short enough to stop CBC in its preprocessing, where it
		// reports the problem infeasible.
		{"300ms", 300 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := milp.Solver{Backend: b, TimeLimit: tt.limit}
			start := time.Now()
			pl, err := s.Solve(context.Background(), p)
			elapsed := time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("10 × 2000 with a %v limit: %v after %v: %s", tt.limit, pl.Status, elapsed.Round(time.Millisecond), pl.Note)
			if pl.Status != alloc.KeptCurrent {
				t.Fatalf("status %v (%s), want %v", pl.Status, pl.Note, alloc.KeptCurrent)
			}
			if !strings.Contains(pl.Note, "time limit "+tt.limit.String()) {
				t.Fatalf("note %q does not name the time limit", pl.Note)
			}
			if err := alloc.Check(p, pl); err != nil {
				t.Fatal(err)
			}
			// Not a timing assertion: the kill past limit + grace
			// bounds it.
			if bound := tt.limit + 2*time.Second + 10*time.Second; elapsed > bound {
				t.Fatalf("took %v; the solver should have been killed by %v", elapsed, bound)
			}
		})
	}
}

// TestCancel: cancelling the context stops the solver and is an error.
func TestCancel(t *testing.T) {
	b := requireBackend(t, milp.CBC{})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	_, err := milp.Solver{Backend: b, TimeLimit: time.Minute}.Solve(ctx, alloctest.Summit(10, 2000, 64, 3))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

// checkAbsent checks that b is absent, with an error naming hint, and
// that solving with it fails the same way.
func checkAbsent(t *testing.T, b milp.Backend, hint string) {
	t.Helper()
	err := b.Available()
	if !errors.Is(err, milp.ErrBackendAbsent) || !strings.Contains(err.Error(), hint) {
		t.Fatalf("Available() = %v, want ErrBackendAbsent with %q", err, hint)
	}
	_, err = milp.Solver{Backend: b}.Solve(context.Background(), alloctest.Summit(2, 4, 4, 1))
	if !errors.Is(err, milp.ErrBackendAbsent) {
		t.Fatalf("Solve: %v, want ErrBackendAbsent", err)
	}
}

// checkSmall solves a small problem with b and checks the plan against
// Exact's.
func checkSmall(t *testing.T, b milp.Backend) {
	t.Helper()
	p := alloctest.Summit(2, 6, 4, 1)
	want, err := alloc.Exact{}.Solve(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	pl, err := milp.Solver{Backend: b, TimeLimit: time.Minute}.Solve(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if pl.Status != alloc.Optimal || !approx(pl.Objective, want.Objective, 1e-9) {
		t.Fatalf("plan %v objective %v (%s), exact %v", pl.Status, pl.Objective, pl.Note, want.Objective)
	}
}

func TestBackendAbsent(t *testing.T) {
	tests := []struct {
		name string
		b    milp.Backend
		hint string
	}{
		{"cbc", milp.CBC{Path: "/nonexistent/cbc"}, "apt install coinor-cbc"},
		{"highs", milp.HiGHS{Path: "/nonexistent/highs"}, "apt install highs"},
		{"gurobi", milp.Gurobi{Path: "/nonexistent/gurobi_cl"}, "gurobi_cl"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkAbsent(t, tt.b, tt.hint)
		})
	}
}

// TestHiGHSDriver: the WebAssembly driver is found through a link on PATH
// (node then loads the npm package from the link's target directory), and
// without node or without its package it is absent, with a hint naming
// the install command.
func TestHiGHSDriver(t *testing.T) {
	driver := wasmHiGHS(t).Path
	script, err := os.ReadFile(driver)
	if err != nil {
		t.Fatal(err)
	}
	// A copy of the driver with no node_modules beside it.
	bareDir := t.TempDir()
	bare := filepath.Join(bareDir, "bftrainer-highs.mjs")
	if err := os.WriteFile(bare, script, 0o755); err != nil {
		t.Fatal(err)
	}
	link := func(t *testing.T, target string) string {
		dir := t.TempDir()
		if err := os.Symlink(target, filepath.Join(dir, "bftrainer-highs")); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	node, nodeErr := exec.LookPath("node")
	empty := t.TempDir()
	tests := []struct {
		name string
		b    milp.HiGHS
		path string // PATH for the test; "" keeps it
		hint string
	}{
		{"package missing", milp.HiGHS{Path: bare}, "", "npm ci --prefix " + bareDir},
		{"package missing, linked onto PATH", milp.HiGHS{}, link(t, bare) + ":" + filepath.Dir(node), "npm ci --prefix " + bareDir},
		{"node missing", milp.HiGHS{Path: driver}, empty, "apt install nodejs"},
		{"driver missing", milp.HiGHS{Path: filepath.Join(empty, "bftrainer-highs.mjs")}, "", "npm ci --prefix alloc/milp/highs-wasm"},
		{"nothing on PATH", milp.HiGHS{}, empty, "apt install highs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.path != "" {
				if nodeErr != nil && tt.path != empty {
					t.Skipf("skipping: no node on PATH: %v", nodeErr)
				}
				t.Setenv("PATH", tt.path)
			}
			checkAbsent(t, tt.b, tt.hint)
		})
	}
	t.Run("linked onto PATH", func(t *testing.T) {
		requireBackend(t, wasmHiGHS(t))
		if _, err := exec.LookPath("highs"); err == nil {
			t.Skip("skipping: a native highs on PATH comes first")
		}
		t.Setenv("PATH", link(t, driver)+":"+os.Getenv("PATH"))
		checkSmall(t, milp.HiGHS{})
	})
}

// TestHiGHSTimeLimit: a problem HiGHS cannot finish in a second keeps the
// current allocation, with a note naming the limit.
func TestHiGHSTimeLimit(t *testing.T) {
	b := requireBackend(t, wasmHiGHS(t))
	p := alloctest.Summit(10, 2000, 64, 3)
	s := milp.Solver{Backend: b, TimeLimit: time.Second}
	start := time.Now()
	pl, err := s.Solve(context.Background(), p)
	elapsed := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("10 × 2000 with a 1s limit: %v after %v: %s", pl.Status, elapsed.Round(time.Millisecond), pl.Note)
	if pl.Status != alloc.KeptCurrent || !strings.Contains(pl.Note, "time limit 1s") {
		t.Fatalf("status %v (%s), want %v naming the time limit", pl.Status, pl.Note, alloc.KeptCurrent)
	}
	if err := alloc.Check(p, pl); err != nil {
		t.Fatal(err)
	}
}

// TestRelativePath: a solver named by a relative path runs, although it
// runs in its work directory.
func TestRelativePath(t *testing.T) {
	cwd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	cbc, cbcErr := exec.LookPath("cbc")
	tests := []struct {
		name string
		b    func() (milp.Backend, error)
	}{
		{"cbc", func() (milp.Backend, error) {
			if cbcErr != nil {
				return nil, cbcErr
			}
			rel, err := filepath.Rel(cwd, cbc)
			return milp.CBC{Path: rel}, err
		}},
		{"highs-wasm", func() (milp.Backend, error) {
			return milp.HiGHS{Path: filepath.Join("highs-wasm", "bftrainer-highs.mjs")}, nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := tt.b()
			if err != nil {
				t.Skipf("skipping: %v", err)
			}
			checkSmall(t, requireBackend(t, b))
		})
	}
}

// TestKeepDir: with Options.Dir the model and the solver's answer stay
// there for inspection.
func TestKeepDir(t *testing.T) {
	b := requireBackend(t, milp.CBC{})
	dir := t.TempDir()
	p := alloctest.Summit(2, 6, 4, 1)
	if _, err := (milp.Solver{Backend: b, Dir: dir}).Solve(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"model.mps", "solution.txt"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestBackendByName(t *testing.T) {
	for _, name := range []string{"cbc", "highs", "gurobi"} {
		b, err := milp.BackendByName(name)
		if err != nil || b.Name() != name {
			t.Fatalf("BackendByName(%q) = %v, %v", name, b, err)
		}
	}
	if _, err := milp.BackendByName("glpk"); err == nil {
		t.Fatal("BackendByName(glpk) succeeded")
	}
}
