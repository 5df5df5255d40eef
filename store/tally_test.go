package store_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/store"
)

// TestTally: the histograms count every event of their kind with a wall
// time, in the right bucket, once — a second call counts only what was
// added since — and start over when asked for with other bounds.
func TestTally(t *testing.T) {
	ctx := context.Background()
	db := MustOpen(t, filepath.Join(t.TempDir(), "b.db"))
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	hook := func(ms float64) store.Event {
		return store.Event{At: at, Kind: store.KindHook, Source: "slurm", Ms: ms, HasMs: true}
	}
	if _, err := db.Append(ctx, hook(0.5), hook(3), hook(3), hook(40),
		store.Event{At: at, Kind: store.KindSolve, Ms: 7, HasMs: true},
		store.Event{At: at, Kind: store.KindHook, Source: "slurm"}, // no wall time: not counted
		store.Event{At: at, Kind: store.KindError, Error: "boom"}); err != nil {
		t.Fatal(err)
	}
	bounds := map[store.Kind][]float64{store.KindHook: {1, 5, 10}, store.KindSolve: {10}}
	tl, err := db.Tally(ctx, bounds)
	if err != nil {
		t.Fatal(err)
	}
	h := tl.Histograms[store.KindHook]
	if got, want := h.Counts, []int64{1, 2, 0, 1}; !slices.Equal(got, want) || h.Count != 4 || h.Sum != 46.5 {
		t.Fatalf("hook histogram %+v, want counts %v, count 4, sum 46.5", h, want)
	}
	if s := tl.Histograms[store.KindSolve]; s.Count != 1 || s.Counts[0] != 1 || tl.Errors != 1 {
		t.Fatalf("solve histogram %+v, errors %d", s, tl.Errors)
	}

	// Only the new rows are counted again.
	if _, err := db.Append(ctx, hook(2000), store.Event{At: at, Kind: store.KindHook, Ms: 9, HasMs: true, Error: "slow"}); err != nil {
		t.Fatal(err)
	}
	if tl, err = db.Tally(ctx, bounds); err != nil {
		t.Fatal(err)
	}
	if h := tl.Histograms[store.KindHook]; !slices.Equal(h.Counts, []int64{1, 2, 1, 2}) || h.Count != 6 || tl.Errors != 2 {
		t.Fatalf("after two more hooks: %+v, errors %d", h, tl.Errors)
	}
	// Other bounds: counted again from the first event.
	if tl, err = db.Tally(ctx, map[store.Kind][]float64{store.KindHook: {100}}); err != nil {
		t.Fatal(err)
	}
	if h := tl.Histograms[store.KindHook]; !slices.Equal(h.Counts, []int64{5, 1}) || h.Count != 6 || len(tl.Histograms) != 1 || tl.Errors != 2 {
		t.Fatalf("recounted: %+v, errors %d", tl.Histograms, tl.Errors)
	}
	if _, err := db.Tally(ctx, map[store.Kind][]float64{store.KindHook: {5, 1}}); err == nil {
		t.Fatal("bounds out of order should be refused")
	}
}

// TestKindsDocumented: Kinds (what history --kind accepts) lists exactly
// the kinds docs/history.md documents.
func TestKindsDocumented(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "docs", "history.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	doc = doc[strings.Index(doc, "Kinds that **change the pool**"):strings.Index(doc, "### `nodes`")]
	var documented []store.Kind
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z]+)` \\|").FindAllStringSubmatch(doc, -1) {
		documented = append(documented, store.Kind(m[1]))
	}
	got := store.Kinds()
	slices.Sort(documented)
	slices.Sort(got)
	if !slices.Equal(got, documented) {
		t.Fatalf("store.Kinds() = %v\ndocs/history.md documents %v", got, documented)
	}
}
