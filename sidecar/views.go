package sidecar

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/names"
	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/store"
	"github.com/bftrainer/bftrainer/trainer"
)

// Preview is a dry run of a round: the saved state with the events not yet
// folded, brought to now, and the plan the solver would make
// (pool.Propose). Nothing is saved and nothing is applied.
type Preview struct {
	Pool     *pool.Pool
	Problem  *alloc.Problem
	Plan     *alloc.Plan
	Pending  int // events folded here that no round has folded yet
	SolveDur time.Duration
	// Probes are the curve learner's probes the decision was offered
	// (pool.Decision.Probes).
	Probes []pool.Probe
}

// Preview computes a dry-run round with the configured solver, or the one
// named by solver.
func (c *Core) Preview(ctx context.Context, solver string) (*Preview, error) {
	s := c.solver
	if solver != "" {
		var err error
		if s, err = c.o.Solvers.New(solver, c.o.SolverSettings); err != nil {
			return nil, invalid(err)
		}
	}
	db, err := c.openRead(ctx)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	f, err := c.foldNow(ctx, db)
	if err != nil {
		return nil, err
	}
	p := f.pool
	start := time.Now()
	d := p.Propose(ctx, s, false)
	if d.Err != nil {
		return nil, d.Err
	}
	return &Preview{Pool: p, Problem: d.Problem, Plan: d.Plan, Pending: f.events, SolveDur: time.Since(start), Probes: d.Probes}, nil
}

// foldNow is the saved pool with the recorded events no round has folded
// yet, brought to now, without saving or deciding anything: what the
// previews, status and the report show. Releases are folded as a round
// here would fold them, without asking anyone (no program of the
// scheduler's runs).
func (c *Core) foldNow(ctx context.Context, db *store.DB) (*folded, error) {
	_, join := c.idleCheck(false)
	r := &Reconciler{DB: db, Pool: c.o.Pool, Launchers: c.o.Launchers, Admins: c.o.Admins, Now: c.o.Now, JoinReleases: join}
	r.defaults()
	f, err := r.fold(ctx)
	if err != nil {
		return nil, err
	}
	f.pool.Step(pool.Event{At: r.Now()})
	return f, nil
}

// ErrNoListing: the scheduler has no node listing here (none, turned off,
// or its program is not installed).
var ErrNoListing = fmt.Errorf("the scheduler's node listing is not installed")

