package sidecar

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/journal"
	"github.com/bftrainer/bftrainer/store"
)

// openCore builds a core from o, on a database in a temporary directory
// (unless o names one), opens it for writing and closes it at the end.
func openCore(tb testing.TB, o Options) (*Core, *store.DB) {
	tb.Helper()
	if o.Database == "" {
		o.Database = filepath.Join(tb.TempDir(), "b.db")
	}
	if o.Pool.TFwd == 0 {
		o.Pool.TFwd = 10
	}
	c, err := New(o)
	if err != nil {
		tb.Fatal(err)
	}
	db, err := c.open(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return c, db
}

// TestStatusSaysStale: status works without a solver, and says what is
// stale — hook records not in the history, events no round folded, no
// reconciler for longer than a few intervals while work waits, hooks
// failing — and that with no runner nothing is started.
func TestStatusSaysStale(t *testing.T) {
	ctx := context.Background()
	clock := time.Now()
	c, db := openCore(t, Options{Interval: 5 * time.Second, Solver: "cbc", SolverSettings: SolverSettings{Path: "/nonexistent/cbc"},
		Now: func() time.Time { return clock }})
	submitted(t, db)
	if err := c.Reconcile(ctx, true); err != nil {
		t.Fatal(err)
	}
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatalf("status with the solver missing: %v", err)
	}
	if len(st.Stale) != 0 || st.Starts || len(st.Pool.Running()) != 1 {
		t.Fatalf("fresh status: stale %q, starts %v, %d running", st.Stale, st.Starts, len(st.Pool.Running()))
	}
	// A hook's record waits in the journal; a hook recorded an error; an
	// event is recorded that no round folded; two minutes pass.
	if _, err := c.journal.Write(journal.Record{At: clock, Events: []store.Event{{Kind: store.KindLeave, Source: "slurm", Job: "9", Nodes: []string{"n1"}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Append(ctx,
		store.Event{At: clock, Kind: store.KindHook, Source: "slurm", Context: "epilog_slurmctld", Error: "hostlist: unclosed"},
		store.Event{At: clock, Kind: store.KindJoin, Source: "test", Nodes: []string{"n2"}}); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(2 * time.Minute)
	st, err = c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(st.Stale, "\n")
	for _, want := range []string{
		"1 hook record(s) not yet in the history",
		"1 recorded event(s) not yet folded",
		"no reconciler has run since",
		"hooks failing: 1 error(s) in the last hour; the last, ",
		"slurm epilog_slurmctld: hostlist: unclosed",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("status lacks %q; it says:\n%s", want, all)
		}
	}
	if st.Journal.Records != 1 || st.Unfolded != 1 {
		t.Fatalf("backlog %+v, unfolded %d", st.Journal, st.Unfolded)
	}
	// A round takes it all in: nothing stale but the hook error.
	if err := c.Reconcile(ctx, true); err != nil {
		t.Fatal(err)
	}
	if st, err = c.Status(ctx); err != nil {
		t.Fatal(err)
	}
	if len(st.Stale) != 1 || !strings.HasPrefix(st.Stale[0], "hooks failing") {
		t.Fatalf("after a round: %q", st.Stale)
	}
}

// TestReportFigures: the report counts what accrued since the last round
// (a Trainer holding its node an hour without a round still used a
// node-hour), prints hours to the thousandth, and counts failed
// Trainers.
func TestReportFigures(t *testing.T) {
	ctx := context.Background()
	clock := time.Now()
	c, db := openCore(t, Options{Now: func() time.Time { return clock }})
	submitted(t, db)
	if err := c.Reconcile(ctx, true); err != nil {
		t.Fatal(err)
	}
	rep, err := c.Report(ctx, time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if rows := rep.Rows(); rows[0][1] != "0.000" || rows[1][1] != "0.000" {
		t.Fatalf("right after the round: %q, %q; want 0.000 (no tiny floats in exponent form)", rows[0][1], rows[1][1])
	}
	clock = clock.Add(time.Hour)
	if rep, err = c.Report(ctx, time.Time{}, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if rows := rep.Rows(); rows[0][1] != "1.000" || rows[1][1] != "1.000" || rows[2][1] != "1.0000" {
		t.Fatalf("an hour later, no round: %q", rows[:3])
	}
	if _, err := db.Append(ctx, store.Event{At: clock, Kind: store.KindExit, Source: "trainer", Trainer: "t1", Detail: []byte(`{"status":"failed","note":"exit 1"}`)}); err != nil {
		t.Fatal(err)
	}
	if err := c.Reconcile(ctx, true); err != nil {
		t.Fatal(err)
	}
	if rep, err = c.Report(ctx, time.Time{}, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if rep.TrainersFailed != 1 || rep.Rows()[3][1] != "0 / 1 / 0" {
		t.Fatalf("failed Trainers: %d, row %q", rep.TrainersFailed, rep.Rows()[3])
	}
}

// TestSpoolFlood: junk dropped in the spool gives at most the error
// budget's rows an hour, the rest counted, then counted again once the
// budget is back; a round reads at most maxIngest requests and asks for
// another.
func TestSpoolFlood(t *testing.T) {
	ctx := context.Background()
	db := MustDB(t)
	sp := &spool{Dir: filepath.Join(t.TempDir(), "spool")}
	if err := os.Mkdir(sp.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	junk := func(k, n int) {
		for i := range n {
			if err := os.WriteFile(filepath.Join(sp.Dir, fmt.Sprintf("%d-%05d-junk.req", k, i)), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	rows := func(since time.Time) []store.Event {
		evs, err := db.Events(ctx, store.Filter{Kinds: []store.Kind{store.KindError}, Source: "spool", Since: since})
		if err != nil {
			t.Fatal(err)
		}
		return evs
	}
	t0 := time.Now()
	junk(1, maxIngest+50)
	more, err := sp.ingest(ctx, db, t0)
	if err != nil || !more {
		t.Fatalf("first batch: more=%v err=%v, want more", more, err)
	}
	if more, err = sp.ingest(ctx, db, t0); err != nil || more {
		t.Fatalf("second batch: more=%v err=%v", more, err)
	}
	// The first batch: 9 rows of their own and one counting the rest of
	// it; the second finds the budget spent and counts its 50 for later.
	got := rows(t0)
	if len(got) != 10 || got[9].Value != float64(maxIngest-9) {
		t.Fatalf("%d rows, the last %+v; want 10, the last counting %d", len(got), got[len(got)-1], maxIngest-9)
	}
	junk(2, 20)
	if _, err := sp.ingest(ctx, db, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if n := len(rows(t0)); n != 10 {
		t.Fatalf("%d rows after more junk within the hour, want still 10", n)
	}
	if ents, _ := os.ReadDir(sp.Dir); len(ents) != 0 {
		t.Fatalf("%d files left in the spool", len(ents))
	}
	later := t0.Add(time.Hour + 2*time.Minute)
	if _, err := sp.ingest(ctx, db, later); err != nil {
		t.Fatal(err)
	}
	if got := rows(later); len(got) != 1 || got[0].Value != 70 {
		t.Fatalf("an hour later: %+v, want one row counting the 50 and the 20", got)
	}
}

// TestStatusNamesPlanned reproduces issue 27's node that Slurm showed
// PLANNED (a backfill reservation) filed under "completing": released
// nodes the scheduler's listing says it holds for a planned start are
// named planned; those still completing stay completing. The listing is
// a script printing what `sinfo -h -N -o '%N %t'` prints.
func TestStatusNamesPlanned(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	sinfo := filepath.Join(dir, "sinfo")
	if err := os.WriteFile(sinfo, []byte("#!/bin/sh\nprintf 'n1 plnd\\nn2 comp\\nn3 idle\\nn4 plnd*\\n'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	clock := time.Now()
	c, db := openCore(t, Options{Scheduler: "slurm", Listings: map[string]string{"sinfo": sinfo}, Now: func() time.Time { return clock }})
	if _, err := db.Append(ctx,
		store.Event{At: clock, Kind: store.KindJoin, Source: "test", Nodes: []string{"n1", "n2", "n3", "n4"}},
		// Job 5 ran on three of them and ended: released, pending until
		// the scheduler lists them exactly idle.
		store.Event{At: clock, Kind: store.KindLeave, Source: "slurm", Job: "5", Nodes: []string{"n1", "n2", "n4"}},
		store.Event{At: clock.Add(time.Second), Kind: store.KindRelease, Source: "slurm", Job: "5", Nodes: []string{"n1", "n2", "n4"}}); err != nil {
		t.Fatal(err)
	}
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Planned != 2 || st.PlannedNodes != "n[1,4]" || st.Completing != 1 || st.CompletingNodes != "n2" || st.Idle != 1 {
		t.Fatalf("planned %d %q, completing %d %q, idle %d; want 2 n[1,4], 1 n2, 1",
			st.Planned, st.PlannedNodes, st.Completing, st.CompletingNodes, st.Idle)
	}
	// A listing that cannot answer: they are counted completing, as before.
	c.o.Listings["sinfo"] = filepath.Join(dir, "missing")
	if st, err = c.Status(ctx); err != nil || st.Planned != 0 || st.Completing != 3 {
		t.Fatalf("no listing: %v, planned %d, completing %d; want 0, 3", err, st.Planned, st.Completing)
	}
}
