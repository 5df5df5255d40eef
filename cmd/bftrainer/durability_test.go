package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bftrainer/bftrainer/internal/lab/hookburst"
	"github.com/bftrainer/bftrainer/store"
)

// burstEnv is a configuration for hook bursts: no reconciler started by
// the hooks (the burst is about them), no scheduler listing.
func burstEnv(tb testing.TB) testEnv {
	tb.Helper()
	dir := tb.TempDir()
	e := testEnv{dir: dir, config: filepath.Join(dir, "bftrainer.toml"), db: filepath.Join(dir, "db", "bftrainer.db")}
	conf := fmt.Sprintf("database = %q\nspool = %q\n[hooks]\nlog = %q\nspawn_reconciler = \"never\"\n[scheduler]\nsinfo = \"\"\nsqueue = \"\"\n",
		e.db, filepath.Join(dir, "spool"), filepath.Join(dir, "hooks.log"))
	if err := os.WriteFile(e.config, []byte(conf), 0o644); err != nil {
		tb.Fatal(err)
	}
	return e
}

// TestThousandHooks is the proof that hooks never lose an event: 1,000
// controller prologs of the real binary at once, distinct jobs, with
// every core kept busy by bounded burners, then one reconcile: every
// hook exited 0 and logged nothing — but the line of a call starved past
// its deadline whose record its own write still took (late=, in the
// line) — and every call's hook and leave events are recorded exactly
// once. BFTRAINER_HOOK_REPS repeats it (the issue
// asks for 10; the default, 2, keeps the suite short). Heavy: run it
// under the shared lock,
//
//	flock /tmp/bft-heavy.lock go test -run ThousandHooks -v ./cmd/bftrainer/
func TestThousandHooks(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 1,000 hook processes on saturated cores")
	}
	reps := 2
	if v := os.Getenv("BFTRAINER_HOOK_REPS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("BFTRAINER_HOOK_REPS=%q", v)
		}
		reps = n
	}
	bin := MustBuild(t)
	e := burstEnv(t)
	// The reconciler makes the journal, as an install's service does.
	if out, err := e.cmd(bin, nil, "reconcile", "--no-scheduler").CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for rep := range reps {
		res, err := hookburst.Run(context.Background(), hookburst.Options{Bin: bin, Config: e.config, DB: e.db, Log: filepath.Join(e.dir, "hooks.log"),
			Callers: 1000, Load: runtime.NumCPU(), JobBase: rep * 1000})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("rep %d: %s", rep, res.Line())
		if len(res.Failed) > 0 {
			t.Errorf("rep %d: %d hooks failed, e.g. %s", rep, len(res.Failed), strings.Join(res.Failed[:min(3, len(res.Failed))], "; "))
		}
		if res.Lost != 0 || res.Dup != 0 {
			t.Errorf("rep %d: %d calls lost, %d recorded more than once", rep, res.Lost, res.Dup)
		}
		if res.Logged != "" {
			t.Errorf("rep %d: the hooks logged:\n%s", rep, res.Logged)
		}
		if t.Failed() {
			return
		}
	}
}

