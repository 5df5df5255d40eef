package pool_test

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/pool"
)

// planned runs one Trainer (R_down 3 s, lead 3 s) on n1..n4 and returns
// the pool at t=100.
func plannedPool(t *testing.T, cfg pool.Config) (*pool.Pool, *pool.Trainer) {
	t.Helper()
	p := mustNew(t, cfg)
	p.Join(at(0), []string{"n1", "n2", "n3", "n4"}, "")
	if err := p.Submit(at(0), pool.Spec{ID: "T1", Min: 1, Max: 4, Curve: linear(4, 10), RUp: 5, RDown: 3}); err != nil {
		t.Fatal(err)
	}
	p.Admit()
	decide(t, p)
	p.Step(pool.Event{At: at(100)})
	tr, _ := p.Trainer("T1")
	if len(tr.Nodes) != 4 {
		t.Fatalf("holds %d nodes, want 4", len(tr.Nodes))
	}
	return p, tr
}

func changesOf(p *pool.Pool, k pool.Kind) []pool.Change {
	var out []pool.Change
	for _, c := range p.Changes() {
		if c.Kind == k {
			out = append(out, c)
		}
	}
	return out
}

// TestPlanMovesBeforeTheJob: a main job planned on n3 and n4 in 60 s is
// only a short horizon; within the lead (R_down = 3 s) the Trainer moves
// off them gracefully, once, charged R_down·rate as a planned move; the
// job then takes them with no reclaim at all.
func TestPlanMovesBeforeTheJob(t *testing.T) {
	p, tr := plannedPool(t, pool.Config{TFwd: 100})
	p.SetPlan([]pool.Planned{{Job: "main", Nodes: []string{"n3", "n4", "busy9"}, Start: at(160)}})
	decide(t, p)
	if len(tr.Nodes) != 4 {
		t.Fatalf("a plan 60 s away took nodes: holds %d", len(tr.Nodes))
	}
	if next, ok := p.NextMove(); !ok || !next.Equal(at(157)) {
		t.Fatalf("NextMove = %v %v, want %v (the planned start less the 3 s lead)", next, ok, at(157))
	}
	p.Changes()
	p.Step(pool.Event{At: at(157)})
	decide(t, p)
	moves := changesOf(p, pool.Moved)
	if len(moves) != 1 || !slices.Equal(moves[0].Nodes, []string{"n3", "n4"}) || moves[0].Job != "main" || moves[0].To != 2 {
		t.Fatalf("moves %+v, want one off n3 n4 for job main, to 2 nodes", moves)
	}
	if got, want := moves[0].Cost, 3*40.0; !near(got, want) {
		t.Errorf("move cost %v, want R_down·rate = %v", got, want)
	}
	if got := len(tr.Nodes); got != 2 {
		t.Fatalf("holds %d nodes after the move, want 2 (the planned nodes are lent to no one in the lead)", got)
	}
	tot := p.Totals()
	if tot.Moves != 1 || !near(tot.MoveLoss, 120) || tot.Preemptions != 0 {
		t.Errorf("totals moves %d loss %v preemptions %d, want 1, 120, 0", tot.Moves, tot.MoveLoss, tot.Preemptions)
	}
	p.Leave(at(160), []string{"n3", "n4"}, "main")
	if got := p.Totals().Preemptions; got != 0 {
		t.Errorf("the planned job's start preempted %d times, want 0", got)
	}
}

// TestPlanChangesLendAgain: when the plan no longer names a node (the
// scheduler changed its mind), the node is lent again.
func TestPlanChangesLendAgain(t *testing.T) {
	p, tr := plannedPool(t, pool.Config{TFwd: 100})
	p.SetPlan([]pool.Planned{{Job: "main", Nodes: []string{"n4"}, Start: at(101)}})
	decide(t, p)
	if len(tr.Nodes) != 3 {
		t.Fatalf("holds %d, want 3 (moved off n4)", len(tr.Nodes))
	}
	p.SetPlan(nil)
	p.Step(pool.Event{At: at(102)})
	decide(t, p)
	if len(tr.Nodes) != 4 {
		t.Fatalf("holds %d after the plan was withdrawn, want 4", len(tr.Nodes))
	}
}

// TestStalePlanKeepsNothing: a planned start long past (the job did not
// come) neither moves a Trainer nor keeps a node from it; a plan never
// keeps a node from the scheduler (a leave of a planned node is a leave).
func TestStalePlanKeepsNothing(t *testing.T) {
	p, tr := plannedPool(t, pool.Config{TFwd: 100})
	p.SetPlan([]pool.Planned{{Job: "gone", Nodes: []string{"n1", "n2"}, Start: at(10)}})
	decide(t, p)
	if len(tr.Nodes) != 4 || p.Totals().Moves != 0 {
		t.Fatalf("a stale plan moved the Trainer: holds %d, moves %d", len(tr.Nodes), p.Totals().Moves)
	}
	// A job the plan did not show takes a planned node early: the
	// prolog's reclaim, as ever.
	p.SetPlan([]pool.Planned{{Job: "later", Nodes: []string{"n1"}, Start: at(5000)}})
	p.Leave(at(101), []string{"n1"}, "surprise")
	if n, _ := p.Node("n1"); n.State != pool.Busy || p.Totals().Preemptions != 1 {
		t.Fatalf("n1 %s, preemptions %d: want busy and one reclaim", n.State, p.Totals().Preemptions)
	}
}

