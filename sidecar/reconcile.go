package sidecar

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"slices"
	"time"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/store"
	"github.com/bftrainer/bftrainer/trainer"
)

// Runner makes Trainer processes match the desired state.
type Runner interface {
	Apply(ctx context.Context, want []trainer.Want) []trainer.Action
}

// checker is a Runner that also notices Trainers whose processes ended
// by themselves. Each round asks it first; the exits it reports become
// exit events, folded in the same round, so the Trainer's nodes go back
// to the pool and the runner stops what is left of it.
type checker interface {
	Check(ctx context.Context) ([]trainer.Exit, []trainer.Action)
}

// nodeLister reads the batch scheduler's own view of node states. States
// are the scheduler's words; "idle" means exactly idle (for Slurm: not
// COMPLETING, not drained, responding).
type nodeLister interface {
	NodeStates(ctx context.Context, nodes []string) (map[string]string, error)
}

// Reconciler is the serialised re-plan.
type Reconciler struct {
	DB        *store.DB
	Pool      pool.Config
	Solver    alloc.Solver
	Runner    Runner     // nil: record nothing to run
	Scheduler nodeLister // nil: released nodes join at once
	Spool     *spool     // nil: no unprivileged submissions
	Admins    func(user string) bool
	LockPath  string
	IdleWait  time.Duration // how long released nodes may take to be exactly idle
	Poll      time.Duration // pause between rounds while waiting for them
	MaxRounds int           // rounds per Run; 0 means 100
	// Metrics is the file each round writes the pool's metrics to, for
	// node_exporter's textfile collector (metrics.go); "": none.
	Metrics string
	// Backlog counts the hook records waiting in the journal, for the
	// metrics; nil: not written.
	Backlog func() (int, error)
	Now     func() time.Time
	Log     *log.Logger
}

// Run performs rounds until no new event is waiting, then returns. If
// another reconciler holds the lock it returns at once: that one will see
// the new events before it stops.
func (r *Reconciler) Run(ctx context.Context) error {
	r.defaults()
	lk, ok, err := tryLock(r.LockPath)
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	if !ok {
		return nil // the holder picks up the new events before it stops
	}
	rounds := 0
	for {
		more, err := r.locked(ctx, &rounds)
		lk.Unlock()
		if err != nil || !more {
			return err
		}
		// Events may have arrived after our last look but before we
		// unlocked, from a hook that saw the lock held: look again.
		if lk, ok, err = tryLock(r.LockPath); err != nil || !ok {
			return err
		}
	}
}

// locked runs rounds while holding the lock; more reports events that
// arrived at the very end.
func (r *Reconciler) locked(ctx context.Context, rounds *int) (more bool, err error) {
	for ; *rounds < r.MaxRounds; *rounds++ {
		again, err := r.Round(ctx)
		if err != nil {
			return false, err
		}
		if !again {
			return r.waiting(ctx)
		}
		if r.Poll > 0 {
			select {
			case <-ctx.Done():
				return false, ctx.Err()
			case <-time.After(r.Poll):
			}
		}
	}
	r.Log.Printf("stopping after %d rounds; the next event or sync continues", r.MaxRounds)
	return false, nil
}

// waiting reports whether input events newer than the saved state, or
// spooled requests, exist.
func (r *Reconciler) waiting(ctx context.Context) (bool, error) {
	// A request spooled after the last round's ingest is waiting too: the
	// CLI that spooled it found the lock held and left it to us.
	if r.Spool != nil && r.Spool.pending() {
		return true, nil
	}
	snap, err := r.DB.Load(ctx)
	if err != nil {
		return false, err
	}
	evs, err := r.DB.Events(ctx, store.Filter{AfterID: snap.AppliedID, InputsOnly: true, Limit: 1})
	return len(evs) > 0, err
}

func (r *Reconciler) defaults() {
	if r.MaxRounds <= 0 {
		r.MaxRounds = 100
	}
	if r.Now == nil {
		r.Now = time.Now
	}
	if r.Log == nil {
		r.Log = log.New(io.Discard, "", 0)
	}
	if r.LockPath == "" {
		r.LockPath = r.DB.Path() + ".lock"
	}
	if r.Solver == nil {
		r.Solver = alloc.Exact{}
	}
}