// TestReadLockDoesNotDelayHooks: an ordinary user holding a read lock on
// bytes 120–127 of the database's -shm file (the WAL write and
// checkpoint locks: what made every hook wait its busy timeout and drop
// its event) changes nothing for the real hook binary: each controller
// prolog exits 0 and leaves its record in the journal while the lock is
// held, and once it is released one reconcile records them all, once.
// The hooks' times with and without the lock are printed, not asserted.
// (journal's TestReadLockDoesNotDelayHook shows the same lock stopping a
// direct SQLite writer.)
func TestReadLockDoesNotDelayHooks(t *testing.T) {
	if testing.Short() {
		t.Skip("creates a user")
	}
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("the lock holder is /usr/bin/python3 (fcntl.lockf): not installed")
	}
	bin := MustBuild(t)
	e := burstEnv(t)
	openUp(t, e.dir)
	if out, err := e.cmd(bin, nil, "reconcile", "--no-scheduler").CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	const n = 20
	calls := func(base int) []time.Duration {
		t.Helper()
		var took []time.Duration
		for i := range n {
			c := e.cmd(bin, []string{"SLURM_SCRIPT_CONTEXT=prolog_slurmctld", "SLURM_JOB_ID=" + strconv.Itoa(base+i), "SLURM_JOB_NODELIST=c1"})
			start := time.Now()
			if out, err := c.CombinedOutput(); err != nil || len(out) > 0 {
				t.Fatalf("hook %d: %v %s", base+i, err, out)
			}
			took = append(took, time.Since(start))
		}
		return took
	}
	free := calls(1000)

	u := mustUser(t, "bftl")
	lock := exec.Command("/usr/bin/python3", "-c", `import fcntl, os, sys
f = open(sys.argv[1], "rb")
fcntl.lockf(f, fcntl.LOCK_SH | fcntl.LOCK_NB, 8, 120, os.SEEK_SET)
print("locked", flush=True)
sys.stdin.read()`, e.db+"-shm")
	lock.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.uid, Gid: u.gid}}
	release, err := lock.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	said, err := lock.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	lock.Stderr = os.Stderr
	if err := lock.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { release.Close(); lock.Process.Kill(); lock.Wait() })
	if line, err := bufio.NewReader(said).ReadString('\n'); err != nil || line != "locked\n" {
		t.Fatalf("the lock holder said %q, %v", line, err)
	}
	// The lock is held, by that user's process: what SQLite's writers
	// (and checkpoints) must wait for.
	f, err := os.Open(e.db + "-shm")
	if err != nil {
		t.Fatal(err)
	}
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 120, Len: 8}
	err = unix.FcntlFlock(f.Fd(), unix.F_GETLK, &lk)
	f.Close()
	if err != nil || lk.Type != unix.F_RDLCK || int(lk.Pid) != lock.Process.Pid {
		t.Fatalf("no read lock of the holder's on the -shm file: %+v %v", lk, err)
	}
	locked := calls(2000)
	if got := journalFiles(t, filepath.Join(filepath.Dir(e.db), "journal")); got != 2*n {
		t.Fatalf("%d records in the journal while the lock is held, want %d", got, 2*n)
	}
	release.Close()
	if err := lock.Wait(); err != nil {
		t.Fatalf("lock holder: %v", err)
	}
	if out, err := e.cmd(bin, nil, "reconcile", "--no-scheduler").CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	db := e.openDB(t)
	evs, err := db.Events(context.Background(), store.Filter{Kinds: []store.Kind{store.KindHook, store.KindLeave}})
	if err != nil {
		t.Fatal(err)
	}
	per := map[string]int{}
	for _, ev := range evs {
		per[ev.Job]++
	}
	for _, base := range []int{1000, 2000} {
		for i := range n {
			if got := per[strconv.Itoa(base+i)]; got != 2 {
				t.Errorf("job %d: %d events, want its hook and its leave", base+i, got)
			}
		}
	}
	if b, _ := os.ReadFile(filepath.Join(e.dir, "hooks.log")); len(b) > 0 {
		t.Errorf("the hooks logged:\n%s", b)
	}
	q := func(ds []time.Duration, p float64) float64 {
		ms := make([]float64, len(ds))
		for i, d := range ds {
			ms[i] = float64(d.Microseconds()) / 1000
		}
		slices.Sort(ms)
		return store.Quantile(ms, p)
	}
	t.Logf("controller prolog, exec to exit: p50 %.2f ms p99 %.2f ms without the lock; p50 %.2f ms p99 %.2f ms under a user's read lock (ratio %.2f)",
		q(free, 0.5), q(free, 0.99), q(locked, 0.5), q(locked, 0.99), q(locked, 0.5)/q(free, 0.5))
}

// journalFiles counts the records waiting in a journal directory.
func journalFiles(tb testing.TB, dir string) int {
	tb.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		tb.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".ev") {
			n++
		}
	}
	return n
}
