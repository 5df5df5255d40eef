package sidecar

import (
	"context"
	"errors"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bftrainer/bftrainer/journal"
	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/store"
)

// standinSetup is a core whose database is on its own tmpfs (a real
// read-only remount needs one), its journal fallback outside it.
type standinSetup struct {
	c     *Core
	dbDir string
	logs  *lockedBuffer
}

func newStandinSetup(t *testing.T) *standinSetup {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a read-only filesystem needs a mount: run as root")
	}
	dir := t.TempDir()
	s := &standinSetup{dbDir: filepath.Join(dir, "db"), logs: &lockedBuffer{}}
	if err := os.Mkdir(s.dbDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=16m,mode=0755", "bftstandin", s.dbDir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", s.dbDir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", s.dbDir, err, out)
			exec.Command("umount", "-l", s.dbDir).Run()
		}
	})
	user := "alice"
	c, err := New(Options{Database: filepath.Join(s.dbDir, "b.db"), JournalFallback: filepath.Join(dir, "fallback"), MetricsFile: filepath.Join(dir, "bftrainer.prom"),
		Pool: pool.Config{TFwd: 10}, User: func() string { return user }, Log: log.New(s.logs, "", 0)})
	if err != nil {
		t.Fatal(err)
	}
	s.c = c
	return s
}

// readOnly makes the database's directory read-only for every open from
// now on (a read-only bind mount over it: the kernel refuses a read-only
// remount while a file is open for writing, and a handle opened before
// keeps writing to the filesystem below); writable undoes it.
func (s *standinSetup) readOnly(t *testing.T) (writable func()) {
	t.Helper()
	if out, err := exec.Command("mount", "--bind", s.dbDir, s.dbDir).CombinedOutput(); err != nil {
		t.Fatalf("bind %s: %v %s", s.dbDir, err, out)
	}
	done := false
	writable = func() {
		if done {
			return
		}
		done = true
		if out, err := exec.Command("umount", s.dbDir).CombinedOutput(); err != nil {
			t.Fatalf("umount the read-only bind %s: %v %s", s.dbDir, err, out)
		}
	}
	t.Cleanup(writable)
	if out, err := exec.Command("mount", "-o", "remount,bind,ro", s.dbDir, s.dbDir).CombinedOutput(); err != nil {
		t.Fatalf("bind %s read-only: %v %s", s.dbDir, err, out)
	}
	return writable
}

