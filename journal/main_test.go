package journal

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bftrainer/bftrainer/store"
)

// The test binary doubles as the processes the tests need: a hook that
// writes one record, today's hook that appends to SQLite directly, a CPU
// burner and an ordinary user holding a read lock. roleEnv names the role.
const roleEnv = "JOURNAL_TEST_ROLE"

func TestMain(m *testing.M) {
	if role := os.Getenv(roleEnv); role != "" {
		os.Exit(runRole(role))
	}
	code := m.Run()
	if helper.dir != "" {
		os.RemoveAll(helper.dir)
	}
	os.Exit(code)
}

// helper is the binary the helper processes run: this one, or under the
// race detector a plain build of the same tests, made once.
var helper struct {
	once      sync.Once
	dir, path string
	err       error
}

func helperExe(tb testing.TB) string {
	tb.Helper()
	helper.once.Do(func() {
		if !raceEnabled {
			helper.path, helper.err = os.Executable()
			return
		}
		if helper.dir, helper.err = os.MkdirTemp("", "journal-helper-"); helper.err != nil {
			return
		}
		goBin, err := exec.LookPath("go")
		if err != nil {
			helper.err = err
			return
		}
		helper.path = filepath.Join(helper.dir, "journal.test")
		out, err := exec.Command(goBin, "test", "-c", "-o", helper.path, "github.com/bftrainer/bftrainer/journal").CombinedOutput()
		if err != nil {
			helper.err = fmt.Errorf("build the helper binary without -race: %v\n%s", err, out)
		}
	})
	if helper.err != nil {
		tb.Fatal(helper.err)
	}
	return helper.path
}

func runRole(role string) int {
	var err error
	switch role {
	case "write":
		err = roleWrite()
	case "sqlite":
		err = roleSQLite()
	case "burn":
		err = roleBurn()
	case "rdlock":
		err = roleReadLock()
	case "ingest":
		err = roleIngest()
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", role, err)
		return 1
	}
	return 0
}

// hookRecord is what the controller's prolog writes for job: its hook
// event and the leave of its node.
func hookRecord(job string, at time.Time) Record {
	node := "n" + job
	return Record{At: at, Events: []store.Event{
		{At: at, Kind: store.KindHook, Source: "slurm", Context: "prolog_slurmctld", Job: job, User: "alice",
			Nodes: []string{node}, Ms: 0.5, HasMs: true, Detail: []byte(`{"action":"reclaim"}`)},
		{At: at.Add(time.Microsecond), Kind: store.KindLeave, Source: "slurm", Context: "prolog_slurmctld", Job: job,
			User: "alice", Nodes: []string{node}},
	}}
}

// waitGo blocks until stdin closes: the parent's start signal, so that
// every writer is alive before any writes.
func waitGo() {
	if os.Getenv("JOURNAL_TEST_WAIT") != "" {
		io.Copy(io.Discard, os.Stdin)
	}
}

// roleWrite writes one record for JOURNAL_TEST_JOB and prints how long
// the write took, in nanoseconds.
func roleWrite() error {
	j := &Journal{Dir: os.Getenv("JOURNAL_TEST_DIR"), Fallback: os.Getenv("JOURNAL_TEST_FALLBACK"), Sync: os.Getenv("JOURNAL_TEST_SYNC") != ""}
	waitGo()
	start := time.Now()
	if _, err := j.Write(hookRecord(os.Getenv("JOURNAL_TEST_JOB"), start)); err != nil {
		return err
	}
	fmt.Println(time.Since(start).Nanoseconds())
	return nil
}

// roleSQLite is today's hook: open the database as a hook does
// (ephemeral, a busy timeout) and append the same events.
func roleSQLite() error {
	busy, err := time.ParseDuration(os.Getenv("JOURNAL_TEST_BUSY"))
	if err != nil {
		return err
	}
	if busy == 0 {
		// store.Options reads 0 as its default; 1 ns is _busy_timeout=0
		// (whole milliseconds): one attempt, no waiting.
		busy = time.Nanosecond
	}
	waitGo()
	start := time.Now()
	ctx := context.Background()
	db, err := store.Open(ctx, os.Getenv("JOURNAL_TEST_DB"), store.Options{BusyTimeout: busy, Ephemeral: true})
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.Append(ctx, hookRecord(os.Getenv("JOURNAL_TEST_JOB"), start).Events...); err != nil {
		return err
	}
	fmt.Println(time.Since(start).Nanoseconds())
	return nil
}

