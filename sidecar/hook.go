package sidecar

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/bftrainer/bftrainer/hooks"
	"github.com/bftrainer/bftrainer/store"
)

// Killer kills every Trainer process of ours on a node.
type Killer interface {
	// KillLocal kills what runs on this machine as the given node and
	// reports it once they are gone. It runs in the node's prolog, and
	// refuses new starts until the epilog, so that a re-plan made just
	// before the reclaim cannot start a Trainer there. An error means
	// something of ours may remain.
	KillLocal(ctx context.Context, node string) (KillResult, error)
	// CleanLocal runs in the node's epilog: what is left is killed too,
	// and the node may take Trainers again.
	CleanLocal(ctx context.Context, node string) (KillResult, error)
}

// KillResult is what a node's kill did, for the hook's log and the
// history.
type KillResult struct {
	Killed      int             // processes killed
	Containment string          // how they were found: "cgroup", or "degraded (reason)"
	Report      json.RawMessage // the node agent's whole report, kept in the history
}

// Hook handles one scheduler hook call: the instant path. It never solves
// and never waits for a re-plan.
type Hook struct {
	Open    func(ctx context.Context) (*store.DB, error) // the database, opened on demand
	Killer  Killer                                       // nil: nothing to kill here
	Trigger func() error                                 // starts or nudges the reconciler; nil: none
	Started time.Time                                    // when the hook process started
	Now     func() time.Time
}

// Handle acts on the call and records it. The returned error is for the
// hook's log; the caller always exits 0.
//
//   - Reclaim (the controller's prolog): record the hook and a leave of the
//     job's nodes in one transaction, then nudge the reconciler.
//   - Release (the controller's epilog): record a release; the nodes join
//     once the scheduler reports them exactly idle.
//   - KillLocal and CleanupLocal (the node's own prolog and epilog): kill
//     our processes on this node first, from the local registry, with no
//     database and no network; then record it if the database is reachable.
func (h *Hook) Handle(ctx context.Context, call hooks.Call) error {
	if h.Now == nil {
		h.Now = time.Now
	}
	if h.Started.IsZero() {
		h.Started = h.Now()
	}
	var errs []error
	var extra []store.Event
	killed := -1
	switch call.Action {
	case hooks.KillLocal, hooks.CleanupLocal:
		if h.Killer != nil && call.Local != "" {
			start := h.Now()
			kill := h.Killer.KillLocal
			if call.Action == hooks.CleanupLocal {
				kill = h.Killer.CleanLocal
			}
			res, err := kill(ctx, call.Local)
			killed = res.Killed
			if err != nil {
				errs = append(errs, fmt.Errorf("kill on %s: %w", call.Local, err))
			}
			if res.Killed > 0 || err != nil {
				ev := store.Event{At: h.Now(), Kind: store.KindKill, Source: call.Scheduler, Context: call.Context,
					Job: call.JobID, Nodes: []string{call.Local}, Value: float64(res.Killed), HasVal: true,
					Ms: ms(h.Now().Sub(start)), HasMs: true, Detail: res.Report}
				if err != nil {
					ev.Error = err.Error()
				}
				extra = append(extra, ev)
			}
		}
	case hooks.Reclaim:
		extra = append(extra, store.Event{At: h.Now(), Kind: store.KindLeave, Source: call.Scheduler, Context: call.Context, Job: call.JobID, User: call.User, Nodes: call.Nodes})
	case hooks.Release:
		extra = append(extra, store.Event{At: h.Now(), Kind: store.KindRelease, Source: call.Scheduler, Context: call.Context, Job: call.JobID, User: call.User, Nodes: call.Nodes})
	}
	if err := h.record(ctx, call, extra, killed, errs); err != nil {
		errs = append(errs, err)
	} else if (call.Action == hooks.Reclaim || call.Action == hooks.Release) && h.Trigger != nil {
		if err := h.Trigger(); err != nil {
			errs = append(errs, fmt.Errorf("start reconciler: %w", err))
		}
	}
	return errors.Join(errs...)
}

func (h *Hook) record(ctx context.Context, call hooks.Call, extra []store.Event, killed int, errs []error) error {
	if h.Open == nil {
		return nil
	}
	db, err := h.Open(ctx)
	if err != nil {
		return fmt.Errorf("record hook: %w", err)
	}
	defer db.Close()
	detail := map[string]any{"action": call.Action.String()}
	if call.Local != "" {
		detail["local"] = call.Local
	}
	if killed >= 0 {
		detail["killed"] = killed
	}
	d, _ := json.Marshal(detail)
	ev := store.Event{At: h.Started, Kind: store.KindHook, Source: call.Scheduler, Context: call.Context,
		Job: call.JobID, User: call.User, Nodes: call.Nodes, Detail: d, Ms: ms(h.Now().Sub(h.Started)), HasMs: true}
	if len(errs) > 0 {
		ev.Error = errors.Join(errs...).Error()
	}
	if _, err := db.Append(ctx, append([]store.Event{ev}, extra...)...); err != nil {
		return fmt.Errorf("record hook: %w", err)
	}
	return nil
}

// RecordError records an error a hook swallowed, when the database can be
// reached at all.
func RecordError(ctx context.Context, open func(context.Context) (*store.DB, error), source, context_ string, started time.Time, herr error) error {
	if open == nil {
		return nil
	}
	db, err := open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.Append(ctx, store.Event{At: started, Kind: store.KindError, Source: source, Context: context_,
		Ms: ms(time.Since(started)), HasMs: true, Error: herr.Error()})
	return err
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
