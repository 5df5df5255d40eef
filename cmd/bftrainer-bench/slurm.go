package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/bftrainer/bftrainer/internal/lab/slurm"
)

// slurmCommand measures bftrainer as the hooks of a real Slurm cluster on
// this machine (internal/lab/slurm: one munged, one slurmctld, six
// slurmds), with Trainers owned by a throwaway user:
//
//	slurm hook_cost setting=<fast|default> mode=<none|noop|bftrainer> start_p50=<x> … alloc_p50=<y> … epilog_p50=<z> … n=<n>
//	slurm hook_cost setting=<fast|default> over=<none|noop> alloc_added_p50=<x> … epilog_added_p50=<y> …
//	slurm hooks_added_ms over=noop p50=<x> p99=<y>
//	slurm hooks_added_ms over=none p50=<x> p99=<y>
//	slurm epilog_added_ms over=<noop|none> p50=<x> p99=<y>
//	slurm hook_stages_ms context=<hook point> total_p50=<x> … act_p99=<y> n=<n>
//	slurm main_job_start_delay_ms with=<x> without=<y> …
//	slurm main_job_alloc_to_start_ms with=<x> without=<y> …
//	slurm main_job_start_delay_ms trainers=torchrun with=<x> …
//	slurm reclaim_ms p50=<x> p99=<y> …
//	slurm hook_ms context=<prolog_slurmctld|prolog_slurmd> p50=<x> p99=<y> …
//	slurm scavenger reclaim_ms=<x> main_job_start_delay_ms=<y> trainer_node_seconds=<z> …
//	slurm bftrainer reclaim_ms=<x> main_job_start_delay_ms=<y> trainer_node_seconds=<z> …
//	slurm goals hooks_added_p99_ms=<x> reclaim_speedup=<y> …
//	slurm planned_reclaim lead_s=<x> lost_s=<y> vs_surprise_lost_s=<z> moves=<m> kills=<k> …
//
// The hook cost (-cost-runs, first; measureCost in slurmcost.go) is three
// clusters side by side in the same run, the same slurm.conf but for the
// hooks — none, /bin/true in all four places, bftrainer's with its
// reconciler as a service — whose main jobs run one at a time,
// round-robin, with the lab's fast scheduler settings and then with
// Slurm's defaults (scontrol reconfigure on all three between).
//
// For the other lines, hooks on and off are the same cluster in the same run: the hook lines
// of slurm.conf are switched and `scontrol reconfigure` issued, and a
// probe job checks that every slurmd has the change. "With" main jobs
// each reclaim two nodes from one-node exec Trainers (a shell and two
// sleeps) that run on every node; "without" main jobs find the nodes
// empty. Start delay is sbatch to the job's first line (Slurm's
// scheduler passes, once a second here, dominate it); alloc to start is
// slurmctld's allocation (its log, millisecond timestamps) to the first
// line, which is what the prologs add to. reclaim_ms is the node-local
// kill the prolog records in the history (SIGKILL of the Trainer's
// process groups until confirmed gone). The scavenger comparison is
// slurm.SideBySide: the same torchrun Trainer and main job, once
// reclaimed by bftrainer, once preempted by Slurm (PreemptMode=REQUEUE,
// GraceTime=0), whose reclaim is timed in slurmctld's log from the
// preemption to the main job's allocation.
//
// The planned reclaim (-planned, last; slurm.PlannedReclaim, issue 15) is
// an elastic Trainer (train.py on bftrainer's elastic runtime) on three
// nodes and a main job planned by Slurm's backfill pass on two of them,
// run in pairs: once with the plan read (the Trainer is moved off
// before the job lands), once with it ignored (the job's prologs kill).
// lead_s is how long before the main job's first line the Trainer was
// off its nodes; lost_s and vs_surprise_lost_s the training seconds
// the change cost the Trainer with the plan and without it
// (slurm.MeasureChange, from its progress log); moves and kills the
// plan-on arms' history rows for the main job, surprise_kills the
// plan-off arms' kills.
type slurmCommand struct {
	stdout, stderr io.Writer
}

