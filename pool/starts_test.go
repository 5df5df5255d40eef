package pool_test

import (
	"strings"
	"testing"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/pool"
)

// TestStartFailed: a Trainer whose start fails gives its nodes back at
// once and is credited with nothing for them; it takes no node during its
// back-off (30 s, then 60 s, …), and its 5th failure in a row ends it
// failed with the reason. A start that runs forgets the failures.
func TestStartFailed(t *testing.T) {
	p := mustNew(t, pool.Config{TFwd: 100})
	p.Join(at(0), []string{"n1", "n2", "n3"}, "")
	if err := p.Submit(at(0), pool.Spec{ID: "T", Owner: "root", Min: 1, Max: 3, Curve: linear(3, 10), Samples: 1e6}); err != nil {
		t.Fatal(err)
	}
	p.Step(pool.Event{At: at(0)})
	decide(t, p)
	held := func() int { tr, _ := p.Trainer("T"); return len(tr.Nodes) }
	if got := held(); got != 3 {
		t.Fatalf("first decision: %d nodes, want 3", got)
	}
	fail := func(s int) bool {
		t.Helper()
		tr, _ := p.Trainer("T")
		ended, err := p.StartFailed(at(s), "T", alloc.Names(tr.Nodes), "refusing to run a Trainer as root")
		if err != nil {
			t.Fatal(err)
		}
		return ended
	}
	if fail(0) {
		t.Fatal("ended at its first failure")
	}
	tr, _ := p.Trainer("T")
	if got, want := len(p.Free()), 3; got != want || !tr.Waiting() {
		t.Fatalf("after the failure: %d free nodes, waiting %v; want %d, true", got, tr.Waiting(), want)
	}
	// Ten seconds later, within its 30 s back-off: no node for it, and
	// nothing accrued for the nodes it gave back.
	p.Step(pool.Event{At: at(10)})
	decide(t, p)
	if got := held(); got != 0 {
		t.Fatalf("at 10 s, backing off: %d nodes, want 0", got)
	}
	tr, _ = p.Trainer("T")
	if tr.Done != 0 || tr.NodeSeconds != 0 || p.Totals().UsedNodeSeconds != 0 || p.Totals().Samples != 0 {
		t.Fatalf("credited: done %v, node-seconds %v, pool used %v, samples %v; want all 0",
			tr.Done, tr.NodeSeconds, p.Totals().UsedNodeSeconds, p.Totals().Samples)
	}
	// After 30 s it is tried again; the next failures back off 60, 120,
	// 240 s, and the 5th ends it.
	s := 0
	for i, wait := range []int{30, 60, 120, 240} {
		s += wait
		p.Step(pool.Event{At: at(s - 1)})
		decide(t, p)
		if got := held(); got != 0 {
			t.Fatalf("failure %d: given %d nodes 1 s before its back-off of %d s ended", i+1, got, wait)
		}
		p.Step(pool.Event{At: at(s)})
		decide(t, p)
		if got := held(); got != 3 {
			t.Fatalf("failure %d: given %d nodes when its back-off ended, want 3", i+1, got)
		}
		ended := fail(s)
		if ended != (i == 3) {
			t.Fatalf("failure %d: ended %v", i+2, ended)
		}
	}
	var end *pool.Change
	for _, c := range p.Changes() {
		if c.Kind == pool.Ended {
			end = &c
		}
	}
	if end == nil || end.Status != pool.Failed || !strings.Contains(end.Note, "5 times") || !strings.Contains(end.Note, "as root") {
		t.Fatalf("end: %+v, want failed, 5 times, the reason", end)
	}
	if end.Final.Done != 0 || end.Final.NodeSeconds != 0 {
		t.Fatalf("ended with done %v, node-seconds %v: want nothing credited", end.Final.Done, end.Final.NodeSeconds)
	}
	if got := len(p.Free()); got != 3 {
		t.Fatalf("%d free nodes after it ended, want 3", got)
	}

	// A start that runs resets the count.
	if err := p.Submit(at(s), pool.Spec{ID: "U", Min: 1, Max: 3, Curve: linear(3, 10)}); err != nil {
		t.Fatal(err)
	}
	p.Step(pool.Event{At: at(s)})
	decide(t, p)
	u, _ := p.Trainer("U")
	if _, err := p.StartFailed(at(s), "U", alloc.Names(u.Nodes), "ssh: timeout"); err != nil {
		t.Fatal(err)
	}
	p.StartRan("U")
	if u, _ := p.Trainer("U"); u.Starts.Failures != 0 || !u.Starts.RetryAt.IsZero() {
		t.Fatalf("after a start that ran: %+v, want none", u.Starts)
	}
}
