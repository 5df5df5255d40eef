package slurm_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/internal/lab/slurm"
	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/sidecar"
	"github.com/bftrainer/bftrainer/store"
)

// recordedOnce fails unless every hook of an ended job is in the history
// exactly once — its controller prolog and epilog, with their leave and
// release, and its node prologs and epilogs once per node — with no
// error. No event lost, none twice.
func recordedOnce(t *testing.T, c *slurm.Cluster, j *slurm.Job, info slurm.JobInfo) {
	t.Helper()
	ctx := context.Background()
	nodesOf := must[[]string](t)(info.Nodes())
	hooks := must[map[string][]store.Event](t)(c.HookEvents(ctx, j.ID))
	for _, ctxName := range []string{"prolog_slurmctld", "epilog_slurmctld"} {
		if got := len(hooks[ctxName]); got != 1 {
			t.Errorf("job %s: %s recorded %d times, want 1", j.ID, ctxName, got)
		}
	}
	for _, ctxName := range []string{"prolog_slurmd", "epilog_slurmd"} {
		var on []string
		for _, e := range hooks[ctxName] {
			on = append(on, localNode(e))
		}
		slices.Sort(on)
		if !slices.Equal(on, nodesOf) {
			t.Errorf("job %s on %v: %s recorded on %v", j.ID, nodesOf, ctxName, on)
		}
	}
	for _, kind := range []store.Kind{store.KindLeave, store.KindRelease} {
		if evs := must[[]store.Event](t)(c.In.Events(ctx, store.Filter{Kinds: []store.Kind{kind}, Job: j.ID})); len(evs) != 1 {
			t.Errorf("job %s: %d %s events, want 1", j.ID, len(evs), kind)
		}
	}
	for _, es := range hooks {
		for _, e := range es {
			if e.Error != "" {
				t.Errorf("job %s: hook %s on %v: %s", j.ID, e.Context, e.Nodes, e.Error)
			}
		}
	}
}

// watched are the main jobs of the fault scenarios: every node of theirs
// looks for Trainer processes all the while the job runs.
var watched = []slurm.JobSpec{{Nodes: 2, Hold: 3 * time.Second, Watch: true}, {Nodes: 1, Hold: 3 * time.Second, Watch: true}}

// underFault runs the fault scenario: a one-node Trainer on every node, a
// fault injected, main jobs that start and end normally (never requeued,
// no node drained, no Trainer process on their nodes at any moment while
// they run: their own scripts look); then the fault cleared and one
// reconcile: every event of theirs recorded exactly once, the pool and
// the processes back in line with sinfo, no Trainer ended.
func underFault(t *testing.T, c *slurm.Cluster, tag string, inject func(t *testing.T) (clear func())) {
	debugOnFailure(t, c)
	ctx := context.Background()
	reset(t, c)
	sleepersEverywhere(t, c, tag)
	before := must[[]string](t)(c.Active(ctx))
	clear := inject(t)
	jobs := runMain(t, c, watched...)
	clear()
	held := lockHeld(c.In.DB + ".lock")
	out := must[string](t)(c.Run(ctx, "reconcile"))
	for _, j := range jobs {
		recordedOnce(t, c, j, must[slurm.JobInfo](t)(c.Lab.Job(ctx, j.ID)))
	}
	if err := c.In.WaitPoolMatches(ctx, c.Lab, time.Minute); err != nil {
		t.Error(err)
	}
	if err := c.TrainersMatchPool(ctx, 2*time.Minute); err != nil {
		// Seen once (CI, loaded, reconciler-killed-mid-round): no round
		// had folded the main jobs' events. Say what the reconcile said.
		t.Errorf("%v\nthe round lock was held just before the reconcile after the fault: %v; it printed %q", err, held, out)
	}
	after := must[[]string](t)(c.Active(ctx))
	for _, name := range before {
		if !slices.Contains(after, name) {
			t.Errorf("Trainer %s ended under the fault", name)
		}
	}
}