// Sync compares the pool with the scheduler's own view (of the scheduler
// named, or the configured one) and records what differs: nodes exactly
// idle there but not in the pool are released (the round that follows
// confirms them idle, lifts their fence and joins them); nodes in the
// pool that the scheduler runs jobs on (or no longer lists) leave. It is
// how a missed hook (a crashed node, a restarted controller) is repaired.
// The view is consistent: the journal is ingested before the scheduler is
// asked, and whatever is recorded about a node after that moment wins
// over what sync recorded from it. Then it re-plans, asking the scheduler
// about released nodes, unless noReconcile.
func (c *Core) Sync(ctx context.Context, scheduler string, noReconcile bool) (joined, left []string, err error) {
	if err := c.o.Schedulers.Validate(scheduler); err != nil {
		return nil, nil, invalid(fmt.Errorf("sync: %w", err))
	}
	q, _ := c.listing(scheduler)
	if q == nil {
		return nil, nil, fmt.Errorf("sync: %w", ErrNoListing)
	}
	db, err := c.open(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer db.Close()
	if _, err := c.journal.Ingest(ctx, db, c.o.Now()); err != nil {
		c.o.Log.Printf("%v", err)
	}
	if joined, left, err = syncNodes(ctx, db, c.o.Pool, q, c.o.Now, c.o.User()); err != nil {
		return nil, nil, err
	}
	if noReconcile {
		return joined, left, nil
	}
	r, err := c.newReconciler(db, false)
	if err != nil {
		return joined, left, err
	}
	r.Scheduler, r.JoinReleases = q, false
	return joined, left, r.Run(ctx)
}

// syncNodes is Sync's comparison and record, on an open database. The
// events carry the moment just before the scheduler was asked: the fold
// drops them for nodes that changed after it.
func syncNodes(ctx context.Context, db *store.DB, cfg pool.Config, sched nodeLister, now func() time.Time, user string) (joined, left []string, err error) {
	at := now()
	lctx, cancel := context.WithTimeout(ctx, listingTimeout)
	states, err := sched.NodeStates(lctx, nil)
	cancel()
	if err != nil {
		return nil, nil, fmt.Errorf("sync: %w", err)
	}
	r := &Reconciler{DB: db, Pool: cfg, Scheduler: sched, Now: now}
	r.defaults()
	f, err := r.fold(ctx)
	if err != nil {
		return nil, nil, err
	}
	p := f.pool
	listed := make([]string, 0, len(states))
	for n := range states {
		listed = append(listed, n)
	}
	slices.Sort(listed)
	for _, n := range listed {
		node, known := p.Node(n)
		idle := states[n] == "idle"
		if known && node.Since.After(at) {
			continue // recorded after the snapshot: that wins
		}
		switch {
		case idle && (!known || node.State != pool.Idle):
			joined = append(joined, n)
		case !idle && known && node.State == pool.Idle:
			left = append(left, n)
		}
	}
	for _, n := range p.State().Nodes {
		if _, ok := states[n.Name]; !ok && n.State == pool.Idle && !n.Since.After(at) {
			left = append(left, n.Name)
		}
	}
	detail, _ := json.Marshal(map[string]int{"scheduler_nodes": len(states), "joined": len(joined), "left": len(left)})
	out := []store.Event{{At: at, Kind: store.KindSync, Source: "cli", User: user, Detail: detail}}
	if len(left) > 0 {
		out = append(out, store.Event{At: at, Kind: store.KindLeave, Source: syncSource, User: user, Nodes: left})
	}
	if len(joined) > 0 {
		out = append(out, store.Event{At: at, Kind: store.KindRelease, Source: syncSource, User: user, Nodes: joined})
	}
	if _, err := db.Append(ctx, out...); err != nil {
		return nil, nil, err
	}
	return joined, left, nil
}

// Trainers lists the active Trainers, or all with all.
func (c *Core) Trainers(ctx context.Context, all bool) ([]store.Trainer, error) {
	db, err := c.openRead(ctx)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	var statuses []pool.Status
	if !all {
		statuses = []pool.Status{pool.Queued, pool.Running}
	}
	return db.Trainers(ctx, statuses...)
}

// Trainer returns one Trainer, active or ended.
func (c *Core) Trainer(ctx context.Context, id string) (store.Trainer, bool, error) {
	if err := names.ValidateTrainer(id); err != nil {
		return store.Trainer{}, false, invalid(err)
	}
	db, err := c.openRead(ctx)
	if err != nil {
		return store.Trainer{}, false, err
	}
	defer db.Close()
	return db.Trainer(ctx, id)
}

// Hosts returns the Trainer's nodes as Elastic Horovod's discovery script
// prints them, "node:slots" lines: the host file the runner replaces
// atomically each round, when there is one (Horovod asks every second: it
// spares the database that many readers), else from the database.
func (c *Core) Hosts(ctx context.Context, id string) ([]byte, error) {
	if err := names.ValidateTrainer(id); err != nil {
		return nil, invalid(err) // a name becomes a path below
	}
	if c.o.RunnerState != "" {
		if b, err := trainer.ReadHosts(c.o.RunnerState, id); err == nil {
			return b, nil
		}
	}
	tr, ok, err := c.Trainer(ctx, id)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("no Trainer named %q", id)
	}
	var spec trainer.Spec
	json.Unmarshal(tr.Launch.Spec, &spec)
	return trainer.HostLines(alloc.Names(tr.Nodes), spec.Slots()), nil
}

// Events returns the recorded events the filter selects.
func (c *Core) Events(ctx context.Context, f store.Filter) ([]store.Event, error) {
	db, err := c.openRead(ctx)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	return db.Events(ctx, f)
}

// Report summarises the history between since and until (zero: open).
// When the window reaches now, what accrued since the last round (idle
// nodes offered, nodes held, samples at the Trainers' rates) counts too:
// the history has it only once a round saves it, and a quiet pool may
// see no round for hours.
func (c *Core) Report(ctx context.Context, since, until time.Time) (*store.Report, error) {
	db, err := c.openRead(ctx)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rep, err := db.Report(ctx, since, until)
	if err != nil {
		return nil, err
	}
	if !until.IsZero() && until.Before(c.o.Now()) {
		return rep, nil
	}
	f, err := c.foldNow(ctx, db)
	if err != nil {
		return nil, err
	}
	was, is := f.snap.State.Totals, f.pool.Totals()
	rep.IdleNodeHours += (is.IdleNodeSeconds - was.IdleNodeSeconds) / 3600
	rep.UsedNodeHours += (is.UsedNodeSeconds - was.UsedNodeSeconds) / 3600
	// Brought to now Trainer by Trainer: measured samples to processed,
	// the model's to modelled (pool.Trainer.MeasuredDone).
	saved := map[string]pool.Trainer{}
	for _, t := range f.snap.State.Trainers {
		saved[t.ID] = t
	}
	for _, t := range f.pool.State().Trainers {
		old := saved[t.ID]
		if done, ok := t.MeasuredDone(); ok {
			before, _ := old.MeasuredDone()
			rep.Samples += done - before
			if _, was := old.MeasuredDone(); !was {
				rep.ModelledSamples -= old.Done // it measured since: its model is no longer counted
				if old.Done > 0 {
					rep.ModelledTrainers--
				}
			}
			continue
		}
		rep.ModelledSamples += t.Done - old.Done
		if old.Done == 0 && t.Done > 0 {
			rep.ModelledTrainers++
		}
	}
	rep.Utilisation = 0
	if rep.IdleNodeHours > 0 {
		rep.Utilisation = rep.UsedNodeHours / rep.IdleNodeHours
	}
	return rep, nil
}
