package trainer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/trainer/agent"
	"github.com/bftrainer/bftrainer/trainer/wire"
)

// trainLines are contrib/trainer/train.py's progress log, torchrun form:
// two ranks per step, then a restart from the checkpoint at step 30
// (fewer samples), then a line torn by a kill.
const trainLines = `1795984786.971 node=B pid=430 rank=1 world=2 restart=0 step=31 samples=1984 loss=0.547927
1795984787.102 node=A pid=431 rank=0 world=2 restart=0 step=31 samples=1984 loss=0.547927
1795984787.301 node=A pid=431 rank=0 world=2 restart=0 step=32 samples=2048 loss=0.51
some other output
1795984795.500 node=A pid=512 rank=0 world=3 restart=1 step=31 samples=2016 loss=0.5
1795984795.711 node=A pid=512 rank=0 world=3 restart=1 step=32 samp`

func tail(s string) wire.Tail { return wire.Tail{Size: int64(len(s)), Data: []byte(s)} }

func TestLastReadingTornLine(t *testing.T) {
	pl := ProgressLog{Path: "/x"}
	r, ok := pl.LastReading(tail(trainLines))
	if !ok {
		t.Fatal("no reading")
	}
	// The torn last line is left out: the latest complete one is the
	// restart's step 31, with fewer samples than before (a restart).
	if r.Samples != 2016 || r.World != 3 || !r.At.Equal(time.Unix(1795984795, 500e6)) {
		t.Fatalf("reading %+v, want step 31 after the restart (2016 samples, world 3, at .500)", r)
	}
	// The same lines, complete: the last one is not torn any more.
	r, _ = pl.LastReading(tail(trainLines + "les=2112 loss=0.4\n"))
	if r.Samples != 2112 {
		t.Fatalf("completed line: %+v", r)
	}
	// A line of other output last: the one before it counts.
	r, _ = pl.LastReading(tail("1795984786.971 step=3 samples=96\nTraceback (most recent call last):\n"))
	if r.Samples != 96 {
		t.Fatalf("after other output: %+v", r)
	}
	// Nothing complete yet.
	if r, ok := pl.LastReading(tail("1795984786.971 step=3 samples=96")); ok {
		t.Fatalf("a file without a newline read as %+v", r)
	}
}

func TestLastReadingCutStart(t *testing.T) {
	// A tail that starts in the middle of a file: its first bytes are a
	// line's end, which would read as "15.5 s after the epoch, 7 samples".
	pl := ProgressLog{Path: "/x"}
	if r, ok := pl.LastReading(wire.Tail{Offset: 100, Data: []byte("15.5 samples=7\n")}); ok {
		t.Fatalf("a line's end read as %+v", r)
	}
	r, ok := pl.LastReading(wire.Tail{Offset: 100, Data: []byte("15.5 samples=7\n1795984786.5 samples=64\n")})
	if !ok || r.Samples != 64 {
		t.Fatalf("reading %+v %v", r, ok)
	}
}

