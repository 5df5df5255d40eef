package sidecar

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/store"
	"github.com/bftrainer/bftrainer/trainer"
)

// fakeRunner is the runner one layer up: it records what it was asked
// and reports the exits it is told to.
type fakeRunner struct {
	wants [][]trainer.Want
	exits []trainer.Exit
}

func (f *fakeRunner) Apply(_ context.Context, want []trainer.Want) []trainer.Action {
	f.wants = append(f.wants, want)
	return nil
}

func (f *fakeRunner) Check(context.Context) ([]trainer.Exit, []trainer.Action) {
	ex := f.exits
	f.exits = nil
	if len(ex) == 0 {
		return nil, nil
	}
	return ex, []trainer.Action{{Trainer: "t1", Node: "n1", Op: "exited", Note: "exited 0 by itself"}}
}

// MustDB opens a database in a temporary directory.
func MustDB(tb testing.TB) *store.DB {
	tb.Helper()
	db, err := store.Open(context.Background(), filepath.Join(tb.TempDir(), "b.db"), store.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

// submitted records a join of n1 and a Trainer t1 owned by alice.
func submitted(tb testing.TB, db *store.DB) {
	tb.Helper()
	spec, _ := json.Marshal(trainer.Spec{Argv: []string{"/bin/true"}})
	req, _ := json.Marshal(SubmitRequest{ID: "t1", Min: 1, Max: 1, Curve: alloc.Curve{Nodes: []int{0, 1}, Throughput: []float64{0, 1}},
		Samples: 100, Launch: store.Launch{Launcher: trainer.Exec, Spec: spec}})
	now := time.Now()
	if _, err := db.Append(context.Background(),
		store.Event{At: now, Kind: store.KindJoin, Source: "test", Nodes: []string{"n1"}},
		store.Event{At: now, Kind: store.KindSubmit, Source: "test", Trainer: "t1", User: "alice", Detail: req}); err != nil {
		tb.Fatal(err)
	}
}

func status(tb testing.TB, db *store.DB, id string) pool.Status {
	tb.Helper()
	t, ok, err := db.Trainer(context.Background(), id)
	if err != nil || !ok {
		tb.Fatalf("trainer %s: %v %v", id, ok, err)
	}
	return t.Status
}

// TestCheckedExitEnds: an exit the runner reports is recorded as an exit
// event and folded in the same round; the runner is no longer asked for
// the Trainer.
func TestCheckedExitEnds(t *testing.T) {
	db := MustDB(t)
	submitted(t, db)
	f := &fakeRunner{}
	r := &Reconciler{DB: db, Runner: f, Pool: pool.Config{TFwd: 10}}
	ctx := context.Background()
	if _, err := r.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if got := len(f.wants[0]); got != 1 || len(f.wants[0][0].Nodes) != 1 {
		t.Fatalf("first round wants %+v", f.wants[0])
	}
	f.exits = []trainer.Exit{{Trainer: "t1", Status: trainer.Finished, Note: "exited 0 on n1"}}
	if _, err := r.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if got := status(t, db, "t1"); got != pool.Finished {
		t.Fatalf("status %s, want finished", got)
	}
	if got := len(f.wants[1]); got != 0 {
		t.Fatalf("the ended Trainer is still wanted: %+v", f.wants[1])
	}
	evs, err := db.Events(ctx, store.Filter{Trainer: "t1", Kinds: []store.Kind{store.KindExit, store.KindAction}})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range evs {
		kinds = append(kinds, string(e.Kind)+" "+e.Context)
	}
	if len(evs) != 2 || evs[0].Kind != store.KindAction || evs[1].Kind != store.KindExit || string(evs[1].Detail) != `{"status":"finished","note":"exited 0 on n1"}` {
		t.Fatalf("history %v (%s)", kinds, evs[1].Detail)
	}
}

// TestFoldAuthorization: only the owner, root, an admin — or the
// reconciler itself (no user) — may cancel, end or report for a Trainer;
// a report whose detail does not parse is refused.
func TestFoldAuthorization(t *testing.T) {
	tests := []struct {
		name   string
		kind   store.Kind
		user   string
		detail string
		value  float64
		want   pool.Status
	}{
		{"owner cancels", store.KindCancel, "alice", "", 0, pool.Cancelled},
		{"other cancels", store.KindCancel, "bob", "", 0, pool.Running},
		{"root cancels", store.KindCancel, "root", "", 0, pool.Cancelled},
		{"admin cancels", store.KindCancel, "carol", "", 0, pool.Cancelled},
		{"other ends", store.KindExit, "bob", `{"status":"finished"}`, 0, pool.Running},
		{"runner ends", store.KindExit, "", `{"status":"failed"}`, 0, pool.Failed},
		{"owner ends", store.KindExit, "alice", `{"status":"finished"}`, 0, pool.Finished},
		{"other reports the target", store.KindProgress, "bob", "", 1e9, pool.Running},
		{"owner reports the target", store.KindProgress, "alice", "", 1e9, pool.Finished},
		{"owner reports the target on its nodes", store.KindProgress, "alice", `{"nodes":1}`, 1e9, pool.Finished},
		{"a report with a bad detail", store.KindProgress, "alice", `{"nodes":-1}`, 1e9, pool.Running},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := MustDB(t)
			submitted(t, db)
			r := &Reconciler{DB: db, Pool: pool.Config{TFwd: 10}, Admins: func(u string) bool { return u == "carol" }}
			ctx := context.Background()
			if _, err := r.Round(ctx); err != nil {
				t.Fatal(err)
			}
			ev := store.Event{At: time.Now(), Kind: tt.kind, Source: "test", Trainer: "t1", User: tt.user, Value: tt.value, HasVal: tt.kind == store.KindProgress}
			if tt.detail != "" {
				ev.Detail = json.RawMessage(tt.detail)
			}
			if _, err := db.Append(ctx, ev); err != nil {
				t.Fatal(err)
			}
			if _, err := r.Round(ctx); err != nil {
				t.Fatal(err)
			}
			if got := status(t, db, "t1"); got != tt.want {
				t.Fatalf("status %s, want %s", got, tt.want)
			}
		})
	}
}