// TestPlanLeadFromConfig: PlanLead replaces R_down + PlanSlack.
func TestPlanLeadFromConfig(t *testing.T) {
	p, tr := plannedPool(t, pool.Config{TFwd: 100, PlanSlack: 2 * time.Second})
	if got, want := p.Lead(tr), 5*time.Second; got != want {
		t.Errorf("lead %v, want R_down + slack = %v", got, want)
	}
	q, tq := plannedPool(t, pool.Config{TFwd: 100, PlanLead: time.Minute})
	if got := q.Lead(tq); got != time.Minute {
		t.Errorf("lead %v, want the configured minute", got)
	}
	q.SetPlan([]pool.Planned{{Job: "main", Nodes: []string{"n1"}, Start: at(150)}})
	decide(t, q)
	if len(tq.Nodes) != 3 {
		t.Errorf("holds %d, want 3: a start 50 s away is within the 1 min lead", len(tq.Nodes))
	}
}

// TestPlanHorizonChoices: which held nodes the allocator sees with their
// planned start (alloc.Node.Until). Unpriced (the default) none; priced
// every planned one; stable only a node whose planned start survived a new
// plan — n3 is planned at 160 s twice across a change, n4 first at 170 s
// then at 180 s, so only n3 is stable. Reading the same plan again is no
// new plan and settles nothing.
func TestPlanHorizonChoices(t *testing.T) {
	until := func(p *pool.Pool) map[string]time.Time {
		out := map[string]time.Time{}
		for _, tr := range p.Problem().Trainers {
			for _, n := range tr.Held {
				if !n.Until.IsZero() {
					out[n.Name] = n.Until
				}
			}
		}
		return out
	}
	first := []pool.Planned{{Job: "a", Nodes: []string{"n3"}, Start: at(160)}, {Job: "b", Nodes: []string{"n4"}, Start: at(170)}}
	second := []pool.Planned{{Job: "a", Nodes: []string{"n3"}, Start: at(160)}, {Job: "b", Nodes: []string{"n4"}, Start: at(180)}}
	for _, c := range []struct {
		h           pool.PlanHorizon
		once, twice []string // nodes priced after the first plan (read twice), then after the second
	}{
		{pool.PlanUnpriced, nil, nil},
		{pool.PlanPriced, []string{"n3", "n4"}, []string{"n3", "n4"}},
		{pool.PlanStable, nil, []string{"n3"}},
	} {
		p, _ := plannedPool(t, pool.Config{TFwd: 100, PlanHorizon: c.h})
		p.SetPlan(first)
		p.SetPlan(first)
		if got := slices.Sorted(maps.Keys(until(p))); !slices.Equal(got, c.once) {
			t.Errorf("%q after the first plan: priced %v, want %v", c.h, got, c.once)
		}
		p.SetPlan(second)
		got := until(p)
		if names := slices.Sorted(maps.Keys(got)); !slices.Equal(names, c.twice) {
			t.Errorf("%q after the second plan: priced %v, want %v", c.h, names, c.twice)
		}
		if u, ok := got["n3"]; ok && !u.Equal(at(160)) {
			t.Errorf("%q: n3 priced until %v, want its planned start %v", c.h, u, at(160))
		}
	}
}

// TestPlanOfSeveralJobs: a plan of several queued jobs (a backfill pass's,
// replay --plan all) names a node for the earliest of them: n3, planned
// for the head at 160 s and for a job behind it at 130 s, moves at 127 s
// for the latter. Read again unchanged, the plan changes nothing; when the
// scheduler drops the earlier job, n3's start is the head's again, and a
// job on n4 that no plan showed still takes it at once.
func TestPlanOfSeveralJobs(t *testing.T) {
	p, tr := plannedPool(t, pool.Config{TFwd: 100})
	plan := []pool.Planned{
		{Job: "head", Nodes: []string{"n3"}, Start: at(160)},
		{Job: "queued 1", Nodes: []string{"n3"}, Start: at(130)},
	}
	p.SetPlan(plan)
	if next, ok := p.NextMove(); !ok || !next.Equal(at(127)) {
		t.Fatalf("NextMove = %v %v, want %v (the earlier job's start less the 3 s lead)", next, ok, at(127))
	}
	p.SetPlan(plan)
	p.Changes()
	p.Step(pool.Event{At: at(127)})
	decide(t, p)
	if moves := changesOf(p, pool.Moved); len(moves) != 1 || moves[0].Job != "queued 1" || !slices.Equal(moves[0].Nodes, []string{"n3"}) {
		t.Fatalf("moves %+v, want one off n3 for queued 1", moves)
	}
	p.SetPlan(plan[:1])
	if next, ok := p.NextMove(); ok {
		t.Errorf("NextMove = %v: n3 is held by no Trainer now", next)
	}
	p.Leave(at(128), []string{"n4"}, "unplanned")
	if n, _ := p.Node("n4"); n.State != pool.Busy || p.Totals().Preemptions != 1 || len(tr.Nodes) != 2 {
		t.Fatalf("n4 %s, preemptions %d, holds %d: want busy, one reclaim, 2 nodes", n.State, p.Totals().Preemptions, len(tr.Nodes))
	}
}