// trainersIn lists the active Trainers the database at path holds.
func trainersIn(t *testing.T, path string) []string {
	t.Helper()
	db, err := store.Open(context.Background(), path, store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	snap, err := db.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, tr := range snap.State.Trainers {
		ids = append(ids, tr.ID)
	}
	slices.Sort(ids)
	return ids
}

// TestStandIn: with the database's filesystem read-only, requests, hook
// records and rounds go on, recorded in the stand-in; reads show it; once
// the filesystem is writable again the next writer moves all of it into
// the database, once, and the stand-in is gone.
func TestStandIn(t *testing.T) {
	ctx := context.Background()
	s := newStandinSetup(t)
	c := s.c
	if _, err := c.Nodes(ctx, true, []string{"n[1-4]"}, "", false); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Submit(ctx, execRequest("t1")); err != nil {
		t.Fatal(err)
	}
	writable := s.readOnly(t)
	if c.StandIn() != "" {
		t.Fatal("a stand-in before anything needed one")
	}

	// A hook's record (the journal is read-only: the fallback takes it),
	// a request and a round.
	w, err := c.journal.Write(journal.Record{Events: []store.Event{{At: time.Now(), Kind: store.KindLeave, Source: "slurm", Job: "9", Nodes: []string{"n4"}}}})
	if err != nil || !strings.HasPrefix(w.Path, c.o.JournalFallback) {
		t.Fatalf("the hook's record: %+v %v, want it in the fallback", w, err)
	}
	rc, err := c.Submit(ctx, execRequest("t2"))
	if err != nil || rc.Spooled {
		t.Fatalf("Submit with the database read-only: %+v %v", rc, err)
	}
	if err := c.Reconcile(ctx, true); err != nil {
		t.Fatal(err)
	}
	standin := c.StandIn()
	if standin == "" || !strings.Contains(s.logs.String(), "read-only filesystem: rounds run on the stand-in") {
		t.Fatalf("no stand-in (%q); log:\n%s", standin, s.logs)
	}
	if got := trainersIn(t, c.o.Database); !slices.Equal(got, []string{"t1"}) {
		t.Fatalf("the read-only database holds %v", got)
	}
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.StandIn != standin || len(st.Trainers) != 2 || st.Busy != 1 {
		t.Fatalf("status on the stand-in: standin %q, %d Trainers, %d busy; want both Trainers and n4 busy", st.StandIn, len(st.Trainers), st.Busy)
	}
	if !slices.ContainsFunc(st.Stale, func(l string) bool { return strings.Contains(l, "rounds run on the stand-in") }) {
		t.Fatalf("status does not say so: %q", st.Stale)
	}
	if n, _, _ := c.journal.Backlog(); n != 0 {
		t.Fatalf("%d hook record(s) left in the fallback after a round on the stand-in", n)
	}
	if got := metric(t, parseMetrics(t, c.o.MetricsFile), "bftrainer_standin", ""); got != 1 {
		t.Errorf("bftrainer_standin %v on the stand-in, want 1", got)
	}

	// Writable again: the next writer (here a round) moves it back.
	writable()
	if err := c.Reconcile(ctx, true); err != nil {
		t.Fatal(err)
	}
	if c.StandIn() != "" {
		t.Fatalf("the stand-in is still there; log:\n%s", s.logs)
	}
	if got := metric(t, parseMetrics(t, c.o.MetricsFile), "bftrainer_standin", ""); got != 0 {
		t.Errorf("bftrainer_standin %v back on the database, want 0", got)
	}
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if _, err := os.Stat(standin + suffix); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s%s left behind: %v", standin, suffix, err)
		}
	}
	if got := trainersIn(t, c.o.Database); !slices.Equal(got, []string{"t1", "t2"}) {
		t.Fatalf("the database holds %v after the stand-in, want t1 t2", got)
	}
	db, err := store.Open(ctx, c.o.Database, store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	evs, err := db.Events(ctx, store.Filter{Kinds: []store.Kind{store.KindLeave}})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || evs[0].Job != "9" {
		t.Fatalf("the hook's leave in the history: %+v, want it once", evs)
	}
}

// TestStandInWaitsForAWriter: a writer that had the database open before
// its filesystem became read-only holds the stand-in's lock, so no copy is
// taken that its writes could miss; once it closes, the next writer makes
// one.
func TestStandInWaitsForAWriter(t *testing.T) {
	ctx := context.Background()
	s := newStandinSetup(t)
	c := s.c
	if _, err := c.Nodes(ctx, true, []string{"n[1-2]"}, "", false); err != nil {
		t.Fatal(err)
	}
	held, err := c.open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.readOnly(t)
	if _, err := c.open(ctx); !errors.Is(err, ErrNotWritable) || !errors.Is(err, unix.EWOULDBLOCK) {
		t.Fatalf("open while another writer holds the database: %v, want not writable (the lock is held)", err)
	}
	if c.StandIn() != "" {
		t.Fatal("a stand-in was made while a writer held the database")
	}
	held.Close()
	db, err := c.open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if db.Path() != c.StandIn() || c.StandIn() == "" {
		t.Fatalf("opened %s, want the stand-in (%q)", db.Path(), c.StandIn())
	}
	if !strings.Contains(s.logs.String(), "rounds run on the stand-in") {
		t.Fatalf("log:\n%s", s.logs)
	}
}
