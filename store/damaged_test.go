package store_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/store"
)

// historyFile writes a database with n events, checkpointed into the main
// file and closed, and returns its path and bytes: what a damaged copy is
// made from.
func historyFile(t *testing.T, n int) (string, []byte) {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "h.db")
	db, err := store.Open(ctx, path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		// Long details, so that the events span many pages.
		ev := store.Event{At: t0.Add(time.Duration(i) * time.Second), Kind: store.KindHook, Job: fmt.Sprint(i),
			Detail: []byte(fmt.Sprintf(`{"pad":%q}`, strings.Repeat("x", 500)))}
		if _, err := db.Append(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if wal, err := os.Stat(path + "-wal"); err != nil || wal.Size() != 0 {
		t.Fatalf("the last close left a WAL to replay (%v): the damage would not be to the main file", err)
	}
	return path, b
}

// TestOpenDamaged: a file that is not a database, or a database cut
// short, is refused by Open with an error that says so, and Open leaves
// the file's bytes as they were: a damaged history is never emptied,
// migrated over or rewritten.
func TestOpenDamaged(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		damage func(b []byte) []byte
		want   string // in the error
	}{
		{"garbage text", func([]byte) []byte { return []byte(strings.Repeat("not a database\n", 300)) }, "not a database"},
		{"header overwritten", func(b []byte) []byte { b = bytes.Clone(b); copy(b, strings.Repeat("\x00", 100)); return b }, "not a database"},
		{"truncated to half", func(b []byte) []byte { return b[:len(b)/2] }, "malformed"},
		{"truncated to one page", func(b []byte) []byte { return b[:4096] }, "malformed"},
		{"truncated inside the header", func(b []byte) []byte { return b[:60] }, "malformed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path, whole := historyFile(t, 200)
			bad := c.damage(whole)
			if err := os.WriteFile(path, bad, 0o640); err != nil {
				t.Fatal(err)
			}
			for _, ro := range []bool{false, true} {
				db, err := store.Open(ctx, path, store.Options{ReadOnly: ro})
				if err == nil {
					n := -1
					if evs, err := db.Events(ctx, store.Filter{}); err == nil {
						n = len(evs)
					}
					db.Close()
					t.Fatalf("read-only %v: Open accepted a damaged file (%d events readable)", ro, n)
				}
				if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path) {
					t.Errorf("read-only %v: error %q, want one naming %s and saying %q", ro, err, path, c.want)
				}
				after, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(after, bad) {
					t.Fatalf("read-only %v: the failed Open changed the file (%d bytes → %d)", ro, len(bad), len(after))
				}
			}
		})
	}
}
