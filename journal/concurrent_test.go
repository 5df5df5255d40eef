package journal

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestThousandConcurrentHooks: 1,000 hook processes, all alive before
// any writes (they wait on one pipe that is closed when the last one has
// started), with every core kept busy by bounded burners; then one
// ingest. Every hook exits 0 and every call is recorded exactly once.
// Ten times (two with -short). It is heavy: run it alone,
//
//	flock /tmp/bft-heavy.lock go test -race -run ThousandConcurrent -v ./journal/
func TestThousandConcurrentHooks(t *testing.T) {
	const callers = 1000
	reps := 10
	if testing.Short() {
		reps = 2
	}
	db := mustDB(t)
	burners(t, runtime.NumCPU(), 10*time.Minute)
	start := time.Now()
	for rep := range reps {
		j := mustJournal(t)
		repStart := time.Now()
		steps := runConcurrent(t, j, rep, callers)
		writeWall := time.Since(repStart)
		ingestStart := time.Now()
		res := mustIngest(t, j, db, time.Now())
		ingestWall := time.Since(ingestStart)
		if res.Records != callers || res.Left != 0 || res.Bad != 0 || res.InFlight != 0 {
			t.Fatalf("rep %d: ingest %+v, want %d records, nothing bad or left", rep, res, callers)
		}
		counts := jobCounts(t, db)
		lost, dup := 0, 0
		for i := range callers {
			switch c := counts[repJob(rep, i)]; {
			case c == [2]int{}:
				lost++
			case c != [2]int{1, 1}:
				dup++
			}
		}
		if left := entries(t, j.Dir); len(left) != 0 {
			t.Fatalf("rep %d: %d files left after ingest", rep, len(left))
		}
		p50, p99 := quantiles(steps)
		t.Logf("hook context=prolog_slurmctld callers=%d load=%d lost=%d dup=%d median_ms=%.3f p99_ms=%.3f (journal write; rep %d: all %d processes %v, one ingest %v)",
			callers, runtime.NumCPU(), lost, dup, p50, p99, rep, callers, writeWall.Round(time.Millisecond), ingestWall.Round(time.Millisecond))
		if lost != 0 || dup != 0 {
			t.Fatalf("rep %d: %d calls lost, %d recorded more than once", rep, lost, dup)
		}
	}
	t.Logf("%d reps of %d concurrent hooks in %v", reps, callers, time.Since(start).Round(time.Millisecond))
}

func repJob(rep, i int) string { return strconv.Itoa(rep*100000 + i) }

// runConcurrent starts n writer processes held on one pipe, releases
// them at once, and returns each one's write time; every one must exit 0.
func runConcurrent(t *testing.T, j *Journal, rep, n int) []time.Duration {
	t.Helper()
	gate, release, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer gate.Close()
	defer release.Close()
	var procs []*bytes.Buffer
	var errs []*bytes.Buffer
	var waits []func() error
	for i := range n {
		cmd := role(t, "write", "JOURNAL_TEST_DIR="+j.Dir, "JOURNAL_TEST_JOB="+repJob(rep, i), "JOURNAL_TEST_WAIT=1")
		cmd.Args[0] = filepath.Base(cmd.Path) + "-writer"
		var out, stderr bytes.Buffer
		cmd.Stdin, cmd.Stdout, cmd.Stderr = gate, &out, &stderr
		if err := cmd.Start(); err != nil {
			release.Close()
			for _, w := range waits {
				w()
			}
			t.Fatalf("start writer %d: %v", i, err)
		}
		procs, errs, waits = append(procs, &out), append(errs, &stderr), append(waits, cmd.Wait)
	}
	release.Close() // every writer is alive: go
	var steps []time.Duration
	for i, w := range waits {
		if err := w(); err != nil {
			t.Errorf("writer %d: %v: %s", i, err, strings.TrimSpace(errs[i].String()))
			continue
		}
		ns, err := strconv.ParseInt(strings.TrimSpace(procs[i].String()), 10, 64)
		if err != nil {
			t.Errorf("writer %d printed %q", i, procs[i].String())
			continue
		}
		steps = append(steps, time.Duration(ns))
	}
	if t.Failed() {
		t.FailNow()
	}
	return steps
}
