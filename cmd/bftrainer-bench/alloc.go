package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strconv"
	"time"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/alloc/alloctest"
	"github.com/bftrainer/bftrainer/alloc/milp"
	"github.com/bftrainer/bftrainer/internal/allocbefore"
)

// allocCommand times alloc.Exact against CBC and HiGHS on the paper's
// node-level MILP, on Summit-scale instances (alloctest.Summit, seed 1),
// and prints per instance:
//
//	alloc instance=<name> trainers=<J> nodes=<N> exact_ms=<median>
//	      cbc_ms=<median> speedup=<cbc/exact> same_objective=<true|false>
//	      highs_ms=<median> highs_same_objective=<true|false>
//	      adaptive_ms=<median>
//
// exact_ms is the wall time of alloc.Exact{}.Solve; cbc_ms that of
// milp.Solver{Backend: CBC}.Solve — model build, MPS write, the cbc run
// and reading its answer, the whole cost a user pays — and highs_ms the
// same with the HiGHS backend (the native highs, or HiGHS compiled to
// WebAssembly through its node driver, alloc/milp/highs-wasm). Runs of
// the three are interleaved and the medians reported. When a MILP solver
// does not prove an optimum within its limit, its _ms field is
// timeout(<limit>) (or the plan's status, or error when it failed) and
// its comparison fields are n/a; highs_ms=absent when HiGHS cannot run
// (the reason is on stderr). adaptive_ms is alloc.Adaptive's time on the
// same instance (its own objective; its runs interleaved with exact's).
// Each line then has the previous implementation's times in the same run
// (internal/allocbefore, the solvers before the exascale work, issue 23),
// whether their objectives are the new ones', and the whole decision:
//
//	before_ms=<old adaptive> before_exact_ms=<old exact>
//	before_same=<true|false> decide_ms=<median> decide_exact_ms=<median>
//	problem_ms=… solve_ms=… place_ms=… commit_ms=… state_ms=… save_ms=…
//	exact_problem_ms=… … exact_save_ms=…
//
// decide_ms is pool.Decide with Adaptive on a pool holding the instance's
// nodes and Trainers (decidePool), after an event (16 nodes leave, 16
// join), decide_exact_ms the same with Exact; the stage fields time a
// decision's stages with Adaptive (exact_…: with Exact), each decision
// after its own event (decideStages): the problem built from the pool,
// the solver (place_ms, the choice of physical nodes, is a part of it),
// the commit, the state copied for the store and its save in SQLite. The exascale instances (Aurora's 10,624 nodes)
// skip the MILP solvers: cbc_ms=skipped.
type allocCommand struct {
	stdout, stderr io.Writer
}

// benchInstance is one measured problem. limited instances take the MILP
// solvers' limit from -cbc-limit; the others run to optimality (within an hour).
type benchInstance struct {
	J, N, nmax int
	limited    bool
	quick      bool // part of the -quick set
	noMILP     bool // too large for CBC and HiGHS: exact and adaptive only
}

func (b benchInstance) name() string {
	return fmt.Sprintf("summit-%dx%d-nmax%d", b.J, b.N, b.nmax)
}

var benchInstances = []benchInstance{
	{J: 10, N: 400, nmax: 64, quick: true},
	{J: 10, N: 4654, nmax: 64, quick: true},
	{J: 10, N: 4654, nmax: 4654},
	{J: 100, N: 4734, nmax: 64, limited: true},
	{J: 1000, N: 10624, nmax: 64, noMILP: true},
	{J: 1000, N: 10624, nmax: 512, noMILP: true},
	{J: 100, N: 10624, nmax: 10624, noMILP: true},
}

// unlimited is the MILP solvers' time limit on the instances they are
// expected to finish.
const unlimited = time.Hour

