package sidecar

import (
	"fmt"
	"strings"
	"time"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/alloc/milp"
)

// SolverSettings are what a solver may be built with: a MILP backend's
// time limit per decision and its program.
type SolverSettings struct {
	TimeLimit time.Duration // 0: milp.DefaultTimeLimit
	Path      string        // the solver's program; "": found on PATH when it solves
}

// NewSolver builds one allocator from the settings. Its name — how the
// configuration (pool.solver), `plan --solver` and `replay --allocator`
// give it — is the one its value gives (alloc.Solver.Name), whatever the
// settings.
type NewSolver func(SolverSettings) alloc.Solver

// Solvers is the allocators one bftrainer knows, in the order help texts
// list them. It is a plain value, handed to whoever needs it.
type Solvers []NewSolver

// BuiltinSolvers returns the allocators bftrainer ships. A new allocator
// (an alloc.Solver in its own file) is registered by one line here.
func BuiltinSolvers() Solvers {
	mip := func(b func(path string) milp.Backend) NewSolver {
		// The paper's node-level MILP on a real solver program, found when
		// it solves (a missing one is a clear error then, and the decision
		// keeps the allocation).
		return func(s SolverSettings) alloc.Solver { return milp.Solver{Backend: b(s.Path), TimeLimit: s.TimeLimit} }
	}
	return Solvers{
		func(SolverSettings) alloc.Solver { return alloc.Adaptive{} },
		func(SolverSettings) alloc.Solver { return alloc.Exact{} },
		mip(func(p string) milp.Backend { return milp.CBC{Path: p} }),
		mip(func(p string) milp.Backend { return milp.HiGHS{Path: p} }),
		mip(func(p string) milp.Backend { return milp.Gurobi{Path: p} }),
		func(SolverSettings) alloc.Solver { return alloc.EqualShare{} },
		func(SolverSettings) alloc.Solver { return alloc.Greedy{} },
	}
}

// New builds the allocator named name ("" is the first, adaptive).
func (r Solvers) New(name string, s SolverSettings) (alloc.Solver, error) {
	if name == "" && len(r) > 0 {
		return r[0](s), nil
	}
	for _, n := range r {
		if sv := n(s); sv.Name() == name {
			return sv, nil
		}
	}
	return nil, fmt.Errorf("unknown allocator %q (want %s)", name, r.Want())
}

// Names returns the allocators' names, in order: each the name its value
// gives.
func (r Solvers) Names() []string {
	out := make([]string, len(r))
	for i, n := range r {
		out[i] = n(SolverSettings{}).Name()
	}
	return out
}

// Want lists the names for a message: "adaptive, exact, … or greedy".
func (r Solvers) Want() string {
	n := r.Names()
	if len(n) < 2 {
		return strings.Join(n, "")
	}
	return strings.Join(n[:len(n)-1], ", ") + " or " + n[len(n)-1]
}