// TestSubmitLaunchChecked: a spooled submission whose launch the CLI
// would have refused is refused by the reconciler too.
func TestSubmitLaunchChecked(t *testing.T) {
	tests := []struct {
		name   string
		launch store.Launch
	}{
		{"unknown launcher", store.Launch{Launcher: "sh", Spec: json.RawMessage(`{"argv":["/bin/true"]}`)}},
		{"no program", store.Launch{Launcher: trainer.Exec, Spec: json.RawMessage(`{"argv":[]}`)}},
		{"bad env name", store.Launch{Launcher: trainer.Exec, Spec: json.RawMessage(`{"argv":["x"],"env":{"A;B":"1"}}`)}},
		{"unknown field", store.Launch{Launcher: trainer.Exec, Spec: json.RawMessage(`{"argv":["x"],"user":"root"}`)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := MustDB(t)
			req, _ := json.Marshal(SubmitRequest{ID: "t1", Min: 1, Max: 1, Curve: alloc.Curve{Nodes: []int{0, 1}, Throughput: []float64{0, 1}}, Launch: tt.launch})
			if _, err := db.Append(context.Background(), store.Event{At: time.Now(), Kind: store.KindSubmit, Source: "spool", Trainer: "t1", User: "bob", Detail: req}); err != nil {
				t.Fatal(err)
			}
			if _, err := (&Reconciler{DB: db}).Round(context.Background()); err != nil {
				t.Fatal(err)
			}
			if _, ok, _ := db.Trainer(context.Background(), "t1"); ok {
				t.Fatal("the submission was accepted")
			}
		})
	}
}

