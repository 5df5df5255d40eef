package sidecar

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/store"
	"github.com/bftrainer/bftrainer/trainer"
)

// TestTimeline rebuilds the live pool's node use from a history written by
// real rounds over four hours: nodes join, a reclaim takes one of the
// Trainer's (it regrows on a free node), the job's release gives it back,
// the Trainer is cancelled. Each hourly sample is the state in force then.
func TestTimeline(t *testing.T) {
	ctx := context.Background()
	db := MustDB(t)
	t0 := time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)
	now := t0
	r := &Reconciler{DB: db, Pool: pool.Config{TFwd: 1e6, MaxTrainers: 4}, Now: func() time.Time { return now }}
	step := func(h float64, evs ...store.Event) {
		t.Helper()
		now = t0.Add(time.Duration(h * float64(time.Hour)))
		for i := range evs {
			evs[i].At = now
		}
		if _, err := db.Append(ctx, evs...); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Round(ctx); err != nil {
			t.Fatal(err)
		}
	}
	spec, _ := json.Marshal(trainer.Spec{Argv: []string{"/bin/true"}})
	req, _ := json.Marshal(SubmitRequest{ID: "t1", Min: 1, Max: 2, Curve: alloc.Curve{Nodes: []int{0, 1, 2}, Throughput: []float64{0, 10, 20}},
		Samples: 1e12, Launch: store.Launch{Launcher: trainer.Exec, Spec: spec}})
	step(0, store.Event{Kind: store.KindJoin, Source: "test", Nodes: []string{"n1", "n2", "n3", "n4"}},
		store.Event{Kind: store.KindSubmit, Source: "test", Trainer: "t1", User: "alice", Detail: req})
	held := func() []string {
		tr, _, _ := db.Trainer(ctx, "t1")
		return alloc.Names(tr.Nodes)
	}
	taken := held()[0]
	step(1, store.Event{Kind: store.KindLeave, Source: "slurm", Job: "5", Nodes: []string{taken}})
	step(2, store.Event{Kind: store.KindRelease, Source: "slurm", Job: "5", Nodes: []string{taken}})
	step(3, store.Event{Kind: store.KindCancel, Source: "cli", Trainer: "t1", User: "alice"})

	core, err := New(Options{Database: db.Path(), Now: func() time.Time { return t0.Add(5 * time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	tl, err := core.Timeline(ctx, time.Time{}, t0.Add(4*time.Hour), 5)
	if err != nil {
		t.Fatal(err)
	}
	if !tl.From.Equal(t0) || len(tl.Times) != 5 || !tl.Times[4].Equal(t0.Add(4*time.Hour)) {
		t.Fatalf("window %v–%v, samples at %v", tl.From, tl.To, tl.Times)
	}
	if want := []int{4, 3, 4, 4, 4}; !slices.Equal(tl.Idle, want) {
		t.Errorf("idle %v, want %v", tl.Idle, want)
	}
	if want := []int{2, 2, 2, 0, 0}; !slices.Equal(tl.Used, want) {
		t.Errorf("used %v, want %v (the Trainer regrows after the reclaim)", tl.Used, want)
	}
	if !slices.Equal(tl.Trainers, []string{"t1"}) || len(tl.Shares[0]) != 1 || tl.Shares[0][0] != (TimelineShare{Trainer: 0, Nodes: 2}) || len(tl.Shares[3]) != 0 {
		t.Errorf("trainers %v, shares %v", tl.Trainers, tl.Shares)
	}

	// A window inside the history starts from the state in force then.
	tl, err = core.Timeline(ctx, t0.Add(90*time.Minute), t0.Add(150*time.Minute), 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{3, 4}; !slices.Equal(tl.Idle, want) || tl.Events == 0 {
		t.Errorf("window 1.5–2.5 h: idle %v, want %v; %d events in it", tl.Idle, want, tl.Events)
	}
	if _, err := core.Timeline(ctx, t0.Add(5*time.Hour), t0.Add(4*time.Hour), 5); err == nil {
		t.Error("an empty window should be refused")
	}
}
