package sidecar

import (
	"context"
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/store"
	"github.com/bftrainer/bftrainer/trainer"
)

// readRunner hands each round the progress-log readings it is given.
type readRunner struct {
	fakeRunner
	reads []trainer.Progress
}

func (f *readRunner) ReadProgress(context.Context) ([]trainer.Progress, []trainer.Action) {
	r := f.reads
	f.reads = nil
	return r, nil
}

// TestReadingsFolded: the runner's readings of a progress log become
// progress events of source launcher, folded in the same round: the
// Trainer's samples, curve rows that say they came from the log, and its
// reading count; a Trainer that reported itself is told so in its Want
// (its log is then not read) and a reading still in flight is ignored; a
// reading of a Trainer that ended is dropped without an error.
func TestReadingsFolded(t *testing.T) {
	db := MustDB(t)
	submitted(t, db)
	ctx := context.Background()
	f := &readRunner{}
	r := &Reconciler{DB: db, Runner: f, Pool: pool.Config{TFwd: 10}}
	if err := r.Run(ctx); err != nil {
		t.Fatal(err)
	}
	// Lines written after the Trainer started (the readings are timed by
	// them, not by their fold).
	at1 := time.Now()
	f.reads = []trainer.Progress{{Trainer: "t1", Node: "n1", At: at1, Samples: 10, World: 1}}
	if err := r.Run(ctx); err != nil {
		t.Fatal(err)
	}
	at2 := time.Now()
	f.reads = []trainer.Progress{{Trainer: "t1", Node: "n1", At: at2, Samples: 30, World: 1}}
	if err := r.Run(ctx); err != nil {
		t.Fatal(err)
	}
	tr, _, err := db.Trainer(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	if tr.Learn.Readings != 2 || tr.Learn.Reports != 0 || tr.Done < 30 {
		t.Fatalf("readings %d, reports %d, done %v: want 2 readings folded, 30 samples", tr.Learn.Readings, tr.Learn.Reports, tr.Done)
	}
	evs, _ := db.Events(ctx, store.Filter{Trainer: "t1", Kinds: []store.Kind{store.KindProgress}})
	if len(evs) != 2 || evs[1].Source != launcherSource || evs[1].Value != 30 || !evs[1].At.Equal(at2.UTC().Truncate(time.Microsecond)) {
		t.Fatalf("progress events %+v", evs)
	}
	curve, _ := db.Events(ctx, store.Filter{Trainer: "t1", Kinds: []store.Kind{store.KindCurve}})
	var d struct{ Source string }
	want := 20 / at2.UTC().Truncate(time.Microsecond).Sub(at1.UTC().Truncate(time.Microsecond)).Seconds()
	if len(curve) != 1 || json.Unmarshal(curve[0].Detail, &d) != nil || d.Source != pool.SourceLog || math.Abs(curve[0].Value/want-1) > 1e-6 {
		t.Fatalf("curve rows %+v: want one of %v samples/s (20 over the lines' interval) from the log", curve, want)
	}
	if w := f.wants[len(f.wants)-1]; len(w) != 1 || w[0].Reports {
		t.Fatalf("want %+v: a Trainer that never reported is read", w)
	}
	// It reports itself: the runner is told, and a reading is ignored.
	if _, err := db.Append(ctx, store.Event{At: time.Now(), Kind: store.KindProgress, Source: "trainer", Trainer: "t1", Value: 40, HasVal: true}); err != nil {
		t.Fatal(err)
	}
	if err := r.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if w := f.wants[len(f.wants)-1]; len(w) != 1 || !w[0].Reports {
		t.Fatalf("want %+v: a Trainer that reported is not read", w)
	}
	f.reads = []trainer.Progress{{Trainer: "t1", Node: "n1", At: time.Now(), Samples: 99}}
	if err := r.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if tr, _, _ := db.Trainer(ctx, "t1"); tr.Done > 41 || tr.Learn.Readings != 2 {
		t.Fatalf("done %v, readings %d after a reading of 99 of a reporting Trainer: want its report's 40 (and the estimate since), 2", tr.Done, tr.Learn.Readings)
	}
	// Ended: a late reading is dropped, no error row.
	if _, err := db.Append(ctx, store.Event{At: time.Now(), Kind: store.KindProgress, Source: "trainer", Trainer: "t1", Value: 100, HasVal: true}); err != nil {
		t.Fatal(err)
	}
	if err := r.Run(ctx); err != nil {
		t.Fatal(err)
	}
	f.reads = []trainer.Progress{{Trainer: "t1", Node: "n1", At: time.Now(), Samples: 120}}
	if err := r.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if errs, _ := db.Events(ctx, store.Filter{Kinds: []store.Kind{store.KindError}}); len(errs) != 0 {
		t.Fatalf("errors %+v", errs)
	}
}