// TestSpoolDirChecked: a spool others could tamper with is not read.
func TestSpoolDirChecked(t *testing.T) {
	tests := []struct {
		name string
		mode os.FileMode
		ok   bool
	}{
		{"sticky, as installed", SpoolMode, true},
		{"private", 0o700, true},
		{"world-writable without sticky", 0o777, false},
		{"group-writable without sticky", 0o770, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "spool")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, tt.mode); err != nil {
				t.Fatal(err)
			}
			_, err := (&spool{Dir: dir}).ingest(context.Background(), MustDB(t), time.Now())
			if tt.ok != (err == nil) || (!tt.ok && !errors.Is(err, errSpoolUnsafe)) {
				t.Fatalf("ingest: %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

// fakeScheduler reports node states, one layer up from sinfo.
type fakeScheduler map[string]string

func (f fakeScheduler) NodeStates(_ context.Context, nodes []string) (map[string]string, error) {
	out := map[string]string{}
	for _, n := range nodes {
		out[n] = f[n]
	}
	return out, nil
}

// TestReleasedNodesJoinWhenIdle: nodes a job released join only once the
// scheduler reports them exactly idle, and the join is recorded once.
func TestReleasedNodesJoinWhenIdle(t *testing.T) {
	ctx := context.Background()
	db := MustDB(t)
	now := time.Now()
	if _, err := db.Append(ctx,
		store.Event{At: now, Kind: store.KindLeave, Source: "test", Job: "7", Nodes: []string{"n1", "n2"}},
		store.Event{At: now, Kind: store.KindRelease, Source: "test", Job: "7", Nodes: []string{"n1", "n2"}}); err != nil {
		t.Fatal(err)
	}
	sched := fakeScheduler{"n1": "comp", "n2": "idle"}
	r := &Reconciler{DB: db, Pool: pool.Config{TFwd: 10}, Scheduler: sched, IdleWait: time.Minute}
	again, err := r.Round(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !again {
		t.Fatal("a node still completing should ask for another round")
	}
	sched["n1"] = "idle"
	if again, err = r.Round(ctx); err != nil || again {
		t.Fatalf("second round: again=%v err=%v", again, err)
	}
	snap, err := db.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range snap.State.Nodes {
		if n.State != pool.Idle {
			t.Fatalf("%s is %s, want idle", n.Name, n.State)
		}
	}
	evs, err := db.Events(ctx, store.Filter{Kinds: []store.Kind{store.KindIdle}})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || evs[0].Nodes[0] != "n2" || evs[1].Nodes[0] != "n1" || evs[0].Job != "7" {
		t.Fatalf("idle events %+v, want n2 then n1, for job 7", evs)
	}
}

// failingSolver always fails, as a missing MILP program does.
type failingSolver struct{}

func (failingSolver) Name() string { return "failing" }
func (failingSolver) Solve(context.Context, *alloc.Problem) (*alloc.Plan, error) {
	return nil, errors.New("no such program")
}

// TestRoundSolverError: a round whose solver fails keeps the allocation
// and records the failure on its solve event; a round with nothing running
// calls no solver and records no solve (pool.Propose's policy).
func TestRoundSolverError(t *testing.T) {
	ctx := context.Background()
	db := MustDB(t)
	if _, err := db.Append(ctx, store.Event{At: time.Now(), Kind: store.KindJoin, Source: "test", Nodes: []string{"n1"}}); err != nil {
		t.Fatal(err)
	}
	r := &Reconciler{DB: db, Pool: pool.Config{TFwd: 10}, Solver: failingSolver{}}
	if _, err := r.Round(ctx); err != nil {
		t.Fatal(err)
	}
	solves := func() []store.Event {
		evs, err := db.Events(ctx, store.Filter{Kinds: []store.Kind{store.KindSolve}})
		if err != nil {
			t.Fatal(err)
		}
		return evs
	}
	if evs := solves(); len(evs) != 0 {
		t.Fatalf("solve events with nothing running: %+v", evs)
	}
	submitted(t, db)
	if _, err := r.Round(ctx); err != nil {
		t.Fatal(err)
	}
	evs := solves()
	if len(evs) != 1 || !strings.Contains(evs[0].Error, "no such program") {
		t.Fatalf("solve events %+v, want one naming the solver's error", evs)
	}
	tr, _, err := db.Trainer(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Nodes) != 0 || tr.Status != pool.Running {
		t.Fatalf("t1 is %s with %v, want running on no node", tr.Status, tr.Nodes)
	}
}

// TestSpooledRequestKeepsTheRoundGoing: a request spooled while a
// reconciler holds the lock (the CLI that spooled it then leaves it to the
// holder) counts as waiting, so the holder takes it before it stops.
func TestSpooledRequestKeepsTheRoundGoing(t *testing.T) {
	ctx := context.Background()
	db := MustDB(t)
	dir := filepath.Join(t.TempDir(), "spool")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	r := &Reconciler{DB: db, Pool: pool.Config{TFwd: 10}, Spool: &spool{Dir: dir}}
	r.defaults()
	if w, err := r.waiting(ctx); err != nil || w {
		t.Fatalf("waiting with nothing recorded or spooled: %v %v", w, err)
	}
	if _, err := r.Spool.put(spoolRequest{Kind: store.KindCancel, Trainer: "t1", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if w, err := r.waiting(ctx); err != nil || !w {
		t.Fatalf("a spooled request is not waiting: %v %v", w, err)
	}
	if err := r.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if w, err := r.waiting(ctx); err != nil || w {
		t.Fatalf("still waiting after a run: %v %v", w, err)
	}
	evs, err := db.Events(ctx, store.Filter{Kinds: []store.Kind{store.KindCancel}})
	if err != nil || len(evs) != 1 {
		t.Fatalf("the spooled cancel was not ingested: %+v %v", evs, err)
	}
}