// roleBurn spins until JOURNAL_TEST_BURN has passed or stdin closes
// (the parent is gone): bounded either way.
func roleBurn() error {
	d, err := time.ParseDuration(os.Getenv("JOURNAL_TEST_BURN"))
	if err != nil {
		return err
	}
	stop := time.Now().Add(d)
	done := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(done) }()
	for x := 0; time.Now().Before(stop); x++ {
		select {
		case <-done:
			return nil
		default:
		}
		for i := 0; i < 1e5; i++ {
			x ^= i * x
		}
	}
	return nil
}

// roleReadLock is an ordinary user holding a read lock on bytes 120–127
// of the file JOURNAL_TEST_LOCK (the -shm file's WAL write and checkpoint
// locks), until stdin closes.
func roleReadLock() error {
	f, err := os.Open(os.Getenv("JOURNAL_TEST_LOCK"))
	if err != nil {
		return err
	}
	lk := unix.Flock_t{Type: unix.F_RDLCK, Whence: io.SeekStart, Start: 120, Len: 8}
	if err := unix.FcntlFlock(f.Fd(), unix.F_SETLK, &lk); err != nil {
		return err
	}
	fmt.Println("locked")
	io.Copy(io.Discard, os.Stdin)
	return nil
}

// roleIngest ingests JOURNAL_TEST_DIR into JOURNAL_TEST_DB, a few
// records at a time, saying "batch" after each call, until it is empty.
func roleIngest() error {
	batch, err := strconv.Atoi(os.Getenv("JOURNAL_TEST_BATCH"))
	if err != nil {
		return err
	}
	ctx := context.Background()
	db, err := store.Open(ctx, os.Getenv("JOURNAL_TEST_DB"), store.Options{})
	if err != nil {
		return err
	}
	defer db.Close()
	j := &Journal{Dir: os.Getenv("JOURNAL_TEST_DIR"), maxBatch: batch}
	for {
		res, err := j.Ingest(ctx, db, time.Now())
		if err != nil {
			return err
		}
		fmt.Println("batch")
		if res.Left == 0 {
			return nil
		}
	}
}

// role returns the test binary run as role with the given settings.
func role(tb testing.TB, role string, env ...string) *exec.Cmd {
	tb.Helper()
	cmd := exec.Command(helperExe(tb))
	cmd.Env = append(os.Environ(), append([]string{roleEnv + "=" + role}, env...)...)
	return cmd
}

// burners saturates every core with bounded burners, stopped at cleanup.
func burners(tb testing.TB, n int, d time.Duration) {
	tb.Helper()
	for range n {
		cmd := role(tb, "burn", "JOURNAL_TEST_BURN="+d.String())
		in, err := cmd.StdinPipe()
		if err != nil {
			tb.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() {
			in.Close()
			cmd.Process.Kill()
			cmd.Wait()
		})
	}
}

// mustDB opens a database in a new temporary directory.
func mustDB(tb testing.TB) *store.DB {
	tb.Helper()
	return mustOpen(tb, filepath.Join(tb.TempDir(), "bftrainer.db"))
}

func mustOpen(tb testing.TB, path string) *store.DB {
	tb.Helper()
	db, err := store.Open(context.Background(), path, store.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

// mustJournal makes a journal directory in a new temporary directory.
func mustJournal(tb testing.TB) *Journal {
	tb.Helper()
	dir := filepath.Join(tb.TempDir(), "journal")
	if err := Create(dir, -1); err != nil {
		tb.Fatal(err)
	}
	return &Journal{Dir: dir}
}

func mustWrite(tb testing.TB, j *Journal, r Record) Written {
	tb.Helper()
	w, err := j.Write(r)
	if err != nil {
		tb.Fatal(err)
	}
	return w
}

func mustIngest(tb testing.TB, j *Journal, db *store.DB, now time.Time) Result {
	tb.Helper()
	res, err := j.Ingest(context.Background(), db, now)
	if err != nil {
		tb.Fatal(err)
	}
	return res
}

// entries lists a directory's names.
func entries(tb testing.TB, dir string) []string {
	tb.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		tb.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// jobCounts counts the hook and leave events per job.
func jobCounts(tb testing.TB, db *store.DB) map[string][2]int {
	tb.Helper()
	evs, err := db.Events(context.Background(), store.Filter{Kinds: []store.Kind{store.KindHook, store.KindLeave}})
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string][2]int{}
	for _, e := range evs {
		c := out[e.Job]
		if e.Kind == store.KindHook {
			c[0]++
		} else {
			c[1]++
		}
		out[e.Job] = c
	}
	return out
}

func itoa(i int) string { return strconv.Itoa(i) }
