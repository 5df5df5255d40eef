package milp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/bftrainer/bftrainer/alloc"
)

// DefaultTimeLimit is the solver time limit when Solver.TimeLimit is 0:
// the 10 s of the paper's experiments.
const DefaultTimeLimit = 10 * time.Second

// Solver is an alloc.Solver that builds the node-level MILP (Build) and
// solves it with a Backend.
//
// A proven optimum is decoded into node counts, and the plan's nodes are
// then chosen by alloc.Place, not taken from the solver: any node choice
// with the same counts is optimal, and which one a MILP solver returns is
// arbitrary (it depends on its presolve and branching), so placing them by
// the stated rule makes every allocator differ only in what it decides.
// The plan's objective is recomputed by Problem.ObjectiveOf.
//
// Anything but a proven optimum keeps the current allocation, as the
// reference does when Gurobi's status is not OPTIMAL: a time limit or a
// solver-reported failure gives alloc.KeptCurrent, proven infeasibility
// alloc.Infeasible, each with a Note. Solve returns an error only for real
// failures: the solver program missing (wrapping ErrBackendAbsent), files,
// a crash, the context cancelled, or an "optimal" answer that breaks the
// model.
type Solver struct {
	Backend   Backend
	TimeLimit time.Duration // 0 means DefaultTimeLimit
	Threads   int           // 0 means 1
	Dir       string        // see Options.Dir
	// Pricing is the objective (nil: the paper's fixed horizon; see
	// BuildPriced).
	Pricing alloc.Pricing
}

// Name returns the backend's name, e.g. "cbc".
func (s Solver) Name() string {
	if s.Backend == nil {
		return "milp"
	}
	return s.Backend.Name()
}

func (s Solver) limit() time.Duration {
	if s.TimeLimit <= 0 {
		return DefaultTimeLimit
	}
	return s.TimeLimit
}

// Solve decides the Problem with the backend.
func (s Solver) Solve(ctx context.Context, p *alloc.Problem) (*alloc.Plan, error) {
	if s.Backend == nil {
		return nil, errors.New("milp solver without a backend")
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	name := s.Name()
	if len(p.Trainers) == 0 {
		// Nothing to decide: no model, no solver run.
		return &alloc.Plan{Solver: name, Status: alloc.Optimal}, nil
	}
	m := BuildPriced(p, s.Pricing)
	sol, err := s.Backend.Solve(ctx, m, Options{TimeLimit: s.limit(), Threads: s.Threads, Dir: s.Dir})
	if err != nil {
		return nil, err
	}
	switch sol.Status {
	case Optimal:
	case TimeLimit:
		return alloc.KeepWith(p, s.Pricing, name, alloc.KeptCurrent,
			fmt.Sprintf("%s: stopped on time limit %v (%s); kept the current allocation", name, s.limit(), sol.Message)), nil
	case Infeasible:
		return alloc.KeepWith(p, s.Pricing, name, alloc.Infeasible,
			fmt.Sprintf("%s: no feasible allocation under the step limit; kept the current one", name)), nil
	default:
		return alloc.KeepWith(p, s.Pricing, name, alloc.KeptCurrent,
			fmt.Sprintf("%s: %s; kept the current allocation", name, sol.Message)), nil
	}
	counts, _, err := m.Decode(sol.Values)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	obj := p.ObjectiveWith(s.Pricing, counts)
	if math.IsInf(obj, -1) {
		return nil, fmt.Errorf("%s: optimal answer decodes to infeasible counts %v", name, counts)
	}
	return &alloc.Plan{Solver: name, Status: alloc.Optimal, Objective: obj, Pricing: s.Pricing,
		Trainers: alloc.PlaceWith(p, s.Pricing, counts)}, nil
}
