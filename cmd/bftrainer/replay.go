package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/alloc/milp"
	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/sidecar"
	"github.com/bftrainer/bftrainer/sim"
)

func replayCommand() *cli.Command {
	return &cli.Command{
		Name:      "replay",
		Usage:     "replay an idle-node trace with a Trainer workload and report what the pool yields",
		ArgsUsage: " ",
		Description: `Replays a scheduler's idle-node history in memory with the same pool and
allocator code the sidecar runs live, and reports makespan, job completion
time, efficiency (E_ovh, E_1node), utilisation, rescales, reclaims and solver
time (definitions: docs/replay.md, "Replay metrics").

The trace is the Summit node-state CSV (with --nodes for host names), a
Standard Workload Format job log (its recorded schedule), or a Slurm site's
own accounting as sacct prints it (any may be gzipped):

  sacct --allusers --allocations --parsable2 --starttime 2026-11-01 \
      --endtime now --format JobID,Start,End,NodeList > month.sacct
  bftrainer replay --trace month.sacct --nodes cluster-nodes.csv

(sacct's times are read in this machine's zone: set TZ as sacct ran; with
--nodes every node of the cluster counts, even those no job used). The workload is the paper's CSV (job,model,tsub,…). Without them,
a generated two-day 1,024-node trace fitted to Summit and a built-in
workload are used, so the command runs anywhere:

  bftrainer replay
  bftrainer replay --allocator exact,heuristic,greedy

Reproduce the BFTrainer reference replayer (its step limit, node order and
initial map) on the Summit trace, from its row 1000:

  bftrainer replay --semantics reference \
      --trace summit-trace-events.csv.gz --nodes summit-trace-nodes.csv \
      --workload jobs-hps-shufflenet-1000J.csv --out runs/hps

With --schedule easy an SWF log is re-simulated with FCFS + EASY backfill,
and --plan head|all gives the allocator the scheduler's plan (the head's
reservation, or every queued job's planned start), from requested
walltimes only; the summary splits reclaims into planned moves and
surprise kills. A kill costs R_down, as a move, unless --kill-loss states
what it loses more (docs/replay.md, "The scheduler's plan"):

  bftrainer replay --trace theta_2022.swf --schedule easy --plan all \
      --kill-loss 5m --workload jobs-hps-shufflenet-1000J.csv

--out DIR writes steps.csv (one row per event, as the reference's
step-logs.csv), trainers.csv (per-Trainer completion), timeline.svg (idle
nodes and nodes per Trainer over time) and summary.json; with several
allocators each gets DIR/<allocator>/ and summary.json lists them all.
The replay starts at --from-event, by default the last event at or before
the first submit time (1000 on the Summit trace with the paper's
workloads). A progress bar is drawn on stderr when it is a terminal.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "trace", Usage: "idle-node trace `FILE` (Summit CSV, SWF or sacct --parsable2; default: generated)"},
			&cli.StringFlag{Name: "nodes", Usage: "node names `FILE` (node_idx,node_name) for a CSV or sacct trace"},
			&cli.StringFlag{Name: "workload", Usage: "Trainer workload `FILE` (paper CSV; default: built in)"},
			&cli.StringSliceFlag{Name: "allocator", Value: cli.NewStringSlice("adaptive"),
				Usage: "`NAME`s (" + oneOf(solvers().Names()) + "); repeat or comma-separate for side-by-side rows",
				Action: func(c *cli.Context, vs []string) error {
					for _, v := range vs {
						for _, n := range splitList(v) {
							if err := checkChoice(c, "allocator", solvers().Names(), n); err != nil {
								return err
							}
						}
					}
					return nil
				}},
			choiceFlag("semantics", "NAME", []string{"default", "reference"}, "default", "bftrainer's model, or the paper's replayer"),
			choiceFlag("schedule", "NAME", []string{"recorded", "easy"}, "recorded", "for an SWF log: its recorded schedule, or an FCFS + EASY-backfill re-simulation from submit times and requested walltimes"),
			choiceFlag("plan", "off|head|all", []string{"off", "on", "head", "all"}, "off", "with --schedule easy: give the allocator the scheduler's plan, as squeue --start gives it live: head (on is the same) the reservation EASY makes for the queue head; all also the starts a backfill pass plans for the queued jobs after it (up to --plan-depth), from requested walltimes only"),
			choiceFlag("plan-horizon", "NAME", []string{"none", "stable", "priced"}, "none", "with a plan: which planned nodes the allocator prices with a horizon ending at their planned start — none (moves only; less rescale loss in every replay measured), stable (a planned start kept across a new plan), priced (every planned node)"),
			&cli.DurationFlag{Name: "kill-loss", Usage: "progress (`DURATION` of training) a reclaim's kill loses beyond R_down — e.g. half a checkpoint interval; 0, the paper's model, charges a kill as a graceful shrink"},
			&cli.IntFlag{Name: "plan-depth", Value: sim.DefaultPlanDepth, Usage: "with --plan all: queued jobs planned, the head included (`N`; Slurm's bf_max_job_test)"},
			&cli.Float64Flag{Name: "plan-walltime-scale", Value: 1, Usage: "with --plan head|all: plan from requested walltimes times `X` (2: a wrong plan; the schedule itself is unchanged)"},
			&cli.Float64Flag{Name: "tfwd", Value: sim.DefaultTFwd, Usage: "`SECONDS` a decision is worth over, for the fixed-horizon allocators (exact, the MILP ones, greedy); adaptive measures its own"},
			&cli.StringFlag{Name: "max-trainers", Value: strconv.Itoa(sim.DefaultMaxTrainers), Usage: "Trainers running at once (`N`), or auto: admit the next queued Trainer when the allocator would give it nodes rather than grow the running ones"},
			formatFlag(fmtTable, fmtJSON),
			&cli.StringFlag{Name: "out", Usage: "write steps.csv, trainers.csv, timeline.svg and summary.json in `DIR`"},
			&cli.DurationFlag{Name: "cbc-limit", Value: 10 * time.Second, Usage: "`DURATION` a MILP decision (cbc, highs, gurobi) may take before the current allocation is kept"},
			&cli.IntFlag{Name: "from-event", DefaultText: "the last event at or before the first submit", Usage: "start at trace event `N`"},
			&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "`SEED` of the generated trace and built-in workload"},
			&cli.IntFlag{Name: "trainers", Value: sim.DefaultTrainers, Usage: "`N` Trainers in the built-in workload"},
			choiceFlag("curves", "MODE", []string{"given", "learned", "linear"}, "given",
				"what the allocator knows of the curves: the workload's, learned from the throughput measured at the counts each Trainer ran (accounting on the true curves), or linear from the one-node throughput"),
			&cli.BoolFlag{Name: "models", Usage: "give each Trainer its workload's model name (the model column; the Pollux-built workload's models): a learning Trainer is planned on the curve learned of the others of its model"},
			&cli.Float64Flag{Name: "curve-noise", Value: sim.DefaultCurveNoise, Usage: "relative standard deviation (`FRACTION`) of each measured throughput with --curves learned (seeded by --seed)"},
		},
		Action: func(c *cli.Context) error {
			r, err := replayInputs(c)
			if err != nil {
				return err
			}
			return runReplays(c, r)
		},
	}
}

// replayInputs maps the flags to sim.Inputs and resolves them (sim's
// replay policy: the default workload and trace, the start, the window).
func replayInputs(c *cli.Context) (*sim.Resolved, error) {
	if c.NArg() > 0 {
		return nil, usagef("replay takes no arguments (got %q); use --trace and --workload", c.Args().First())
	}
	if c.Duration("kill-loss") < 0 {
		return nil, usagef("--kill-loss %v, want ≥ 0", c.Duration("kill-loss"))
	}
	in := sim.Inputs{
		TracePath: c.String("trace"), NodesPath: c.String("nodes"), WorkloadPath: c.String("workload"),
		Schedule: c.String("schedule"), Plan: c.String("plan"), PlanDepth: c.Int("plan-depth"),
		PlanWalltimeScale: c.Float64("plan-walltime-scale"), Seed: c.Uint64("seed"), Trainers: c.Int("trainers"),
	}
	if c.IsSet("from-event") {
		from := c.Int("from-event")
		in.FromEvent = &from
	}
	r, err := in.Resolve()
	switch {
	case errors.Is(err, sim.ErrInputs):
		return nil, usageError{err}
	case errors.Is(err, sim.ErrTraceFormat):
		return nil, withHint(err, "a trace is the Summit CSV (event_idx,time,n_idle,joined,left), an SWF job log, or sacct --parsable2 output with its header")
	}
	return r, err
}

// runReplays replays once per allocator and writes the summaries and files.
func runReplays(c *cli.Context, r *sim.Resolved) error {
	format := c.String("format")
	sem, err := alloc.ParseSemantics(c.String("semantics"))
	if err != nil {
		return usageError{err}
	}
	curveNoise := c.Float64("curve-noise")
	if !(curveNoise >= 0) || curveNoise > 1 {
		return usagef("--curve-noise %v: want a fraction in [0, 1]", curveNoise)
	}
	if curveNoise == 0 {
		curveNoise = -1 // none (sim reads 0 as its default)
	}
	tfwd := c.Float64("tfwd")
	if !(tfwd > 0) || math.IsInf(tfwd, 1) {
		return usagef("--tfwd %v: want a number of seconds > 0", tfwd)
	}
	maxJ, auto, err := parseMaxTrainers(c.String("max-trainers"))
	if err != nil {
		return usageError{err}
	}
	if auto && sem == alloc.Reference {
		return usagef("--max-trainers auto needs --semantics default (the reference admits up to maxJ)")
	}
	var names []string
	for _, v := range c.StringSlice("allocator") {
		names = append(names, splitList(v)...)
	}
	ss := make([]alloc.Solver, len(names))
	for i, n := range names {
		if ss[i], err = solvers().New(n, sidecar.SolverSettings{TimeLimit: c.Duration("cbc-limit")}); err != nil {
			return usageError{err}
		}
	}
	out := c.String("out")
	if out != "" {
		if err := os.MkdirAll(out, 0o755); err != nil {
			return fmt.Errorf("output directory: %w", err)
		}
	}
	var sums []sim.Summary
	for i, s := range ss {
		dir := out
		if out != "" && len(ss) > 1 {
			dir = filepath.Join(out, names[i])
		}
		opt := sim.Options{Solver: s, Semantics: sem, TFwd: tfwd, MaxTrainers: maxJ, AutoAdmit: auto, Plan: r.Planned, PlanHorizon: planHorizon(c.String("plan-horizon")), KillLoss: c.Duration("kill-loss"),
			Curves: pool.CurveMode(c.String("curves")), CurveNoise: curveNoise, CurveSeed: c.Uint64("seed"), Models: c.Bool("models")}
		if isTerminal(c.App.ErrWriter) {
			opt.Progress = sim.ProgressBar(c.App.ErrWriter, "replay "+names[i])
		}
		res, err := r.Replay(c.Context, opt, dir)
		if errors.Is(err, milp.ErrBackendAbsent) {
			return withHint(err, "install it as the message says, or replay with another --allocator (adaptive and exact need nothing)")
		}
		if err != nil {
			return err
		}
		if i == 0 {
			for _, w := range r.Warnings(res.Summary) {
				say(c.App.ErrWriter, "warning: %s", w.Text)
				if w.Hint != "" {
					say(c.App.ErrWriter, "hint: %s", w.Hint)
				}
			}
		}
		if n := res.Summary.SolverErrors; n > 0 {
			say(c.App.ErrWriter, "warning: %s failed at %d decision(s), which kept the allocation as the live reconciler would; the first: %s",
				names[i], n, res.Summary.FirstSolverError)
		}
		sums = append(sums, res.Summary)
	}
	if out != "" {
		if err := sim.WriteFile(filepath.Join(out, "summary.json"), func(w io.Writer) error { return sim.WriteSummaryJSON(w, sums) }); err != nil {
			return err
		}
	}
	if format == fmtJSON {
		err = sim.WriteSummaryJSON(c.App.Writer, sums)
	} else {
		err = sim.WriteSummaryTable(c.App.Writer, sums)
		say(c.App.ErrWriter, "%s", summaryLegend)
	}
	if err == nil && out != "" {
		sayWritten(c.App.ErrWriter, out, names)
	}
	return err
}

// summaryLegend reads the summary table's columns in one line.
const summaryLegend = "columns: finished = Trainers done/all; makespan_h, mean_jct_h = hours to the last completion, " +
	"mean hours from submit to completion; e_ovh = samples net of rescale and reclaim losses / gross; " +
	"e_1node = work per node-second against one dedicated node; utilisation = node-hours used / offered; " +
	"rescales, reclaims, events replayed; solve_ms_p50/p99 per decision; wall_s (docs/replay.md, \"Replay metrics\")"

// sayWritten tells where the replay's files are.
func sayWritten(w io.Writer, out string, allocators []string) {
	if abs, err := filepath.Abs(out); err == nil {
		out = abs
	}
	dirs := out + "/"
	if len(allocators) > 1 {
		dirs = out + "/{" + strings.Join(allocators, ",") + "}/"
	}
	say(w, "wrote %s: steps.csv (a row per event), trainers.csv (a row per Trainer), timeline.svg (node use over time); and %s",
		dirs, filepath.Join(out, "summary.json"))
}

// parseMaxTrainers reads --max-trainers: a positive count, or auto.
func parseMaxTrainers(v string) (n int, auto bool, err error) {
	if strings.TrimSpace(v) == "auto" {
		return 0, true, nil
	}
	n, err = strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n <= 0 {
		return 0, false, fmt.Errorf("--max-trainers %q: want a positive number of Trainers, or auto", v)
	}
	return n, false, nil
}

// isTerminal reports whether w is a terminal (progress bars go only there).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// planHorizon is --plan-horizon as the pool takes it.
func planHorizon(name string) pool.PlanHorizon {
	if name == "none" {
		return pool.PlanUnpriced
	}
	return pool.PlanHorizon(name)
}
