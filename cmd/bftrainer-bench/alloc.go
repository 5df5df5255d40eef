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
)

// allocCommand times alloc.Exact against CBC on the paper's node-level
// MILP, on Summit-scale instances (alloctest.Summit, seed 1), and prints
// per instance:
//
//	alloc instance=<name> trainers=<J> nodes=<N> exact_ms=<median>
//	      cbc_ms=<median> speedup=<cbc/exact> same_objective=<true|false>
//
// exact_ms is the wall time of alloc.Exact{}.Solve; cbc_ms that of
// milp.Solver{Backend: CBC}.Solve — model build, MPS write, the cbc run
// and reading its answer, the whole cost a user pays. Runs of the two
// are interleaved and the medians reported. When CBC does not prove an
// optimum within its limit, cbc_ms is timeout(<limit>) (or the plan's
// status) and the comparison fields are n/a.
type allocCommand struct {
	stdout, stderr io.Writer
}

// benchInstance is one measured problem. limited instances take CBC's
// limit from -cbc-limit; the others run to optimality (within an hour).
type benchInstance struct {
	J, N, nmax int
	limited    bool
	quick      bool // part of the -quick set
}

func (b benchInstance) name() string {
	return fmt.Sprintf("summit-%dx%d-nmax%d", b.J, b.N, b.nmax)
}

var benchInstances = []benchInstance{
	{J: 10, N: 400, nmax: 64, quick: true},
	{J: 10, N: 4654, nmax: 64, quick: true},
	{J: 10, N: 4654, nmax: 4654},
	{J: 100, N: 4734, nmax: 64, limited: true},
}

// unlimited is CBC's time limit on the instances it is expected to finish.
const unlimited = time.Hour

// Run parses the flags and measures every instance.
func (c *allocCommand) Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("alloc", flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	runs := fs.Int("runs", 0, "runs per solver and instance (default 5 for exact, 3 for CBC)")
	limit := fs.Duration("cbc-limit", 60*time.Second, "CBC's time limit on the 100-Trainer instance (the 10-Trainer ones run to optimality)")
	quick := fs.Bool("quick", false, "only the two smallest instances, 3 exact runs and 1 CBC run")
	fs.Usage = func() {
		fmt.Fprintf(c.stderr, "usage: bftrainer-bench alloc [-runs N] [-cbc-limit 60s] [-quick]\n\n")
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
	if err := cbc.Available(); err != nil {
		return fmt.Errorf("alloc: %w", err)
	}
	fmt.Fprintf(c.stderr, "bftrainer-bench: alloc: %d exact and %d cbc runs per instance, GOMAXPROCS=%d; timings on a shared machine are noisy\n",
		exactRuns, cbcRuns, runtime.GOMAXPROCS(0))
	for _, in := range benchInstances {
		if *quick && !in.quick {
			continue
		}
		lim := unlimited
		if in.limited {
			lim = *limit
		}
		line, err := c.measure(ctx, in, cbc, lim, exactRuns, cbcRuns)
		if err != nil {
			return fmt.Errorf("alloc: %s: %w", in.name(), err)
		}
		fmt.Fprintln(c.stdout, line)
	}
	return nil
}

// measure runs both solvers on one instance, interleaved, and returns the
// result line.
func (c *allocCommand) measure(ctx context.Context, in benchInstance, backend milp.Backend, limit time.Duration, exactRuns, cbcRuns int) (string, error) {
	p := alloctest.Summit(in.J, in.N, in.nmax, 1)
	solver := milp.Solver{Backend: backend, TimeLimit: limit}
	var exactT, cbcT []time.Duration
	var exactObj, cbcObj float64
	var stopped *alloc.Plan // a CBC plan that is not a proven optimum
	for i := range max(exactRuns, cbcRuns) {
		if i < exactRuns {
			start := time.Now()
			pl, err := alloc.Exact{}.Solve(ctx, p)
			if err != nil {
				return "", err
			}
			exactT = append(exactT, time.Since(start))
			exactObj = pl.Objective
		}
		if i < cbcRuns && stopped == nil {
			fmt.Fprintf(c.stderr, "bftrainer-bench: alloc: %s: cbc run %d/%d (limit %v)\n", in.name(), i+1, cbcRuns, limit)
			start := time.Now()
			pl, err := solver.Solve(ctx, p)
			if err != nil {
				return "", err
			}
			d := time.Since(start)
			if pl.Status != alloc.Optimal {
				fmt.Fprintf(c.stderr, "bftrainer-bench: alloc: %s: %s after %v\n", in.name(), pl.Note, d.Round(time.Millisecond))
				stopped = pl
				continue
			}
			cbcT = append(cbcT, d)
			cbcObj = pl.Objective
		}
	}
	exactMS := ms(median(exactT))
	head := fmt.Sprintf("alloc instance=%s trainers=%d nodes=%d exact_ms=%s", in.name(), in.J, in.N, fmtMS(exactMS))
	if stopped != nil {
		what := "timeout(" + strconv.FormatFloat(limit.Seconds(), 'g', -1, 64) + "s)"
		if stopped.Status != alloc.KeptCurrent {
			what = stopped.Status.String()
		}
		return head + " cbc_ms=" + what + " speedup=n/a same_objective=n/a", nil
	}
	cbcMS := ms(median(cbcT))
	same := math.Abs(cbcObj-exactObj) <= 1e-9*math.Max(1, math.Abs(exactObj))
	return fmt.Sprintf("%s cbc_ms=%s speedup=%s same_objective=%t", head, fmtMS(cbcMS), fmtRatio(cbcMS/exactMS), same), nil
}

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