// mount runs mount(8) and returns its undo, which runs once.
func mount(t *testing.T, args ...string) (undo func()) {
	t.Helper()
	if out, err := exec.Command("mount", args...).CombinedOutput(); err != nil {
		t.Skipf("cannot mount (%v): %v %s", args, err, out)
	}
	target := args[len(args)-1]
	done := false
	undo = func() {
		if done {
			return
		}
		done = true
		// A round a hook started may still have the database open (CI on
		// a fresh machine: "umount: target is busy", then the cluster's
		// stop could not remove the directory). Wait for it, bounded; a
		// holder that outlives the bound is a finding, named.
		var held []string
		err := slurm.Poll(context.Background(), 2*time.Minute, func() (bool, error) {
			held = holders(target)
			return len(held) == 0, nil
		})
		if err != nil {
			t.Errorf("%s still held after the fault: %v: %s", target, err, strings.Join(held, "; "))
		}
		if out, err := exec.Command("umount", target).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s (held by: %s)", target, err, out, strings.Join(holders(target), "; "))
			// Detach it all the same, so that the cluster's stop and
			// the scenarios after this one do not fail on it too.
			exec.Command("umount", "-l", target).Run()
		}
	}
	t.Cleanup(undo)
	return undo
}

// faults is issue 9's proof on the real cluster, with running Trainers:
// the database read-only, its disk full, the database corrupt, the
// reconciler killed -9 mid round. Whatever breaks, main jobs run
// normally, no Trainer runs beside them, and once the fault is cleared no
// event is missing.
func faults(t *testing.T, c *slurm.Cluster) {
	ctx := context.Background()
	dbDir := filepath.Dir(c.In.DB)

	// Read-only (a read-only bind mount of the database's directory, the
	// journal with it): hooks write their records in the fallback, and
	// rounds record them, and what they do, in the stand-in
	// (sidecar/standin.go), moved into the database once it is writable.
	t.Run("database-read-only", func(t *testing.T) {
		underFault(t, c, "ro", func(t *testing.T) func() {
			undo := mount(t, "--bind", dbDir, dbDir)
			if out, err := exec.Command("mount", "-o", "remount,bind,ro", dbDir, dbDir).CombinedOutput(); err != nil {
				t.Fatalf("remount %s read-only: %v %s", dbDir, err, out)
			}
			return func() {
				// Rounds go on: the fallback's records are taken (a
				// round a hook started may hold the round's lock: the
				// reconcile then leaves the work to it).
				err := slurm.Poll(ctx, time.Minute, func() (bool, error) {
					if _, err := c.Run(ctx, "reconcile"); err != nil {
						return false, err
					}
					return len(entries(t, c.In.JournalFallback, ".ev")) == 0, nil
				})
				if err != nil {
					t.Errorf("the hooks' records in the fallback %s with the database read-only: %v", c.In.JournalFallback, err)
				}
				// status says so.
				out, err := c.Run(ctx, "status")
				if err != nil || !strings.Contains(out, "rounds run on the stand-in") || !strings.Contains(out, "read-only filesystem") {
					t.Errorf("status with the database read-only: %v\n%s", err, out)
				}
				undo()
				// Writable: the first writer to find the stand-in
				// free moves it into the database (a round a hook
				// started may be using it yet).
				standin := sidecar.StandInPath(c.In.JournalFallback)
				err = slurm.Poll(ctx, time.Minute, func() (bool, error) {
					if _, err := c.Run(ctx, "reconcile"); err != nil {
						return false, err
					}
					_, err := os.Stat(standin)
					return errors.Is(err, os.ErrNotExist), nil
				})
				if err != nil {
					t.Errorf("the stand-in %s once the database was writable: %v", standin, err)
				}
			}
		})
	})

	// Full: the database and its journal on a small tmpfs, filled up.
	t.Run("disk-full", func(t *testing.T) {
		var undo func()
		t.Cleanup(func() {
			// The Trainers of the tmpfs's database go before it does.
			if act, err := c.Active(ctx); err == nil && len(act) > 0 {
				c.Cancel(ctx, act...)
			}
			if undo != nil {
				undo()
			}
		})
		undo = mount(t, "-t", "tmpfs", "-o", "size=16m,mode=0755", "bftfull", dbDir)
		filler := filepath.Join(dbDir, "filler")
		underFault(t, c, "full", func(t *testing.T) func() {
			fill(t, filler)
			return func() {
				if n := len(entries(t, c.In.JournalFallback, ".ev")); n == 0 {
					t.Errorf("no hook record in the fallback %s while the disk was full", c.In.JournalFallback)
				}
				os.Remove(filler)
			}
		})
	})

	// Corrupt: the database file overwritten while nobody reconciles; the
	// reconciler refuses it, hooks do not notice; restored from the copy
	// taken just before, the journal brings back everything since.
	t.Run("database-corrupt", func(t *testing.T) {
		underFault(t, c, "bad", func(t *testing.T) func() {
			restore := spawnNever(t, c)
			must[string](t)(c.Run(ctx, "reconcile")) // checkpointed: the copy is whole
			backup := t.TempDir()
			files, _ := filepath.Glob(c.In.DB + "*")
			for _, f := range files {
				copyFile(t, f, filepath.Join(backup, filepath.Base(f)))
			}
			junk := make([]byte, 1<<16)
			for i := range junk {
				junk[i] = byte(i*7 + 3)
			}
			if err := os.WriteFile(c.In.DB, junk, 0o644); err != nil {
				t.Fatal(err)
			}
			return func() {
				if _, err := c.Run(ctx, "reconcile"); err == nil {
					t.Error("the reconciler took a corrupt database")
				} else {
					t.Logf("on the corrupt database: %v", err)
				}
				for _, f := range files {
					copyFile(t, filepath.Join(backup, filepath.Base(f)), f)
				}
				restore()
			}
		})
	})

	// The reconciler service killed -9 while it holds the round's lock,
	// again and again while the main jobs run, and started again.
	t.Run("reconciler-killed-mid-round", func(t *testing.T) {
		underFault(t, c, "k9", func(t *testing.T) func() {
			restore := spawnNever(t, c)
			svc := must[*slurm.Service](t)(c.StartService(200 * time.Millisecond))
			stop := make(chan struct{})
			killed := make(chan int)
			go func() {
				n := 0
				defer func() { killed <- n }()
				for {
					select {
					case <-stop:
						svc.Kill()
						return
					case <-time.After(20 * time.Millisecond):
					}
					if !lockHeld(c.In.DB + ".lock") {
						continue
					}
					svc.Kill()
					n++
					var err error
					if svc, err = c.StartService(200 * time.Millisecond); err != nil {
						return
					}
				}
			}()
			return func() {
				close(stop)
				n := <-killed
				t.Logf("the reconciler was killed -9 %d times mid round", n)
				if n == 0 {
					t.Error("the reconciler was never killed mid round: the scenario proved nothing")
				}
				restore()
			}
		})
	})
}