func (c *slurmCommand) Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("slurm", flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	repo := fs.String("repo", ".", "the bftrainer module's directory (lab.sh and ./cmd/bftrainer are found there)")
	runs := fs.Int("runs", 30, "main jobs per start-delay measurement, hooks on and hooks off (0: skip)")
	costRuns := fs.Int("cost-runs", 40, "main jobs per cluster and scheduler setting in the hook cost measurement (0: skip)")
	torchRuns := fs.Int("torch-runs", 8, "main jobs reclaiming a node from a torchrun Trainer (0: skip)")
	rounds := fs.Int("rounds", 1, "side-by-side rounds, bftrainer then the scavenger partition (about 2.5 minutes each; 0: skip)")
	window := fs.Duration("window", 60*time.Second, "side by side: Trainer progress is counted for this long from the main job's sbatch")
	hold := fs.Duration("hold", 20*time.Second, "side by side: how long the main job runs")
	planned := fs.Int("planned", 1, "planned reclaim: pairs of runs with the scheduler's plan read and ignored (about 2 minutes each; 0: skip)")
	keep := fs.Bool("keep", false, "keep the cluster's directory (database, logs) when done")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := slurm.Need(); err != nil {
		// make bench runs every command: a machine without Slurm skips
		// this one and says why.
		fmt.Fprintf(c.stderr, "bftrainer-bench: slurm: skipped: %v\n", err)
		return nil
	}
	root, err := filepath.Abs(*repo)
	if err != nil {
		return err
	}
	if _, err := os.Stat(slurm.LabScript(root)); err != nil {
		return fmt.Errorf("slurm: -repo %s: %w", root, err)
	}
	logf := func(format string, args ...any) {
		fmt.Fprintf(c.stderr, "bftrainer-bench: slurm: "+format+"\n", args...)
	}
	logf("building bftrainer and starting a 6-node cluster")
	co := slurm.ClusterOptions{Repo: root, Nodes: 6, Scavenger: true, Logf: logf}
	if *costRuns > 0 {
		co.Extra = slurm.CostExtra
	}
	cl, err := slurm.Up(ctx, co)
	if err != nil {
		return fmt.Errorf("slurm: %w", err)
	}
	defer func() {
		if *keep {
			logf("kept %s", cl.Dir)
		}
		if derr := cl.Down(context.Background(), *keep); derr != nil {
			logf("stopping the cluster: %v", derr)
		}
	}()
	if *costRuns > 0 {
		if err := measureCost(ctx, c.stdout, cl, logf, *costRuns); err != nil {
			logf("what the cluster says:\n%s", cl.Debug(context.Background()))
			return fmt.Errorf("slurm: hook cost: %w", err)
		}
	}
	if err := c.measure(ctx, cl, logf, *runs, *torchRuns, *rounds, *window, *hold); err != nil {
		logf("what the cluster says:\n%s", cl.Debug(context.Background()))
		return fmt.Errorf("slurm: %w", err)
	}
	if err := c.measurePlanned(ctx, cl, logf, *planned); err != nil {
		logf("what the cluster says:\n%s", cl.Debug(context.Background()))
		return fmt.Errorf("slurm: planned reclaim: %w", err)
	}
	return nil
}

// measurePlanned runs pairs of planned reclaims, plan on then off, and
// prints their line.
func (c *slurmCommand) measurePlanned(ctx context.Context, cl *slurm.Cluster, logf func(string, ...any), pairs int) error {
	if pairs <= 0 {
		return nil
	}
	var on, off []slurm.PlannedResult
	for i := 0; i < pairs; i++ {
		for _, plan := range []bool{true, false} {
			logf("planned reclaim, pair %d of %d, plan %v", i+1, pairs, plan)
			if err := cl.Reset(ctx); err != nil {
				return err
			}
			r, err := slurm.PlannedReclaim(ctx, cl, slurm.PlannedOptions{Plan: plan})
			if err != nil {
				return err
			}
			logf("plan %v: lead %.1f s, %.3f s lost, %d moves, %d kills", plan, r.Lead.Seconds(), r.Change.Lost, len(r.Moves), len(r.Kills))
			if plan {
				on = append(on, r)
			} else {
				off = append(off, r)
			}
		}
	}
	fmt.Fprintln(c.stdout, slurm.PlannedLine(on, off))
	return nil
}

