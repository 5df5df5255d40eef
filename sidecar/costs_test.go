package sidecar

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/store"
	"github.com/bftrainer/bftrainer/trainer"
)

// costRunner reports, on each Apply, the measured rescales it is given.
type costRunner struct {
	fakeRunner
	measured []trainer.Measured
}

func (c *costRunner) Apply(ctx context.Context, want []trainer.Want) []trainer.Action {
	c.fakeRunner.Apply(ctx, want)
	var acts []trainer.Action
	for _, m := range c.measured {
		acts = append(acts, trainer.Action{Trainer: "t1", Op: "rescale", Note: "measured", Measured: &m})
	}
	c.measured = nil
	return acts
}

// TestMeasuredCostsFolded: a rescale cost the runner measured becomes a
// cost event in the history and, folded by the reconciler's next round,
// the Trainer's R_up / R_down (the submitted value a prior); a failure is
// recorded only; a cost from anyone but the runner is rejected. The
// runner is told which nodes the scheduler took.
func TestMeasuredCostsFolded(t *testing.T) {
	db := MustDB(t)
	submitted(t, db) // R_up, R_down 0 as submitted
	ctx := context.Background()
	f := &costRunner{}
	r := &Reconciler{DB: db, Runner: f, Pool: pool.Config{TFwd: 10}}
	if err := r.Run(ctx); err != nil {
		t.Fatal(err)
	}
	f.measured = []trainer.Measured{
		{Direction: trainer.Up, From: 1, To: 2, Seconds: 0.2},
		{Direction: trainer.Up, From: 2, To: 3, Seconds: 0.4},
		{Direction: trainer.Up, From: 3, To: 4, Seconds: 0.3},
		{Direction: trainer.Reclaim, From: 4, To: 3, Seconds: 1.2},
		{Direction: trainer.Failure, From: 3, To: 2, Seconds: 9},
	}
	if _, err := db.Append(ctx, store.Event{At: time.Now(), Kind: store.KindJoin, Source: "test", Nodes: []string{"n2"}}); err != nil {
		t.Fatal(err)
	}
	// Run: the round applies (the runner reports the costs), sees the
	// cost events waiting, and folds them in a second round.
	if err := r.Run(ctx); err != nil {
		t.Fatal(err)
	}
	tr, ok, err := db.Trainer(ctx, "t1")
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	// Up: median of {0, 0, 0.2, 0.4, 0.3} = 0.2; a reclaim is kept apart
	// from the graceful downs: reclaim cost, median of {0, 0, 1.2} = 0.
	if got := tr.Measured.Up; !slices.Equal(got, []float64{0.2, 0.4, 0.3}) {
		t.Fatalf("measured up %v", got)
	}
	if got := tr.Measured.Reclaim; !slices.Equal(got, []float64{1.2}) || len(tr.Measured.Down) != 0 {
		t.Fatalf("measured reclaim %v, down %v (a reclaim is no graceful down, a failure neither)", got, tr.Measured.Down)
	}
	if got := tr.RescaleUp(); got != 0.2 {
		t.Fatalf("R_up %v, want 0.2", got)
	}
	evs, err := db.Events(ctx, store.Filter{Trainer: "t1", Kinds: []store.Kind{store.KindCost}})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 5 || evs[3].Context != trainer.Reclaim || evs[3].Value != 1.2 || !evs[3].HasVal {
		t.Fatalf("cost events %+v", evs)
	}
	// A cost event from another source is refused, not folded.
	if _, err := db.Append(ctx, store.Event{At: time.Now(), Kind: store.KindCost, Source: "cli", Trainer: "t1", Value: 99, HasVal: true,
		Detail: []byte(`{"direction":"up","from":1,"to":2}`)}); err != nil {
		t.Fatal(err)
	}
	if err := r.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if tr, _, _ := db.Trainer(ctx, "t1"); len(tr.Measured.Up) != 3 {
		t.Fatalf("a cost from the CLI was folded: %v", tr.Measured.Up)
	}
	// Taken: the scheduler takes n2; the runner is told.
	if _, err := db.Append(ctx, store.Event{At: time.Now(), Kind: store.KindLeave, Source: "test", Job: "7", Nodes: []string{"n2"}}); err != nil {
		t.Fatal(err)
	}
	if err := r.Run(ctx); err != nil {
		t.Fatal(err)
	}
	last := f.wants[len(f.wants)-1]
	if len(last) != 1 || !slices.Equal(last[0].Taken, []string{"n2"}) {
		t.Fatalf("want %+v, taken should be [n2]", last)
	}
}