// spawnNever configures hooks that start no reconciler (whatever runs
// then is the scenario's) and returns the undo.
func spawnNever(t *testing.T, c *slurm.Cluster) (restore func()) {
	t.Helper()
	s := c.Settings
	s.Spawn = "never"
	if err := c.Configure(s); err != nil {
		t.Fatal(err)
	}
	return func() {
		s.Spawn = ""
		if err := c.Configure(s); err != nil {
			t.Fatal(err)
		}
	}
}

// fill writes path until its filesystem is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Write(buf); err != nil {
			if !strings.Contains(err.Error(), "no space") {
				t.Fatal(err)
			}
			break
		}
	}
	// The last bytes too: a small write must fail as well.
	for {
		if _, err := f.Write(buf[:512]); err != nil {
			return
		}
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}

// holders lists the processes that hold something under dir open — a
// file, a mapping (SQLite's -shm), their working directory — as
// "pid (command): path", the way fuser -m would name them.
func holders(dir string) []string {
	under := func(p string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }
	procs, _ := filepath.Glob("/proc/[0-9]*")
	var out []string
	for _, proc := range procs {
		comm, _ := os.ReadFile(proc + "/comm")
		name := fmt.Sprintf("%s (%s)", filepath.Base(proc), strings.TrimSpace(string(comm)))
		var paths []string
		for _, link := range []string{"cwd", "root", "exe"} {
			paths = append(paths, readlink(proc+"/"+link))
		}
		fds, _ := filepath.Glob(proc + "/fd/*")
		for _, fd := range fds {
			paths = append(paths, readlink(fd))
		}
		if maps, err := os.ReadFile(proc + "/maps"); err == nil {
			for _, line := range strings.Split(string(maps), "\n") {
				if i := strings.Index(line, "/"); i >= 0 {
					paths = append(paths, strings.TrimSuffix(line[i:], " (deleted)"))
				}
			}
		}
		for _, p := range paths {
			if under(p) {
				out = append(out, name+": "+p)
				break
			}
		}
	}
	return out
}

func readlink(path string) string {
	p, _ := os.Readlink(path)
	return p
}

