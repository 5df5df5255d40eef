package trainer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// launch is a test launch of a shell script on a node.
func launch(tb testing.TB, trainer, node, script string) Launch {
	tb.Helper()
	return Launch{Trainer: trainer, Node: node, Owner: currentUserName(tb), Argv: []string{"/bin/sh", "-c", script},
		Workdir: tb.TempDir(), Token: NewToken(trainer, node).String()}
}

// TestStopKillsGroupAndEscapees starts a program that leaves every kind of
// descendant behind — one in its group, one that left it with setsid, a
// double-forked daemon — and checks that a stop leaves none of them,
// reports each, and forgets the entry.
func TestStopKillsGroupAndEscapees(t *testing.T) {
	a := MustAgent(t)
	ctx := context.Background()
	dir := t.TempDir()
	script := fmt.Sprintf(`sleep 300 &
setsid sleep 301 &
(setsid sh -c 'sleep 302 & echo $! > %s/daemon' &)
echo $$ > %s/main
exec sleep 303`, dir, dir)
	l := launch(t, "t1", "n1", script)
	s, err := a.Start(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	if s.Existing || s.PGID <= 1 || s.PID <= 1 {
		t.Fatalf("started: %+v", s)
	}
	waitFor(t, 5*time.Second, "all four sleeps", func() bool {
		return len(tokenProcs(t, func(tk Token, p Proc) bool { return tk.Trainer == "t1" && p.Comm == "sleep" })) == 4
	})
	// Another Trainer on the same node, and the same Trainer on another
	// node, must survive the stop.
	other, err := a.Start(ctx, launch(t, "t2", "n1", "exec sleep 310"))
	if err != nil {
		t.Fatal(err)
	}
	elsewhere, err := a.Start(ctx, launch(t, "t1", "n2", "exec sleep 311"))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := a.Stop(ctx, "n1", "t1")
	if err != nil {
		t.Fatal(err)
	}
	if left := tokenProcs(t, func(tk Token, _ Proc) bool { return tk == mustToken(t, l.Token) }); len(left) > 0 {
		t.Fatalf("processes survived the stop: %+v", left)
	}
	if len(rep.Groups) != 1 || rep.Groups[0].PGID != s.PGID {
		t.Fatalf("groups killed: %+v, want the supervisor's group %d", rep.Groups, s.PGID)
	}
	if len(rep.Procs) != 2 {
		t.Fatalf("escapees killed one by one: %+v, want the setsid sleep and the daemon", rep.Procs)
	}
	if !slices.Equal(rep.Removed, []string{"t1"}) {
		t.Fatalf("removed %v", rep.Removed)
	}
	if _, ok, _ := a.Registry.Entry("n1", "t1"); ok {
		t.Fatal("entry still recorded")
	}
	for _, keep := range []Started{other, elsewhere} {
		if n := len(tokenProcs(t, func(tk Token, _ Proc) bool { return tk.String() == keep.Token })); n == 0 {
			t.Fatalf("%s on %s was killed too", keep.Trainer, keep.Node)
		}
	}
	t.Logf("report: %s", rep)

	// KillAll takes everything on n1, and only on n1.
	rep, err = a.KillAll(ctx, "n1", false)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Count() != 1 {
		t.Fatalf("kill-all killed %d groups, want 1: %s", rep.Count(), rep)
	}
	if n := len(tokenProcs(t, func(tk Token, p Proc) bool { return tk.Node == "n1" })); n != 0 {
		t.Fatalf("%d processes left on n1", n)
	}
	if n := len(tokenProcs(t, func(tk Token, p Proc) bool { return tk.Node == "n2" })); n == 0 {
		t.Fatal("n2 was killed by n1's kill-all")
	}
	if _, err := a.KillAll(ctx, "n2", false); err != nil {
		t.Fatal(err)
	}
}

func mustToken(tb testing.TB, s string) Token {
	tb.Helper()
	t, err := ParseToken(s)
	if err != nil {
		tb.Fatal(err)
	}
	return t
}

// TestKillIgnoresZombies: a process with our token that already exited but
// was not reaped (a zombie) holds nothing; the kill must not wait for it.
func TestKillIgnoresZombies(t *testing.T) {
	a := MustAgent(t)
	tok := NewToken("t1", "n1")
	cmd := exec.Command("/bin/true")
	cmd.Env = []string{RunEnv + "=" + tok.String()}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	waitFor(t, 5*time.Second, "the zombie", func() bool {
		p, ok := readProc(cmd.Process.Pid)
		return ok && p.Dead()
	})
	start := time.Now()
	rep, err := a.KillAll(context.Background(), "n1", false)
	if err != nil {
		t.Fatalf("kill-all: %v (%s)", err, rep)
	}
	if time.Since(start) > time.Second {
		t.Fatalf("kill-all waited %v for a zombie", time.Since(start))
	}
}

// TestExitRecorded: a program that ends by itself has its exit status
// recorded by the supervisor, by code or by signal.
func TestExitRecorded(t *testing.T) {
	a := MustAgent(t)
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
			if _, err := a.Start(ctx, launch(t, id, "n1", tt.script)); err != nil {
				t.Fatal(err)
			}
			var st Status
			waitFor(t, 10*time.Second, "the recorded exit", func() bool {
				sts, err := a.List(context.Background(), "n1")
				if err != nil {
					t.Fatal(err)
				}
				for _, s := range sts {
					if s.Trainer == id && s.State == StateExited {
						st = s
						return true
					}
				}
				return false
			})
			if st.Exit.Code != tt.code || st.Exit.Signal != tt.signal {
				t.Fatalf("exit %+v, want code %d signal %q", st.Exit, tt.code, tt.signal)
			}
			rep, err := a.Stop(ctx, "n1", id)
			if err != nil || rep.Exits[id] != tt.code {
				t.Fatalf("stop after exit: %v %+v", err, rep)
			}
		})
	}
}

