package sidecar

// Every translation between the vocabularies the core joins, in one
// place: a scheduler's call (hooks.Call) becomes a history event
// (callEvent), and so does a node agent's kill report (killEvent); an
// input event is applied to the pool (foldEvent); the pool's changes
// become history events (changeEvents); the runner's actions and the
// exits it saw become history events (actionEvents, exitEvents); the
// history is folded back into a pool for the timeline (timelineBuilder's
// apply). The hook path (hook.go), the round's stages (reconcile.go) and
// the timeline (timeline.go) call these and translate nothing themselves.

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/bftrainer/bftrainer/hooks"
	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/store"
	"github.com/bftrainer/bftrainer/trainer"
	"github.com/bftrainer/bftrainer/trainer/wire"
)

// killEvent is the history's row for a node agent's kill (or clean-up)
// in a hook: what it killed, and its whole report.
func killEvent(call hooks.Call, node string, rep wire.KillReport, took time.Duration, err error, at time.Time) store.Event {
	detail, _ := json.Marshal(rep)
	ev := store.Event{At: at, Kind: store.KindKill, Source: call.Scheduler, Context: call.Context,
		Job: call.JobID, Nodes: []string{node}, Value: float64(rep.Count()), HasVal: true,
		Ms: ms(took), HasMs: true, Detail: detail}
	if err != nil {
		ev.Error = err.Error()
	}
	return ev
}

// callEvent is the history's row for a job taking nodes (a reclaim: a
// leave) or giving them back (a release), as its scheduler's hook said.
func callEvent(call hooks.Call, at time.Time) store.Event {
	kind := store.KindLeave
	if call.Action == hooks.Release {
		kind = store.KindRelease
	}
	return store.Event{At: at, Kind: kind, Source: call.Scheduler, Context: call.Context, Job: call.JobID, User: call.User, Nodes: call.Nodes}
}

