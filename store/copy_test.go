package store_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bftrainer/bftrainer/store"
)

// TestCopyThenAbsorb: a copy holds what the database held; what is written
// to the copy is in the database after Absorb, the database's own later
// writes are replaced, and an origin recorded in the copy is still
// recorded once.
func TestCopyThenAbsorb(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	primary := MustOpen(t, filepath.Join(dir, "p.db"))
	ev := func(kind store.Kind, origin string) store.Event {
		return store.Event{At: t0, Kind: kind, Source: "slurm", Job: "7", Nodes: []string{"n1"}, Origin: origin}
	}
	if _, err := primary.AppendOnce(ctx, ev(store.KindLeave, "r1.0"), ev(store.KindRelease, "r2.0")); err != nil {
		t.Fatal(err)
	}
	copyPath := filepath.Join(dir, "copy.db")
	if err := store.CopyFile(ctx, primary.Path(), copyPath, 0o600); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(copyPath); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the copy's mode: %v %v, want 0600", fi.Mode(), err)
	}
	if err := store.CopyFile(ctx, primary.Path(), copyPath, 0o600); err == nil {
		t.Fatal("CopyFile overwrote an existing database")
	}
	cp := MustOpen(t, copyPath)
	if got := kinds(t, cp); got != "leave:r1.0 release:r2.0" {
		t.Fatalf("the copy holds %q", got)
	}
	if _, err := cp.AppendOnce(ctx, ev(store.KindLeave, "r3.0")); err != nil {
		t.Fatal(err)
	}
	// Written to the database after the copy was taken: Absorb replaces it.
	if _, err := primary.Append(ctx, store.Event{At: t0, Kind: store.KindJoin, Nodes: []string{"n2"}}); err != nil {
		t.Fatal(err)
	}
	reader, err := store.Open(ctx, primary.Path(), store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	if err := primary.Absorb(ctx, copyPath); err != nil {
		t.Fatal(err)
	}
	for _, db := range []*store.DB{primary, reader} {
		if got := kinds(t, db); got != "leave:r1.0 release:r2.0 leave:r3.0" {
			t.Fatalf("after Absorb %s holds %q", db.Path(), got)
		}
	}
	if n, err := primary.AppendOnce(ctx, ev(store.KindLeave, "r3.0")); err != nil || n != 0 {
		t.Fatalf("an origin the copy recorded was recorded again: %d %v", n, err)
	}
}

// TestAbsorbRefusesAnotherSchema: a copy made by another version's
// migrations is not taken.
func TestAbsorbRefusesAnotherSchema(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	primary := MustOpen(t, filepath.Join(dir, "p.db"))
	copyPath := filepath.Join(dir, "copy.db")
	if err := store.CopyFile(ctx, primary.Path(), copyPath, 0o600); err != nil {
		t.Fatal(err)
	}
	raw, err := sql.Open("sqlite3", copyPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec("PRAGMA user_version = 999"); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	if err := primary.Absorb(ctx, copyPath); err == nil || !strings.Contains(err.Error(), "version 999") {
		t.Fatalf("Absorb of another schema: %v", err)
	}
}

func kinds(t *testing.T, db *store.DB) string {
	t.Helper()
	evs, err := db.Events(context.Background(), store.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range evs {
		got = append(got, string(e.Kind)+":"+e.Origin)
	}
	return strings.Join(got, " ")
}
