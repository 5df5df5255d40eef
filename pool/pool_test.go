package pool_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/pool"
)

var t0 = time.Date(2021, 2, 10, 20, 21, 15, 0, time.UTC)

func at(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

func linear(n int, perNode float64) alloc.Curve {
	c := alloc.Curve{Nodes: []int{0}, Throughput: []float64{0}}
	for k := 1; k <= n; k++ {
		c.Nodes = append(c.Nodes, k)
		c.Throughput = append(c.Throughput, perNode*float64(k))
	}
	return c
}

// decide solves, checks and commits, as the reconciler and the replay do.
func decide(tb testing.TB, p *pool.Pool) *alloc.Plan {
	tb.Helper()
	d, err := p.Decide(context.Background(), alloc.Exact{}, true)
	if err != nil {
		tb.Fatal(err)
	}
	if d.Err != nil {
		tb.Fatal(d.Err)
	}
	return d.Plan
}

func mustNew(tb testing.TB, cfg pool.Config) *pool.Pool {
	tb.Helper()
	p, err := pool.New(cfg, pool.State{})
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// TestAccountingByHand follows one Trainer through growth, a reclaim, a
// return and its finish; every figure is computed by hand in the comments.
func TestAccountingByHand(t *testing.T) {
	p := mustNew(t, pool.Config{TFwd: 100})
	p.Join(at(0), []string{"n1", "n2", "n3", "n4"}, "")
	if err := p.Submit(at(0), pool.Spec{ID: "T1", Min: 1, Max: 4, Curve: linear(4, 10), RUp: 5, RDown: 3, Samples: 1000}); err != nil {
		t.Fatal(err)
	}
	p.Admit()
	// 0 → 4 nodes: worth 100·40; growing from 0 costs nothing (rate 0).
	if pl := decide(t, p); pl.Trainers[0].To != 4 {
		t.Fatalf("first decision: %d nodes, want 4", pl.Trainers[0].To)
	}
	tr, _ := p.Trainer("T1")
	if got, want := tr.Rate, 40.0; got != want {
		t.Fatalf("rate %v, want %v", got, want)
	}
	// t=10: n4 is reclaimed. Progress 10 s · 40 = 400, minus R_down·rate =
	// 3·40 = 120 → 280.
	p.Leave(at(10), []string{"n4", "n3"}, "job1")
	if got, want := tr.Done, 400.0-120; !near(got, want) {
		t.Fatalf("done after reclaim %v, want %v", got, want)
	}
	if got, want := tr.Preemptions, 1; got != want {
		t.Fatalf("preemptions %d, want %d (once per event, not per node)", got, want)
	}
	decide(t, p) // 2 nodes left: keeps them, rate 20
	// t=20: both return. Progress 10·20 = 200 → 480. Growing to 4 is worth
	// 100·40 − 5·20 = 3900 > 100·20: grow; the cost R_up·P(2) = 100 is
	// booked and charged at the next event.
	p.Join(at(20), []string{"n3", "n4"}, "job1")
	if got, want := tr.Done, 480.0; !near(got, want) {
		t.Fatalf("done at return %v, want %v", got, want)
	}
	if pl := decide(t, p); pl.Trainers[0].To != 4 || tr.PendingCost != 100 {
		t.Fatalf("after return: %d nodes, pending %v; want 4 and 100", pl.Trainers[0].To, tr.PendingCost)
	}
	// t=30: 480 + 10·40 − 100 = 780. t=40: 1180 ≥ 1000: finished, the
	// overshoot is trimmed.
	p.Step(pool.Event{At: at(30)})
	if got, want := tr.Done, 780.0; !near(got, want) {
		t.Fatalf("done at 30 s %v, want %v", got, want)
	}
	p.Step(pool.Event{At: at(40)})
	if tr.Status != pool.Finished || tr.Done != 1000 {
		t.Fatalf("at 40 s: %s with %v samples, want finished with 1000", tr.Status, tr.Done)
	}
	if got := len(p.Free()); got != 4 {
		t.Fatalf("free nodes after finish: %d, want 4", got)
	}
	tot := p.Totals()
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"samples", tot.Samples, 1000},
		{"preempt loss", tot.PreemptLoss, 120},
		{"rescale loss", tot.RescaleLoss, 100},
		{"rescales", float64(tot.Rescales), 2},
		// node-seconds held: 4·10 + 2·10 + 4·10 + 4·10
		{"used node-seconds", tot.UsedNodeSeconds, 140},
		{"idle node-seconds", tot.IdleNodeSeconds, 140},
	} {
		if !near(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestLateEpilogCannotFreeAnotherJobsNode(t *testing.T) {
	p := mustNew(t, pool.Config{TFwd: 10})
	p.Join(at(0), []string{"n1"}, "")
	p.Leave(at(1), []string{"n1"}, "A")
	p.Release(at(2), []string{"n1"}, "A") // A ends, n1 completing
	p.Leave(at(3), []string{"n1"}, "B")   // B starts on n1
	p.Join(at(4), []string{"n1"}, "A")    // A's late "idle"
	if n, _ := p.Node("n1"); n.State != pool.Busy || n.Job != "B" {
		t.Fatalf("n1 is %s (job %q) after A's late join; want busy with B", n.State, n.Job)
	}
	var stale bool
	for _, c := range p.Changes() {
		stale = stale || c.Kind == pool.Stale
	}
	if !stale {
		t.Fatal("the ignored join was not recorded as stale")
	}
	p.Join(at(5), []string{"n1"}, "B")
	if n, _ := p.Node("n1"); n.State != pool.Idle {
		t.Fatalf("n1 is %s after B's join; want idle", n.State)
	}
}

func TestAdmissionIsFirstComeFirstServed(t *testing.T) {
	p := mustNew(t, pool.Config{TFwd: 10, MaxTrainers: 2})
	for i, id := range []string{"a", "b", "c", "d"} {
		s := pool.Spec{ID: id, Min: 1, Max: 2, Curve: linear(2, 1), Submit: at(i * 10)}
		if err := p.Submit(at(0), s); err != nil {
			t.Fatal(err)
		}
	}
	p.Step(pool.Event{At: at(5)})
	if got := ids(p.Running()); !reflect.DeepEqual(got, []string{"a"}) {
		t.Fatalf("running at 5 s: %v, want [a] (b not yet submitted)", got)
	}
	p.Step(pool.Event{At: at(30)})
	if got := ids(p.Running()); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Fatalf("running at 30 s: %v, want [a b]", got)
	}
	if err := p.Cancel(at(31), "a"); err != nil {
		t.Fatal(err)
	}
	if got := ids(p.Running()); !reflect.DeepEqual(got, []string{"b", "c"}) {
		t.Fatalf("running after cancel: %v, want [b c]", got)
	}
	if err := p.Cancel(at(32), "a"); !errors.Is(err, pool.ErrUnknownTrainer) {
		t.Fatalf("second cancel: %v, want ErrUnknownTrainer", err)
	}
}

func ids(ts []*pool.Trainer) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.ID)
	}
	return out
}

