package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/internal/lab"
	"github.com/bftrainer/bftrainer/internal/lab/hookburst"
	"github.com/bftrainer/bftrainer/names"
	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/store"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// MustBuild builds the real bftrainer binary once per test run.
func MustBuild(tb testing.TB) string {
	tb.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "bftrainer-bin")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "bftrainer")
		// Its built-in hooks.log is beside it, not in /var/log: the hooks
		// of tests with a broken configuration log there. Every other
		// built-in path is below its directory too (builtinDir).
		out, err := exec.Command("go", "build", "-ldflags", lab.BuildFlags(builtinDir(binPath), "", fallbackLog(binPath)), "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		tb.Fatal(buildErr)
	}
	return binPath
}

// fallbackLog is where the test binary's hooks log when the configuration
// does not load.
func fallbackLog(bin string) string { return filepath.Join(filepath.Dir(bin), "fallback-hooks.log") }

// builtinDir holds the test binary's built-in paths (lab.BuildFlags): its
// /etc, /var and /run.
func builtinDir(bin string) string { return filepath.Join(filepath.Dir(bin), "builtin") }

// testEnv is a work directory with a configuration for the binary.
type testEnv struct {
	dir, config, db string
}

func newTestEnv(tb testing.TB, extra string) testEnv {
	tb.Helper()
	dir := tb.TempDir()
	e := testEnv{dir: dir, config: filepath.Join(dir, "bftrainer.toml"), db: filepath.Join(dir, "db", "bftrainer.db")}
	// No scheduler to ask: released nodes join at once.
	conf := fmt.Sprintf("database = %q\nspool = %q\n%s\n[hooks]\nlog = %q\n[scheduler]\nsinfo = \"\"\nsqueue = \"\"\n", e.db, filepath.Join(dir, "spool"), extra, filepath.Join(dir, "hooks.log"))
	if err := os.WriteFile(e.config, []byte(conf), 0o644); err != nil {
		tb.Fatal(err)
	}
	return e
}

func (e testEnv) cmd(bin string, env []string, args ...string) *exec.Cmd {
	c := exec.Command(bin, args...)
	// Hooks get no PATH: give only what the scheduler gives.
	c.Env = append([]string{"BFTRAINER_CONFIG=" + e.config}, env...)
	return c
}

// sequentialState folds the recorded input events, in id order, into a
// fresh pool — the oracle for what concurrent hooks and reconcilers must
// have produced.
func sequentialState(tb testing.TB, db *store.DB, cfg pool.Config) map[string]pool.NodeState {
	tb.Helper()
	evs, err := db.Events(context.Background(), store.Filter{InputsOnly: true})
	if err != nil {
		tb.Fatal(err)
	}
	p, err := pool.New(cfg, pool.State{})
	if err != nil {
		tb.Fatal(err)
	}
	for _, ev := range evs {
		switch ev.Kind {
		case store.KindJoin, store.KindRelease: // no scheduler to wait for
			p.Join(ev.At, ev.Nodes, ev.Job)
		case store.KindLeave:
			p.Leave(ev.At, ev.Nodes, ev.Job)
		}
	}
	out := map[string]pool.NodeState{}
	for _, n := range p.State().Nodes {
		out[n.Name] = n.State
	}
	return out
}

func savedState(tb testing.TB, db *store.DB) map[string]pool.NodeState {
	tb.Helper()
	snap, err := db.Load(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string]pool.NodeState{}
	for _, n := range snap.State.Nodes {
		out[n.Name] = n.State
	}
	return out
}

func diffStates(a, b map[string]pool.NodeState) string {
	var d []string
	for n, s := range a {
		if b[n] != s {
			d = append(d, fmt.Sprintf("%s: %s vs %s", n, s, b[n]))
		}
	}
	for n, s := range b {
		if _, ok := a[n]; !ok {
			d = append(d, fmt.Sprintf("%s: missing vs %s", n, s))
		}
	}
	sort.Strings(d)
	return strings.Join(d, "; ")
}

// waitReconcilers waits until no reconciler holds the lock, then runs one
// more to fold whatever the last hooks recorded.
func waitReconcilers(tb testing.TB, e testEnv, bin string) {
	tb.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		f, err := os.OpenFile(e.db+".lock", os.O_RDWR|os.O_CREATE, 0o640)
		if err != nil {
			tb.Fatal(err)
		}
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		f.Close() // releases it
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			tb.Fatal("a reconciler still holds the lock after 60 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if out, err := e.cmd(bin, nil, "reconcile", "--no-scheduler").CombinedOutput(); err != nil {
		tb.Fatalf("reconcile: %v\n%s", err, out)
	}
}

