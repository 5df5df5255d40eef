package journal

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestWriteFallback: a hook whose Write has not returned by its deadline
// writes the same record (same ID) to the fallback; the record in both
// directories, ingested at once or one after the other, is recorded once.
func TestWriteFallback(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 15, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		together bool // both files there before the first Ingest
	}{{"both at once", true}, {"primary later", false}} {
		t.Run(tc.name, func(t *testing.T) {
			j := mustJournal(t)
			j.Fallback = filepath.Join(t.TempDir(), "fallback")
			if err := Create(j.Fallback, -1); err != nil {
				t.Fatal(err)
			}
			db := mustDB(t)
			id, err := NewID()
			if err != nil {
				t.Fatal(err)
			}
			r := hookRecord("7", t0)
			r.ID = id
			w, err := j.WriteFallback(r)
			if err != nil {
				t.Fatal(err)
			}
			if w.ID != id || w.Path != filepath.Join(j.Fallback, r.Name()) {
				t.Fatalf("WriteFallback wrote %v at %s, want %v at %s", w.ID, w.Path, id, filepath.Join(j.Fallback, r.Name()))
			}
			if got := entries(t, j.Dir); len(got) != 0 {
				t.Fatalf("the journal holds %v: WriteFallback writes the fallback only", got)
			}
			if !tc.together {
				if res := mustIngest(t, j, db, t0); res.Records != 1 || res.Added != 2 {
					t.Fatalf("first ingest: %+v, want 1 record, 2 events", res)
				}
			}
			mustWrite(t, j, r) // the hook's own write, landing late
			if got := entries(t, j.Dir); len(got) != 1 || got[0] != r.Name() {
				t.Fatalf("the journal holds %v, want %s", got, r.Name())
			}
			res := mustIngest(t, j, db, t0)
			want := 0
			if tc.together {
				want = 2
			}
			if res.Added != want {
				t.Fatalf("ingest: %+v, want %d events added", res, want)
			}
			if got := jobCounts(t, db); len(got) != 1 || got["7"] != [2]int{1, 1} {
				t.Fatalf("history has %v, want job 7's hook and leave once each", got)
			}
			if got := append(entries(t, j.Dir), entries(t, j.Fallback)...); len(got) != 0 {
				t.Fatalf("left after ingest: %v", got)
			}
		})
	}
}

// TestWriteFallbackRefuses: no fallback, or a record without the ID its
// Write chose, writes nothing and says so.
func TestWriteFallbackRefuses(t *testing.T) {
	j := mustJournal(t)
	r := hookRecord("8", time.Now())
	if _, err := j.WriteFallback(r); err == nil || !strings.Contains(err.Error(), "without its id") {
		t.Fatalf("zero id: %v, want refused", err)
	}
	r.ID = ID{1}
	if _, err := j.WriteFallback(r); err == nil || !strings.Contains(err.Error(), "no fallback") {
		t.Fatalf("no fallback: %v, want refused", err)
	}
	if got := entries(t, j.Dir); len(got) != 0 {
		t.Fatalf("the journal holds %v", got)
	}
}