// Run parses the flags and measures every instance.
func (c *allocCommand) Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("alloc", flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	runs := fs.Int("runs", 0, "runs per solver and instance (default 5 for exact, 3 for CBC and HiGHS)")
	limit := fs.Duration("cbc-limit", 60*time.Second, "CBC's and HiGHS' time limit on the 100-Trainer instance (the 10-Trainer ones run to optimality)")
	quick := fs.Bool("quick", false, "only the two smallest instances, 3 exact runs and 1 run per MILP solver")
	scale := fs.Bool("scale", false, "only the instances without MILP solvers (Aurora's 10,624 nodes)")
	highsPath := fs.String("highs", "", "the highs program or WebAssembly driver `PATH` (default: highs or bftrainer-highs on PATH, else "+repoHiGHS+")")
	fs.Usage = func() {
		fmt.Fprintf(c.stderr, "usage: bftrainer-bench alloc [-runs N] [-cbc-limit 60s] [-highs PATH] [-quick] [-scale]\n\n")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	exactRuns, cbcRuns := 5, 3
	switch {
	case *runs > 0:
		exactRuns, cbcRuns = *runs, *runs
	case *quick:
		exactRuns, cbcRuns = 3, 1
	}
	cbc := milp.CBC{}
	if err := cbc.Available(); err != nil && !*scale {
		return fmt.Errorf("alloc: %w", err)
	}
	highs := benchHiGHS(*highsPath)
	if err := highs.Available(); err != nil {
		fmt.Fprintf(c.stderr, "bftrainer-bench: alloc: no HiGHS, highs_ms=absent: %v\n", err)
		highs = nil
	}
	fmt.Fprintf(c.stderr, "bftrainer-bench: alloc: %d exact and %d cbc and highs runs per instance, GOMAXPROCS=%d; timings on a shared machine are noisy\n",
		exactRuns, cbcRuns, runtime.GOMAXPROCS(0))
	for _, in := range benchInstances {
		if *quick && !in.quick || *scale && !in.noMILP {
			continue
		}
		lim := unlimited
		if in.limited {
			lim = *limit
		}
		line, err := c.measure(ctx, in, cbc, highs, lim, exactRuns, cbcRuns)
		if err != nil {
			return fmt.Errorf("alloc: %s: %w", in.name(), err)
		}
		fmt.Fprintln(c.stdout, line)
	}
	return nil
}

// repoHiGHS is the WebAssembly driver in the source tree, relative to
// the repository's top directory, where make bench runs.
const repoHiGHS = "alloc/milp/highs-wasm/bftrainer-highs.mjs"

// benchHiGHS is the HiGHS backend the bench times: path if given, else
// the one on PATH, else the source tree's driver.
func benchHiGHS(path string) milp.Backend {
	if path != "" {
		return milp.HiGHS{Path: path}
	}
	if (milp.HiGHS{}).Available() == nil {
		return milp.HiGHS{}
	}
	return milp.HiGHS{Path: repoHiGHS}
}

// backendRuns are one MILP solver's runs on an instance.
type backendRuns struct {
	solver  milp.Solver
	times   []time.Duration
	obj     float64
	stopped *alloc.Plan // a plan that is not a proven optimum: no more runs
	failed  bool        // a run failed (said on stderr): no more runs
}

// run solves p once, unless an earlier run did not prove an optimum.
func (r *backendRuns) run(ctx context.Context, stderr io.Writer, in benchInstance, p *alloc.Problem, i, n int) error {
	if r.stopped != nil || r.failed {
		return nil
	}
	name := r.solver.Name()
	fmt.Fprintf(stderr, "bftrainer-bench: alloc: %s: %s run %d/%d (limit %v)\n", in.name(), name, i+1, n, r.solver.TimeLimit)
	start := time.Now()
	pl, err := r.solver.Solve(ctx, p)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		// One solver failing (HiGHS' WebAssembly build has a 4 GiB
		// memory) leaves the others' figures standing.
		fmt.Fprintf(stderr, "bftrainer-bench: alloc: %s: %v\n", in.name(), err)
		r.failed = true
		return nil
	}
	d := time.Since(start)
	if pl.Status != alloc.Optimal {
		fmt.Fprintf(stderr, "bftrainer-bench: alloc: %s: %s after %v\n", in.name(), pl.Note, d.Round(time.Millisecond))
		r.stopped = pl
		return nil
	}
	r.times = append(r.times, d)
	r.obj = pl.Objective
	return nil
}

// result is the median time, or why there is none, and whether the
// objective equals exact's.
func (r *backendRuns) result(exactObj float64) (took, same string) {
	if r.failed {
		return "error", "n/a"
	}
	if r.stopped != nil {
		if r.stopped.Status != alloc.KeptCurrent {
			return r.stopped.Status.String(), "n/a"
		}
		return "timeout(" + strconv.FormatFloat(r.solver.TimeLimit.Seconds(), 'g', -1, 64) + "s)", "n/a"
	}
	return fmtMS(ms(median(r.times))), strconv.FormatBool(math.Abs(r.obj-exactObj) <= 1e-9*math.Max(1, math.Abs(exactObj)))
}