// lockHeld reports whether a reconciler holds its lock (is in a round).
func lockHeld(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return true
	}
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}

// entries lists a directory's names with the suffix.
func entries(t *testing.T, dir, suffix string) []string {
	t.Helper()
	ents, _ := os.ReadDir(dir)
	var out []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), suffix) {
			out = append(out, e.Name())
		}
	}
	return out
}

// nodeState is one node's state in the saved pool.
func nodeState(t *testing.T, c *slurm.Cluster, node string) pool.NodeState {
	t.Helper()
	return must[map[string]pool.Node](t)(c.In.PoolNodes(context.Background()))[node].State
}

// syncRacingLeave: sync's sinfo answer says a node is idle; a main job
// starts on it before sync records what it saw. The job's leave wins:
// the node never goes back to the pool while the job runs, and the
// Trainer waiting for a node does not start there.
func syncRacingLeave(t *testing.T, c *slurm.Cluster) {
	debugOnFailure(t, c)
	ctx := context.Background()
	reset(t, c)
	sleepersEverywhere(t, c, "race")
	must[string](t)(c.SubmitSleeper(ctx, "racewait")) // no free node: it waits for one
	x := c.Lab.Nodes[0]
	// The pool thinks x busy (a job whose end was missed); sinfo says idle.
	must[string](t)(c.Run(ctx, "node", "leave", x, "--job", "99999", "--no-reconcile"))
	must[string](t)(c.Run(ctx, "reconcile"))
	if got := nodeState(t, c, x); got != pool.Busy {
		t.Fatalf("%s is %q in the pool, want busy", x, got)
	}
	// sinfo, held on its way back: a full listing (sync's) waits on a gate
	// after the answer is made, until the test lets it go.
	gate := filepath.Join(c.Dir, "sinfo-gate")
	wrapper := filepath.Join(c.Dir, "sinfo-gated")
	script := fmt.Sprintf(`#!/bin/sh
out=$(%s "$@") || exit $?
case " $* " in *" -n "*) ;; *)
	if [ -e %[2]s ]; then : > %[2]s.held; while [ -e %[2]s ]; do sleep 0.05; done; fi ;;
esac
printf '%%s\n' "$out"
`, c.In.Sinfo, gate)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	s := c.Settings
	s.Sinfo = wrapper
	if err := c.Configure(s); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	sync := exec.Command(c.In.Bin, "sync")
	sync.Env = c.Lab.Env()
	var out strings.Builder
	sync.Stdout, sync.Stderr = &out, &out
	if err := sync.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(gate); sync.Process.Kill(); sync.Wait() })
	if err := slurm.Poll(ctx, time.Minute, func() (bool, error) { _, err := os.Stat(gate + ".held"); return err == nil, nil }); err != nil {
		t.Fatalf("sync never asked sinfo: %v", err)
	}
	// The answer (x idle) is made; now a job takes x.
	job := must[*slurm.Job](t)(c.Lab.Submit(ctx, slurm.JobSpec{Nodes: 1, NodeList: x, Held: true, Watch: true, Name: "race"}))
	must[slurm.JobReport](t)(job.WaitChecked(ctx, time.Minute))
	os.Remove(gate)
	if err := sync.Wait(); err != nil {
		t.Fatalf("sync: %v\n%s", err, out.String())
	}
	t.Logf("sync: %s", strings.ReplaceAll(strings.TrimSpace(out.String()), "\n", "; "))
	must[string](t)(c.Run(ctx, "reconcile"))
	if got := nodeState(t, c, x); got == pool.Idle {
		t.Errorf("%s is idle in the pool while job %s runs there", x, job.ID)
	}
	if ps := must[[]slurm.Proc](t)(c.In.TrainerProcs(x)); len(ps) > 0 {
		t.Errorf("Trainer processes on %s beside job %s: %+v", x, job.ID, ps)
	}
	job.Release()
	info := must[slurm.JobInfo](t)(job.WaitEnded(ctx, time.Minute))
	if bad := slurm.Normal(info, must[slurm.JobReport](t)(job.Report())); bad != "" {
		t.Errorf("job %s: %s", job.ID, bad)
	}
	s.Sinfo = ""
	if err := c.Configure(s); err != nil {
		t.Fatal(err)
	}
	must[string](t)(c.Run(ctx, "reconcile"))
	recordedOnce(t, c, job, info)
	if err := c.In.WaitPoolMatches(ctx, c.Lab, time.Minute); err != nil {
		t.Error(err)
	}
}

