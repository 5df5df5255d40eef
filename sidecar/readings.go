package sidecar

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/store"
)

// launcherSource is the source of the progress events a round records
// from the runner's readings of Trainers' progress logs; no request can
// carry it (the spool's are "spool", the CLI's "trainer").
const launcherSource = "launcher"

// readProgress asks the runner for new readings of progress logs and
// records them, with what it said, as input events folded in this round.
func (r *Reconciler) readProgress(ctx context.Context, pr progressReader) {
	reads, acts := pr.ReadProgress(ctx)
	evs := r.actionEvents(acts)
	for _, p := range reads {
		d, _ := json.Marshal(readingDetail{World: p.World, Backward: p.Backward, Restart: p.Restart})
		evs = append(evs, store.Event{At: p.At, Kind: store.KindProgress, Source: launcherSource, Context: "progress-log",
			Trainer: p.Trainer, Nodes: []string{p.Node}, Value: p.Samples, HasVal: true, Detail: d})
	}
	if len(evs) == 0 {
		return
	}
	if _, err := r.DB.Append(ctx, evs...); err != nil {
		r.Log.Printf("record progress readings: %v", err)
	}
}

// foldReading folds a reading of a Trainer's progress log; one of a
// Trainer that ended meanwhile is dropped quietly, and one of a Trainer
// that reports itself is ignored by the pool (reports win).
func (r *Reconciler) foldReading(p *pool.Pool, ev store.Event) *store.Event {
	var d readingDetail
	json.Unmarshal(ev.Detail, &d) // an unreadable detail: no restart known
	if _, err := p.ProgressRead(ev.At, ev.Trainer, ev.Value, d.Restart); err != nil && !errors.Is(err, pool.ErrUnknownTrainer) {
		r.Log.Printf("event %d (progress-log): %v", ev.ID, err)
		return &store.Event{At: ev.At, Kind: store.KindError, Source: "reconciler", Context: string(ev.Kind), Trainer: ev.Trainer, Error: err.Error()}
	}
	return nil
}

// readingDetail is a reading's progress event detail.
type readingDetail struct {
	World    int  `json:"world"`
	Backward bool `json:"backward"`
	Restart  bool `json:"restart"`
}
