package agent_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/trainer/agent"
	"github.com/bftrainer/bftrainer/trainer/registry"
	"github.com/bftrainer/bftrainer/trainer/trainertest"
	"github.com/bftrainer/bftrainer/trainer/wire"
)

// TestMain lets the test binary be the node agent and the supervisor.
func TestMain(m *testing.M) {
	if code, ran := trainertest.AgentMain(); ran {
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// launch is a test launch of a shell script on a node.
func launch(tb testing.TB, trainer, node, script string) wire.Launch {
	tb.Helper()
	return wire.Launch{Trainer: trainer, Node: node, Owner: trainertest.CurrentUser(tb), Run: "ab", Argv: []string{"/bin/sh", "-c", script},
		Workdir: tb.TempDir(), Token: wire.NewToken(trainer, node).String()}
}

var procs = trainertest.Procs

func mustToken(tb testing.TB, s string) wire.Token {
	tb.Helper()
	t, err := wire.ParseToken(s)
	if err != nil {
		tb.Fatal(err)
	}
	return t
}

// modes runs a test once with the machine's containment (cgroup where
// it can) and once degraded; mode configures the agent for it.
func modes(t *testing.T, f func(t *testing.T, degraded bool, mode func(*trainertest.AgentConfig))) {
	t.Run("auto", func(t *testing.T) { f(t, false, func(*trainertest.AgentConfig) {}) })
	t.Run("off", func(t *testing.T) { f(t, true, off) })
}

func off(c *trainertest.AgentConfig) { c.Containment = agent.ContainOff }

// TestStopKillsGroupAndEscapees starts a program that leaves every kind of
// descendant behind — one in its group, one that left it with setsid, a
// double-forked daemon — and checks that a stop leaves none of them,
// reports them, and forgets the entry; in both containment modes.
func TestStopKillsGroupAndEscapees(t *testing.T) {
	modes(t, func(t *testing.T, degraded bool, mode func(*trainertest.AgentConfig)) {
		a := trainertest.MustAgent(t, mode)
		ctx := context.Background()
		dir := t.TempDir()
		script := fmt.Sprintf(`sleep 300 &
setsid sleep 301 &
(setsid sh -c 'sleep 302 & echo $! > %s/daemon' &)
echo $$ > %s/main
exec sleep 303`, dir, dir)
		l := launch(t, "t1", a.N("n1"), script)
		s, err := a.Start(ctx, l)
		if err != nil {
			t.Fatal(err)
		}
		if s.Existing || s.PGID <= 1 || s.PID <= 1 {
			t.Fatalf("started: %+v", s)
		}
		trainertest.WaitFor(t, 5*time.Second, "all four sleeps", func() bool {
			return len(procs(t, func(tk wire.Token, p agent.Proc) bool {
				return tk.Trainer == "t1" && tk.Node == l.Node && p.Comm == "sleep"
			})) == 4
		})
		// Another Trainer on the same node, and the same Trainer on another
		// node, must survive the stop.
		other, err := a.Start(ctx, launch(t, "t2", a.N("n1"), "exec sleep 310"))
		if err != nil {
			t.Fatal(err)
		}
		elsewhere, err := a.Start(ctx, launch(t, "t1", a.N("n2"), "exec sleep 311"))
		if err != nil {
			t.Fatal(err)
		}
		rep, err := a.Stop(ctx, a.N("n1"), "t1")
		if err != nil {
			t.Fatal(err)
		}
		if left := procs(t, func(tk wire.Token, _ agent.Proc) bool { return tk == mustToken(t, l.Token) }); len(left) > 0 {
			t.Fatalf("processes survived the stop: %+v", left)
		}
		if degraded {
			if len(rep.Groups) != 1 || rep.Groups[0].PGID != s.PGID {
				t.Fatalf("groups killed: %+v, want the supervisor's group %d", rep.Groups, s.PGID)
			}
			if len(rep.Procs) != 2 {
				t.Fatalf("escapees killed one by one: %+v, want the setsid sleep and the daemon", rep.Procs)
			}
			if !strings.HasPrefix(rep.Containment, wire.Degraded+" (switched off") || rep.Clean || rep.Escapes == "" {
				t.Fatalf("a degraded kill reported %q clean=%v escapes %q", rep.Containment, rep.Clean, rep.Escapes)
			}
		} else if a.Mode() == wire.Cgroup {
			if len(rep.Cgroups) != 1 || len(rep.Cgroups[0].PIDs) != 5 || len(rep.Procs) != 0 {
				t.Fatalf("want one cgroup of 5 (the supervisor, 4 sleeps), nothing found by scan: %s", rep)
			}
			if rep.Containment != wire.Cgroup || !rep.Clean {
				t.Fatalf("cgroup kill reported %q clean=%v", rep.Containment, rep.Clean)
			}
			if _, err := os.Stat(s.Cgroup); !os.IsNotExist(err) {
				t.Fatalf("the launch's cgroup %s is left: %v", s.Cgroup, err)
			}
		}
		if !slices.Equal(rep.Removed, []string{"t1"}) {
			t.Fatalf("removed %v", rep.Removed)
		}
		if _, ok, _ := a.Registry.Entry(a.N("n1"), "t1"); ok {
			t.Fatal("entry still recorded")
		}
		for _, keep := range []wire.Started{other, elsewhere} {
			if n := len(procs(t, func(tk wire.Token, _ agent.Proc) bool { return tk.String() == keep.Token })); n == 0 {
				t.Fatalf("%s on %s was killed too", keep.Trainer, keep.Node)
			}
		}
		t.Logf("report: %s", rep)

		// KillAll takes everything on n1, and only on n1.
		rep, err = a.KillAll(ctx, a.N("n1"), false)
		if err != nil {
			t.Fatal(err)
		}
		// The supervisor and its sleep; a degraded kill sees the members
		// of a group it killed at once only if they are still there.
		if want := 2; rep.Count() != want && !(degraded && rep.Count() == 1) {
			t.Fatalf("kill-all killed %d processes, want %d (supervisor and sleep): %s", rep.Count(), want, rep)
		}
		if n := len(procs(t, func(tk wire.Token, p agent.Proc) bool { return tk.Node == a.N("n1") })); n != 0 {
			t.Fatalf("%d processes left on n1", n)
		}
		if n := len(procs(t, func(tk wire.Token, p agent.Proc) bool { return tk.Node == a.N("n2") })); n == 0 {
			t.Fatal("n2 was killed by n1's kill-all")
		}
		if _, err := a.KillAll(ctx, a.N("n2"), false); err != nil {
			t.Fatal(err)
		}
	})
}

// TestKillIgnoresZombies: a process with our token that already exited but
// was not reaped (a zombie) holds nothing; the kill must not wait for it.
func TestKillIgnoresZombies(t *testing.T) {
	a := trainertest.MustAgent(t, off)
	tok := wire.NewToken("t1", a.N("n1"))
	cmd := exec.Command("/bin/true")
	cmd.Env = []string{wire.RunEnv + "=" + tok.String()}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	trainertest.WaitFor(t, 5*time.Second, "the zombie", func() bool {
		return len(trainertest.Alive([]int{cmd.Process.Pid})) == 0
	})
	rep, err := a.KillAll(context.Background(), a.N("n1"), false)
	if err != nil {
		t.Fatalf("kill-all: %v (%s)", err, rep)
	}
	if len(rep.Procs) != 0 || len(rep.Survivors) != 0 {
		t.Fatalf("the zombie was taken for a live process: %s", rep)
	}
}

// TestExitRecorded: a program that ends by itself has its exit status
// recorded by the supervisor, by code or by signal.
func TestExitRecorded(t *testing.T) {
	a := trainertest.MustAgent(t)
	ctx := context.Background()
	tests := []struct {
		name, script string
		code         int
		signal       string
	}{
		{"code", "exit 3", 3, ""},
		{"zero", "true", 0, ""},
		{"signal", "kill -TERM $$; sleep 5", -1, "terminated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := "t-" + tt.name
			if _, err := a.Start(ctx, launch(t, id, a.N("n1"), tt.script)); err != nil {
				t.Fatal(err)
			}
			var st wire.Status
			trainertest.WaitFor(t, 10*time.Second, "the recorded exit", func() bool {
				sts, err := a.List(context.Background(), a.N("n1"))
				if err != nil {
					t.Fatal(err)
				}
				for _, s := range sts {
					if s.Trainer == id && s.State == wire.StateExited {
						st = s
						return true
					}
				}
				return false
			})
			if st.Exit.Code != tt.code || st.Exit.Signal != tt.signal {
				t.Fatalf("exit %+v, want code %d signal %q", st.Exit, tt.code, tt.signal)
			}
			rep, err := a.Stop(ctx, a.N("n1"), id)
			if err != nil || rep.Exits[id] != tt.code {
				t.Fatalf("stop after exit: %v %+v", err, rep)
			}
		})
	}
}

// TestListGone: an entry whose processes were killed by someone else
// (a prolog that fell back to another registry) reads as gone, never as
// an exit — with a cgroup, without a look at /proc.
func TestListGone(t *testing.T) {
	modes(t, func(t *testing.T, degraded bool, mode func(*trainertest.AgentConfig)) {
		a := trainertest.MustAgent(t, mode)
		ctx := context.Background()
		s, err := a.Start(ctx, launch(t, "t1", a.N("n1"), "exec sleep 300"))
		if err != nil {
			t.Fatal(err)
		}
		// Another agent, on another registry, kills the node.
		other := trainertest.MustAgent(t, func(c *trainertest.AgentConfig) {
			c.Containment, c.CgroupRoot = a.Config.Containment, a.Config.CgroupRoot
		})
		if _, err := other.KillAll(ctx, a.N("n1"), false); err != nil {
			t.Fatal(err)
		}
		if len(trainertest.Alive([]int{s.PID})) != 0 {
			t.Fatal("the other agent's kill missed the launch")
		}
		sts, err := a.List(ctx, a.N("n1"))
		if err != nil {
			t.Fatal(err)
		}
		if len(sts) != 1 || sts[0].State != wire.StateGone || sts[0].Exit != nil {
			t.Fatalf("list: %+v, want one gone entry without an exit", sts)
		}
	})
}

// TestSweepWritesNothing: a prolog whose configuration did not load kills
// with the built-in paths and a sweep for run tokens: the launch dies,
// and nothing is written where that agent looked (it may be another
// install's) — no registry, no lock, no fence; the launch's own registry
// keeps its entry, which then reads as gone (killed, no exit).
func TestSweepWritesNothing(t *testing.T) {
	a := trainertest.MustAgent(t)
	ctx := context.Background()
	s, err := a.Start(ctx, launch(t, "t1", a.N("n1"), "exec sleep 300"))
	if err != nil {
		t.Fatal(err)
	}
	elsewhere := filepath.Join(t.TempDir(), "builtin")
	sweep := &agent.Agent{Registry: registry.Registry{Dir: filepath.Join(elsewhere, "nodes")}, CgroupRoot: filepath.Join(elsewhere, "cgroup"),
		Sweep: true, AllowRootOwner: true}
	rep, err := sweep.KillAll(ctx, a.N("n1"), true)
	if err != nil {
		t.Fatal(err)
	}
	if len(trainertest.Alive([]int{s.PID})) != 0 {
		t.Fatalf("the sweep missed the launch: %+v", rep)
	}
	if _, err := os.Stat(elsewhere); err == nil {
		if ents, _ := os.ReadDir(elsewhere); len(ents) > 0 {
			t.Fatalf("the sweep wrote into the built-in paths: %v", ents)
		}
	}
	sts, err := a.List(ctx, a.N("n1"))
	if err != nil {
		t.Fatal(err)
	}
	if len(sts) != 1 || sts[0].State != wire.StateGone || sts[0].Exit != nil {
		t.Fatalf("list: %+v, want one gone entry without an exit", sts)
	}
	if _, err := a.Start(ctx, launch(t, "t1", a.N("n1"), "exec sleep 300")); err != nil {
		t.Fatalf("the sweep fenced the node in the launch's registry: %v", err)
	}
	a.KillAll(ctx, a.N("n1"), false)
}

// TestStartIdempotent: the same launch twice starts once; a different
// launch of the same Trainer replaces it; a missing workdir or program is
// a clear error.
func TestStartIdempotent(t *testing.T) {
	a := trainertest.MustAgent(t)
	ctx := context.Background()
	l := launch(t, "t1", a.N("n1"), "exec sleep 300")
	s1, err := a.Start(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	l2 := l
	l2.Token = wire.NewToken("t1", a.N("n1")).String() // a retry after a lost answer gets a new token
	s2, err := a.Start(ctx, l2)
	if err != nil {
		t.Fatal(err)
	}
	if !s2.Existing || s2.PGID != s1.PGID || s2.Token != s1.Token {
		t.Fatalf("second start: %+v, want the first (%d)", s2, s1.PGID)
	}
	l3 := launch(t, "t1", a.N("n1"), "exec sleep 301")
	s3, err := a.Start(ctx, l3)
	if err != nil {
		t.Fatal(err)
	}
	if s3.Existing || s3.PGID == s1.PGID {
		t.Fatalf("a different launch did not replace the first: %+v", s3)
	}
	if n := len(procs(t, func(tk wire.Token, _ agent.Proc) bool { return tk.String() == s1.Token })); n != 0 {
		t.Fatal("the replaced launch still runs")
	}
	bad := launch(t, "t2", a.N("n1"), "true")
	bad.Workdir = "/nonexistent/dir"
	if _, err := a.Start(ctx, bad); err == nil || !strings.Contains(err.Error(), "workdir") {
		t.Fatalf("missing workdir: %v", err)
	}
	bad = launch(t, "t2", a.N("n1"), "true")
	bad.Argv = []string{"no-such-program-here"}
	if _, err := a.Start(ctx, bad); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("missing program: %v", err)
	}
	s4, err := a.Start(ctx, launch(t, "t3", a.N("n1"), "exec sleep 302"))
	if err != nil {
		t.Fatal(err)
	}
	if got := s4.Others; len(got) != 1 || got[0].Trainer != "t1" || got[0].Token != s3.Token {
		t.Fatalf("the start's answer names the node's other launches as %+v, want t1's", got)
	}
	if _, err := a.KillAll(ctx, a.N("n1"), false); err != nil {
		t.Fatal(err)
	}
}

// TestFence: a prolog's kill refuses starts until the epilog's clean or
// the controller's unfence; the fence does not expire.
func TestFence(t *testing.T) {
	a := trainertest.MustAgent(t)
	ctx := context.Background()
	if _, err := a.KillAll(ctx, a.N("n1"), true); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Start(ctx, launch(t, "t1", a.N("n1"), "exec sleep 300")); !errors.Is(err, agent.ErrFenced) {
		t.Fatalf("start on a reclaimed node: %v, want ErrFenced", err)
	}
	a.Now = func() time.Time { return time.Now().Add(30 * 24 * time.Hour) }
	if _, err := a.Start(ctx, launch(t, "t1", a.N("n1"), "exec sleep 300")); !errors.Is(err, agent.ErrFenced) {
		t.Fatalf("a month later, with the job still on it: %v, want ErrFenced", err)
	}
	a.Now = nil
	if _, err := a.Start(ctx, launch(t, "t1", a.N("n2"), "exec sleep 300")); err != nil {
		t.Fatalf("another node is not fenced: %v", err)
	}
	if _, err := a.Clean(ctx, a.N("n1")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Start(ctx, launch(t, "t1", a.N("n1"), "exec sleep 300")); err != nil {
		t.Fatalf("after the epilog: %v", err)
	}
	if _, err := a.KillAll(ctx, a.N("n1"), true); err != nil {
		t.Fatal(err)
	}
	if err := a.Main(ctx, []string{"unfence", a.N("n1")}, nil, &strings.Builder{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Start(ctx, launch(t, "t1", a.N("n1"), "exec sleep 300")); err != nil {
		t.Fatalf("after the controller lifted the fence: %v", err)
	}
	a.KillAll(ctx, a.N("n1"), false)
	a.KillAll(ctx, a.N("n2"), false)
}

// TestOwner: a program runs as its owner (uid, gid, groups from the
// password and group databases), never as root unless allowed; its log
// is its owner's, in a directory of the run's.
func TestOwner(t *testing.T) {
	u := trainertest.MustUser(t, "bftag")
	a := trainertest.MustAgent(t)
	a.AllowRootOwner = false
	ctx := context.Background()
	l := launch(t, "t1", a.N("n1"), "exec sleep 300")
	l.Owner = "root"
	if _, err := a.Start(ctx, l); !errors.Is(err, agent.ErrRootOwner) {
		t.Fatalf("root owner: %v, want ErrRootOwner", err)
	}
	l = launch(t, "t1", a.N("n1"), "exec sleep 300")
	l.Owner, l.Workdir = u.Name, "/"
	s, err := a.Start(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	defer a.KillAll(ctx, a.N("n1"), false)
	st, err := agent.ProcStatus(s.PID)
	if err != nil {
		t.Fatal(err)
	}
	if uids := strings.Fields(st["Uid"]); len(uids) != 4 || slices.ContainsFunc(uids, func(x string) bool { return x != fmt.Sprint(u.UID) }) {
		t.Fatalf("program runs with Uid %q, want %d everywhere", st["Uid"], u.UID)
	}
	if gids := strings.Fields(st["Gid"]); gids[0] != fmt.Sprint(u.GID) {
		t.Fatalf("program runs with Gid %q, want %d", st["Gid"], u.GID)
	}
	for _, c := range []struct {
		path string
		uid  int
		mode os.FileMode
	}{{s.Log, u.UID, 0o600}, {filepath.Dir(s.Log), u.UID, 0o700}, {filepath.Dir(filepath.Dir(s.Log)), 0, 0o755}} {
		fi, err := os.Stat(c.path)
		if err != nil {
			t.Fatal(err)
		}
		if uid := int(fi.Sys().(*syscall.Stat_t).Uid); uid != c.uid || fi.Mode().Perm() != c.mode {
			t.Fatalf("%s: uid %d mode %v, want uid %d mode %v", c.path, uid, fi.Mode().Perm(), c.uid, c.mode)
		}
	}
}

// TestRunDirBeingHandedOver: a run directory root made for this run and
// has not handed over yet (another node's landing of the same run, at the
// same moment, on a shared log directory) is this run's: the start logs
// into it and hands it to the owner, instead of refusing it as another
// user's (seen in CI, under load: a start failed with "owned by uid 0").
func TestRunDirBeingHandedOver(t *testing.T) {
	u := trainertest.MustUser(t, "bftrh")
	a := trainertest.MustAgent(t)
	ctx := context.Background()
	l := launch(t, "handed", a.N("n1"), "echo here; exec sleep 300")
	l.Owner, l.Workdir, l.Run = u.Name, "/", "cccc"
	td := filepath.Join(a.LogDir, "handed")
	if err := os.MkdirAll(filepath.Join(td, "cccc"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(td, 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := a.Start(ctx, l)
	if err != nil {
		t.Fatalf("start into a run directory being handed over: %v", err)
	}
	defer a.KillAll(ctx, a.N("n1"), false)
	if filepath.Dir(s.Log) != filepath.Join(td, "cccc") {
		t.Fatalf("logs to %s, want in %s", s.Log, filepath.Join(td, "cccc"))
	}
	fi, err := os.Stat(filepath.Join(td, "cccc"))
	if err != nil {
		t.Fatal(err)
	}
	if uid := int(fi.Sys().(*syscall.Stat_t).Uid); uid != u.UID || fi.Mode().Perm() != 0o700 {
		t.Fatalf("run directory uid %d mode %v, want the owner's (%d), 0700", uid, fi.Mode().Perm(), u.UID)
	}
}

// TestNameReuse: another user's run of a reused Trainer name gets a new
// log directory; the first user's log is never given to the second, even
// if the second's run claims the first's run id.
func TestNameReuse(t *testing.T) {
	ua, ub := trainertest.MustUser(t, "bftra"), trainertest.MustUser(t, "bftrb")
	a := trainertest.MustAgent(t)
	ctx := context.Background()
	la := launch(t, "same", a.N("n1"), "echo secret-of-a; exec sleep 300")
	la.Owner, la.Workdir, la.Run = ua.Name, "/", "aaaa"
	sa, err := a.Start(ctx, la)
	if err != nil {
		t.Fatal(err)
	}
	trainertest.WaitFor(t, 5*time.Second, "A's output", func() bool {
		b, _ := os.ReadFile(sa.Log)
		return strings.Contains(string(b), "secret-of-a")
	})
	if _, err := a.Stop(ctx, a.N("n1"), "same"); err != nil {
		t.Fatal(err)
	}
	lb := launch(t, "same", a.N("n1"), "cat "+sa.Log+"; exec sleep 300")
	lb.Owner, lb.Workdir, lb.Run = ub.Name, "/", "aaaa"
	if _, err := a.Start(ctx, lb); !errors.Is(err, agent.ErrNotOwner) {
		t.Fatalf("B's launch in A's run directory: %v, want ErrNotOwner", err)
	}
	lb.Run = "bbbb"
	sb, err := a.Start(ctx, lb)
	if err != nil {
		t.Fatal(err)
	}
	defer a.KillAll(ctx, a.N("n1"), false)
	if filepath.Dir(sb.Log) == filepath.Dir(sa.Log) {
		t.Fatalf("B logs into A's directory %s", filepath.Dir(sa.Log))
	}
	fi, err := os.Stat(sa.Log)
	if err != nil {
		t.Fatal(err)
	}
	if uid := int(fi.Sys().(*syscall.Stat_t).Uid); uid != ua.UID {
		t.Fatalf("A's log is now uid %d's", uid)
	}
	trainertest.WaitFor(t, 5*time.Second, "B's program to try", func() bool {
		b, _ := os.ReadFile(sb.Log)
		return strings.Contains(string(b), "Permission denied")
	})
	if b, _ := os.ReadFile(sb.Log); strings.Contains(string(b), "secret-of-a") {
		t.Fatalf("B read A's log:\n%s", b)
	}
}

// TestRegistryMustBeOurs: a registry directory others may write is
// refused — its entries name processes that root kills — while the kill
// itself still happens.
func TestRegistryMustBeOurs(t *testing.T) {
	a := trainertest.MustAgent(t)
	if err := os.MkdirAll(a.Registry.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(a.Registry.Dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := a.KillAll(context.Background(), a.N("n1"), false); !errors.Is(err, registry.ErrUnsafeDir) {
		t.Fatalf("world-writable registry: %v, want ErrUnsafeDir", err)
	}
}
