package main

import (
	"context"
	"fmt"
	"time"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/alloc/alloctest"
	"github.com/bftrainer/bftrainer/pool"
)

// decideStages are one decision's stages, timed apart: building the
// problem from the pool (Problem), the solver (Propose less Problem: the
// learner's probes and Solve), the commit's bookkeeping (Commit: the node
// moves, costs and history) and the state a store saves (State); decide
// is a whole pool.Decide, timed on its own event.
type decideStages struct {
	problem, solve, commit, state, decide time.Duration
}

// decidePool returns a pool of n nodes (joined in cohorts of 16 over the
// last hours) running the J Trainers of alloctest.Summit(J, n, nmax, 1),
// after a first decision has placed them.
func decidePool(ctx context.Context, s alloc.Solver, J, n, nmax int) (*pool.Pool, error) {
	ap := alloctest.Summit(J, n, nmax, 1)
	p, err := pool.New(pool.Config{MaxTrainers: J, TFwd: 10}, pool.State{})
	if err != nil {
		return nil, err
	}
	start := ap.Now.Add(-24 * time.Hour)
	for j, t := range ap.Trainers {
		spec := pool.Spec{ID: t.ID, Min: t.Min, Max: t.Max, Curve: t.Curve, RUp: t.RUp, RDown: t.RDown, Samples: t.Remaining, Submit: start}
		if err := p.Submit(start, spec); err != nil {
			return nil, fmt.Errorf("trainer %d: %w", j, err)
		}
	}
	for i := 0; i < n; i += 16 {
		var names []string
		for k := i; k < min(i+16, n); k++ {
			names = append(names, fmt.Sprintf("n%05d", k))
		}
		p.Join(start.Add(time.Duration(i)*time.Second), names, fmt.Sprintf("j%d", i))
	}
	if _, err := p.Decide(ctx, s, false); err != nil {
		return nil, err
	}
	return p, nil
}

// decideMedian builds the instance's pool and returns the median of each
// stage over runs decisions split into stages and runs whole ones, each
// after its own event.
func decideMedian(ctx context.Context, s alloc.Solver, in benchInstance, runs int) (decideStages, error) {
	p, err := decidePool(ctx, s, in.J, in.N, in.nmax)
	if err != nil {
		return decideStages{}, err
	}
	var problem, solve, commit, state, decide []time.Duration
	for r := range runs {
		st, err := timeStages(ctx, p, s, 2*r)
		if err != nil {
			return decideStages{}, err
		}
		problem, solve, commit = append(problem, st.problem), append(solve, st.solve), append(commit, st.commit)
		state = append(state, st.state)
		d, err := timeDecide(ctx, p, s, 2*r+1)
		if err != nil {
			return decideStages{}, err
		}
		decide = append(decide, d)
	}
	return decideStages{problem: median(problem), solve: median(solve), commit: median(commit), state: median(state), decide: median(decide)}, nil
}

// event moves the pool to its next event: a second later (so that few of
// the Trainers, whose remaining work is alloctest's, finish during the
// measurement), a cohort of 16 nodes leaves (a main job starts on them)
// and 16 others join.
func event(p *pool.Pool, round int) {
	at := p.Now().Add(time.Second)
	var gone, come []string
	for k := range 16 {
		gone = append(gone, fmt.Sprintf("n%05d", round*16+k))
		come = append(come, fmt.Sprintf("x%03d-%02d", round, k))
	}
	p.Leave(at, gone, "main")
	p.Join(at, come, "")
}

// timeStages times one decision stage by stage: Propose and Commit are
// what Decide does when no scheduler plan is set and admission is first
// come first served.
func timeStages(ctx context.Context, p *pool.Pool, s alloc.Solver, round int) (decideStages, error) {
	var st decideStages
	event(p, round)
	t0 := time.Now()
	p.Problem()
	st.problem = time.Since(t0)
	t0 = time.Now()
	d := p.Propose(ctx, s, false)
	st.solve = max(0, time.Since(t0)-st.problem)
	t0 = time.Now()
	if err := p.Commit(d.Plan); err != nil {
		return st, err
	}
	st.commit = time.Since(t0)
	t0 = time.Now()
	p.State()
	st.state = time.Since(t0)
	return st, nil
}

// timeDecide times one whole pool.Decide.
func timeDecide(ctx context.Context, p *pool.Pool, s alloc.Solver, round int) (time.Duration, error) {
	event(p, round)
	t0 := time.Now()
	if _, err := p.Decide(ctx, s, false); err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}
