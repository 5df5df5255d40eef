package store_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bftrainer/bftrainer/store"
)

// TestAppendOnce: events keyed by an origin are recorded once however
// often they are written, in order, and a plain Append cannot duplicate
// an origin either.
func TestAppendOnce(t *testing.T) {
	ctx := context.Background()
	db := MustOpen(t, filepath.Join(t.TempDir(), "b.db"))
	a := store.Event{At: t0, Kind: store.KindHook, Source: "slurm", Job: "7", Origin: "r1.0"}
	b := store.Event{At: t0, Kind: store.KindLeave, Source: "slurm", Job: "7", Nodes: []string{"n1"}, Origin: "r1.1"}
	c := store.Event{At: t0, Kind: store.KindRelease, Source: "slurm", Job: "7", Nodes: []string{"n1"}, Origin: "r2.0"}
	if n, err := db.AppendOnce(ctx, a, b); err != nil || n != 2 {
		t.Fatalf("first AppendOnce: %d, %v; want 2", n, err)
	}
	if n, err := db.AppendOnce(ctx, a, b, c); err != nil || n != 1 {
		t.Fatalf("second AppendOnce: %d, %v; want 1 (only r2.0 is new)", n, err)
	}
	if _, err := db.Append(ctx, a); err == nil || !strings.Contains(err.Error(), "UNIQUE") {
		t.Fatalf("Append of a recorded origin: %v, want a UNIQUE constraint error", err)
	}
	if _, err := db.AppendOnce(ctx, store.Event{At: t0, Kind: store.KindHook}); err == nil {
		t.Fatal("AppendOnce accepted an event without origin")
	}
	// Events written directly have no origin and never collide.
	for range 2 {
		if _, err := db.Append(ctx, store.Event{At: t0, Kind: store.KindJoin, Nodes: []string{"n2"}}); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := db.Events(ctx, store.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range evs {
		got = append(got, string(e.Kind)+":"+e.Origin)
	}
	if g, w := strings.Join(got, " "), "hook:r1.0 leave:r1.1 release:r2.0 join: join:"; g != w {
		t.Fatalf("events %q, want %q", g, w)
	}
}
