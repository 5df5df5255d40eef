package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/sim"
)

// yieldCommand replays, in one process and under the default semantics,
// every allocator on the traces and workloads of issue 12 and prints one
// line per replay:
//
//	yield trace=<t> workload=<w> allocator=<a> makespan_h=… mean_jct_h=… e_ovh=… e_1node=… reclaims=… wall_s=… max_trainers=… solve_ms_p50=… solve_ms_p99=… finished=…/…
//
// The rows: the Summit trace with hps-1000J, ImageNet-imgps-1001J and
// ImageNet-spdup-1001J; the Theta 2022 SWF log (its recorded schedule) with
// hps-1000J moved to the log's first busy week (sim.BusyWeek); and the
// Summit trace with a workload built from the Pollux measured step times
// (sim.PolluxWorkload: 1000 Trainers, two single-node hours of work each).
// Allocators: exact (the paper's fixed T_fwd of 10 s), heuristic, greedy
// and adaptive, 10 Trainers at once; then adaptive admitting by value
// (max_trainers=auto), rows of their own. Before each row's replays, its
// lossless bound (sim.LosslessBound: no rescale or reclaim costs anything),
// which no allocator with 10 Trainers beats:
//
//	bound trace=<t> workload=<w> max_trainers=10 makespan_h=…
//
// Then the paired-start sweep: hps-1000J and ImageNet-imgps-1001J moved to
// start at Summit events 1000, 2000, …, 16000, replayed with adaptive,
// exact and heuristic, and per workload the mean and range of adaptive's
// makespan change against each:
//
//	sweep trace=summit workload=<w> starts=16 versus=<a> mean_pct=… min_pct=… max_pct=… better=<k>/16
//
// with a sweep-start line per start. The sweep's replays run two at a time
// (its timings are not reported).
type yieldCommand struct {
	stdout, stderr io.Writer
}

// yieldRow is one trace and workload of the yield table.
type yieldRow struct {
	trace, workload string
	tr              *sim.Trace // windowed at the workload's start
	jobs            []sim.Job
}