// Round folds new events, decides and saves once. again reports that
// another round is wanted soon (released nodes not idle yet, or events
// arrived meanwhile).
func (r *Reconciler) Round(ctx context.Context) (again bool, err error) {
	r.defaults()
	if c, ok := r.Runner.(checker); ok && r.Runner != nil {
		r.check(ctx, c)
	}
	if r.Spool != nil {
		if err := r.Spool.ingest(ctx, r.DB, r.Now()); err != nil {
			r.Log.Printf("spool: %v", err)
		}
	}
	f, err := r.fold(ctx)
	if err != nil {
		return false, err
	}
	snap, p, launches, history := f.snap, f.pool, f.launches, f.history
	prevNow, prevTotal, applied := snap.State.Now, snap.State.Totals, f.applied
	waiting, joins := r.checkPending(ctx, p)
	history = append(history, joins...)
	now := r.Now()
	p.Step(pool.Event{At: now})
	if ev := r.decide(ctx, p, now); ev != nil {
		history = append(history, *ev)
	}
	changes, ended := changeEvents(p.Changes(), now)
	history = append(history, changes...)
	st := p.State()
	if err := r.DB.Save(ctx, &store.Round{
		State: st, Ended: ended, Launch: launches, AppliedID: applied,
		PrevNow: prevNow, PrevTotal: prevTotal, Events: history,
	}); err != nil {
		return false, err
	}
	// Hooks never checkpoint the write-ahead log; the reconciler does, off
	// the scheduler's path. A busy checkpoint is only postponed.
	if err := r.DB.Checkpoint(ctx); err != nil {
		r.Log.Printf("%v", err)
	}
	if r.Runner != nil {
		r.apply(ctx, st, snap.Launch, launches)
	}
	if r.Metrics != "" {
		// Monitoring is not the round's purpose: a failure is logged.
		if err := r.writeMetrics(ctx, st, r.Now()); err != nil {
			r.Log.Printf("%v", err)
		}
	}
	return waiting, nil
}

// folded is the saved pool with the input events recorded since folded
// in: the pool as the next round will see it.
type folded struct {
	snap     *store.Snapshot
	pool     *pool.Pool
	events   int                     // input events folded
	applied  int64                   // id of the last one
	launches map[string]store.Launch // of Trainers submitted by them
	history  []store.Event           // rejections
}

func (r *Reconciler) fold(ctx context.Context) (*folded, error) {
	snap, err := r.DB.Load(ctx)
	if err != nil {
		return nil, err
	}
	evs, err := r.DB.Events(ctx, store.Filter{AfterID: snap.AppliedID, InputsOnly: true})
	if err != nil {
		return nil, err
	}
	p, err := pool.New(r.Pool, snap.State)
	if err != nil {
		return nil, err
	}
	f := &folded{snap: snap, pool: p, events: len(evs), applied: snap.AppliedID, launches: map[string]store.Launch{}}
	for _, ev := range evs {
		if e := r.foldEvent(p, ev, f.launches); e != nil {
			f.history = append(f.history, *e)
		}
		f.applied = ev.ID
	}
	return f, nil
}

