package slurm_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/internal/lab/slurm"
	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/store"
	"github.com/bftrainer/bftrainer/trainer/trainertest"
)

// up starts the cluster every scenario shares: 6 nodes (slab1..slab6),
// bftrainer as all four hooks, Slurm's own scavenger partition beside
// main (scenario 7; main jobs never touch it otherwise), Trainers owned
// by a throwaway user. Everything is stopped by PID when the test ends,
// failed or not, and before the test binary's own deadline.
func up(t *testing.T) *slurm.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a real Slurm cluster and real torchrun Trainers (several minutes)")
	}
	if err := slurm.Need(); err != nil {
		t.Skip(err)
	}
	ctx := context.Background()
	c, err := slurm.Up(ctx, slurm.ClusterOptions{Repo: trainertest.RepoRoot(t), Nodes: 6, Scavenger: true, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// BFTS_KEEP=1 keeps the directory of a failed run (database, logs).
		keep := t.Failed() && os.Getenv("BFTS_KEEP") == "1"
		if keep {
			t.Logf("kept %s", c.Dir)
		}
		if err := c.Down(context.Background(), keep); err != nil {
			t.Errorf("stopping the cluster: %v", err)
		}
	})
	// A test killed by -timeout runs no cleanup: stop the cluster (and
	// every process of ours) a little before that, so that nothing
	// outlives the test binary.
	if d, ok := t.Deadline(); ok && time.Until(d) > time.Minute {
		timer := time.AfterFunc(time.Until(d)-20*time.Second, func() {
			fmt.Println("slurm_test: the test deadline is near; stopping the cluster")
			c.Down(context.Background(), false)
		})
		t.Cleanup(func() { timer.Stop() })
	}
	return c
}

// debugOnFailure logs what a failed scenario needs to be understood from
// a CI log: the daemons' logs, the hooks' log, the history.
func debugOnFailure(t *testing.T, c *slurm.Cluster) {
	t.Helper()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("debug:\n%s", c.Debug(context.Background()))
		}
	})
}

// stopKilled reports whether a runner's stop action killed something: its
// note (the node agent's kill report) names a launch cgroup killed with
// its pids (cgroup.kill, where containment is by cgroup) or a process or
// group sent SIGKILL (without cgroups); "nothing running" is neither.
func stopKilled(detail json.RawMessage) bool {
	var d struct{ Note string }
	if json.Unmarshal(detail, &d) != nil {
		return false
	}
	return strings.Contains(d.Note, " cgroup.kill ") || strings.Contains(d.Note, "SIGKILL to ")
}

// must returns a call's value or fails the test with its error:
// must[T](t)(f()).
func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// nodes returns the lab's node names from..to (1-based, inclusive).
func nodes(c *slurm.Cluster, from, to int) []string { return slices.Clone(c.Lab.Nodes[from-1 : to]) }

// noDrain fails the test if any node is drained, draining or down: a hook
// that exits non-zero or hangs past PrologEpilogTimeout drains its node.
func noDrain(t *testing.T, c *slurm.Cluster) {
	t.Helper()
	bad, err := c.Lab.Drained(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) > 0 {
		t.Errorf("nodes drained or down: %v", bad)
	}
}