// TestStartIdempotent: the same launch twice starts once; a different
// launch of the same Trainer replaces it; a missing workdir or program is
// a clear error.
func TestStartIdempotent(t *testing.T) {
	a := MustAgent(t)
	ctx := context.Background()
	l := launch(t, "t1", "n1", "exec sleep 300")
	s1, err := a.Start(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	l2 := l
	l2.Token = NewToken("t1", "n1").String() // a retry after a lost answer gets a new token
	s2, err := a.Start(ctx, l2)
	if err != nil {
		t.Fatal(err)
	}
	if !s2.Existing || s2.PGID != s1.PGID || s2.Token != s1.Token {
		t.Fatalf("second start: %+v, want the first (%d)", s2, s1.PGID)
	}
	l3 := launch(t, "t1", "n1", "exec sleep 301")
	s3, err := a.Start(ctx, l3)
	if err != nil {
		t.Fatal(err)
	}
	if s3.Existing || s3.PGID == s1.PGID {
		t.Fatalf("a different launch did not replace the first: %+v", s3)
	}
	if n := len(tokenProcs(t, func(tk Token, _ Proc) bool { return tk.String() == s1.Token })); n != 0 {
		t.Fatal("the replaced launch still runs")
	}
	bad := launch(t, "t2", "n1", "true")
	bad.Workdir = "/nonexistent/dir"
	if _, err := a.Start(ctx, bad); err == nil || !strings.Contains(err.Error(), "workdir") {
		t.Fatalf("missing workdir: %v", err)
	}
	bad = launch(t, "t2", "n1", "true")
	bad.Argv = []string{"no-such-program-here"}
	if _, err := a.Start(ctx, bad); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("missing program: %v", err)
	}
	if _, err := a.KillAll(ctx, "n1", false); err != nil {
		t.Fatal(err)
	}
}

// TestFence: a prolog's kill refuses starts until the epilog's clean.
func TestFence(t *testing.T) {
	a := MustAgent(t)
	ctx := context.Background()
	if _, err := a.KillAll(ctx, "n1", true); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Start(ctx, launch(t, "t1", "n1", "exec sleep 300")); !errors.Is(err, ErrFenced) {
		t.Fatalf("start on a reclaimed node: %v, want ErrFenced", err)
	}
	if _, err := a.Start(ctx, launch(t, "t1", "n2", "exec sleep 300")); err != nil {
		t.Fatalf("another node is not fenced: %v", err)
	}
	if _, err := a.Clean(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Start(ctx, launch(t, "t1", "n1", "exec sleep 300")); err != nil {
		t.Fatalf("after the epilog: %v", err)
	}
	a.KillAll(ctx, "n1", false)
	a.KillAll(ctx, "n2", false)
}

// TestOwner: a program runs as its owner (uid, gid, groups from the
// password and group databases), never as root unless allowed.
func TestOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to start programs as another user")
	}
	a := MustAgent(t)
	a.AllowRootOwner = false
	ctx := context.Background()
	l := launch(t, "t1", "n1", "exec sleep 300")
	l.Owner = "root"
	if _, err := a.Start(ctx, l); !errors.Is(err, ErrRootOwner) {
		t.Fatalf("root owner: %v, want ErrRootOwner", err)
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		t.Skip("no user nobody")
	}
	l = launch(t, "t1", "n1", "exec sleep 300")
	l.Owner, l.Workdir = "nobody", "/"
	s, err := a.Start(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	defer a.KillAll(ctx, "n1", false)
	st, err := ProcStatus(s.PID)
	if err != nil {
		t.Fatal(err)
	}
	if uids := strings.Fields(st["Uid"]); len(uids) != 4 || slices.ContainsFunc(uids, func(x string) bool { return x != u.Uid }) {
		t.Fatalf("program runs with Uid %q, want %s everywhere", st["Uid"], u.Uid)
	}
	if gids := strings.Fields(st["Gid"]); gids[0] != u.Gid {
		t.Fatalf("program runs with Gid %q, want %s", st["Gid"], u.Gid)
	}
	// Its log is its owner's to read, in a directory only root writes.
	fi, err := os.Stat(s.Log)
	if err != nil {
		t.Fatal(err)
	}
	if uid := fi.Sys().(*syscall.Stat_t).Uid; fmt.Sprint(uid) != u.Uid {
		t.Fatalf("log owned by %d, want %s", uid, u.Uid)
	}
	if fi, _ := os.Stat(filepath.Dir(s.Log)); fi.Sys().(*syscall.Stat_t).Uid != 0 || fi.Mode().Perm()&0o022 != 0 {
		t.Fatalf("log directory %v is not root's alone", fi.Mode())
	}
}

// TestRegistryMustBeOurs: a registry directory others may write is
// refused — its entries name process groups that root kills.
func TestRegistryMustBeOurs(t *testing.T) {
	a := MustAgent(t)
	if err := os.MkdirAll(a.Registry.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(a.Registry.Dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := a.KillAll(context.Background(), "n1", false); !errors.Is(err, ErrUnsafeDir) {
		t.Fatalf("world-writable registry: %v, want ErrUnsafeDir", err)
	}
}