// foldEvent applies one input event to the pool; it returns a history event
// when the input is rejected (bad submission, unauthorised cancel).
func (r *Reconciler) foldEvent(p *pool.Pool, ev store.Event, launches map[string]store.Launch) *store.Event {
	reject := func(err error) *store.Event {
		r.Log.Printf("event %d (%s): %v", ev.ID, ev.Kind, err)
		return &store.Event{At: ev.At, Kind: store.KindError, Source: "reconciler", Context: ev.Kind,
			Trainer: ev.Trainer, User: ev.User, Error: fmt.Sprintf("event %d rejected: %v", ev.ID, err)}
	}
	switch ev.Kind {
	case store.KindJoin:
		p.Join(ev.At, ev.Nodes, ev.Job)
	case store.KindLeave:
		p.Leave(ev.At, ev.Nodes, ev.Job)
	case store.KindRelease:
		if r.Scheduler == nil {
			// Nobody to ask whether they are exactly idle: the caller
			// (node join, tests) vouches for it.
			p.Join(ev.At, ev.Nodes, ev.Job)
			break
		}
		p.Release(ev.At, ev.Nodes, ev.Job)
	case store.KindSubmit:
		var req SubmitRequest
		if err := json.Unmarshal(ev.Detail, &req); err != nil {
			return reject(fmt.Errorf("bad submission: %w", err))
		}
		// A spooled request need not come from the CLI: check it before
		// anything is started from it.
		if err := checkSubmit(r.Pool, ev.Trainer, &req); err != nil {
			return reject(err)
		}
		req.ID = ev.Trainer
		if err := p.Submit(ev.At, req.spec(ev.User, ev.At)); err != nil {
			return reject(err)
		}
		launches[ev.Trainer] = req.Launch
	case store.KindCancel:
		t, ok := p.Trainer(ev.Trainer)
		if !ok {
			return reject(fmt.Errorf("cancel %q: %w", ev.Trainer, pool.ErrUnknownTrainer))
		}
		if !mayAct(ev.User, t.Owner, r.Admins) {
			return reject(fmt.Errorf("cancel %q: %s may not cancel %s's trainer", ev.Trainer, ev.User, t.Owner))
		}
		if err := p.Cancel(ev.At, ev.Trainer); err != nil {
			return reject(err)
		}
	case store.KindProgress:
		// A progress report can finish a Trainer (its samples reached):
		// only its owner's processes (or root) may send one.
		if t, ok := p.Trainer(ev.Trainer); ok && !mayAct(ev.User, t.Owner, r.Admins) {
			return reject(fmt.Errorf("progress %q: %s may not report for %s's trainer", ev.Trainer, ev.User, t.Owner))
		}
		if err := p.Progress(ev.At, ev.Trainer, ev.Value); err != nil {
			return reject(err)
		}
	case store.KindExit:
		var d exitDetail
		if err := json.Unmarshal(ev.Detail, &d); err != nil || d.Status.Active() {
			return reject(fmt.Errorf("bad exit detail %q", ev.Detail))
		}
		t, ok := p.Trainer(ev.Trainer)
		if !ok {
			return nil // already ended
		}
		if !mayAct(ev.User, t.Owner, r.Admins) {
			return reject(fmt.Errorf("exit %q: %s may not end %s's trainer", ev.Trainer, ev.User, t.Owner))
		}
		if err := p.End(ev.At, ev.Trainer, d.Status, d.Note); err != nil {
			return reject(err)
		}
	case store.KindCost:
		if err := foldCost(p, ev); err != nil {
			return reject(err)
		}
	}
	return nil
}

// check asks the runner which Trainers ended by themselves and records
// their exits (input events, folded next) and what it saw.
func (r *Reconciler) check(ctx context.Context, c checker) {
	exits, acts := c.Check(ctx)
	evs := r.actionEvents(acts)
	for _, e := range exits {
		d, _ := json.Marshal(exitDetail{Status: pool.Status(e.Status), Note: e.Note})
		evs = append(evs, store.Event{At: r.Now(), Kind: store.KindExit, Source: "trainer", Trainer: e.Trainer, Detail: d})
	}
	if len(evs) == 0 {
		return
	}
	if _, err := r.DB.Append(ctx, evs...); err != nil {
		r.Log.Printf("record exits: %v", err)
	}
}

// checkPending asks the scheduler whether released nodes are exactly idle
// yet, and joins those that are. waiting is true while some are still
// completing and have not waited IdleWait.
func (r *Reconciler) checkPending(ctx context.Context, p *pool.Pool) (waiting bool, history []store.Event) {
	pend := p.Pending()
	if len(pend) == 0 || r.Scheduler == nil {
		return false, nil
	}
	names := make([]string, len(pend))
	for i, n := range pend {
		names[i] = n.Name
	}
	states, err := r.Scheduler.NodeStates(ctx, names)
	now := r.Now()
	if err != nil {
		// Do not spin on a scheduler that does not answer: the nodes stay
		// pending until the next event or sync.
		history = append(history, store.Event{At: now, Kind: store.KindError, Source: "reconciler", Context: "idle-check", Error: err.Error()})
		return false, history
	}
	byJob := map[string][]string{}
	var jobs []string
	for _, n := range pend {
		switch {
		case states[n.Name] == "idle":
		case now.Sub(n.Since) < r.IdleWait:
			waiting = true
			continue
		default:
			continue // not idle after the wait: sync will settle it
		}
		if _, ok := byJob[n.Job]; !ok {
			jobs = append(jobs, n.Job)
		}
		byJob[n.Job] = append(byJob[n.Job], n.Name)
	}
	slices.Sort(jobs)
	for _, job := range jobs {
		p.Join(now, byJob[job], job)
		// Recorded under its own kind: a join row would be folded again.
		history = append(history, store.Event{At: now, Kind: store.KindIdle, Source: "reconciler", Job: job, Nodes: byJob[job]})
	}
	return waiting, history
}

