package journal

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
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/store"
)

// writer is one way a hook records its call, run as its own process.
type writer struct {
	name string
	env  func(job string) []string
}

// runWriter runs one hook process and returns the time its write step
// took (as it measured it) and the whole process's wall time.
func runWriter(tb testing.TB, w writer, job string) (step, wall time.Duration, err error) {
	tb.Helper()
	cmd := role(tb, w.name, w.env(job)...)
	cmd.Args[0] = w.name
	start := time.Now()
	out, err := cmd.Output()
	wall = time.Since(start)
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return 0, wall, fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
		}
		return 0, wall, err
	}
	ns, perr := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if perr != nil {
		return 0, wall, fmt.Errorf("%s printed %q", w.name, out)
	}
	return time.Duration(ns), wall, nil
}

// writers are the journal (with and without fsync) and today's direct
// SQLite append, on the same disk.
func writers(tb testing.TB, j *Journal, dbPath string, busy time.Duration) []writer {
	return []writer{
		{"write", func(job string) []string { return []string{"JOURNAL_TEST_DIR=" + j.Dir, "JOURNAL_TEST_JOB=" + job} }},
		{"write", func(job string) []string {
			return []string{"JOURNAL_TEST_DIR=" + j.Dir, "JOURNAL_TEST_JOB=" + job, "JOURNAL_TEST_SYNC=1"}
		}},
		{"sqlite", func(job string) []string {
			return []string{"JOURNAL_TEST_DB=" + dbPath, "JOURNAL_TEST_JOB=" + job, "JOURNAL_TEST_BUSY=" + busy.String()}
		}},
	}
}

// busyDisk rewrites 64 MiB of path and syncs it, over and over, until
// cleanup.
func busyDisk(b *testing.B, path string) {
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 1<<20)
		for {
			f, err := os.Create(path)
			if err != nil {
				return
			}
			for range 64 {
				f.Write(buf)
			}
			f.Sync()
			f.Close()
			select {
			case <-stop:
				os.Remove(path)
				return
			default:
			}
		}
	}()
	b.Cleanup(func() { close(stop); <-done })
}

// drain is the reconciler's part, off the hooks' path: it keeps the
// directory and the log as short as they are in service.
func drain(b *testing.B, j *Journal, db *store.DB) {
	if _, err := j.Ingest(context.Background(), db, time.Now()); err != nil {
		b.Fatal(err)
	}
	db.Checkpoint(context.Background())
}

var writerLabels = []string{"journal", "journal_fsync", "sqlite"}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func quantiles(ds []time.Duration) (p50, p99 float64) {
	xs := make([]float64, len(ds))
	for i, d := range ds {
		xs[i] = ms(d)
	}
	slices.Sort(xs)
	return store.Quantile(xs, 0.5), store.Quantile(xs, 0.99)
}

// BenchmarkHookWrite: a hook's cost to record its call, one process per
// call as the scheduler runs it, the three ways interleaved in one run on
// the same disk (the database's, beside which the journal lives): the
// write step as the process measured it, and exec to exit. Run it alone:
//
//	flock /tmp/bft-heavy.lock go test -run '^$' -bench HookWrite -benchtime 300x ./journal/
func BenchmarkHookWrite(b *testing.B) { hookWrite(b, false) }

// BenchmarkHookWriteDiskBusy is BenchmarkHookWrite while another process
// on the machine writes to the same disk and syncs (as slurmctld saving
// its state does): what an fsync on the hook's path would wait for.
func BenchmarkHookWriteDiskBusy(b *testing.B) { hookWrite(b, true) }

func hookWrite(b *testing.B, diskBusy bool) {
	j, db := mustJournal(b), mustDB(b)
	dbPath := db.Path()
	if diskBusy {
		busyDisk(b, filepath.Join(b.TempDir(), "busy"))
	}
	ws := writers(b, j, dbPath, 2*time.Second)
	steps := make([][]time.Duration, len(ws))
	walls := make([][]time.Duration, len(ws))
	b.ResetTimer()
	for i := range b.N {
		for k, w := range ws {
			step, wall, err := runWriter(b, w, itoa(i))
			if err != nil {
				b.Fatal(err)
			}
			steps[k], walls[k] = append(steps[k], step), append(walls[k], wall)
		}
		if i%100 == 99 {
			drain(b, j, db)
		}
	}
	b.StopTimer()
	for k, label := range writerLabels {
		s50, s99 := quantiles(steps[k])
		w50, w99 := quantiles(walls[k])
		b.ReportMetric(s50, label+"_p50_ms")
		b.ReportMetric(s99, label+"_p99_ms")
		b.Logf("hook write=%s calls=%d step_p50_ms=%.3f step_p99_ms=%.3f process_p50_ms=%.3f process_p99_ms=%.3f",
			label, len(steps[k]), s50, s99, w50, w99)
	}
	j50, _ := quantiles(steps[0])
	q50, _ := quantiles(steps[2])
	b.Logf("hook write ratio sqlite/journal p50=%.1f", q50/j50)
}