func (c *slurmCommand) measure(ctx context.Context, cl *slurm.Cluster, logf func(string, ...any), runs, torchRuns, rounds int, window, hold time.Duration) error {
	if runs <= 0 {
		return nil
	}
	ex, err := measureExec(ctx, cl, logf, runs)
	if err != nil {
		return err
	}
	c.printExec(ex, runs)
	q := slurm.Quantile
	ao := delays(ex.without, true)
	addedP99 := q(delays(ex.with, true), 0.99) - q(ao, 0.99)
	if torchRuns > 0 {
		at, err := c.measureTorch(ctx, cl, logf, torchRuns)
		if err != nil {
			return err
		}
		addedP99 = max(addedP99, q(at, 0.99)-q(ao, 0.99))
	}
	var speedup float64
	if rounds > 0 {
		if speedup, err = c.measureSideBySide(ctx, cl, logf, rounds, window, hold); err != nil {
			return err
		}
	}
	fmt.Fprintf(c.stdout, "slurm goals hooks_added_p99_ms=%.1f goal_below=50 reclaim_speedup=%.1f goal_at_least=20\n", addedP99, speedup)
	return nil
}

// execRun is what the exec-Trainer measurement saw: main jobs' start
// delays with the hooks on (the reconciler spawned by them, then as a
// service) and off, the reclaims' kills, the hooks' own times and where
// each allocation-to-start went.
type execRun struct {
	with, withSvc, without []slurm.DelaySample
	kills                  []float64
	hookMs                 map[string][]float64
	path                   [5][]float64 // alloc→ctld hook, ctld hook, →node prologs, node prologs, →first line
	lost                   int          // Trainers that ended although a reclaim should only take a node
}

// measureExec puts a one-node exec Trainer on every node and measures runs
// two-node main jobs reclaiming them, with the hooks on, with the
// reconciler as a service, and with the hooks off.
func measureExec(ctx context.Context, cl *slurm.Cluster, logf func(string, ...any), runs int) (*execRun, error) {
	if err := cl.Reset(ctx); err != nil {
		return nil, err
	}
	sleepers, err := cl.NewSleepers(ctx, "bench")
	if err != nil {
		return nil, err
	}
	ready := func() (bool, error) { return sleepers.Ready(ctx) }
	if err := slurm.Poll(ctx, 2*time.Minute, ready); err != nil {
		return nil, fmt.Errorf("trainers on every node: %w", err)
	}
	startID, err := cl.LastEventID(ctx)
	if err != nil {
		return nil, err
	}
	ex := &execRun{hookMs: map[string][]float64{}}
	logf("%d main jobs with the hooks on", runs)
	if ex.with, err = slurm.StartDelays(ctx, cl, runs, 2, ready); err != nil {
		return nil, err
	}
	if ex.lost = sleepers.Lost; ex.lost > 0 {
		logf("%d of the Trainers ended although a reclaim should only take their node (README, known issues); replaced", ex.lost)
	}
	if ex.kills, err = cl.KillMs(ctx, startID); err != nil {
		return nil, err
	}
	for _, hc := range []string{"prolog_slurmctld", "prolog_slurmd"} {
		if ex.hookMs[hc], err = cl.HookMs(ctx, hc, startID); err != nil {
			return nil, err
		}
	}
	for _, smp := range ex.with {
		p, ok, err := cl.Path(ctx, smp)
		if err != nil {
			return nil, err
		}
		if ok {
			for i, d := range []time.Duration{p.ToCtldHook, p.CtldHook, p.ToNodeProlog, p.NodeProlog, p.ToFirstLine} {
				ex.path[i] = append(ex.path[i], slurm.Millis(d)...)
			}
		}
	}
	if ex.withSvc, err = withService(ctx, cl, logf, runs, ready); err != nil {
		return nil, err
	}
	if err := cl.Reset(ctx); err != nil {
		return nil, err
	}
	logf("%d main jobs with the hooks off", runs)
	if err := cl.In.SetHooks(ctx, cl.Lab, false); err != nil {
		return nil, err
	}
	ex.without, err = slurm.StartDelays(ctx, cl, runs, 2, nil)
	if herr := cl.In.SetHooks(ctx, cl.Lab, true); err == nil {
		err = herr
	}
	return ex, err
}