// decide makes the round's decision with pool.Decide (the replay's own step;
// pool.Propose states the policy for an empty pool and a failing solver)
// and returns the solve event to record, or nil when the solver was not
// called.
func (r *Reconciler) decide(ctx context.Context, p *pool.Pool, now time.Time) *store.Event {
	start := time.Now()
	d, err := p.Decide(ctx, r.Solver, false)
	took := time.Since(start)
	if err != nil {
		// The plan was made for this very pool: a failure is a bug.
		r.Log.Printf("commit: %v", err)
	}
	if !d.Solved && err == nil {
		return nil
	}
	pr, pl := d.Problem, d.Plan
	ev := &store.Event{At: now, Kind: store.KindSolve, Source: "reconciler", Ms: ms(took), HasMs: true, Count: pr.Size()}
	switch {
	case err != nil:
		ev.Error = "commit: " + err.Error()
	case d.Err != nil:
		ev.Error = d.Err.Error()
	}
	ev.Detail, _ = json.Marshal(map[string]any{
		"solver": pl.Solver, "status": pl.Status.String(), "trainers": len(pr.Trainers), "nodes": pr.Size(), "note": pl.Note,
	})
	ev.Value, ev.HasVal = pl.Objective, true
	return ev
}

// changeEvents turns the pool's changes into history rows, leaving out
// those that merely repeat an input event, and collects the final state
// of Trainers that ended.
func changeEvents(cs []pool.Change, now time.Time) (out []store.Event, ended []pool.Trainer) {
	for _, c := range cs {
		e := store.Event{At: c.At, Source: "reconciler", Trainer: c.Trainer, Job: c.Job, Nodes: c.Nodes}
		if e.At.IsZero() {
			e.At = now
		}
		switch c.Kind {
		case pool.Preempted:
			e.Kind, e.Value, e.HasVal = store.KindPreempt, c.Cost, true
			e.Detail, _ = json.Marshal(map[string]int{"from": c.From, "to": c.To})
		case pool.Admitted:
			e.Kind = store.KindAdmit
		case pool.Rescaled:
			e.Kind, e.Value, e.HasVal = store.KindRescale, c.Cost, true
			e.Nodes = append(slices.Clone(c.Add), c.Release...)
			e.Detail, _ = json.Marshal(map[string]any{"from": c.From, "to": c.To, "add": c.Add, "release": c.Release})
		case pool.Ended:
			e.Kind = store.KindEnd
			e.Detail, _ = json.Marshal(exitDetail{Status: c.Status, Note: c.Note})
			if c.Final != nil {
				ended = append(ended, *c.Final)
			}
		case pool.Stale:
			e.Kind, e.Context = store.KindStale, c.Note
		case pool.Undecided:
			e.Kind, e.Context = store.KindKept, c.Note
		default:
			continue // join, leave, release, submit, progress: the input row says it
		}
		out = append(out, e)
	}
	return out, ended
}

// apply hands the desired state to the runner and records what it did.
func (r *Reconciler) apply(ctx context.Context, st pool.State, saved, fresh map[string]store.Launch) {
	var want []trainer.Want
	taken := takenNodes(st)
	for _, t := range st.Trainers {
		if t.Status != pool.Running {
			continue
		}
		l, ok := fresh[t.ID]
		if !ok {
			l = saved[t.ID]
		}
		w := trainer.Want{ID: t.ID, Owner: t.Owner, Launcher: l.Launcher, Spec: l.Spec, Min: t.Min, Max: t.Max, Since: t.Submit, Taken: taken}
		for _, n := range t.Nodes {
			w.Nodes = append(w.Nodes, n.Name)
		}
		want = append(want, w)
	}
	evs := r.actionEvents(r.Runner.Apply(ctx, want))
	if len(evs) == 0 {
		return
	}
	if _, err := r.DB.Append(ctx, evs...); err != nil {
		r.Log.Printf("record actions: %v", err)
	}
}

// actionEvents turns the runner's actions into history rows.
func (r *Reconciler) actionEvents(acts []trainer.Action) []store.Event {
	evs := make([]store.Event, 0, len(acts))
	for _, a := range acts {
		e := store.Event{At: r.Now(), Kind: store.KindAction, Source: "trainer", Context: a.Op, Trainer: a.Trainer,
			Ms: ms(a.Took), HasMs: true}
		if a.Node != "" {
			e.Nodes = []string{a.Node}
		}
		if a.Err != nil {
			e.Error = a.Err.Error()
		}
		if a.Note != "" {
			e.Detail, _ = json.Marshal(map[string]string{"note": a.Note})
		}
		evs = append(evs, e)
		if c := costEvent(e.At, a); c != nil {
			evs = append(evs, *c)
		}
	}
	return evs
}