// foldEvent applies one input event to the pool; it returns a history event
// when the input is rejected (bad submission, unauthorised cancel).
func (r *Reconciler) foldEvent(p *pool.Pool, ev store.Event, launches map[string]store.Launch) *store.Event {
	reject := func(err error) *store.Event {
		r.Log.Printf("event %d (%s): %v", ev.ID, ev.Kind, err)
		return &store.Event{At: ev.At, Kind: store.KindError, Source: "reconciler", Context: string(ev.Kind),
			Trainer: ev.Trainer, User: ev.User, Error: fmt.Sprintf("event %d rejected: %v", ev.ID, err)}
	}
	var skipped *store.Event
	if ev.Source == syncSource {
		ev.Nodes, skipped = unchangedSince(p, ev)
	}
	switch ev.Kind {
	case store.KindJoin:
		p.Join(ev.At, ev.Nodes, ev.Job)
	case store.KindLeave:
		p.Leave(ev.At, ev.Nodes, ev.Job)
	case store.KindRelease:
		if r.JoinReleases {
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
		if err := checkSubmit(r.Pool, r.Launchers, ev.Trainer, &req); err != nil {
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
		if ev.Source == launcherSource {
			return r.foldReading(p, ev)
		}
		// A progress report can finish a Trainer (its samples reached):
		// only its owner's processes (or root) may send one.
		if t, ok := p.Trainer(ev.Trainer); ok && !mayAct(ev.User, t.Owner, r.Admins) {
			return reject(fmt.Errorf("progress %q: %s may not report for %s's trainer", ev.Trainer, ev.User, t.Owner))
		}
		var d progressDetail
		if len(ev.Detail) > 0 {
			if err := json.Unmarshal(ev.Detail, &d); err != nil || d.Nodes < 0 {
				return reject(fmt.Errorf("bad progress detail %q", ev.Detail))
			}
		}
		if err := p.ProgressOn(ev.At, ev.Trainer, ev.Value, d.Nodes); err != nil {
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
	case store.KindStart:
		if ev.Error == "" {
			p.StartRan(ev.Trainer)
			break
		}
		if _, err := p.StartFailed(ev.At, ev.Trainer, ev.Nodes, ev.Error); err != nil && !errors.Is(err, pool.ErrUnknownTrainer) {
			return reject(err)
		}
	}
	return skipped
}

// syncSource is the source of the leaves and releases sync records.
const syncSource = "sync"

// unchangedSince keeps, of a sync's leave or release, the nodes whose
// state has not changed since the scheduler's snapshot it was made from
// (the event's time): whatever was recorded after the snapshot wins. The
// others are returned as a stale event.
func unchangedSince(p *pool.Pool, ev store.Event) ([]string, *store.Event) {
	var keep, later []string
	for _, n := range ev.Nodes {
		if node, ok := p.Node(n); ok && node.Since.After(ev.At) {
			later = append(later, n)
			continue
		}
		keep = append(keep, n)
	}
	if len(later) == 0 {
		return keep, nil
	}
	return keep, &store.Event{At: ev.At, Kind: store.KindStale, Source: "reconciler", Context: "changed after the sync's snapshot",
		Job: ev.Job, Nodes: later, Detail: json.RawMessage(fmt.Sprintf(`{"event":%d,"kind":%q}`, ev.ID, ev.Kind))}
}

// changeEvents turns the pool's changes into history rows, leaving out
// those that merely repeat an input event, and collects the final state
// of Trainers that ended.
func changeEvents(cs []pool.Change, now time.Time) (out []store.Event, ended []pool.Trainer) {
	for _, c := range cs {
		// One vocabulary: a change's kind is its row's kind.
		e := store.Event{At: c.At, Kind: c.Kind, Source: "reconciler", Trainer: c.Trainer, Job: c.Job, Nodes: c.Nodes}
		if e.At.IsZero() {
			e.At = now
		}
		switch c.Kind {
		case pool.Preempted:
			e.Value, e.HasVal = c.Cost, true
			e.Detail, _ = json.Marshal(map[string]int{"from": c.From, "to": c.To})
		case pool.Admitted:
		case pool.Rescaled:
			e.Value, e.HasVal = c.Cost, true
			e.Nodes = append(slices.Clone(c.Add), c.Release...)
			d := map[string]any{"from": c.From, "to": c.To, "add": c.Add, "release": c.Release}
			if c.Probe != nil {
				d["probe"] = c.Probe.Reason
			}
			e.Detail, _ = json.Marshal(d)
		case pool.CurveUpdated:
			e.Value, e.HasVal = c.Obs.Rate, true
			d := map[string]any{"nodes": c.Obs.Nodes, "seconds": c.Obs.Duration, "since": c.Obs.Since}
			if c.Source != "" {
				d["source"] = c.Source
			}
			e.Detail, _ = json.Marshal(d)
		case pool.Ended:
			d := exitDetail{Status: c.Status, Note: c.Note}
			if c.Final != nil {
				// Its samples, and whether it measured them: a
				// model's samples are never processed ones.
				e.Value, e.HasVal = c.Final.Done, true
				d.Progress = "modelled"
				if _, ok := c.Final.MeasuredDone(); ok {
					d.Progress = "measured"
				}
			}
			e.Detail, _ = json.Marshal(d)
			if c.Final != nil {
				ended = append(ended, *c.Final)
			}
		case pool.Moved:
			e.Value, e.HasVal = c.Cost, true
			e.Detail, _ = json.Marshal(map[string]any{"from": c.From, "to": c.To, "planned": c.Note})
		case pool.Stale:
			e.Context = c.Note
		case pool.Undecided, pool.StartFailed:
			e.Context = c.Note
		default:
			continue // join, leave, release, submit, progress: the input row says it
		}
		out = append(out, e)
	}
	return out, ended
}

// actionEvents turns the runner's actions into history rows.
func (r *Reconciler) actionEvents(acts []trainer.Action) []store.Event {
	evs := make([]store.Event, 0, len(acts))
	for _, a := range acts {
		at := r.Now()
		if !a.At.IsZero() {
			at = a.At // when it began: the audit orders a start against the jobs on its node
		}
		e := store.Event{At: at, Kind: store.KindAction, Source: "trainer", Context: a.Op, Trainer: a.Trainer,
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

// exitEvents turns the Trainers the runner saw end by themselves into
// input events (folded next round, like any other).
func exitEvents(exits []trainer.Exit, now time.Time) []store.Event {
	var evs []store.Event
	for _, e := range exits {
		d, _ := json.Marshal(exitDetail{Status: pool.Status(e.Status), Note: e.Note})
		evs = append(evs, store.Event{At: now, Kind: store.KindExit, Source: "trainer", Trainer: e.Trainer, Detail: d})
	}
	return evs
}

// apply folds one history event into the timeline's pool and sizes: the
// nodes' comings and goings by the pool's own rules, the Trainers' sizes
// from the decisions' records (see Core.Timeline).
func (b *timelineBuilder) apply(ev store.Event) {
	switch ev.Kind {
	case store.KindJoin, store.KindIdle:
		b.p.Join(ev.At, ev.Nodes, ev.Job)
	case store.KindLeave:
		b.p.Leave(ev.At, ev.Nodes, ev.Job)
	case store.KindRelease:
		if b.joinedAt[ev.Job] {
			b.p.Release(ev.At, ev.Nodes, ev.Job)
		} else {
			b.p.Join(ev.At, ev.Nodes, ev.Job)
		}
	case store.KindAdmit:
		b.admitted(ev.Trainer)
	case store.KindRescale, store.KindPreempt:
		var d struct{ To int }
		if json.Unmarshal(ev.Detail, &d) == nil {
			b.admitted(ev.Trainer)
			b.sizes[ev.Trainer] = d.To
		}
	case store.KindStartFailed:
		// A failed start gave these nodes back: the Trainer never used them.
		b.sizes[ev.Trainer] = max(0, b.sizes[ev.Trainer]-len(ev.Nodes))
	case store.KindEnd:
		delete(b.sizes, ev.Trainer)
	}
	b.p.Changes() // drained: only the nodes' states matter here
}
