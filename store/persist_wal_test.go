package store

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestWALPersists: the -wal and -shm files outlive the last writer, with
// the database's mode, so that a user who may read the database but not
// create files beside it can still open it (SQLite's read-only WAL
// readers need both files to exist).
func TestWALPersists(t *testing.T) {
	path := filepath.Join(t.TempDir(), "b.db")
	ctx := context.Background()
	db, err := Open(ctx, path, Options{Mode: 0o644})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Append(ctx, Event{At: time.Now(), Kind: KindJoin, Source: "test", Nodes: []string{"n1"}}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for _, suffix := range []string{"-wal", "-shm"} {
		fi, err := os.Stat(path + suffix)
		if err != nil {
			t.Fatalf("%s gone after the last writer closed: %v", suffix, err)
		}
		if got := fi.Mode().Perm(); got != 0o644 {
			t.Fatalf("%s has mode %v, want the database's 0644", suffix, got)
		}
	}
	ro, err := Open(ctx, path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	evs, err := ro.Events(ctx, Filter{})
	if err != nil || len(evs) != 1 {
		t.Fatalf("read-only: %d events, %v", len(evs), err)
	}
}
