package pool

import (
	"context"
	"fmt"

	"github.com/bftrainer/bftrainer/alloc"
)

// Decision is one decision over the pool: the problem it was about, the
// plan, and whether and how the solver answered.
type Decision struct {
	// Problem is the pool's problem at the decision. It shares the pool's
	// slices: read it before the pool changes (a commit changes it).
	Problem *alloc.Problem
	// Plan is never nil: the solver's plan, or the one Propose made
	// without it.
	Plan *alloc.Plan
	// Solved reports that the solver was called.
	Solved bool
	// Err is why the plan keeps the allocation instead of being the
	// solver's: the solver failed, or its plan failed alloc.Check.
	Err error
	// Probes are the curve learner's probes offered to the solver, as
	// optimistic curves in Problem (learn.go); a Trainer the plan gives
	// exactly a probe's count is moved there to learn its rate.
	Probes []Probe
}

// Propose decides for the pool now without changing it. The policy, the
// same live and in a replay:
//
//   - No Trainer running: there is nothing to decide; the solver is not
//     called and the plan is empty.
//   - No idle node: every running Trainer holds nothing, and the plan says
//     so without calling the solver (a MILP solver rejects an empty model;
//     the reference does not call it either).
//   - Otherwise the solver decides. A plan that is not optimal (a time
//     limit) keeps every Trainer's nodes, and Commit books nothing for it.
//   - A solver error keeps the allocation too, as the reference keeps its
//     map when Gurobi gives no optimum: the plan is alloc.Keep's, and
//     Decision.Err says why. With check set, so does a plan that fails
//     alloc.Check (a solver bug).
//
// A solver error is not Propose's error: the caller records or counts it
// and goes on; the pool stays consistent either way.
func (p *Pool) Propose(ctx context.Context, s alloc.Solver, check bool) Decision {
	pr := p.Problem()
	d := Decision{Problem: pr}
	switch {
	case len(pr.Trainers) == 0:
		d.Plan = &alloc.Plan{Solver: s.Name(), Status: alloc.Optimal, Note: "no trainer running"}
		return d
	case pr.Size() == 0:
		d.Plan = &alloc.Plan{Solver: s.Name(), Status: alloc.Optimal, Note: "no idle node",
			Trainers: alloc.Place(pr, make([]int, len(pr.Trainers)))}
		return d
	}
	d.Solved = true
	d.Probes = p.explore(pr)
	pl, err := s.Solve(ctx, pr)
	if err == nil && check {
		if cerr := alloc.Check(pr, pl); cerr != nil {
			err = fmt.Errorf("check plan: %w", cerr)
		}
	}
	if err != nil {
		d.Err = fmt.Errorf("%s: %w", s.Name(), err)
		pl = alloc.Keep(pr, s.Name(), alloc.KeptCurrent, "solver error: "+err.Error())
	}
	d.Plan = pl
	return d
}

// Decide proposes (see Propose for the policy) and commits the plan: the
// one decision step of the live reconciler and of the replay. It first
// moves Trainers off nodes the scheduler plans a main job on within their
// lead (SetPlan, movePlanned); with AutoAdmit it then admits by value
// (admitByValue). Its error is
// a commit's, which means the plan was not made for this pool: a bug, never
// a solver's failure.
func (p *Pool) Decide(ctx context.Context, s alloc.Solver, check bool) (Decision, error) {
	p.movePlanned()
	if p.cfg.AutoAdmit {
		p.admitByValue(ctx, s)
	}
	d := p.Propose(ctx, s, check)
	if err := p.commit(d.Plan, d.Probes); err != nil {
		return d, err
	}
	return d, nil
}

// admitByValue admits queued Trainers, first come first served, as long as
// the next one whose submit time has come is worth its place: the solver,
// asked about the running Trainers and it (holding nothing), gives it nodes.
// Its objective then prefers running it to growing the others with those
// nodes. The first that gets nothing, or a solver that fails, stops the
// admissions: the Trainer waits for a later decision.
func (p *Pool) admitByValue(ctx context.Context, s alloc.Solver) {
	for {
		i := p.eligible()
		if i < 0 {
			return
		}
		t := p.queue[i]
		pr := p.Problem()
		pr.Trainers = append(pr.Trainers, alloc.Trainer{
			ID: t.ID, Min: t.Min, Max: t.Max, Curve: p.planCurve(t), Weight: t.Weight,
			RUp: t.RescaleUp(), RDown: t.RescaleDown(), Remaining: remaining(t),
		})
		if pr.Size() == 0 {
			return
		}
		pl, err := s.Solve(ctx, pr)
		if err != nil || pl.Status != alloc.Optimal || pl.Trainers[len(pl.Trainers)-1].To == 0 {
			return
		}
		p.admit(i)
	}
}