// cliRoundPending: a main job's node epilog is slow, so the node stays
// COMPLETING after its release is recorded; a round a CLI command runs
// meanwhile (here `trainer cancel`, with no reconciler of the hooks'
// around) keeps the node pending — sinfo is asked — and starts nothing
// there; once the epilog is done, the next round joins it.
func cliRoundPending(t *testing.T, c *slurm.Cluster) {
	debugOnFailure(t, c)
	ctx := context.Background()
	reset(t, c)
	slow := filepath.Join(c.Dir, "slow-epilog")
	wrapper := filepath.Join(c.Dir, "hook-slow-epilog")
	script := fmt.Sprintf("#!/bin/sh\nif [ \"$SLURM_SCRIPT_CONTEXT\" = epilog_slurmd ] && [ -e %s ]; then sleep 8; fi\nexec %s\n", slow, c.In.Bin)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := c.In.SetHookPath(ctx, c.Lab, wrapper); err != nil {
		t.Fatal(err)
	}
	sleepersEverywhere(t, c, "cli")
	spawnNever(t, c) // the next reset restores it
	x := c.Lab.Nodes[0]
	// What a round's start check costs: one listing of the nodes it is
	// about to start Trainers on.
	var took []float64
	for range 10 {
		start := time.Now()
		must[string](t)(c.Lab.Output(ctx, c.In.Sinfo, "-h", "-N", "-o", "%N %t", "-n", x))
		took = append(took, ms(time.Since(start)))
	}
	t.Logf("sinfo -n %s: p50 %.1f ms, max %.1f ms (10 calls)", x, slurm.Quantile(took, 0.5), slurm.Quantile(took, 1))
	if err := os.WriteFile(slow, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(slow) })
	job := must[*slurm.Job](t)(c.Lab.Submit(ctx, slurm.JobSpec{Nodes: 1, NodeList: x, Hold: time.Second, Name: "slowepilog"}))
	// Released (EpilogSlurmctld recorded it), the node still completing.
	if err := slurm.Poll(ctx, time.Minute, func() (bool, error) {
		evs, err := c.In.Events(ctx, store.Filter{Kinds: []store.Kind{store.KindRelease}, Job: job.ID})
		if err != nil || len(evs) == 0 {
			return false, err
		}
		st, err := c.Lab.NodeStates(ctx)
		return st[x] != "idle", err
	}); err != nil {
		t.Fatalf("job %s's release with %s completing: %v", job.ID, x, err)
	}
	// A CLI command's round: root cancels the Trainer on another node.
	others := must[map[string][]string](t)(c.In.Held(ctx))
	var first, second string
	for name, ns := range others {
		if len(ns) > 0 && ns[0] != x {
			if first == "" {
				first = name
			} else if second == "" {
				second = name
			}
		}
	}
	must[string](t)(c.Run(ctx, "trainer", "cancel", first))
	st := must[map[string]string](t)(c.Lab.NodeStates(ctx))
	if st[x] == "idle" {
		t.Fatalf("%s was idle again before the CLI round was over: the slow epilog was not slow enough to prove anything", x)
	}
	if got := nodeState(t, c, x); got != pool.Pending {
		t.Errorf("after a CLI round, %s (sinfo %q) is %q in the pool, want pending", x, st[x], got)
	}
	if ps := must[[]slurm.Proc](t)(c.In.TrainerProcs(x)); len(ps) > 0 {
		t.Errorf("Trainer processes on %s while it is %s: %+v", x, st[x], ps)
	}
	os.Remove(slow)
	info := must[slurm.JobInfo](t)(job.WaitEnded(ctx, time.Minute))
	if bad := slurm.Normal(info, must[slurm.JobReport](t)(job.Report())); bad != "" {
		t.Errorf("job %s: %s", job.ID, bad)
	}
	if err := c.Lab.WaitIdle(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	// The next CLI round joins it.
	must[string](t)(c.Run(ctx, "trainer", "cancel", second))
	if got := nodeState(t, c, x); got != pool.Idle {
		t.Errorf("once %s is idle, the next CLI round leaves it %q", x, got)
	}
	if err := c.TrainersMatchPool(ctx, time.Minute); err != nil {
		t.Error(err)
	}
	recordedOnce(t, c, job, info)
}