// withService measures main jobs with the reconciler as a service
// (hooks.spawn_reconciler = "never", as with an unprivileged SlurmUser):
// no re-plan competes with the node prologs for the CPU.
func withService(ctx context.Context, cl *slurm.Cluster, logf func(string, ...any), runs int, ready func() (bool, error)) ([]slurm.DelaySample, error) {
	logf("%d main jobs with the hooks on and the reconciler as a service", runs)
	s := cl.Settings
	s.Spawn = "never"
	if err := cl.Configure(s); err != nil {
		return nil, err
	}
	svc, err := cl.StartService(time.Second)
	if err != nil {
		return nil, err
	}
	out, err := slurm.StartDelays(ctx, cl, runs, 2, ready)
	if kerr := svc.Kill(); err == nil {
		err = kerr
	}
	return out, err
}

// printExec writes the exec measurement's lines.
func (c *slurmCommand) printExec(ex *execRun, runs int) {
	q := slurm.Quantile
	sw, so := delays(ex.with, false), delays(ex.without, false)
	aw, ao := delays(ex.with, true), delays(ex.without, true)
	fmt.Fprintf(c.stdout, "slurm main_job_start_delay_ms with=%.0f without=%.0f with_p99=%.0f without_p99=%.0f runs=%d trainers=exec hooks=scontrol-reconfigure\n",
		q(sw, 0.5), q(so, 0.5), q(sw, 0.99), q(so, 0.99), runs)
	fmt.Fprintf(c.stdout, "slurm main_job_alloc_to_start_ms with=%.1f without=%.1f with_p99=%.1f without_p99=%.1f runs=%d trainers=exec\n",
		q(aw, 0.5), q(ao, 0.5), q(aw, 0.99), q(ao, 0.99), runs)
	fmt.Fprintf(c.stdout, "slurm reclaim_ms p50=%.1f p99=%.1f n=%d trainers=exec trainers_lost=%d\n", q(ex.kills, 0.5), q(ex.kills, 0.99), len(ex.kills), ex.lost)
	for _, hc := range []string{"prolog_slurmctld", "prolog_slurmd"} {
		fmt.Fprintf(c.stdout, "slurm hook_ms context=%s p50=%.1f p99=%.1f n=%d\n", hc, q(ex.hookMs[hc], 0.5), q(ex.hookMs[hc], 0.99), len(ex.hookMs[hc]))
	}
	as := delays(ex.withSvc, true)
	fmt.Fprintf(c.stdout, "slurm main_job_alloc_to_start_ms reconciler=service with=%.1f without=%.1f with_p99=%.1f without_p99=%.1f runs=%d trainers=exec\n",
		q(as, 0.5), q(ao, 0.5), q(as, 0.99), q(ao, 0.99), runs)
	// Where the "with" main jobs' allocation-to-start went (medians).
	p := ex.path
	fmt.Fprintf(c.stdout, "slurm hook_path_ms alloc_to_prolog_slurmctld=%.1f prolog_slurmctld=%.1f to_node_prolog=%.1f node_prologs=%.1f to_first_line=%.1f n=%d\n",
		q(p[0], 0.5), q(p[1], 0.5), q(p[2], 0.5), q(p[3], 0.5), q(p[4], 0.5), len(p[0]))
}

