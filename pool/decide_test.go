package pool_test

import (
	"context"
	"errors"
	"testing"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/pool"
)

// countingSolver is a solver one layer up: it counts its calls and fails
// or answers as told.
type countingSolver struct {
	calls int
	err   error
	plan  func(*alloc.Problem) *alloc.Plan
}

func (s *countingSolver) Name() string { return "counting" }

func (s *countingSolver) Solve(ctx context.Context, pr *alloc.Problem) (*alloc.Plan, error) {
	s.calls++
	if s.err != nil {
		return nil, s.err
	}
	if s.plan != nil {
		return s.plan(pr), nil
	}
	return alloc.Exact{}.Solve(ctx, pr)
}

// TestDecidePolicy checks the one decision policy the reconciler and the
// replay share, case by case.
func TestDecidePolicy(t *testing.T) {
	ctx := context.Background()
	spec := pool.Spec{ID: "a", Min: 1, Max: 4, Curve: linear(4, 10), RUp: 2, RDown: 2}

	t.Run("nothing running: no solve, empty plan", func(t *testing.T) {
		p := mustNew(t, pool.Config{TFwd: 10})
		p.Join(at(0), []string{"n1", "n2"}, "")
		s := &countingSolver{}
		d, err := p.Decide(ctx, s, true)
		if err != nil || d.Err != nil {
			t.Fatal(err, d.Err)
		}
		if got, want := s.calls, 0; got != want || d.Solved {
			t.Fatalf("solver called %d times (Solved %v), want %d", got, d.Solved, want)
		}
		if d.Plan == nil || len(d.Plan.Trainers) != 0 || d.Plan.Status != alloc.Optimal {
			t.Fatalf("plan = %+v, want an empty optimal plan", d.Plan)
		}
	})

	t.Run("no idle node: no solve, every Trainer holds nothing", func(t *testing.T) {
		p := mustNew(t, pool.Config{TFwd: 10})
		if err := p.Submit(at(0), spec); err != nil {
			t.Fatal(err)
		}
		p.Step(pool.Event{At: at(0)})
		s := &countingSolver{}
		d, err := p.Decide(ctx, s, true)
		if err != nil || d.Err != nil {
			t.Fatal(err, d.Err)
		}
		if s.calls != 0 || d.Solved {
			t.Fatalf("solver called %d times, want 0", s.calls)
		}
		if got := d.Plan.Counts(); len(got) != 1 || got[0] != 0 || d.Plan.Status != alloc.Optimal {
			t.Fatalf("plan counts %v status %v, want [0] optimal", got, d.Plan.Status)
		}
	})

	t.Run("solver error keeps the allocation and is reported", func(t *testing.T) {
		p := mustNew(t, pool.Config{TFwd: 100})
		p.Join(at(0), []string{"n1", "n2", "n3"}, "")
		if err := p.Submit(at(0), spec); err != nil {
			t.Fatal(err)
		}
		p.Step(pool.Event{At: at(0)})
		decide(t, p)
		held := len(p.Running()[0].Nodes)
		if held != 3 {
			t.Fatalf("holds %d nodes, want 3", held)
		}
		p.Changes()
		boom := errors.New("boom")
		s := &countingSolver{err: boom}
		p.Step(pool.Event{At: at(10), Leave: []string{"n3"}})
		p.Changes()
		d, err := p.Decide(ctx, s, false)
		if err != nil {
			t.Fatal(err)
		}
		if !errors.Is(d.Err, boom) || !d.Solved || s.calls != 1 {
			t.Fatalf("Err %v Solved %v calls %d, want boom, true, 1", d.Err, d.Solved, s.calls)
		}
		if got, want := d.Plan.Status, alloc.KeptCurrent; got != want {
			t.Fatalf("status %v, want %v", got, want)
		}
		if got, want := len(p.Running()[0].Nodes), 2; got != want {
			t.Fatalf("holds %d nodes after the failed decision, want %d (kept)", got, want)
		}
		if cs := p.Changes(); len(cs) != 1 || cs[0].Kind != pool.Undecided {
			t.Fatalf("changes %+v, want one %q", cs, pool.Undecided)
		}
	})

	t.Run("a plan that fails the check is kept, with check set", func(t *testing.T) {
		p := mustNew(t, pool.Config{TFwd: 100})
		p.Join(at(0), []string{"n1", "n2"}, "")
		if err := p.Submit(at(0), spec); err != nil {
			t.Fatal(err)
		}
		p.Step(pool.Event{At: at(0)})
		// A plan claiming a node the pool does not have.
		bad := func(pr *alloc.Problem) *alloc.Plan {
			return &alloc.Plan{Solver: "counting", Status: alloc.Optimal, Trainers: []alloc.Assignment{
				{ID: "a", From: 0, To: 1, Nodes: []string{"ghost"}, Add: []string{"ghost"}}}}
		}
		d, err := p.Decide(ctx, &countingSolver{plan: bad}, true)
		if err != nil {
			t.Fatal(err)
		}
		if d.Err == nil || d.Plan.Status != alloc.KeptCurrent {
			t.Fatalf("Err %v status %v, want a check error and a kept plan", d.Err, d.Plan.Status)
		}
		if n := len(p.Running()[0].Nodes); n != 0 {
			t.Fatalf("holds %d nodes, want 0", n)
		}
	})
}