// measure runs the exact solver, CBC and HiGHS (nil: absent) on one
// instance, interleaved, and returns the result line.
func (c *allocCommand) measure(ctx context.Context, in benchInstance, cbc, highs milp.Backend, limit time.Duration, exactRuns, milpN int) (string, error) {
	p := alloctest.Summit(in.J, in.N, in.nmax, 1)
	solvers := []*backendRuns{{solver: milp.Solver{Backend: cbc, TimeLimit: limit}}}
	if highs != nil {
		solvers = append(solvers, &backendRuns{solver: milp.Solver{Backend: highs, TimeLimit: limit}})
	}
	if in.noMILP {
		milpN = 0
	}
	var exactT, adaptiveT []time.Duration
	var exactObj float64
	for i := range max(exactRuns, milpN) {
		if i < exactRuns {
			start := time.Now()
			pl, err := alloc.Exact{}.Solve(ctx, p)
			if err != nil {
				return "", err
			}
			exactT = append(exactT, time.Since(start))
			exactObj = pl.Objective
			start = time.Now()
			if _, err := (alloc.Adaptive{}).Solve(ctx, p); err != nil {
				return "", err
			}
			adaptiveT = append(adaptiveT, time.Since(start))
		}
		if i < milpN {
			for _, r := range solvers {
				if err := r.run(ctx, c.stderr, in, p, i, milpN); err != nil {
					return "", err
				}
			}
		}
	}
	exactMS := ms(median(exactT))
	line := fmt.Sprintf("alloc instance=%s trainers=%d nodes=%d exact_ms=%s", in.name(), in.J, in.N, fmtMS(exactMS))
	if in.noMILP {
		line += " cbc_ms=skipped speedup=n/a same_objective=n/a highs_ms=skipped highs_same_objective=n/a"
	} else {
		cbcMS, same := solvers[0].result(exactObj)
		speedup := "n/a"
		if solvers[0].stopped == nil && !solvers[0].failed {
			speedup = fmtRatio(ms(median(solvers[0].times)) / exactMS)
		}
		line += " cbc_ms=" + cbcMS + " speedup=" + speedup + " same_objective=" + same
		highsMS, highsSame := "absent", "n/a"
		if highs != nil {
			highsMS, highsSame = solvers[1].result(exactObj)
		}
		line += " highs_ms=" + highsMS + " highs_same_objective=" + highsSame
	}
	line += " adaptive_ms=" + fmtMS(ms(median(adaptiveT)))
	before, err := c.before(ctx, in, p, exactRuns)
	if err != nil {
		return "", err
	}
	return line + before, nil
}

// before times the previous implementation (internal/allocbefore) on p,
// checks its objectives against the new solvers', and times whole
// decisions; it returns the line's remaining fields.
func (c *allocCommand) before(ctx context.Context, in benchInstance, p *alloc.Problem, runs int) (string, error) {
	// The old adaptive took 50 s on the largest instance: one run there.
	oldRuns := runs
	if in.nmax > 1000 && in.N > 5000 {
		oldRuns = 1
	}
	// Each old run is paired with a new one, back to back, so that the
	// ratios (speedup_adaptive, speedup_exact) compare runs under the
	// same load.
	var oldA, oldE, newA, newE []time.Duration
	var countsA, countsE []int
	var pa, pe *alloc.Plan
	for range oldRuns {
		fmt.Fprintf(c.stderr, "bftrainer-bench: alloc: %s: previous adaptive and exact\n", in.name())
		// A previous solve: validation, its counts, then placement (Place
		// is unchanged), the work Solve does.
		start := time.Now()
		var err error
		if countsA, _, err = allocbefore.AdaptiveSolve(p); err != nil {
			return "", err
		}
		oldA = append(oldA, time.Since(start))
		start = time.Now()
		if pa, err = (alloc.Adaptive{}).Solve(ctx, p); err != nil {
			return "", err
		}
		newA = append(newA, time.Since(start))
		start = time.Now()
		if countsE, _, err = allocbefore.ExactSolve(p); err != nil {
			return "", err
		}
		oldE = append(oldE, time.Since(start))
		start = time.Now()
		if pe, err = (alloc.Exact{}).Solve(ctx, p); err != nil {
			return "", err
		}
		newE = append(newE, time.Since(start))
	}
	same := sameValue(pa.Objective, p.ObjectiveWith(alloc.AdaptiveHorizon{}, countsA)) && sameValue(pe.Objective, p.ObjectiveOf(countsE))
	out := fmt.Sprintf(" before_ms=%s before_exact_ms=%s before_same=%t speedup_adaptive=%s speedup_exact=%s",
		fmtMS(ms(median(oldA))), fmtMS(ms(median(oldE))), same,
		fmtRatio(ms(median(oldA))/ms(median(newA))), fmtRatio(ms(median(oldE))/ms(median(newE))))
	stages, err := decideMedian(ctx, alloc.Adaptive{}, in, runs)
	if err != nil {
		return "", fmt.Errorf("decide: %w", err)
	}
	exact, err := decideMedian(ctx, alloc.Exact{}, in, runs)
	if err != nil {
		return "", fmt.Errorf("decide exact: %w", err)
	}
	return out + fmt.Sprintf(" decide_ms=%s decide_exact_ms=%s", fmtMS(ms(stages.decide)), fmtMS(ms(exact.decide))) +
		stages.fields("") + exact.fields("exact_"), nil
}

// sameValue reports whether two objectives agree to 1e-9 relative.
func sameValue(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// fmtMS prints milliseconds with three significant decimals below 10 ms
// and one above.
func fmtMS(v float64) string {
	if v < 10 {
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

func fmtRatio(r float64) string {
	if r >= 100 {
		return strconv.FormatFloat(r, 'f', 0, 64)
	}
	return strconv.FormatFloat(r, 'f', 1, 64)
}