// TestConcurrentHooks runs 200 hook processes at once — prologs and
// epilogs of 100 jobs over overlapping nodes — each starting a detached
// reconciler, as on a busy controller.
func TestConcurrentHooks(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns 200 processes")
	}
	bin := MustBuild(t)
	e := newTestEnv(t, "")
	// Start every node idle, with Trainers to preempt.
	if out, err := e.cmd(bin, nil, "node", "join", "--no-reconcile", "c[001-040]").CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	r := rand.New(rand.NewPCG(7, 7))
	var cmds []*exec.Cmd
	for job := 1; job <= 100; job++ {
		first := 1 + r.IntN(36)
		nodes := fmt.Sprintf("c[%03d-%03d]", first, first+r.IntN(5))
		for _, ctx := range []string{"prolog_slurmctld", "epilog_slurmctld"} {
			env := []string{"SLURM_SCRIPT_CONTEXT=" + ctx, fmt.Sprintf("SLURM_JOB_ID=%d", job), "SLURM_JOB_NODELIST=" + nodes}
			c := e.cmd(bin, append(env, "X=1"), "hook", "slurm")
			cmds = append(cmds, c)
		}
	}
	r.Shuffle(len(cmds), func(i, j int) { cmds[i], cmds[j] = cmds[j], cmds[i] })
	var wg sync.WaitGroup
	errs := make(chan error, len(cmds))
	start := make(chan struct{})
	for _, c := range cmds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out, err := c.CombinedOutput()
			if err != nil || len(out) > 0 {
				errs <- fmt.Errorf("%v: %v %s", c.Env, err, out)
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	waitReconcilers(t, e, bin)
	// A call starved past its deadline just before its own write ends a
	// little late with its record in the journal, and says so (the
	// hookburst lab counts these too): that is the fail-open path
	// working, not an error. Every record is still counted below.
	if b, _ := os.ReadFile(filepath.Join(e.dir, "hooks.log")); len(b) > 0 {
		var other strings.Builder
		for line := range strings.Lines(string(b)) {
			if hookburst.IsLate(line) {
				t.Logf("late but written: %s", strings.TrimSpace(line))
				continue
			}
			other.WriteString(line)
		}
		if other.Len() > 0 {
			t.Errorf("hooks logged errors:\n%s", other.String())
		}
	}
	db, err := store.Open(context.Background(), e.db, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	evs, err := db.Events(context.Background(), store.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int{}
	for _, ev := range evs {
		if ev.Error != "" {
			t.Errorf("event %d (%s) recorded an error: %s", ev.ID, ev.Kind, ev.Error)
		}
		switch ev.Kind {
		case store.KindHook, store.KindLeave, store.KindRelease:
			calls[string(ev.Kind)+" "+ev.Context+" "+ev.Job]++
		}
	}
	for job := 1; job <= 100; job++ {
		for _, k := range []string{"hook prolog_slurmctld", "leave prolog_slurmctld", "hook epilog_slurmctld", "release epilog_slurmctld"} {
			if n := calls[fmt.Sprintf("%s %d", k, job)]; n != 1 {
				t.Errorf("job %d: %q recorded %d times, want exactly once", job, k, n)
			}
		}
	}
	if d := diffStates(sequentialState(t, db, pool.Config{}), savedState(t, db)); d != "" {
		t.Fatalf("state differs from a sequential replay of the recorded order: %s", d)
	}
}

// TestReconcilerCrash kills the reconciler with SIGKILL at random points,
// 20 times: the next run must take the lock (no stale lock survives) and
// leave consistent tables, equal to a sequential replay.
func TestReconcilerCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("kills processes")
	}
	bin := MustBuild(t)
	e := newTestEnv(t, "")
	run := func(args ...string) {
		t.Helper()
		if out, err := e.cmd(bin, nil, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", args, err, out)
		}
	}
	run("node", "join", "--no-reconcile", "c[0001-2000]")
	for i := 0; i < 8; i++ {
		run("trainer", "submit", "--name", fmt.Sprintf("t%d", i), "--min", "1", "--max", "400", "--curve", "1:10,100:900,400:3000",
			"--rescale-up", "5", "--rescale-down", "5", "--", "/bin/true")
	}
	r := rand.New(rand.NewPCG(1, 2))
	db, err := store.Open(context.Background(), e.db, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// Time an uninterrupted run on the same amount of work, to kill within it.
	burst := func(trial int) []store.Event {
		var evs []store.Event
		for k := 0; k < 300; k++ {
			first := 1 + r.IntN(1990)
			kind := store.KindLeave
			if r.IntN(2) == 0 {
				kind = store.KindJoin
			}
			names, _ := names.ExpandHostlist(fmt.Sprintf("c[%04d-%04d]", first, first+r.IntN(10)))
			evs = append(evs, store.Event{At: time.Now(), Kind: kind, Source: "test", Job: fmt.Sprint(trial*1000 + k), Nodes: names})
		}
		return evs
	}
	if _, err := db.Append(context.Background(), burst(99)...); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	run("reconcile", "--no-scheduler")
	full := time.Since(t0)
	interrupted := 0
	for trial := 0; trial < 20; trial++ {
		// Work for the reconciler: a burst of leaves and joins.
		if _, err := db.Append(context.Background(), burst(trial)...); err != nil {
			t.Fatal(err)
		}
		c := e.cmd(bin, nil, "reconcile", "--no-scheduler")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(r.Int64N(int64(full))))
		c.Process.Signal(syscall.SIGKILL)
		if err := c.Wait(); err != nil {
			interrupted++
		}
		// The next run must get the lock at once and finish.
		done := make(chan error, 1)
		go func() { done <- e.cmd(bin, nil, "reconcile", "--no-scheduler").Run() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("trial %d: reconcile after kill -9: %v", trial, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("trial %d: reconcile after kill -9 did not finish", trial)
		}
		var ok string
		if err := db.SQL().QueryRow("PRAGMA integrity_check").Scan(&ok); err != nil || ok != "ok" {
			t.Fatalf("trial %d: integrity %q %v", trial, ok, err)
		}
		if d := diffStates(sequentialState(t, db, pool.Config{}), savedState(t, db)); d != "" {
			t.Fatalf("trial %d: state differs from a sequential replay: %s", trial, d)
		}
		snap, err := db.Load(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		last, _ := db.Events(context.Background(), store.Filter{InputsOnly: true, Desc: true, Limit: 1})
		if snap.AppliedID != last[0].ID {
			t.Fatalf("trial %d: applied %d, last input %d", trial, snap.AppliedID, last[0].ID)
		}
		// Allocations name only idle nodes held by running Trainers.
		var bad int
		db.SQL().QueryRow(`SELECT count(*) FROM allocations a JOIN nodes n ON n.name = a.node
			JOIN trainers t ON t.id = a.trainer WHERE n.state <> 'idle' OR n.trainer <> a.trainer OR t.status <> 'running'`).Scan(&bad)
		if bad != 0 {
			t.Fatalf("trial %d: %d inconsistent allocations", trial, bad)
		}
	}
	t.Logf("a full run takes %v; %d of 20 runs were killed before they finished", full, interrupted)
	if interrupted == 0 {
		t.Fatal("no run was interrupted: the test proved nothing")
	}
}

// TestBrokenConfigStillKills: a node's prolog with an unreadable
// configuration records nothing and writes nothing into the built-in
// paths (another install's, perhaps), but still kills what runs there
// (the run tokens in /proc need no configuration).
func TestBrokenConfigStillKills(t *testing.T) {
	if testing.Short() || os.Geteuid() != 0 {
		t.Skip("needs root: the node prolog kills with the built-in registry")
	}
	bin := MustBuild(t)
	e := newTestEnv(t, "")
	if err := os.WriteFile(e.config, []byte("database = \n[pool\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const node = "zzbroken1"
	// The built-in registry's entry for the node (the binary's /run).
	builtin := filepath.Join(builtinDir(bin), "run", "bftrainer", "nodes", node)
	victim := exec.Command("sleep", "300")
	victim.Env = []string{"BFTRAINER_RUN=tt/" + node + "/0123456789abcdef"}
	victim.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- victim.Wait() }()
	out, err := e.cmd(bin, []string{"SLURM_SCRIPT_CONTEXT=prolog_slurmd", "SLURM_JOB_ID=9", "SLURM_NODELIST=" + node, "SLURMD_NODENAME=" + node}).CombinedOutput()
	if err != nil {
		t.Fatalf("hook exited %v: %s", err, out)
	}
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		victim.Process.Kill()
		t.Fatal("the prolog left the Trainer process running")
	}
	if b, _ := os.ReadFile(fallbackLog(bin)); !strings.Contains(string(b), "hook: config "+e.config) {
		t.Fatalf("the hook did not log the broken configuration to the built-in hooks.log:\n%s", b)
	}
	if _, err := os.Lstat(builtin); err == nil {
		os.RemoveAll(builtin)
		t.Fatalf("the hook wrote %s: the built-in registry is not this install's", builtin)
	}
}