func TestStateRoundTrip(t *testing.T) {
	p := mustNew(t, pool.Config{TFwd: 50})
	p.Join(at(0), []string{"n1", "n2", "n3"}, "")
	for _, id := range []string{"x", "y", "z"} {
		if err := p.Submit(at(0), pool.Spec{ID: id, Min: 1, Max: 2, Curve: linear(2, 5), RUp: 1, RDown: 1}); err != nil {
			t.Fatal(err)
		}
	}
	p.Admit()
	decide(t, p)
	p.Leave(at(7), []string{"n2"}, "j")
	st := p.State()
	q, err := pool.New(p.Config(), st)
	if err != nil {
		t.Fatal(err)
	}
	if got := q.State(); !reflect.DeepEqual(got, st) {
		t.Fatalf("state changed across a reload:\n got %+v\nwant %+v", got, st)
	}
	pp, qp := *p.Problem(), *q.Problem()
	if *pp.Idle != *qp.Idle || pp.Idle.Count != 1 {
		t.Fatalf("idle history %+v, reloaded %+v (want the one period that ended)", *pp.Idle, *qp.Idle)
	}
	pp.Idle, qp.Idle = nil, nil
	if fmt.Sprintf("%+v", qp) != fmt.Sprintf("%+v", pp) {
		t.Fatal("the reloaded pool poses a different problem")
	}
}

func TestCommitRejectsStalePlan(t *testing.T) {
	p := mustNew(t, pool.Config{TFwd: 10})
	p.Join(at(0), []string{"n1", "n2"}, "")
	if err := p.Submit(at(0), pool.Spec{ID: "a", Min: 1, Max: 2, Curve: linear(2, 1)}); err != nil {
		t.Fatal(err)
	}
	p.Admit()
	pr := p.Problem()
	pl, _ := alloc.Exact{}.Solve(context.Background(), pr)
	p.Leave(at(1), []string{"n1"}, "j") // the pool moved on
	before := fmt.Sprintf("%+v", p.State())
	if err := p.Commit(pl); err == nil {
		t.Fatal("commit applied a plan that gives a reclaimed node to a trainer")
	}
	if after := fmt.Sprintf("%+v", p.State()); after != before {
		t.Fatalf("a rejected commit changed the state:\n%s\n%s", before, after)
	}
}
