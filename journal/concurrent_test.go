package journal

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestConcurrentWriters: 200 writer processes, all alive before any
// writes (they wait on one pipe that is closed when the last one has
// started), with every core kept busy by bounded burners; then one
// ingest. Every writer exits 0 and every record is ingested exactly once,
// and the write step is timed. The proof through the real binary, 1,000
// hooks at once, is cmd/bftrainer's TestThousandHooks (and
// `bftrainer-bench hook`); this is the package's own, kept small.
func TestConcurrentWriters(t *testing.T) {
	const callers, reps = 200, 1
	db := mustDB(t)
	burners(t, runtime.NumCPU(), 10*time.Minute)
	start := time.Now()
	for rep := range reps {
		j := mustJournal(t)
		repStart := time.Now()
		b := runConcurrent(t, callers, "write", func(i int) []string {
			return []string{"JOURNAL_TEST_DIR=" + j.Dir, "JOURNAL_TEST_JOB=" + repJob(rep, i)}
		})
		writeWall := time.Since(repStart)
		if len(b.failed) > 0 {
			t.Fatalf("rep %d: %d hooks failed: %s", rep, len(b.failed), strings.Join(b.failed[:min(5, len(b.failed))], "; "))
		}
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
		p50, p99 := quantiles(b.steps)
		c50, c99 := quantiles(b.cpu)
		t.Logf("writers=%d load=%d lost=%d dup=%d write_median_ms=%.3f write_p99_ms=%.3f (rep %d: process cpu p50=%.1fms p99=%.1fms, all %d processes %v, one ingest %v)",
			callers, runtime.NumCPU(), lost, dup, p50, p99, rep, c50, c99, callers, writeWall.Round(time.Millisecond), ingestWall.Round(time.Millisecond))
		if lost != 0 || dup != 0 {
			t.Fatalf("rep %d: %d calls lost, %d recorded more than once", rep, lost, dup)
		}
	}
	t.Logf("%d reps of %d concurrent hooks in %v", reps, callers, time.Since(start).Round(time.Millisecond))
}

func repJob(rep, i int) string { return strconv.Itoa(rep*100000 + i) }

// burst is what a burst of concurrent hook processes did.
type burst struct {
	steps  []time.Duration // the write step, as each process measured it
	cpu    []time.Duration // each process's CPU time, user and system
	failed []string        // the processes that exited non-zero, and why
}

// runConcurrent starts n processes of a role held on one pipe, releases
// them at once and waits for them all.
func runConcurrent(t testing.TB, n int, name string, env func(i int) []string) burst {
	t.Helper()
	gate, release, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer gate.Close()
	defer release.Close()
	var cmds []*exec.Cmd
	var outs, errs []*bytes.Buffer
	for i := range n {
		cmd := role(t, name, append(env(i), "JOURNAL_TEST_WAIT=1")...)
		cmd.Args[0] = name + "-hook"
		var out, stderr bytes.Buffer
		cmd.Stdin, cmd.Stdout, cmd.Stderr = gate, &out, &stderr
		if err := cmd.Start(); err != nil {
			release.Close()
			for _, c := range cmds {
				c.Wait()
			}
			t.Fatalf("start %s %d: %v", name, i, err)
		}
		cmds, outs, errs = append(cmds, cmd), append(outs, &out), append(errs, &stderr)
	}
	release.Close() // every one is alive: go
	var b burst
	for i, cmd := range cmds {
		err := cmd.Wait()
		b.cpu = append(b.cpu, cmd.ProcessState.UserTime()+cmd.ProcessState.SystemTime())
		if err != nil {
			b.failed = append(b.failed, fmt.Sprintf("%s %d: %v: %s", name, i, err, strings.TrimSpace(errs[i].String())))
			continue
		}
		ns, err := strconv.ParseInt(strings.TrimSpace(outs[i].String()), 10, 64)
		if err != nil {
			b.failed = append(b.failed, fmt.Sprintf("%s %d printed %q", name, i, outs[i].String()))
			continue
		}
		b.steps = append(b.steps, time.Duration(ns))
	}
	return b
}
