package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/alloc/alloctest"
	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/store"
)

// decideStages are one decision's stages, timed apart: building the
// problem from the pool (Problem), the solver (Propose less Problem: the
// learner's probes and Solve, placement included), choosing the physical
// nodes (alloc.Place on the plan's counts, timed again on its own: a part
// of solve), the commit's bookkeeping (Commit: the node moves, costs
// and history), the state a store saves (State) and the save itself
// (store.Save of the round in a real SQLite database, as the reconciler
// saves it); decide is a whole pool.Decide, timed on its own event.
type decideStages struct {
	problem, solve, place, commit, state, save, decide time.Duration
}

// fields returns the stages as the alloc line's fields, each name
// prefixed.
func (s decideStages) fields(prefix string) string {
	return fmt.Sprintf(" %sproblem_ms=%s %ssolve_ms=%s %splace_ms=%s %scommit_ms=%s %sstate_ms=%s %ssave_ms=%s",
		prefix, fmtMS(ms(s.problem)), prefix, fmtMS(ms(s.solve)), prefix, fmtMS(ms(s.place)),
		prefix, fmtMS(ms(s.commit)), prefix, fmtMS(ms(s.state)), prefix, fmtMS(ms(s.save)))
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
// after its own event. The saves go to a database in a temporary
// directory, removed after.
func decideMedian(ctx context.Context, s alloc.Solver, in benchInstance, runs int) (decideStages, error) {
	p, err := decidePool(ctx, s, in.J, in.N, in.nmax)
	if err != nil {
		return decideStages{}, err
	}
	dir, err := os.MkdirTemp("", "bftrainer-bench-decide-")
	if err != nil {
		return decideStages{}, err
	}
	defer os.RemoveAll(dir)
	db, err := store.Open(ctx, filepath.Join(dir, "state.db"), store.Options{})
	if err != nil {
		return decideStages{}, err
	}
	defer db.Close()
	// The first save writes every node and Trainer; the timed ones, a
	// round's changes, as the reconciler's do.
	prev := p.State()
	if err := db.Save(ctx, &store.Round{State: prev, AppliedID: 0}); err != nil {
		return decideStages{}, fmt.Errorf("first save: %w", err)
	}
	var st []decideStages
	var decide []time.Duration
	for r := range runs {
		one, err := timeStages(ctx, p, db, &prev, s, 2*r)
		if err != nil {
			return decideStages{}, err
		}
		st = append(st, one)
		d, err := timeDecide(ctx, p, s, 2*r+1)
		if err != nil {
			return decideStages{}, err
		}
		decide = append(decide, d)
	}
	stage := func(f func(decideStages) time.Duration) time.Duration {
		var ds []time.Duration
		for _, x := range st {
			ds = append(ds, f(x))
		}
		return median(ds)
	}
	return decideStages{
		problem: stage(func(x decideStages) time.Duration { return x.problem }),
		solve:   stage(func(x decideStages) time.Duration { return x.solve }),
		place:   stage(func(x decideStages) time.Duration { return x.place }),
		commit:  stage(func(x decideStages) time.Duration { return x.commit }),
		state:   stage(func(x decideStages) time.Duration { return x.state }),
		save:    stage(func(x decideStages) time.Duration { return x.save }),
		decide:  median(decide),
	}, nil
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
// come first served; State and Save what the reconciler's round does
// after. prev is the state saved last (the round's PrevNow and totals).
func timeStages(ctx context.Context, p *pool.Pool, db *store.DB, prev *pool.State, s alloc.Solver, round int) (decideStages, error) {
	var st decideStages
	event(p, round)
	t0 := time.Now()
	p.Problem()
	st.problem = time.Since(t0)
	t0 = time.Now()
	d := p.Propose(ctx, s, false)
	st.solve = max(0, time.Since(t0)-st.problem)
	counts := make([]int, len(d.Plan.Trainers))
	for j, a := range d.Plan.Trainers {
		counts[j] = a.To
	}
	t0 = time.Now()
	// Place values each Trainer at its count with the fixed horizon, a
	// curve lookup: what it times is the choice of nodes (the solver's
	// own placement reads its values from the tables it solved with).
	alloc.Place(d.Problem, counts)
	st.place = time.Since(t0)
	t0 = time.Now()
	if err := p.Commit(d.Plan); err != nil {
		return st, err
	}
	st.commit = time.Since(t0)
	t0 = time.Now()
	state := p.State()
	st.state = time.Since(t0)
	t0 = time.Now()
	if err := db.Save(ctx, &store.Round{State: state, AppliedID: int64(round + 1), PrevNow: prev.Now, PrevTotal: prev.Totals}); err != nil {
		return st, fmt.Errorf("save: %w", err)
	}
	st.save = time.Since(t0)
	*prev = state
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