// TestSlurm runs the scenarios of issues 6 (1-7) and 9 (8-11) on one real Slurm cluster, in
// order: harvest, reclaim and return share one torchrun Trainer; the
// others start from a reset pool.
func TestSlurm(t *testing.T) {
	c := up(t)
	ctx := context.Background()
	var (
		tr     *slurm.Torch
		hold   *slurm.Job // holds the last two nodes during 1-3
		main   *slurm.Job
		onMain []string
	)
	four := nodes(c, 1, 4)

	// 1. Harvest: `bftrainer sync` finds the idle nodes, a torchrun
	// Trainer grows onto them.
	harvested := t.Run("1-harvest", func(t *testing.T) {
		trainertest.NeedTorch(t)
		debugOnFailure(t, c)
		// A main job holds the last two nodes, so that exactly four are
		// idle to find.
		hold = must[*slurm.Job](t)(c.Lab.Submit(ctx, slurm.JobSpec{Nodes: 2, NodeList: strings.Join(nodes(c, 5, 6), ","), Held: true, Name: "hold"}))
		must[slurm.JobReport](t)(hold.WaitChecked(ctx, time.Minute))
		out := must[string](t)(c.Run(ctx, "sync"))
		if want := "joined 4 slab[1-4]\n"; !strings.HasPrefix(out, want) {
			t.Fatalf("sync printed %q, want it to start with %q", out, want)
		}
		if err := c.In.WaitPoolMatches(ctx, c.Lab, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		submitted := time.Now()
		var err error
		if tr, err = c.SubmitTorch(ctx, "tr", 1, 4); err != nil {
			t.Fatal(err)
		}
		r, err := slurm.WaitRounds(ctx, tr.Log, submitted, 3, 3*time.Minute, slurm.OnNodes(four...))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("the Trainer trains at world 4 on %v, %.1f s after its submission", r.Nodes, r.At.Sub(submitted).Seconds())
		held := must[map[string][]string](t)(c.In.Held(ctx))
		if got := held[tr.Name]; !slices.Equal(got, four) {
			t.Errorf("the pool says the Trainer holds %v, want %v", got, four)
		}
	})

	// 2. Reclaim: a main job takes two of the Trainer's nodes; the node
	// prologs kill the Trainer there before the job runs; the job itself
	// finds nothing of ours on its nodes; the Trainer carries on on the
	// other two.
	reclaimed := harvested && t.Run("2-reclaim", func(t *testing.T) {
		debugOnFailure(t, c)
		var err error
		main, err = c.Lab.Submit(ctx, slurm.JobSpec{Nodes: 2, Held: true})
		if err != nil {
			t.Fatal(err)
		}
		r, err := main.WaitChecked(ctx, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		info := must[slurm.JobInfo](t)(c.Lab.Job(ctx, main.ID))
		onMain = must[[]string](t)(info.Nodes())
		for _, n := range onMain {
			if !slices.Contains(four, n) {
				t.Fatalf("the main job runs on %v; only %v were free", onMain, four)
			}
			if p := r.Procs[n]; p != "none" {
				t.Errorf("the main job found Trainer processes on its node %s: %s", n, p)
			}
		}
		t.Logf("main job %s on %v: first line %.0f ms after sbatch", main.ID, onMain, ms(main.StartDelay(r)))
		// The Trainer did run there: each node prolog killed its agent.
		kills := must[[]store.Event](t)(c.In.Events(ctx, store.Filter{Kinds: []store.Kind{store.KindKill}, Job: main.ID}))
		killed := map[string]float64{}
		for _, k := range kills {
			if k.Error != "" {
				t.Errorf("kill on %v: %s", k.Nodes, k.Error)
			}
			for _, n := range k.Nodes {
				killed[n] += k.Value
				t.Logf("prolog on %s killed %.0f process group(s) in %.1f ms", n, k.Value, k.Ms)
			}
		}
		// Who killed it: the node's prolog, or (a race it may win) the
		// re-plan the controller's prolog started, stopping the Trainer on
		// the nodes it no longer has. Either way before the job ran there.
		stops := must[[]store.Event](t)(c.In.Events(ctx, store.Filter{Kinds: []store.Kind{store.KindAction}, Trainer: tr.Name, Since: main.Submitted}))
		for _, n := range onMain {
			if killed[n] >= 1 {
				continue
			}
			byRunner := false
			for _, e := range stops {
				byRunner = byRunner || (e.Context == "stop" && slices.Equal(e.Nodes, []string{n}) && stopKilled(e.Detail))
			}
			if !byRunner {
				t.Errorf("neither the prolog nor the runner killed the Trainer on %s (kills %v): was it running there?", n, killed)
			} else {
				t.Logf("on %s the re-plan stopped the Trainer before the node prolog ran", n)
			}
		}
		rest := slices.DeleteFunc(slices.Clone(four), func(n string) bool { return slices.Contains(onMain, n) })
		rd, err := slurm.WaitRounds(ctx, tr.Log, r.First, 3, 2*time.Minute, slurm.OnNodes(rest...))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("the Trainer trains at world 2 on %v, %.1f s after the main job started", rd.Nodes, rd.At.Sub(r.First).Seconds())
		if ps := must[[]slurm.Proc](t)(c.In.TrainerProcs(onMain...)); len(ps) > 0 {
			t.Errorf("Trainer processes came back on the main job's nodes: %+v", ps)
		}
		noDrain(t, c)
	})

	// 3. Return: the main job ends; its nodes rejoin the pool only once
	// exactly idle; the Trainer grows back.
	t.Run("3-return", func(t *testing.T) {
		if !reclaimed {
			t.Skip("needs 2-reclaim")
		}
		debugOnFailure(t, c)
		released := time.Now()
		if err := main.Release(); err != nil {
			t.Fatal(err)
		}
		info, err := main.WaitEnded(ctx, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		r := must[slurm.JobReport](t)(main.Report())
		if bad := slurm.Normal(info, r); bad != "" {
			t.Errorf("main job %s: %s", main.ID, bad)
		}
		rg, err := slurm.WaitRounds(ctx, tr.Log, released, 3, 2*time.Minute, slurm.OnNodes(four...))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("the Trainer trains at world 4 again, %.1f s after the main job was let go", rg.At.Sub(released).Seconds())
		// Exactly idle first: each node rejoined after its own epilog had
		// finished (while it runs the node is COMPLETING, and sinfo -t
		// idle would already list it).
		hooks := must[map[string][]store.Event](t)(c.HookEvents(ctx, main.ID))
		if len(hooks["epilog_slurmctld"]) != 1 {
			t.Errorf("epilog_slurmctld recorded %d times, want 1", len(hooks["epilog_slurmctld"]))
		}
		epilogEnd := map[string]time.Time{}
		for _, e := range hooks["epilog_slurmd"] {
			epilogEnd[localNode(e)] = e.At.Add(time.Duration(e.Ms * float64(time.Millisecond)))
		}
		pn := must[map[string]pool.Node](t)(c.In.PoolNodes(ctx))
		for _, n := range onMain {
			end, ok := epilogEnd[n]
			if !ok {
				t.Errorf("no epilog recorded on %s", n)
				continue
			}
			if since := pn[n].Since; since.Before(end) {
				t.Errorf("%s rejoined the pool at %s, before its epilog ended at %s", n, since.Format("15:04:05.000"), end.Format("15:04:05.000"))
			} else {
				t.Logf("%s: epilog ended %s, idle in the pool from %s (+%.0f ms)", n, end.Format("15:04:05.000"), since.Format("15:04:05.000"), ms(since.Sub(end)))
			}
		}
		noDrain(t, c)
	})

	// 4. Storm: 20 main jobs of 1-4 nodes at once while Trainers run.
	t.Run("4-storm", func(t *testing.T) {
		debugOnFailure(t, c)
		if hold != nil {
			hold.Release()
			must[slurm.JobInfo](t)(hold.WaitEnded(ctx, time.Minute))
		} else {
			reset(t, c) // run alone (go test -run TestSlurm/4-storm)
		}
		// The torchrun Trainer of 1-3 if it runs, and one-node Trainers
		// until every node runs one.
		held := must[map[string][]string](t)(c.In.Held(ctx))
		busy := 0
		for _, ns := range held {
			busy += len(ns)
		}
		for i := busy; i < len(c.Lab.Nodes); i++ {
			must[string](t)(c.SubmitSleeper(ctx, fmt.Sprintf("storm%d", i)))
		}
		if err := slurm.Poll(ctx, 2*time.Minute, c.SleepersReady); err != nil {
			t.Fatalf("not every node runs a Trainer: %v", err)
		}
		before := must[[]string](t)(c.Active(ctx))
		startID := must[int64](t)(c.LastEventID(ctx))
		sizes := []int{1, 3, 2, 4, 1, 2, 3, 1, 4, 2, 1, 3, 2, 2, 4, 1, 3, 1, 2, 4}
		jobs := make([]*slurm.Job, len(sizes))
		began := time.Now()
		for i, n := range sizes {
			jobs[i] = must[*slurm.Job](t)(c.Lab.Submit(ctx, slurm.JobSpec{Nodes: n, Hold: time.Duration(1+i%3) * time.Second, Name: fmt.Sprintf("storm%d", i)}))
		}
		var delays []float64
		for i, j := range jobs {
			info, err := j.WaitEnded(ctx, 5*time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			r := must[slurm.JobReport](t)(j.Report())
			if bad := slurm.Normal(info, r); bad != "" {
				t.Errorf("storm job %s (-N %d): %s", j.ID, sizes[i], bad)
			}
			if !r.First.IsZero() {
				delays = append(delays, ms(j.StartDelay(r)))
			}
			// No lost event: every hook ran once per job (the node hooks
			// once per node) and each recorded itself exactly once.
			recordedOnce(t, c, j, info)
		}
		t.Logf("%d jobs done in %.1f s; sbatch to first line p50 %.0f ms, max %.0f ms", len(jobs), time.Since(began).Seconds(),
			slurm.Quantile(delays, 0.5), slurm.Quantile(delays, 1))
		// No job requeued: Restarts=0 above, and slurmctld never logged a
		// requeue.
		log := must[string](t)(c.Lab.CtldLog())
		for _, line := range strings.Split(log, "\n") {
			if strings.Contains(strings.ToLower(line), "requeue") {
				t.Errorf("slurmctld: %s", line)
			}
		}
		noDrain(t, c)
		// The pool ends in line with sinfo: every node idle again, and the
		// Trainers back on them.
		if err := c.In.WaitPoolMatches(ctx, c.Lab, 2*time.Minute); err != nil {
			t.Error(err)
		}
		// The Trainers lived through it: a reclaim takes nodes from a
		// Trainer, it never ends it.
		after := must[[]string](t)(c.Active(ctx))
		for _, name := range before {
			if !slices.Contains(after, name) {
				end := must[[]store.Event](t)(c.In.Events(ctx, store.Filter{Kinds: []store.Kind{store.KindEnd}, Trainer: name}))
				t.Errorf("Trainer %s ended during the storm: %s", name, eventDetails(end))
			}
		}
		if err := c.TrainersMatchPool(ctx, 2*time.Minute); err != nil {
			t.Error(err)
		}
		hookMs := must[[]float64](t)(c.HookMs(ctx, "prolog_slurmctld", startID))
		killMs := must[[]float64](t)(c.KillMs(ctx, startID))
		t.Logf("storm: prolog_slurmctld p50 %.1f ms p99 %.1f ms (%d); node kills p50 %.1f ms p99 %.1f ms (%d)",
			slurm.Quantile(hookMs, 0.5), slurm.Quantile(hookMs, 0.99), len(hookMs),
			slurm.Quantile(killMs, 0.5), slurm.Quantile(killMs, 0.99), len(killMs))
	})

	// 5. Fail open: whatever breaks inside bftrainer, main jobs start and
	// finish normally, no node is drained, and the error is logged.
	t.Run("5-fail-open", func(t *testing.T) { failOpen(t, c) })

	// 6. Missed events: the reconciler killed, a slurmd crashed and
	// restarted, jobs meanwhile; `bftrainer sync` brings the pool back in
	// line with sinfo.
	t.Run("6-missed-events", func(t *testing.T) { missedEvents(t, c) })

	// 7. Side by side: the same main job against the same Trainer, with
	// bftrainer's hooks and with Slurm's own scavenger partition.
	t.Run("7-side-by-side", func(t *testing.T) { sideBySide(t, c) })

	// 8. Faults (issue 9): the database read-only, its disk full, the
	// database corrupt, the reconciler killed -9 mid round, with Trainers
	// running: main jobs run normally, no Trainer beside them, no event
	// missing once the fault is cleared.
	t.Run("8-faults", func(t *testing.T) { faults(t, c) })

	// 9-11. A sync whose snapshot races a job's start; a CLI command's
	// round while a released node is still completing; a configuration
	// that does not load while a job reclaims a Trainer's node.
	t.Run("9-sync-races-a-leave", func(t *testing.T) { syncRacingLeave(t, c) })
	t.Run("10-cli-round-pending-release", func(t *testing.T) { cliRoundPending(t, c) })
	t.Run("11-config-unloadable-during-reclaim", func(t *testing.T) { unloadableConfig(t, c) })
}

// reset brings the cluster to a known state or stops the test.
func reset(t *testing.T, c *slurm.Cluster) {
	t.Helper()
	if err := c.Reset(context.Background()); err != nil {
		t.Fatalf("reset: %v", err)
	}
}

// runMain submits main jobs, waits until they end, and checks that each
// ran normally: completed with exit 0, never requeued, and found no
// Trainer process on its nodes.
func runMain(t *testing.T, c *slurm.Cluster, specs ...slurm.JobSpec) []*slurm.Job {
	t.Helper()
	ctx := context.Background()
	var jobs []*slurm.Job
	for _, s := range specs {
		jobs = append(jobs, must[*slurm.Job](t)(c.Lab.Submit(ctx, s)))
	}
	for _, j := range jobs {
		info, err := j.WaitEnded(ctx, 3*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		r := must[slurm.JobReport](t)(j.Report())
		if bad := slurm.Normal(info, r); bad != "" {
			t.Errorf("main job %s: %s", j.ID, bad)
		} else {
			t.Logf("main job %s on %s ran normally; first line %.0f ms after sbatch", j.ID, info["NodeList"], ms(j.StartDelay(r)))
		}
	}
	noDrain(t, c)
	return jobs
}

// logSince returns what was appended to a log file after offset.
func logSince(t *testing.T, path string, offset int64) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if int64(len(b)) < offset {
		return string(b)
	}
	return string(b[offset:])
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// wantLogged fails unless every want appears in what the hooks logged.
func wantLogged(t *testing.T, logged string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(logged, w) {
			t.Errorf("the hooks' log lacks %q; it has:\n%s", w, logged)
		}
	}
}

// sleepersEverywhere puts a one-node Trainer on every node.
func sleepersEverywhere(t *testing.T, c *slurm.Cluster, tag string) {
	t.Helper()
	ctx := context.Background()
	for i := range c.Lab.Nodes {
		must[string](t)(c.SubmitSleeper(ctx, fmt.Sprintf("%s%d", tag, i)))
	}
	if err := slurm.Poll(ctx, 2*time.Minute, c.SleepersReady); err != nil {
		t.Fatalf("not every node runs a Trainer: %v", err)
	}
}

func failOpen(t *testing.T, c *slurm.Cluster) {
	ctx := context.Background()
	two := slurm.JobSpec{Nodes: 2, Hold: time.Second}
	one := slurm.JobSpec{Nodes: 1, Hold: time.Second}

	// A configuration that does not validate (an unknown key): the hooks
	// log it to the hooks.log it names and leave. Without a trustworthy
	// configuration they know no registry either, so no Trainer runs
	// here (see the README: a broken configuration stops reclaims).
	t.Run("config-invalid", func(t *testing.T) {
		debugOnFailure(t, c)
		reset(t, c)
		s := c.Settings
		s.Extra = "no_such_key = 1"
		if err := c.Configure(s); err != nil {
			t.Fatal(err)
		}
		off := fileSize(c.In.HooksLog)
		runMain(t, c, two, one)
		wantLogged(t, logSince(t, c.In.HooksLog, off), "hook: config "+c.In.Config+": unknown key trainer.no_such_key")
	})

	// A configuration that does not parse: the hooks cannot know their log
	// either, and write to the binary's built-in hooks.log (this install's
	// FallbackLog, compiled in; /var/log/bftrainer/hooks.log in a release).
	t.Run("config-unparsable", func(t *testing.T) {
		debugOnFailure(t, c)
		reset(t, c)
		sysLog := c.In.FallbackLog
		off := fileSize(sysLog)
		if err := c.Configure(slurm.Settings{Raw: "database = \"/nonexistent/db\"\n[[[ this is not TOML\n"}); err != nil {
			t.Fatal(err)
		}
		runMain(t, c, two, one)
		wantLogged(t, logSince(t, sysLog, off), "hook: config "+c.In.Config+":")
	})

	// The solver's binary missing (pool.solver = "cbc", cbc not on the
	// reconciler's PATH): the decision is recorded as failed, the
	// allocation kept, and the hooks never notice (they do not solve).
	t.Run("solver-missing", func(t *testing.T) {
		debugOnFailure(t, c)
		reset(t, c)
		s := c.Settings
		s.Solver, s.Spawn = "cbc", "never" // the hooks' reconciler gets a fixed PATH, with cbc
		if err := c.Configure(s); err != nil {
			t.Fatal(err)
		}
		startID := must[int64](t)(c.LastEventID(ctx))
		name := c.In.Name("nocbc")
		args := []string{"trainer", "submit", "--name", name, "--launcher", "exec", "--min", "1", "--max", "1", "--curve", "1:10",
			"--workdir", c.In.Work, "--", "/bin/sleep", "100000"}
		if c.User != nil {
			must[string](t)(c.In.RunAs(ctx, c.User, args...))
		} else {
			must[string](t)(c.Run(ctx, args...))
		}
		noSolver := []string{"PATH=/nonexistent"}
		must[string](t)(c.In.RunEnv(ctx, noSolver, "reconcile"))
		runMain(t, c, two, one)
		must[string](t)(c.In.RunEnv(ctx, noSolver, "reconcile"))
		solves := must[[]store.Event](t)(c.In.Events(ctx, store.Filter{Kinds: []store.Kind{store.KindSolve}, AfterID: startID}))
		failed := 0
		for _, e := range solves {
			if strings.Contains(e.Error, "cbc") {
				failed++
			}
		}
		if failed == 0 {
			t.Errorf("no failed solve naming cbc recorded: %s", eventDetails(solves))
		}
		if held := must[map[string][]string](t)(c.In.Held(ctx)); len(held[name]) > 0 {
			t.Errorf("the Trainer got nodes %v without a solver", held[name])
		}
		// With the solver back, the same pool allocates.
		s.Solver, s.Spawn = "exact", ""
		if err := c.Configure(s); err != nil {
			t.Fatal(err)
		}
		must[string](t)(c.Run(ctx, "reconcile"))
		if held := must[map[string][]string](t)(c.In.Held(ctx)); len(held[name]) != 1 {
			t.Errorf("with the exact solver the Trainer holds %v, want one node", held[name])
		}
	})

	// The ssh transport with sshd down: starting and stopping Trainers on
	// the node fails (recorded, retried), while the reclaim itself is the
	// node's own prolog, which needs no ssh.
	t.Run("sshd-down", func(t *testing.T) {
		debugOnFailure(t, c)
		reset(t, c)
		addrs := map[string]string{}
		for i, n := range c.Lab.Nodes {
			addrs[n] = fmt.Sprintf("127.0.0.%d", i+2)
		}
		sshd := trainertest.StartSSHD(t, addrs)
		s := c.Settings
		s.Transport, s.SSHConfig = "ssh", sshd.Config
		if err := c.Configure(s); err != nil {
			t.Fatal(err)
		}
		// Back to the local transport while sshd still runs.
		t.Cleanup(func() {
			if err := c.Reset(ctx); err != nil {
				t.Errorf("reset: %v", err)
			}
		})
		a := must[string](t)(c.SubmitSleeper(ctx, "ssha"))
		must[string](t)(c.SubmitSleeper(ctx, "sshb"))
		if err := c.TrainersMatchPool(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
		on := must[map[string][]string](t)(c.In.Held(ctx))[a]
		if len(on) != 1 {
			t.Fatalf("Trainer %s holds %v, want one node", a, on)
		}
		startID := must[int64](t)(c.LastEventID(ctx))
		sshd.Stop()
		runMain(t, c, slurm.JobSpec{Nodes: 1, NodeList: on[0], Hold: time.Second}, two)
		var unreachable []store.Event
		err := slurm.Poll(ctx, time.Minute, func() (bool, error) {
			evs, err := c.In.Events(ctx, store.Filter{Kinds: []store.Kind{store.KindAction}, AfterID: startID})
			unreachable = slices.DeleteFunc(evs, func(e store.Event) bool { return !strings.Contains(e.Error, "unreachable") })
			return len(unreachable) > 0, err
		})
		if err != nil {
			t.Errorf("no unreachable node recorded in the history: %v", err)
		} else {
			t.Logf("recorded: %s", eventDetails(unreachable[:1]))
		}
		// sshd back: the next round catches up.
		sshd.Start()
		must[string](t)(c.Run(ctx, "reconcile"))
		if err := c.TrainersMatchPool(ctx, time.Minute); err != nil {
			t.Error(err)
		}
	})
}

func missedEvents(t *testing.T, c *slurm.Cluster) {
	debugOnFailure(t, c)
	ctx := context.Background()
	reset(t, c)
	sleepersEverywhere(t, c, "miss")
	// The reconciler service, then its death: hooks go on recording, but
	// nothing folds their events into the pool.
	s := c.Settings
	s.Spawn = "never"
	if err := c.Configure(s); err != nil {
		t.Fatal(err)
	}
	watch := exec.Command(c.In.Bin, "reconcile", "--watch", "--interval", "1s")
	watch.Env = c.Lab.Env()
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { watch.Process.Kill(); watch.Wait() })
	if err := c.TrainersMatchPool(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := watch.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	watch.Wait()
	// A job that holds two nodes, a slurmd that crashes (Slurm notices at
	// its next contact: a reconfigure makes that now), a short job.
	long := must[*slurm.Job](t)(c.Lab.Submit(ctx, slurm.JobSpec{Nodes: 2, Held: true, Name: "long"}))
	must[slurm.JobReport](t)(long.WaitChecked(ctx, time.Minute))
	crashed := c.Lab.Nodes[len(c.Lab.Nodes)-1]
	if err := c.Lab.StopNode(ctx, crashed, true); err != nil {
		t.Fatal(err)
	}
	must[string](t)(c.Lab.Output(ctx, "scontrol", "reconfigure"))
	if err := slurm.Poll(ctx, time.Minute, func() (bool, error) {
		st, err := c.Lab.NodeStates(ctx)
		return st[crashed] != "idle", err
	}); err != nil {
		t.Fatalf("Slurm did not notice %s's slurmd is gone: %v", crashed, err)
	}
	runMain(t, c, slurm.JobSpec{Nodes: 1, Hold: time.Second})
	if d := must[string](t)(c.In.PoolMismatch(ctx, c.Lab)); d == "" {
		t.Fatal("the pool matches sinfo already: nothing was missed")
	} else {
		t.Logf("before sync: %s", d)
	}
	out := must[string](t)(c.Run(ctx, "sync"))
	t.Logf("sync: %s", strings.ReplaceAll(strings.TrimSpace(out), "\n", "; "))
	if err := c.In.WaitPoolMatches(ctx, c.Lab, 30*time.Second); err != nil {
		t.Error(err)
	}
	if err := c.TrainersMatchPool(ctx, time.Minute); err != nil {
		t.Error(err)
	}
	// The node back, the long job over: still nobody reconciles until
	// sync, which brings every node back.
	if err := c.Lab.StartNode(ctx, crashed); err != nil {
		t.Fatal(err)
	}
	long.Release()
	info := must[slurm.JobInfo](t)(long.WaitEnded(ctx, time.Minute))
	if bad := slurm.Normal(info, must[slurm.JobReport](t)(long.Report())); bad != "" {
		t.Errorf("long job %s: %s", long.ID, bad)
	}
	if err := c.Lab.WaitIdle(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	out = must[string](t)(c.Run(ctx, "sync"))
	t.Logf("sync: %s", strings.ReplaceAll(strings.TrimSpace(out), "\n", "; "))
	if err := c.In.WaitPoolMatches(ctx, c.Lab, 30*time.Second); err != nil {
		t.Error(err)
	}
	if err := c.TrainersMatchPool(ctx, time.Minute); err != nil {
		t.Error(err)
	}
	noDrain(t, c)
}

func sideBySide(t *testing.T, c *slurm.Cluster) {
	trainertest.NeedTorch(t)
	debugOnFailure(t, c)
	ctx := context.Background()
	reset(t, c)
	bf, scav, err := slurm.SideBySide(ctx, c, slurm.SideOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []slurm.SideResult{bf, scav} {
		t.Logf("%-9s main job %s: sbatch to first line %.0f ms; reclaim %.0f ms; Trainer %.0f node-s and %.0f samples in the %v window",
			r.Approach, r.Main.ID, ms(r.StartDelay), ms(r.Reclaim), r.NodeSeconds, r.Samples, 60*time.Second)
	}
	// Slurm's way requeued the Trainer job; bftrainer's kept training on
	// the nodes the main job did not take.
	if scav.Restarts == "" || scav.Restarts == "0" {
		t.Errorf("the scavenger Trainer job was not requeued (Restarts=%q)", scav.Restarts)
	}
	during := func(r slurm.SideResult) float64 {
		steps := must[[]slurm.Step](t)(slurm.ReadSteps(r.TrainerLog))
		return slurm.NodeSeconds(steps, r.Report.First, r.Report.End)
	}
	if ns := during(bf); ns <= 0 {
		t.Errorf("the bftrainer Trainer did not train while the main job ran")
	} else {
		t.Logf("while the main job ran: bftrainer's Trainer %.0f node-s, the scavenger's %.0f node-s", ns, during(scav))
	}
	if bf.Lost {
		t.Errorf("the bftrainer Trainer ended on the reclaim; a reclaim must only take its nodes")
	}
	if bf.Reclaim <= 0 {
		t.Errorf("no node prolog kill recorded for the bftrainer main job")
	}
}

// localNode is the node a slurmd hook ran on.
func localNode(e store.Event) string {
	var d struct {
		Local string `json:"local"`
	}
	if err := json.Unmarshal(e.Detail, &d); err == nil && d.Local != "" {
		return d.Local
	}
	return ""
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// eventDetails is a short account of events for an error message.
func eventDetails(evs []store.Event) string {
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "[%s %s %s %s %s]", e.At.Format("15:04:05.000"), e.Kind, e.Context, e.Detail, e.Error)
	}
	return b.String()
}

// TestSlurmUserNotRoot runs the controller hooks as an unprivileged
// SlurmUser (Debian's slurm), on an install whose database existed before
// with root's group, given the permissions contrib/slurm/README.md
// prescribes for it: the database's directory and files, and the journal
// the hooks write, given SlurmUser's group (the database not
// group-writable: hooks never write it), the hooks' log group-writable,
// and the reconciler as a root service, since a hook that is not root
// does not start one.
func TestSlurmUserNotRoot(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real Slurm cluster")
	}
	if err := slurm.Need(); err != nil {
		t.Skip(err)
	}
	if _, err := user.Lookup("slurm"); err != nil {
		t.Skip("needs the slurm user (Debian's slurm-wlm packages create it)")
	}
	ctx := context.Background()
	c, err := slurm.Up(ctx, slurm.ClusterOptions{Repo: trainertest.RepoRoot(t), Nodes: 3, SlurmUser: "slurm", Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Down(context.Background(), false); err != nil {
			t.Errorf("stopping the cluster: %v", err)
		}
	})
	debugOnFailure(t, c)
	// The database and the journal exist already, root's group.
	out := must[string](t)(c.Run(ctx, "sync"))
	if !strings.HasPrefix(out, "joined 3 slab[1-3]\n") {
		t.Fatalf("sync printed %q", out)
	}
	if err := c.In.GrantGroup("slurm"); err != nil {
		t.Fatal(err)
	}
	if err := c.In.GrantExisting("slurm"); err != nil {
		t.Fatal(err)
	}
	service := exec.Command(c.In.Bin, "reconcile", "--watch", "--interval", "1s")
	service.Env = c.Lab.Env()
	if err := service.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { service.Process.Kill(); service.Wait() })
	sleepersEverywhere(t, c, "su")
	startID := must[int64](t)(c.LastEventID(ctx))
	runMain(t, c, slurm.JobSpec{Nodes: 2, Hold: time.Second}, slurm.JobSpec{Nodes: 1, Hold: time.Second})
	// The controller's hooks, run as slurm, recorded themselves.
	evs := must[[]store.Event](t)(c.In.Events(ctx, store.Filter{Kinds: []store.Kind{store.KindHook}, AfterID: startID}))
	n := 0
	for _, e := range evs {
		if e.Context == "prolog_slurmctld" || e.Context == "epilog_slurmctld" {
			n++
		}
		if e.Error != "" {
			t.Errorf("hook %s: %s", e.Context, e.Error)
		}
	}
	if n != 4 {
		t.Errorf("%d controller hook calls recorded, want 4 (2 jobs × prolog and epilog): %s", n, eventDetails(evs))
	}
	if b, _ := os.ReadFile(c.In.HooksLog); strings.Contains(string(b), "record hook") {
		t.Errorf("the hooks could not record:\n%s", b)
	}
	if err := c.In.WaitPoolMatches(ctx, c.Lab, time.Minute); err != nil {
		t.Error(err)
	}
	if err := c.TrainersMatchPool(ctx, time.Minute); err != nil {
		t.Error(err)
	}
}