// Run parses the flags, loads the data and replays.
func (c *yieldCommand) Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("yield", flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	data := fs.String("data", "../shared/data", "the shared data `directory` (summit/, theta/, workloads/, pollux/)")
	sweep := fs.Int("sweep", 16, "paired starts of the sweep (0: no sweep)")
	table := fs.Bool("table", true, "replay the yield table (false: the sweep only)")
	only := fs.String("only", "", "replay only this `allocator` in the table (exact, heuristic, greedy or adaptive; no auto rows)")
	fs.Usage = func() {
		fmt.Fprintf(c.stderr, "usage: bftrainer-bench yield [-data DIR] [-sweep 16] [-table=false] [-only ALLOCATOR]\n\n")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	summit, err := openSummit(*data)
	if err != nil {
		return fmt.Errorf("yield: %w", err)
	}
	var rows []yieldRow
	if *table {
		if rows, err = c.rows(*data, summit); err != nil {
			return fmt.Errorf("yield: %w", err)
		}
	}
	allocators := []alloc.Solver{alloc.Exact{}, alloc.EqualShare{}, alloc.Greedy{}, alloc.Adaptive{}}
	if *only != "" {
		allocators = slices.DeleteFunc(allocators, func(s alloc.Solver) bool { return s.Name() != *only })
		if len(allocators) == 0 {
			fmt.Fprintf(c.stderr, "bftrainer-bench: yield: unknown allocator %q\n", *only)
			return errUsage
		}
	}
	for _, r := range rows {
		c.bound(r)
		for _, s := range allocators {
			if err := c.row(ctx, r, s, false); err != nil {
				return err
			}
		}
		if *only != "" {
			continue
		}
		if err := c.row(ctx, r, alloc.Adaptive{}, true); err != nil {
			return err
		}
	}
	if *sweep <= 0 {
		return nil
	}
	for _, w := range []string{"hps-1000J", "ImageNet-imgps-1001J"} {
		if err := c.sweep(ctx, *data, summit, w, *sweep); err != nil {
			return err
		}
	}
	return nil
}

// workloadFile names the paper's workloads by their short names.
var workloadFile = map[string]string{
	"hps-1000J":            "jobs-hps-shufflenet-1000J.csv",
	"ImageNet-imgps-1001J": "jobs-ImageNet-imgps-1001J.csv",
	"ImageNet-spdup-1001J": "jobs-ImageNet-spdup-1001J.csv",
}

// readWorkload reads the paper's workload of that short name.
func readWorkload(data, name string) ([]sim.Job, error) {
	return sim.ReadWorkloadFile(filepath.Join(data, "workloads", workloadFile[name]))
}

// summitInputs are the Summit trace with the paper's workload file, as
// bftrainer replay --trace --nodes --workload takes them.
func summitInputs(data, workload string) sim.Inputs {
	return sim.Inputs{
		TracePath:    filepath.Join(data, "summit/summit-trace-events.csv.gz"),
		NodesPath:    filepath.Join(data, "summit/summit-trace-nodes.csv"),
		WorkloadPath: filepath.Join(data, "workloads", workload),
	}
}

// openSummit reads the Summit trace once, for several workloads.
func openSummit(data string) (*sim.Trace, error) {
	in := summitInputs(data, "")
	return sim.OpenTrace(in.TracePath, in.NodesPath)
}

// windowed is the row of a trace read once and a workload: the trace
// windowed at the workload's start, as bftrainer replay picks it.
func windowed(trace, workload string, tr *sim.Trace, jobs []sim.Job) (yieldRow, error) {
	r, err := sim.Inputs{Trace: tr, Jobs: jobs}.Resolve()
	if err != nil {
		return yieldRow{}, fmt.Errorf("%s %s: %w", trace, workload, err)
	}
	return yieldRow{trace, workload, r.Trace, r.Jobs}, nil
}

// rows loads the traces and workloads of the yield table.
func (c *yieldCommand) rows(data string, summit *sim.Trace) ([]yieldRow, error) {
	var rows []yieldRow
	for _, w := range []string{"hps-1000J", "ImageNet-imgps-1001J", "ImageNet-spdup-1001J"} {
		jobs, err := readWorkload(data, w)
		if err != nil {
			return nil, err
		}
		row, err := windowed("summit", w, summit, jobs)
		if err != nil {
			return nil, err
		}
		rows = append(rows, row)
	}
	theta, err := sim.OpenTrace(filepath.Join(data, "theta/theta_2022.swf"), "")
	if err != nil {
		return nil, err
	}
	week, ok := sim.BusyWeek(theta)
	if !ok {
		return nil, errors.New("theta: no busy week")
	}
	hps, err := readWorkload(data, "hps-1000J")
	if err != nil {
		return nil, err
	}
	hps = sim.ShiftWorkload(hps, week)
	fmt.Fprintf(c.stderr, "bftrainer-bench: yield: theta's first busy week starts %s\n", week.Format(time.DateTime))
	row, err := windowed("theta", "hps-1000J", theta, hps)
	if err != nil {
		return nil, err
	}
	rows = append(rows, row)
	pollux, err := sim.PolluxWorkload(filepath.Join(data, "pollux"), 1000, summit.Events[1000].Time, 2*time.Hour)
	if err != nil {
		return nil, err
	}
	row, err = windowed("summit", "pollux-1000J", summit, pollux)
	if err != nil {
		return nil, err
	}
	return append(rows, row), nil
}

// bound prints the row's lossless bound (sim.LosslessBound), a makespan no
// allocator running 10 Trainers at once beats.
func (c *yieldCommand) bound(r yieldRow) {
	h, ok := sim.LosslessBound(r.tr, r.jobs, sim.DefaultMaxTrainers)
	if !ok {
		fmt.Fprintf(c.stdout, "bound trace=%s workload=%s max_trainers=%d makespan_h=none (the trace ends first)\n", r.trace, r.workload, sim.DefaultMaxTrainers)
		return
	}
	fmt.Fprintf(c.stdout, "bound trace=%s workload=%s max_trainers=%d makespan_h=%.2f\n", r.trace, r.workload, sim.DefaultMaxTrainers, h)
}

// row replays one allocator on one row and prints its line.
func (c *yieldCommand) row(ctx context.Context, r yieldRow, s alloc.Solver, auto bool) error {
	res, err := sim.Replay(ctx, r.tr, r.jobs, sim.Options{Solver: s, AutoAdmit: auto})
	if err != nil {
		return fmt.Errorf("yield: %s %s %s: %w", r.trace, r.workload, s.Name(), err)
	}
	m := res.Summary
	maxJ := fmt.Sprint(m.MaxTrainers)
	if auto {
		maxJ = "auto"
	}
	fmt.Fprintf(c.stdout, "yield trace=%s workload=%s allocator=%s makespan_h=%.2f mean_jct_h=%.2f e_ovh=%.3f e_1node=%.3f reclaims=%d wall_s=%.2f max_trainers=%s solve_ms_p50=%.3f solve_ms_p99=%.3f finished=%d/%d\n",
		r.trace, r.workload, m.Allocator, m.MakespanH, m.MeanJCTH, m.EOvh, m.E1Node, m.Reclaims, m.WallS, maxJ, m.SolveMsP50, m.SolveMsP99, m.Finished, m.Trainers)
	return nil
}

// sweep replays a workload moved to each of n paired starts (events 1000,
// 2000, …) with adaptive, exact and heuristic, and prints adaptive's
// makespan change against the others.
func (c *yieldCommand) sweep(ctx context.Context, data string, summit *sim.Trace, workload string, n int) error {
	jobs, err := readWorkload(data, workload)
	if err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	solvers := []alloc.Solver{alloc.Adaptive{}, alloc.Exact{}, alloc.EqualShare{}}
	type job struct{ start, solver int }
	var todo []job
	for i := 1; i <= n && i*1000 < len(summit.Events); i++ {
		for k := range solvers {
			todo = append(todo, job{i * 1000, k})
		}
	}
	makespan := make(map[job]float64, len(todo))
	var mu sync.Mutex
	var first error
	work := make(chan job)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range work {
				shifted := sim.ShiftWorkload(jobs, summit.Events[j.start].Time)
				res, err := sim.Replay(ctx, summit.Window(j.start), shifted, sim.Options{Solver: solvers[j.solver]})
				mu.Lock()
				if err != nil && first == nil {
					first = fmt.Errorf("sweep: %s from event %d, %s: %w", workload, j.start, solvers[j.solver].Name(), err)
				} else if err == nil {
					makespan[j] = res.Summary.MakespanH
				}
				mu.Unlock()
			}
		}()
	}
	for _, j := range todo {
		work <- j
	}
	close(work)
	wg.Wait()
	if first != nil {
		return first
	}
	starts := len(todo) / len(solvers)
	for k := 1; k < len(solvers); k++ {
		var changes []float64
		for i := 1; i <= starts; i++ {
			a, o := makespan[job{i * 1000, 0}], makespan[job{i * 1000, k}]
			pct := 100 * (a - o) / o
			changes = append(changes, pct)
			fmt.Fprintf(c.stdout, "sweep-start trace=summit workload=%s start_event=%d versus=%s adaptive_h=%.2f other_h=%.2f change_pct=%.2f\n",
				workload, i*1000, solvers[k].Name(), a, o, pct)
		}
		mean, better := 0.0, 0
		for _, x := range changes {
			mean += x
			if x < 0 {
				better++
			}
		}
		mean /= float64(len(changes))
		fmt.Fprintf(c.stdout, "sweep trace=summit workload=%s starts=%d versus=%s mean_pct=%.2f min_pct=%.2f max_pct=%.2f better=%d/%d\n",
			workload, len(changes), solvers[k].Name(), mean, slices.Min(changes), slices.Max(changes), better, len(changes))
	}
	return nil
}
