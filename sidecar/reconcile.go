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
	"github.com/bftrainer/bftrainer/journal"
	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/store"
	"github.com/bftrainer/bftrainer/trainer"
)

// Runner makes Trainer processes match the desired state.
type Runner interface {
	Apply(ctx context.Context, want []trainer.Want) []trainer.Action
}

// pacer is a Runner whose launchers can leave to a round soon what they
// would otherwise wait for in this one (an elastic group's new workers
// while they import torch): Pace says whether such a round follows,
// Pending whether the last Apply asked for one (trainer.Runner.Pace).
type pacer interface {
	Pace(later bool)
	Pending() bool
}

// unfencer is a Runner that can lift the reclaim fence of nodes the
// scheduler confirmed idle (their epilog, which lifts it, may never have
// run).
type unfencer interface {
	Unfence(ctx context.Context, nodes []string) []trainer.Action
}

// checker is a Runner that also notices Trainers whose processes ended
// by themselves. Each round asks it first; the exits it reports become
// exit events, folded in the same round, so the Trainer's nodes go back
// to the pool and the runner stops what is left of it.
type checker interface {
	Check(ctx context.Context) ([]trainer.Exit, []trainer.Action)
}

// progressReader is a Runner that also reads Trainers' progress logs
// (trainer.Runner.ReadProgress): each round asks it right after the
// check; its readings become progress events of source "launcher",
// folded in the same round.
type progressReader interface {
	ReadProgress(ctx context.Context) ([]trainer.Progress, []trainer.Action)
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
	Journal   *journal.Journal // the hooks' records, ingested first in every round; nil: none
	Pool      pool.Config
	Solver    alloc.Solver
	Launchers trainer.Kinds // a submission's launch spec is checked by its kind; nil: trainer.Builtin
	Runner    Runner        // nil: record nothing to run
	Scheduler nodeLister    // asked whether released nodes are exactly idle; nil: nobody
	// JoinReleases folds a release as a join at once: whoever runs the
	// round vouches that the nodes are idle. Otherwise, with no Scheduler
	// to ask, released nodes stay pending.
	JoinReleases bool
	// NoPoll makes a run one pass over released nodes: those still
	// completing are left to the next run (Pending says so) instead of
	// being waited for, as a CLI command's round must not hang for them.
	NoPoll bool
	// Pending is set by a round that left released nodes completing, or
	// workers starting that a round soon takes in (pacer).
	Pending bool
	// StartCheck: before starting a Trainer on a node whose last event is
	// older than this (0: on any node), ask Scheduler about it; a node it
	// says is not idle leaves the pool instead. Negative: never ask.
	StartCheck time.Duration
	// Plan is the scheduler's plan of pending jobs' starts, read before
	// each decision (cached, bounded; see planSource); nil: no plan, every
	// reclaim is the prolog's.
	Plan      *planSource
	Spool     *spool // nil: no unprivileged submissions
	Admins    func(user string) bool
	LockPath  string
	IdleWait  time.Duration // how long released nodes may take to be exactly idle
	Poll      time.Duration // pause between rounds while waiting for them, or for workers starting
	MaxRounds int           // rounds per Run; 0 means 100
	// Metrics is the file each round writes the pool's metrics to, for
	// node_exporter's textfile collector (metrics.go); "": none.
	Metrics string
	// Database is the database's path: a round on another (the
	// stand-in, standin.go) says so in the metrics; "": not said.
	Database string
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
	rounds := 0
	for {
		lk, ok, err := tryLock(r.LockPath)
		if err != nil {
			return fmt.Errorf("reconcile: %w", err)
		}
		if !ok {
			return nil // the holder looks again after it unlocks
		}
		err = r.locked(ctx, &rounds)
		lk.Unlock()
		if err != nil || rounds >= r.MaxRounds {
			return err
		}
		// Look again once unlocked: a hook that wrote after our last
		// look found the lock held, and its reconciler left it to us.
		if more, err := r.waiting(ctx); err != nil || !more {
			return err
		}
	}
}