func TestParseLineFormats(t *testing.T) {
	at := time.Unix(1795984786, 971e6)
	for _, c := range []struct {
		pl   ProgressLog
		line string
		want float64
		ok   bool
	}{
		{ProgressLog{}, `{"time": 1795984786.971, "samples": 1056, "step": 31}`, 1056, true},
		{ProgressLog{}, `{"time": "2026-12-01T17:59:46.971Z", "samples": 1056}`, 1056, true},
		{ProgressLog{}, `{"time": "1795984786.971", "samples": 1056}`, 1056, true},
		{ProgressLog{SamplesKey: "images"}, `{"time": 1795984786.971, "images": 7, "samples": 1}`, 7, true},
		{ProgressLog{SamplesPerStep: 64}, `{"time": 1795984786.971, "step": 31}`, 64 * 31, true},
		{ProgressLog{SamplesPerStep: 64}, `1795984786.971 rank=0 step=31`, 64 * 31, true},
		{ProgressLog{}, `1795984786.971 rank=0 step=31`, 0, false}, // steps, but no samples per step
		{ProgressLog{}, `{"samples": 5}`, 0, false},                // no time
		{ProgressLog{}, `{"time": 1795984786.971, "samples": -5}`, 0, false},
		{ProgressLog{}, `{"time": 1795984786.971, "samples": "many"}`, 0, false},
		{ProgressLog{}, `{"time": 1795984786.971, "samp`, 0, false},
		{ProgressLog{}, `step=3 samples=5`, 0, false},
		{ProgressLog{}, `1795984786.971 samples=NaN`, 0, false},
		{ProgressLog{}, `999999999999 samples=5`, 0, false}, // after year 9999: cannot be saved
		{ProgressLog{}, `-5 samples=5`, 0, false},
	} {
		r, ok := c.pl.ParseLine(c.line)
		if ok != c.ok || ok && r.Samples != c.want {
			t.Errorf("%+v %q: %+v %v, want %v %v", c.pl, c.line, r, ok, c.want, c.ok)
		}
		if ok && strings.Contains(c.line, "1795984786.971") && !r.At.Equal(at) {
			t.Errorf("%q: at %v, want %v", c.line, r.At, at)
		}
	}
}

func TestProgressLogCheck(t *testing.T) {
	for _, s := range []Spec{
		{Argv: []string{"/bin/true"}, Workdir: "/w", ProgressLog: &ProgressLog{Path: ""}},
		{Argv: []string{"/bin/true"}, Workdir: "rel", ProgressLog: &ProgressLog{Path: "log"}},
		{Argv: []string{"/bin/true"}, Workdir: "/w", ProgressLog: &ProgressLog{Path: "log", SamplesPerStep: -1}},
		{Argv: []string{"/bin/true"}, Workdir: "/w", ProgressLog: &ProgressLog{Path: "log", SamplesKey: "a=b"}},
	} {
		if err := ValidateSpec(s); err == nil {
			t.Errorf("%+v accepted", *s.ProgressLog)
		}
	}
	s := Spec{Argv: []string{"/bin/true"}, Workdir: "/w", ProgressLog: &ProgressLog{Path: "logs/../p.log"}}
	if err := ValidateSpec(s); err != nil {
		t.Fatal(err)
	}
	if p, _ := s.ProgressLog.Resolve(s.Workdir); p != "/w/p.log" {
		t.Fatalf("resolved %q", p)
	}
}