// delays returns the samples' start delays (sbatch to first line), or
// their allocation-to-start times, in milliseconds.
func delays(ss []slurm.DelaySample, alloc bool) []float64 {
	var ds []time.Duration
	for _, s := range ss {
		if alloc {
			ds = append(ds, s.AllocToStart())
		} else {
			ds = append(ds, s.StartDelay())
		}
	}
	return slurm.Millis(ds...)
}

// measureTorch measures main jobs reclaiming a node from a torchrun
// Trainer and returns their allocation-to-start times.
func (c *slurmCommand) measureTorch(ctx context.Context, cl *slurm.Cluster, logf func(string, ...any), runs int) ([]float64, error) {
	q := slurm.Quantile
	logf("%d main jobs reclaiming a node from a torchrun Trainer", runs)
	if err := cl.Reset(ctx); err != nil {
		return nil, err
	}
	td, err := slurm.TorchStartDelays(ctx, cl, runs)
	if err != nil {
		return nil, err
	}
	tk, err := cl.KillMs(ctx, td.StartID)
	if err != nil {
		return nil, err
	}
	ts := td.Samples
	st, at := delays(ts, false), delays(ts, true)
	fmt.Fprintf(c.stdout, "slurm main_job_start_delay_ms trainers=torchrun with=%.0f with_p99=%.0f alloc_to_start_ms=%.1f alloc_to_start_p99_ms=%.1f runs=%d\n",
		q(st, 0.5), q(st, 0.99), q(at, 0.5), q(at, 0.99), len(ts))
	fmt.Fprintf(c.stdout, "slurm reclaim_ms p50=%.1f p99=%.1f n=%d trainers=torchrun trainers_lost=%d\n", q(tk, 0.5), q(tk, 0.99), len(tk), td.Lost)
	return at, nil
}

// measureSideBySide runs bftrainer and Slurm's scavenger partition side by
// side for rounds rounds and returns how many times faster bftrainer's
// reclaim is (medians).
func (c *slurmCommand) measureSideBySide(ctx context.Context, cl *slurm.Cluster, logf func(string, ...any), rounds int, window, hold time.Duration) (float64, error) {
	q := slurm.Quantile
	var bfs, scs []slurm.SideResult
	for r := 0; r < rounds; r++ {
		logf("side by side, round %d of %d", r+1, rounds)
		if err := cl.Reset(ctx); err != nil {
			return 0, err
		}
		bf, sc, err := slurm.SideBySide(ctx, cl, slurm.SideOptions{Hold: hold, Window: window})
		if err != nil {
			return 0, err
		}
		bfs, scs = append(bfs, bf), append(scs, sc)
	}
	med := map[string]float64{}
	for _, side := range []struct {
		name string
		rs   []slurm.SideResult
	}{{"scavenger", scs}, {"bftrainer", bfs}} {
		var rec, start, ns, samples []float64
		lost := 0
		for _, r := range side.rs {
			if r.Lost {
				lost++
			}
			rec = append(rec, slurm.Millis(r.Reclaim)...)
			start = append(start, slurm.Millis(r.StartDelay)...)
			ns = append(ns, r.NodeSeconds)
			samples = append(samples, r.Samples)
		}
		med[side.name] = q(rec, 0.5)
		extra := ""
		if side.name == "bftrainer" {
			extra = fmt.Sprintf(" trainers_lost=%d", lost)
		}
		fmt.Fprintf(c.stdout, "slurm %s reclaim_ms=%.0f main_job_start_delay_ms=%.0f trainer_node_seconds=%.0f trainer_samples=%.0f window_s=%.0f rounds=%d%s\n",
			side.name, q(rec, 0.5), q(start, 0.5), q(ns, 0.5), q(samples, 0.5), window.Seconds(), rounds, extra)
	}
	if med["bftrainer"] == 0 {
		return 0, nil
	}
	return med["scavenger"] / med["bftrainer"], nil
}