// TestReadLockDoesNotDelayHook: an ordinary user holding a read lock on
// bytes 120–127 of the database's -shm file (what stalled every hook
// before) does not stop a journal write: every hook writes its record,
// complete, while the lock is held — the lock is released only after —
// whereas a direct SQLite append fails (busy timeout 0) or waits out its
// timeout. The times are printed, not asserted.
func TestReadLockDoesNotDelayHook(t *testing.T) {
	j, db := mustJournal(t), mustDB(t)
	if _, err := db.Append(context.Background(), hookRecord("0", t0).Events...); err != nil {
		t.Fatal(err)
	}
	lock := role(t, "rdlock", "JOURNAL_TEST_LOCK="+db.Path()+"-shm")
	release, err := lock.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := lock.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := lock.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { release.Close(); lock.Process.Kill(); lock.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "locked\n" {
		t.Fatalf("lock holder said %q, %v", line, err)
	}

	const n = 20
	ws := writers(t, j, db.Path(), 0)
	var steps []time.Duration
	for i := range n {
		step, _, err := runWriter(t, ws[0], itoa(i+1))
		if err != nil {
			t.Fatalf("journal write %d under the read lock: %v", i, err)
		}
		steps = append(steps, step)
	}
	p50, p99 := quantiles(steps)
	t.Logf("under a user's read lock: journal write p50=%.3f ms p99=%.3f ms (%d hooks, all recorded)", p50, p99, n)
	if _, _, err := runWriter(t, ws[2], "100"); err == nil {
		t.Fatal("a direct SQLite append (busy timeout 0) succeeded under the read lock: the test does not hold the lock it means to")
	} else {
		t.Logf("under a user's read lock: direct SQLite append, busy timeout 0: %v", err)
	}
	wait := writers(t, j, db.Path(), 300*time.Millisecond)[2]
	_, wall, err := runWriter(t, wait, "101")
	t.Logf("under a user's read lock: direct SQLite append, busy timeout 300ms: %v after %v", err, wall.Round(time.Millisecond))
	if err == nil {
		t.Fatal("a direct SQLite append succeeded under the read lock")
	}

	release.Close()
	if err := lock.Wait(); err != nil {
		t.Fatalf("lock holder: %v", err)
	}
	res := mustIngest(t, j, db, time.Now())
	if res.Records != n {
		t.Fatalf("ingest: %+v, want %d records", res, n)
	}
	counts := jobCounts(t, db)
	for i := range n {
		if c := counts[itoa(i+1)]; c != [2]int{1, 1} {
			t.Fatalf("job %d recorded %v times, want once each", i+1, c)
		}
	}
}

// BenchmarkHookBurst: a burst of 200 concurrent hook processes with
// every core busy, three ways: the journal; a direct SQLite append that
// never waits (busy timeout 0, the journal's fallback if it were kept);
// and today's append, waiting up to 1 s (hooks.deadline/2). It reports how
// many of the non-waiting appends would have fallen back to the journal,
// and the write steps' p50 and p99. Run it alone:
//
//	flock /tmp/bft-heavy.lock go test -run '^$' -bench HookBurst -benchtime 3x ./journal/
func BenchmarkHookBurst(b *testing.B) {
	const n = 200
	burners(b, runtime.NumCPU(), 10*time.Minute)
	j, db := mustJournal(b), mustDB(b)
	dbPath := db.Path()
	type way struct {
		label, role string
		env         func(i int) []string
	}
	ways := []way{
		{"journal", "write", func(i int) []string { return []string{"JOURNAL_TEST_DIR=" + j.Dir, "JOURNAL_TEST_JOB=" + itoa(i)} }},
		{"sqlite_busy0", "sqlite", func(i int) []string {
			return []string{"JOURNAL_TEST_DB=" + dbPath, "JOURNAL_TEST_JOB=" + itoa(i), "JOURNAL_TEST_BUSY=0s"}
		}},
		{"sqlite_busy1s", "sqlite", func(i int) []string {
			return []string{"JOURNAL_TEST_DB=" + dbPath, "JOURNAL_TEST_JOB=" + itoa(i), "JOURNAL_TEST_BUSY=1s"}
		}},
	}
	steps := make([][]time.Duration, len(ways))
	failed := make([]int, len(ways))
	b.ResetTimer()
	for range b.N {
		for k, w := range ways {
			r := runConcurrent(b, n, w.role, w.env)
			steps[k], failed[k] = append(steps[k], r.steps...), failed[k]+len(r.failed)
		}
		drain(b, j, db)
	}
	b.StopTimer()
	for k, w := range ways {
		p50, p99 := quantiles(steps[k])
		b.ReportMetric(float64(failed[k])/float64(n*b.N), w.label+"_failed/call")
		b.Logf("hook burst=%d load=%d write=%s calls=%d failed=%d step_p50_ms=%.3f step_p99_ms=%.3f",
			n, runtime.NumCPU(), w.label, n*b.N, failed[k], p50, p99)
	}
}