// locked runs rounds while holding the lock, until one wants no other.
func (r *Reconciler) locked(ctx context.Context, rounds *int) error {
	for ; *rounds < r.MaxRounds; *rounds++ {
		again, err := r.Round(ctx)
		if err != nil {
			return err
		}
		if !again {
			*rounds++
			return nil
		}
		if r.Poll > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(r.Poll):
			}
		}
	}
	r.Log.Printf("stopping after %d rounds; the next event or sync continues", r.MaxRounds)
	return nil
}

// waiting reports whether hook records, spooled requests or input events
// newer than the saved state are waiting.
func (r *Reconciler) waiting(ctx context.Context) (bool, error) {
	if r.Journal != nil {
		if n, _, _ := r.Journal.Backlog(); n > 0 {
			return true, nil
		}
	}
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
	if r.Launchers == nil {
		r.Launchers = trainer.Builtin()
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
	// The hooks' records first, in their own order and with their own
	// timestamps: everything a hook recorded before this round is folded
	// in it.
	more := r.ingestJournal(ctx)
	var gone []string
	if c, ok := r.Runner.(checker); ok && r.Runner != nil {
		gone = r.check(ctx, c)
	}
	if pr, ok := r.Runner.(progressReader); ok && r.Runner != nil {
		r.readProgress(ctx, pr)
	}
	more = r.ingestSpool(ctx) || more
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
	if r.Plan != nil {
		if r.Plan.Log == nil {
			r.Plan.Log = r.Log
		}
		p.SetPlan(r.Plan.get(ctx, now))
	}
	if ev := r.decide(ctx, p, now); ev != nil {
		history = append(history, *ev)
	}
	changes, ended := changeEvents(p.Changes(), now)
	history = append(history, changes...)
	st := p.State()
	if leave := r.startCheck(ctx, snap.State, st, gone, now); leave != nil {
		// The scheduler uses nodes the pool would lend: decide again
		// rather than start anything. A hook that recorded the job since
		// this round began (its prolog racing the check) is the record,
		// with the job; the rest is recorded as the check saw it.
		busy := slices.Clone(leave.Nodes)
		leave.Nodes = r.recordedSince(ctx, applied, leave.Nodes)
		why := ""
		if hooked := len(busy) - len(leave.Nodes); hooked > 0 {
			why = fmt.Sprintf(" (%d recorded by their prologs since the round began)", hooked)
		}
		r.Log.Printf("start check: %v not idle; deciding again without them%s", busy, why)
		if len(leave.Nodes) > 0 {
			if _, err := r.DB.Append(ctx, *leave); err != nil {
				return false, err
			}
		}
		return true, nil
	}
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
	starting := false
	if r.Runner != nil {
		pc, paced := r.Runner.(pacer)
		if paced {
			pc.Pace(!r.NoPoll)
		}
		acts := r.apply(ctx, st, snap.Launch, launches)
		starting = paced && pc.Pending()
		// Timed at the decision: the nodes a failed start gives back
		// were never used, not even while the start was tried.
		if starts := startEvents(snap.State, st, acts, now); len(starts) > 0 {
			if st, err = r.giveBack(ctx, p, applied, starts); err != nil {
				return false, err
			}
			more = true // the nodes given back are decided on at once
		}
	}
	if r.Metrics != "" {
		// Monitoring is not the round's purpose: a failure is logged.
		if err := r.writeMetrics(ctx, st, r.Now()); err != nil {
			r.Log.Printf("%v", err)
		}
	}
	r.Pending = waiting || starting
	return (r.Pending && !r.NoPoll) || more, nil
}

// ingestJournal moves the hooks' records into the history; true when some
// are left for the next round. A failure is logged: the records stay.
func (r *Reconciler) ingestJournal(ctx context.Context) (more bool) {
	if r.Journal == nil {
		return false
	}
	res, err := r.Journal.Ingest(ctx, r.DB, r.Now())
	if err != nil {
		r.Log.Printf("%v", err)
	}
	return res.Left > 0
}

// ingestSpool moves spooled requests into the history; true when some are
// left for the next round. A failure is logged: the requests stay.
func (r *Reconciler) ingestSpool(ctx context.Context) (more bool) {
	if r.Spool == nil {
		return false
	}
	left, err := r.Spool.ingest(ctx, r.DB, r.Now())
	if err != nil {
		r.Log.Printf("spool: %v", err)
	}
	return left
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

// check asks the runner which Trainers ended by themselves and records
// their exits (input events, folded next) and what it saw. gone are the
// nodes where a launch vanished without an exit: something killed it
// there (a node's prolog, whose leave may not be in the history).
func (r *Reconciler) check(ctx context.Context, c checker) (gone []string) {
	exits, acts := c.Check(ctx)
	for _, a := range acts {
		if a.Op == "gone" && a.Node != "" && !slices.Contains(gone, a.Node) {
			gone = append(gone, a.Node)
		}
	}
	evs := append(r.actionEvents(acts), exitEvents(exits, r.Now())...)
	if len(evs) == 0 {
		return gone
	}
	if _, err := r.DB.Append(ctx, evs...); err != nil {
		r.Log.Printf("record exits: %v", err)
	}
	return gone
}

// checkPending asks the scheduler whether released nodes are exactly idle
// yet, and joins those that are. waiting is true while some are still
// completing and have not waited IdleWait. A node the scheduler confirms
// idle has its reclaim fence lifted (its epilog, which lifts it, may not
// have run), then is asked about again: a job that started there before
// the fence was lifted shows in the second answer, and its node stays
// out.
func (r *Reconciler) checkPending(ctx context.Context, p *pool.Pool) (waiting bool, history []store.Event) {
	pend := p.Pending()
	if len(pend) == 0 {
		return false, nil
	}
	if r.Scheduler == nil {
		if r.JoinReleases {
			// Nobody to ask, and the caller vouches for them.
			return false, joinByJob(p, pend, func(string) bool { return true }, r.Now())
		}
		return false, nil
	}
	names := make([]string, len(pend))
	for i, n := range pend {
		names[i] = n.Name
	}
	states, err := r.nodeStates(ctx, names)
	now := r.Now()
	if err != nil {
		// Do not spin on a scheduler that does not answer: the nodes stay
		// pending until the next event or sync.
		return false, []store.Event{{At: now, Kind: store.KindError, Source: "reconciler", Context: "idle-check", Error: err.Error()}}
	}
	var idle []string
	for _, n := range pend {
		switch {
		case states[n.Name] == "idle":
			idle = append(idle, n.Name)
		case now.Sub(n.Since) < r.IdleWait:
			waiting = true
		}
		// else not idle after the wait: sync will settle it
	}
	if u, ok := r.Runner.(unfencer); ok && r.Runner != nil && len(idle) > 0 {
		if evs := r.actionEvents(u.Unfence(ctx, idle)); len(evs) > 0 {
			if _, err := r.DB.Append(ctx, evs...); err != nil {
				r.Log.Printf("record unfence: %v", err)
			}
		}
		again, err := r.nodeStates(ctx, idle)
		if err != nil {
			return false, []store.Event{{At: now, Kind: store.KindError, Source: "reconciler", Context: "idle-check", Error: err.Error()}}
		}
		idle = slices.DeleteFunc(idle, func(n string) bool { return again[n] != "idle" })
	}
	return waiting, joinByJob(p, pend, func(n string) bool { return slices.Contains(idle, n) }, now)
}

// joinByJob joins the pending nodes that are idle, one join per job that
// released them, and returns the history rows.
func joinByJob(p *pool.Pool, pend []pool.Node, idle func(node string) bool, now time.Time) (history []store.Event) {
	byJob := map[string][]string{}
	var jobs []string
	for _, n := range pend {
		if !idle(n.Name) {
			continue
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
	return history
}

// listingTimeout bounds a call of the scheduler's node listing: a round a
// CLI command runs must not hang on a scheduler that does not answer.
const listingTimeout = 15 * time.Second

// nodeStates asks the scheduler, within listingTimeout.
func (r *Reconciler) nodeStates(ctx context.Context, nodes []string) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, listingTimeout)
	defer cancel()
	return r.Scheduler.NodeStates(ctx, nodes)
}

// startCheck asks the scheduler about the nodes the round is about to
// start Trainers on — newly given to a Trainer, or where its launch
// vanished (gone) — when their last event is older than StartCheck, and
// returns a leave of those it says are not idle: a leave the history
// missed, which must not put a Trainer beside the scheduler's job. nil
// when all is well, or nobody can be asked.
func (r *Reconciler) startCheck(ctx context.Context, before, after pool.State, gone []string, now time.Time) *store.Event {
	if r.Scheduler == nil || r.StartCheck < 0 {
		return nil
	}
	held := map[string]string{}
	for _, t := range before.Trainers {
		for _, n := range t.Nodes {
			held[n.Name] = t.ID
		}
	}
	since := map[string]time.Time{}
	for _, n := range after.Nodes {
		since[n.Name] = n.Since
	}
	var ask []string
	for _, t := range after.Trainers {
		if t.Status != pool.Running {
			continue
		}
		for _, n := range t.Nodes {
			fresh := held[n.Name] != t.ID && now.Sub(since[n.Name]) >= r.StartCheck
			if fresh || slices.Contains(gone, n.Name) {
				ask = append(ask, n.Name)
			}
		}
	}
	if len(ask) == 0 {
		return nil
	}
	slices.Sort(ask)
	states, err := r.nodeStates(ctx, ask)
	if err != nil {
		// Not knowing is no reason to keep the pool's nodes from it: the
		// node's fence, set by its prolog, still refuses a start beside a
		// job.
		r.Log.Printf("start check: %v", err)
		return nil
	}
	var busy []string
	seen := map[string]string{}
	for _, n := range ask {
		if st := states[n]; st != "idle" {
			busy = append(busy, n)
			seen[n] = st
		}
	}
	if len(busy) == 0 {
		return nil
	}
	d, _ := json.Marshal(map[string]any{"states": seen})
	return &store.Event{At: now, Kind: store.KindLeave, Source: "reconciler", Context: "start-check", Nodes: busy, Detail: d}
}

// recordedSince returns the nodes of busy that no leave recorded after
// the event applied names: the hooks' records are ingested again first,
// so that a prolog that ran while the round decided is found.
func (r *Reconciler) recordedSince(ctx context.Context, applied int64, busy []string) []string {
	r.ingestJournal(ctx)
	r.ingestSpool(ctx)
	evs, err := r.DB.Events(ctx, store.Filter{AfterID: applied, Kinds: []store.Kind{store.KindLeave}})
	if err != nil {
		r.Log.Printf("start check: %v", err)
		return busy
	}
	return slices.DeleteFunc(busy, func(n string) bool {
		return slices.ContainsFunc(evs, func(e store.Event) bool { return slices.Contains(e.Nodes, n) })
	})
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

// giveBack records the round's starts (startEvents) and folds them at
// once, with any input recorded since the round's fold, into the round's
// pool, and saves it again: a start that failed gives its nodes back in
// the round that tried it, and its Trainer backs off or ends (pool's
// StartFailed). Recorded as inputs first, so that a reconciler that dies
// before the save leaves them to the next round's fold. It returns the
// pool's state as saved.
func (r *Reconciler) giveBack(ctx context.Context, p *pool.Pool, applied int64, starts []store.Event) (pool.State, error) {
	before := p.State()
	if _, err := r.DB.Append(ctx, starts...); err != nil {
		return before, fmt.Errorf("record starts: %w", err)
	}
	evs, err := r.DB.Events(ctx, store.Filter{AfterID: applied, InputsOnly: true})
	if err != nil {
		return before, err
	}
	launches := map[string]store.Launch{}
	var history []store.Event
	for _, ev := range evs {
		if e := r.foldEvent(p, ev, launches); e != nil {
			history = append(history, *e)
		}
		applied = ev.ID
	}
	changes, ended := changeEvents(p.Changes(), r.Now())
	st := p.State()
	err = r.DB.Save(ctx, &store.Round{State: st, Ended: ended, Launch: launches, AppliedID: applied,
		PrevNow: before.Now, PrevTotal: before.Totals, Events: append(history, changes...)})
	return st, err
}

// startOps are the runner's operations that start a Trainer's processes.
var startOps = []string{"start", "store-start", "driver-start"}

// startEvents are the round's starts as the runner reported them (acts),
// one input event per Trainer: a failure (error: the first reason) with
// the nodes it gives back — all it holds when it held none before the
// round (nothing of it runs), else the new nodes that failed (all new
// ones for a failure on no node) — or, for a Trainer with failures in a
// row whose start ran, a success that forgets them.
func startEvents(before, after pool.State, acts []trainer.Action, now time.Time) []store.Event {
	held := map[string][]string{}
	for _, t := range before.Trainers {
		held[t.ID] = alloc.Names(t.Nodes)
	}
	failed := map[string][]trainer.Action{}
	ran := map[string]bool{}
	for _, a := range acts {
		if !slices.Contains(startOps, a.Op) || a.Trainer == "" {
			continue
		}
		if a.Err != nil {
			failed[a.Trainer] = append(failed[a.Trainer], a)
		} else {
			ran[a.Trainer] = true
		}
	}
	var evs []store.Event
	for _, t := range after.Trainers {
		if t.Status != pool.Running {
			continue
		}
		fs := failed[t.ID]
		if len(fs) == 0 {
			if ran[t.ID] && t.Starts.Failures > 0 {
				evs = append(evs, store.Event{At: now, Kind: store.KindStart, Source: "reconciler", Trainer: t.ID})
			}
			continue
		}
		nodes := alloc.Names(t.Nodes)
		if old := held[t.ID]; len(old) > 0 {
			fresh := slices.DeleteFunc(slices.Clone(nodes), func(n string) bool { return slices.Contains(old, n) })
			named := fresh
			if !slices.ContainsFunc(fs, func(a trainer.Action) bool { return a.Node == "" }) {
				named = slices.DeleteFunc(slices.Clone(fresh), func(n string) bool {
					return !slices.ContainsFunc(fs, func(a trainer.Action) bool { return a.Node == n })
				})
			}
			nodes = named
		}
		if len(nodes) == 0 {
			continue
		}
		reason := fs[0].Err.Error()
		if fs[0].Node != "" {
			reason = fmt.Sprintf("on %s: %s", fs[0].Node, reason)
		}
		evs = append(evs, store.Event{At: now, Kind: store.KindStart, Source: "reconciler", Context: fs[0].Op,
			Trainer: t.ID, Nodes: nodes, Error: reason})
	}
	return evs
}

// apply hands the desired state to the runner, records what it did and
// returns it.
func (r *Reconciler) apply(ctx context.Context, st pool.State, saved, fresh map[string]store.Launch) []trainer.Action {
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
		w := trainer.Want{ID: t.ID, Owner: t.Owner, Launcher: l.Launcher, Spec: l.Spec, Min: t.Min, Max: t.Max, Since: t.Submit, Taken: taken,
			Reports: t.Learn.Reports > 0}
		for _, n := range t.Nodes {
			w.Nodes = append(w.Nodes, n.Name)
		}
		want = append(want, w)
	}
	acts := r.Runner.Apply(ctx, want)
	evs := r.actionEvents(acts)
	if len(evs) == 0 {
		return acts
	}
	if _, err := r.DB.Append(ctx, evs...); err != nil {
		r.Log.Printf("record actions: %v", err)
	}
	return acts
}
