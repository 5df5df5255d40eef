package store_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/store"
)

func MustOpen(tb testing.TB, path string) *store.DB {
	tb.Helper()
	db, err := store.Open(context.Background(), path, store.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

var t0 = time.Date(2026, 11, 29, 23, 59, 0, 0, time.UTC)

func TestOpenIsWALAndMigrated(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "bftrainer.db")
	db := MustOpen(t, path)
	var mode string
	if err := db.SQL().QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if mode != "wal" {
		t.Fatalf("journal_mode %q, want wal", mode)
	}
	v, err := db.SchemaVersion(context.Background())
	if err != nil || v < 1 {
		t.Fatalf("schema version %d, %v", v, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fi.Mode().Perm(), os.FileMode(0o640); got != want {
		t.Fatalf("database mode %v, want %v", got, want)
	}
	// Reopening does not migrate again.
	db2 := MustOpen(t, path)
	if v2, _ := db2.SchemaVersion(context.Background()); v2 != v {
		t.Fatalf("version changed on reopen: %d → %d", v, v2)
	}
}

func TestAppendAndFilter(t *testing.T) {
	ctx := context.Background()
	db := MustOpen(t, filepath.Join(t.TempDir(), "b.db"))
	evs := []store.Event{
		{At: t0, Kind: store.KindHook, Source: "slurm", Context: "prolog_slurmctld", Job: "7", Nodes: []string{"n1", "n10"}, Ms: 1.5, HasMs: true},
		{At: t0.Add(time.Second), Kind: store.KindLeave, Source: "slurm", Job: "7", Nodes: []string{"n1", "n10"}},
		{At: t0.Add(2 * time.Second), Kind: store.KindSubmit, Trainer: "t1", User: "alice", Detail: []byte(`{"x":1}`)},
		{At: t0.Add(25 * time.Hour), Kind: store.KindJoin, Job: "7", Nodes: []string{"n100"}},
	}
	if _, err := db.Append(ctx, evs...); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		f    store.Filter
		want int
	}{
		{"all", store.Filter{}, 4},
		{"node n1 (not n10, n100)", store.Filter{Node: "n1"}, 2},
		{"node n10", store.Filter{Node: "n10"}, 2},
		{"node with like metachar", store.Filter{Node: "n_"}, 0},
		{"job", store.Filter{Job: "7"}, 3},
		{"trainer", store.Filter{Trainer: "t1"}, 1},
		{"since", store.Filter{Since: t0.Add(time.Hour)}, 1},
		{"until", store.Filter{Until: t0.Add(time.Second)}, 1},
		{"kinds", store.Filter{Kinds: []store.Kind{store.KindHook, store.KindJoin}}, 2},
		{"inputs", store.Filter{InputsOnly: true}, 3},
		{"limit", store.Filter{Limit: 2, Desc: true}, 2},
	} {
		got, err := db.Events(ctx, c.f)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != c.want {
			t.Errorf("%s: %d events, want %d", c.name, len(got), c.want)
		}
	}
	got, _ := db.Events(ctx, store.Filter{Kinds: []store.Kind{store.KindHook}})
	if e := got[0]; !e.At.Equal(t0) || e.Context != "prolog_slurmctld" || len(e.Nodes) != 2 || e.Ms != 1.5 || e.HasVal {
		t.Fatalf("round trip lost data: %+v", e)
	}
}

// TestConcurrentAppends opens one handle per writer, as separate hook
// processes do, and checks that every append lands exactly once with no
// SQLITE_BUSY surfacing.
func TestConcurrentAppends(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "c.db")
	MustOpen(t, path)
	const writers, each = 40, 10
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			db, err := store.Open(ctx, path, store.Options{})
			if err != nil {
				errs <- err
				return
			}
			defer db.Close()
			for i := 0; i < each; i++ {
				if _, err := db.Append(ctx, store.Event{Kind: store.KindLeave, Job: fmt.Sprintf("%d-%d", w, i)}); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	db := MustOpen(t, path)
	evs, err := db.Events(ctx, store.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range evs {
		if seen[e.Job] {
			t.Fatalf("event %s recorded twice", e.Job)
		}
		seen[e.Job] = true
	}
	if len(seen) != writers*each {
		t.Fatalf("%d events recorded, want %d", len(seen), writers*each)
	}
}

func TestSaveLoadRound(t *testing.T) {
	ctx := context.Background()
	db := MustOpen(t, filepath.Join(t.TempDir(), "r.db"))
	p, err := pool.New(pool.Config{TFwd: 10}, pool.State{})
	if err != nil {
		t.Fatal(err)
	}
	curve := alloc.Curve{Nodes: []int{0, 1, 2, 4}, Throughput: []float64{0, 10, 19, 36}}
	p.Join(t0, []string{"n1", "n2", "n3"}, "")
	if err := p.Submit(t0, pool.Spec{ID: "t1", Owner: "alice", Min: 1, Max: 4, Curve: curve, RUp: 6, RDown: 14, Samples: 1e6}); err != nil {
		t.Fatal(err)
	}
	if err := p.Submit(t0, pool.Spec{ID: "t2", Owner: "bob", Min: 2, Max: 2, Curve: curve, RUp: 6, RDown: 14}); err != nil {
		t.Fatal(err)
	}
	p.Admit()
	pr := p.Problem()
	pl, _ := alloc.Exact{}.Solve(ctx, pr)
	if err := p.Commit(pl); err != nil {
		t.Fatal(err)
	}
	launch := map[string]store.Launch{"t1": {Launcher: "torchrun", Spec: []byte(`{"argv":["train.py"]}`)}, "t2": {Launcher: "exec"}}
	prev := pool.State{}
	st := p.State()
	if err := db.Save(ctx, &store.Round{State: st, Launch: launch, AppliedID: 5, PrevNow: prev.Now, Events: []store.Event{{At: t0, Kind: store.KindSolve}}}); err != nil {
		t.Fatal(err)
	}
	snap, err := db.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if snap.AppliedID != 5 {
		t.Fatalf("applied id %d, want 5", snap.AppliedID)
	}
	q, err := pool.New(p.Config(), snap.State)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := fmt.Sprintf("%+v", q.State()), fmt.Sprintf("%+v", st); a != b {
		t.Fatalf("state changed through the store:\n got %s\nwant %s", a, b)
	}
	if got := string(snap.Launch["t1"].Spec); got != `{"argv":["train.py"]}` {
		t.Fatalf("launch spec %q", got)
	}
	// A later round ends t2; its row keeps its final state.
	p.Step(pool.Event{At: t0.Add(time.Hour)})
	if err := p.Cancel(t0.Add(time.Hour), "t2"); err != nil {
		t.Fatal(err)
	}
	var ended []pool.Trainer
	for _, c := range p.Changes() {
		if c.Kind == pool.Ended {
			ended = append(ended, *c.Final)
		}
	}
	if err := db.Save(ctx, &store.Round{State: p.State(), Ended: ended, AppliedID: 9, PrevNow: st.Now, PrevTotal: st.Totals}); err != nil {
		t.Fatal(err)
	}
	tr, ok, err := db.Trainer(ctx, "t2")
	if err != nil || !ok || tr.Status != pool.Cancelled || tr.Launch.Launcher != "exec" {
		t.Fatalf("t2 after cancel: %+v ok=%v err=%v", tr, ok, err)
	}
	// A round that folded fewer events than the store has is refused.
	if err := db.Save(ctx, &store.Round{State: p.State(), AppliedID: 7}); err == nil {
		t.Fatal("a stale round was saved")
	}
	var idle, used float64
	if err := db.SQL().QueryRow("SELECT sum(idle_node_hours), sum(used_node_hours) FROM node_hours_daily").Scan(&idle, &used); err != nil {
		t.Fatal(err)
	}
	// One hour of 3 idle nodes, spread over two UTC days.
	if idle != 3 || used <= 0 {
		t.Fatalf("node hours idle %v used %v; want 3 and > 0", idle, used)
	}
	var days int
	db.SQL().QueryRow("SELECT count(*) FROM usage").Scan(&days)
	if days != 2 {
		t.Fatalf("usage over %d days, want 2 (23:59 + 1 h crosses midnight)", days)
	}
	for _, view := range []string{"trainer_progress", "reclaims_per_job", "solve_latency", "solve_latency_daily", "hook_calls", "errors"} {
		if _, err := db.SQL().Exec("SELECT * FROM " + view); err != nil {
			t.Errorf("view %s: %v", view, err)
		}
	}
}