// unloadableConfig: the configuration does not parse when a main job
// starts on a Trainer's node. The node's prolog still kills the Trainer
// there (recording nothing: it knows no journal); once the configuration
// is fixed, the next round takes the vanished launch for a reclaim —
// the Trainer keeps running elsewhere or waits, never ends failed — and
// asks sinfo before starting it again: not beside the job.
func unloadableConfig(t *testing.T, c *slurm.Cluster) {
	debugOnFailure(t, c)
	ctx := context.Background()
	reset(t, c)
	sleepersEverywhere(t, c, "cfg")
	held := must[map[string][]string](t)(c.In.Held(ctx))
	x := c.Lab.Nodes[0]
	var victim string
	for name, ns := range held {
		if slices.Contains(ns, x) {
			victim = name
		}
	}
	if victim == "" {
		t.Fatalf("no Trainer holds %s: %v", x, held)
	}
	startID := must[int64](t)(c.LastEventID(ctx))
	good := c.Settings
	if err := c.Configure(slurm.Settings{Raw: "database = \"/nonexistent/db\"\n[[[ this is not TOML\n"}); err != nil {
		t.Fatal(err)
	}
	job := must[*slurm.Job](t)(c.Lab.Submit(ctx, slurm.JobSpec{Nodes: 1, NodeList: x, Held: true, Watch: true, Name: "cfg"}))
	r := must[slurm.JobReport](t)(job.WaitChecked(ctx, time.Minute))
	if p := r.Procs[x]; p != "none" {
		t.Errorf("with the configuration broken the prolog left Trainer processes on %s: %s", x, p)
	}
	if err := c.Configure(good); err != nil {
		t.Fatal(err)
	}
	must[string](t)(c.Run(ctx, "reconcile"))
	if got := nodeState(t, c, x); got == pool.Idle {
		t.Errorf("%s is idle in the pool while job %s runs there", x, job.ID)
	}
	// Twice: a round that restarted the Trainer would have done it by now.
	must[string](t)(c.Run(ctx, "reconcile"))
	if ps := must[[]slurm.Proc](t)(c.In.TrainerProcs(x)); len(ps) > 0 {
		t.Errorf("Trainer processes on %s beside job %s: %+v", x, job.ID, ps)
	}
	evs := must[[]store.Event](t)(c.In.Events(ctx, store.Filter{AfterID: startID, Kinds: []store.Kind{store.KindAction, store.KindLeave, store.KindEnd}}))
	var gone, checked bool
	for _, e := range evs {
		gone = gone || (e.Kind == store.KindAction && e.Context == "gone" && e.Trainer == victim)
		checked = checked || (e.Kind == store.KindLeave && e.Context == "start-check" && slices.Contains(e.Nodes, x))
		if e.Kind == store.KindEnd {
			t.Errorf("a Trainer ended: %s", eventDetails([]store.Event{e}))
		}
	}
	if !gone || !checked {
		t.Errorf("history after the fix: gone %v, start-check leave %v; want both: %s", gone, checked, eventDetails(evs))
	}
	job.Release()
	info := must[slurm.JobInfo](t)(job.WaitEnded(ctx, time.Minute))
	if bad := slurm.Normal(info, must[slurm.JobReport](t)(job.Report())); bad != "" {
		t.Errorf("job %s: %s", job.ID, bad)
	}
	if act := must[[]string](t)(c.Active(ctx)); !slices.Contains(act, victim) {
		t.Errorf("Trainer %s ended", victim)
	}
	if err := c.In.WaitPoolMatches(ctx, c.Lab, time.Minute); err != nil {
		t.Error(err)
	}
	if err := c.TrainersMatchPool(ctx, time.Minute); err != nil {
		t.Error(err)
	}
}

// TestHolders: the umount's wait names a process that holds a file under
// the directory, and stops naming it once the file is closed.
func TestHolders(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "db"))
	if err != nil {
		t.Fatal(err)
	}
	me := fmt.Sprintf("%d (", os.Getpid())
	has := func() bool {
		for _, h := range holders(dir) {
			if strings.HasPrefix(h, me) {
				return true
			}
		}
		return false
	}
	if !has() {
		t.Fatalf("holders(%s) = %q, want this process (%d) with the file open", dir, holders(dir), os.Getpid())
	}
	f.Close()
	if has() {
		t.Fatalf("holders(%s) = %q after the file was closed", dir, holders(dir))
	}
}