// TestReadTail: the node agent's reader takes the end of a long file,
// says a missing one is missing, and refuses what is not a regular file
// (a FIFO would block a plain open).
func TestReadTail(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "p.log")
	if tl, err := agent.ReadTail(path); err != nil || !tl.Missing {
		t.Fatalf("missing file: %+v %v", tl, err)
	}
	var b strings.Builder
	for i := 1; b.Len() < 3*wire.MaxTail; i++ {
		b.WriteString("1795984786.5 step=" + itoa(i) + " samples=" + itoa(64*i) + "\n")
	}
	os.WriteFile(path, []byte(b.String()), 0o644)
	tl, err := agent.ReadTail(path)
	if err != nil || tl.Offset == 0 || len(tl.Data) != wire.MaxTail || tl.Size != int64(b.Len()) {
		t.Fatalf("tail %d bytes at %d of %d: %v", len(tl.Data), tl.Offset, tl.Size, err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	want, _ := (&ProgressLog{}).ParseLine(lines[len(lines)-1])
	if r, ok := (&ProgressLog{}).LastReading(tl); !ok || r.Samples != want.Samples {
		t.Fatalf("last reading %+v, want %v", r, want.Samples)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := mkfifo(fifo); err != nil {
		t.Skip(err)
	}
	done := make(chan error, 1)
	go func() { _, err := agent.ReadTail(fifo); done <- err }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a FIFO was read as a progress log")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("reading a FIFO blocked")
	}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

// logLine is one train.py-style line at a time.
func logLine(at time.Time, step int, samples float64) string { return worldLine(at, 1, step, samples) }

func worldLine(at time.Time, world, step int, samples float64) string {
	return fmt.Sprintf("%d.%03d node=x rank=0 world=%d step=%d samples=%d\n", at.Unix(), at.Nanosecond()/1e6, world, step, int(samples))
}

func appendFile(tb testing.TB, path, s string) {
	tb.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		tb.Fatal(err)
	}
}

// readScenario drives ReadProgress through a log's life: missing, left by
// an earlier run, new lines, unchanged, a torn line, a restart from a
// checkpoint (fewer samples), and a Trainer that reports itself.
func readScenario(t *testing.T, r *Runner, node string) {
	ctx := context.Background()
	r.ReadEvery = time.Nanosecond
	// The scenario is about what a read finds, not how long it may take:
	// on saturated cores an ssh read took over the 5 s default (burner CI
	// run, "tail … signal: killed"). TestSSHReadUnreachable tests failing
	// reads.
	r.ReadTimeout = time.Minute
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	path := filepath.Join(dir, "progress.log")
	since := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	w := execWant(t, "pl", []string{"/bin/sleep", "300"}, node)
	w.Since = since
	spec, _ := json.Marshal(Spec{Argv: []string{"/bin/sleep", "300"}, Workdir: dir, ProgressLog: &ProgressLog{Path: "progress.log"}})
	w.Spec = spec
	ops(t, r.Apply(ctx, []Want{w}))
	t.Cleanup(func() { r.Apply(context.Background(), nil) })
	read := func(what string) ([]Progress, []Action) {
		t.Helper()
		ps, acts := r.ReadProgress(ctx)
		for _, a := range acts {
			if a.Err != nil {
				t.Fatalf("%s: %s on %s: %v", what, a.Op, a.Node, a.Err)
			}
		}
		return ps, acts
	}
	if ps, acts := read("missing"); len(ps)+len(acts) != 0 {
		t.Fatalf("a missing log read as %+v %+v", ps, acts)
	}
	// An earlier run's log: said once, never a reading.
	appendFile(t, path, logLine(since.Add(-time.Hour), 90, 5760))
	ps, acts := read("stale")
	if len(ps) != 0 || len(acts) != 1 || !strings.Contains(acts[0].Note, "older than the run") {
		t.Fatalf("a stale log: %+v %+v", ps, acts)
	}
	if ps, acts := read("stale again"); len(ps)+len(acts) != 0 {
		t.Fatalf("a stale log, read again: %+v %+v", ps, acts)
	}
	at1 := since.Add(10 * time.Second)
	appendFile(t, path, logLine(at1, 10, 640))
	ps, _ = read("first line")
	if len(ps) != 1 || ps[0].Samples != 640 || !ps[0].At.Equal(at1) || ps[0].Node != node || ps[0].Backward || ps[0].World != 1 {
		t.Fatalf("first reading %+v", ps)
	}
	if ps, acts := read("unchanged"); len(ps)+len(acts) != 0 {
		t.Fatalf("an unchanged log read as %+v %+v", ps, acts)
	}
	at2 := since.Add(20 * time.Second)
	torn := logLine(at2, 12, 768)
	appendFile(t, path, torn[:len(torn)/2])
	if ps, _ := read("torn"); len(ps) != 0 {
		t.Fatalf("a torn line read as %+v", ps)
	}
	appendFile(t, path, torn[len(torn)/2:])
	if ps, _ = read("completed"); len(ps) != 1 || ps[0].Samples != 768 || !ps[0].At.Equal(at2) {
		t.Fatalf("the completed line: %+v", ps)
	}
	// Restarted from the checkpoint at step 5: fewer samples, said.
	appendFile(t, path, logLine(since.Add(30*time.Second), 6, 384))
	if ps, _ = read("restart"); len(ps) != 1 || ps[0].Samples != 384 || !ps[0].Backward || !ps[0].Restart {
		t.Fatalf("after a restart: %+v", ps)
	}
	// Restarted at another size, already past the last count: a restart.
	appendFile(t, path, worldLine(since.Add(35*time.Second), 2, 10, 640))
	if ps, _ = read("world"); len(ps) != 1 || ps[0].Backward || !ps[0].Restart || ps[0].World != 2 {
		t.Fatalf("at another world size: %+v", ps)
	}
	appendFile(t, path, worldLine(since.Add(36*time.Second), 2, 11, 704))
	if ps, _ = read("same world"); len(ps) != 1 || ps[0].Restart {
		t.Fatalf("at the same world size: %+v", ps)
	}
	// It reports itself now: its log is not read any more.
	w.Reports = true
	ops(t, r.Apply(ctx, []Want{w}))
	appendFile(t, path, logLine(since.Add(40*time.Second), 8, 512))
	if ps, acts := read("reports"); len(ps)+len(acts) != 0 {
		t.Fatalf("a Trainer that reports had its log read: %+v %+v", ps, acts)
	}
}

// TestReadProgress: the runner reads a Trainer's progress log through the
// local node agent.
func TestReadProgress(t *testing.T) {
	r, a := testRunner(t)
	readScenario(t, r, a.N("n1"))
}

// TestSSHReadProgress: the same through a real sshd on loopback.
func TestSSHReadProgress(t *testing.T) {
	r, a, _ := sshRunner(t, 1)
	readScenario(t, r, a.N("n1"))
}

// TestReadBackoff: failed reads in a row space the next ones out.
func TestReadBackoff(t *testing.T) {
	at := time.Unix(1795984786, 0)
	pw := &progressWatch{Tried: at}
	for fails, wait := range []time.Duration{5, 10, 20, 40, 80, 80} {
		pw.Fails = fails
		if pw.due(at.Add(wait*time.Second-time.Millisecond), 5*time.Second) || !pw.due(at.Add(wait*time.Second), 5*time.Second) {
			t.Errorf("after %d failures: not due exactly %v s after the last read", fails, wait)
		}
	}
}

// TestSSHReadUnreachable: a read on a node whose sshd is down is said once
// as a progress-log action with its error, spaced out while it fails, and
// reads again once the node answers.
func TestSSHReadUnreachable(t *testing.T) {
	r, a, s := sshRunner(t, 1)
	r.ReadEvery = time.Nanosecond
	ctx := context.Background()
	node := a.N("n1")
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	since := time.Now().Add(-time.Minute)
	w := execWant(t, "pu", []string{"/bin/sleep", "300"}, node)
	w.Since = since
	w.Spec, _ = json.Marshal(Spec{Argv: []string{"/bin/sleep", "300"}, Workdir: dir, ProgressLog: &ProgressLog{Path: "p.log"}})
	ops(t, r.Apply(ctx, []Want{w}))
	t.Cleanup(func() { s.Start(); r.Apply(context.Background(), nil) })
	appendFile(t, filepath.Join(dir, "p.log"), logLine(since.Add(time.Second), 1, 64))
	s.Stop()
	ps, acts := r.ReadProgress(ctx)
	var ae *AgentError
	if len(ps) != 0 || len(acts) != 1 || acts[0].Op != "progress-log" || !errors.As(acts[0].Err, &ae) || !ae.Unreachable {
		t.Fatalf("a read on a dead node: %+v %+v", ps, acts)
	}
	r.ReadEvery = time.Hour // the next read waits two hours now
	if ps, acts := r.ReadProgress(ctx); len(ps)+len(acts) != 0 {
		t.Fatalf("read again within the doubled interval: %+v %+v", ps, acts)
	}
	r.ReadEvery = time.Nanosecond
	if ps, acts := r.ReadProgress(ctx); len(ps) != 0 || len(acts) != 0 {
		t.Fatalf("the same failure said again: %+v %+v", ps, acts)
	}
	s.Start()
	// The node answers again: a read gets the report. The first try may
	// still meet the restarted sshd's start-up on a loaded machine (CI:
	// "once the node answers: []"); each try is a real read, bounded.
	deadline := time.Now().Add(30 * time.Second)
	for {
		ps, acts := r.ReadProgress(ctx)
		if len(ps) == 1 && ps[0].Samples == 64 {
			break
		}
		if len(ps) > 0 || time.Now().After(deadline) {
			t.Fatalf("once the node answers: %+v %+v", ps, acts)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
