package sidecar

import (
	"context"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/hooks"
	"github.com/bftrainer/bftrainer/journal"
	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/store"
	"github.com/bftrainer/bftrainer/trainer"
)

// nodeState returns a node's state in the saved pool.
func nodeState(tb testing.TB, db *store.DB, node string) pool.NodeState {
	tb.Helper()
	snap, err := db.Load(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	for _, n := range snap.State.Nodes {
		if n.Name == node {
			return n.State
		}
	}
	return ""
}

// TestReleaseWaitsWhoeverRuns: a released node stays pending until the
// configured scheduler's listing says it is exactly idle, whichever
// front door runs the round (a CLI command's round included); a listing
// configured but missing here joins nothing; only a listing turned off,
// or reconcile --no-scheduler, takes the release's word.
func TestReleaseWaitsWhoeverRuns(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name    string
		listing string // the toy listing's program: "cat" (the file), "" (off), or a missing one
		states  string
		want    pool.NodeState
	}{
		{"listing says completing", "cat", "a completing\nb idle\n", pool.Pending},
		{"listing says idle", "cat", "a idle\nb idle\n", pool.Idle},
		{"listing not installed here", "/nonexistent/toyls", "", pool.Pending},
		{"listing turned off", "", "", pool.Idle},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, "nodes")
			if err := os.WriteFile(file, []byte(tt.states), 0o644); err != nil {
				t.Fatal(err)
			}
			prog := tt.listing
			if prog == "cat" {
				prog = "/bin/cat"
			}
			c, db := openCore(t, Options{IdleWait: time.Hour,
				Schedulers: append(hooks.Builtin(), toyScheduler(file)), Scheduler: "toy", Listings: map[string]string{"toyls": prog}})
			now := time.Now()
			if _, err := db.Append(ctx,
				store.Event{At: now, Kind: store.KindLeave, Source: "toy", Job: "5", Nodes: []string{"a"}},
				store.Event{At: now, Kind: store.KindRelease, Source: "toy", Job: "5", Nodes: []string{"a"}}); err != nil {
				t.Fatal(err)
			}
			// A CLI command's round: node join of another node.
			if _, err := c.Nodes(ctx, true, []string{"b"}, "", false); err != nil {
				t.Fatal(err)
			}
			if got := nodeState(t, db, "a"); got != tt.want {
				t.Fatalf("after a CLI round the released node is %q, want %q", got, tt.want)
			}
			if tt.want == pool.Pending {
				// The caller vouches: reconcile --no-scheduler.
				if err := c.Reconcile(ctx, true); err != nil {
					t.Fatal(err)
				}
				if got := nodeState(t, db, "a"); got != pool.Idle {
					t.Fatalf("after reconcile --no-scheduler the released node is %q, want idle", got)
				}
			}
		})
	}
}

// seqScheduler answers each call with the next of its answers (the last
// one again when they run out), and counts the calls.
type seqScheduler struct {
	answers []map[string]string
	calls   int
}

func (s *seqScheduler) NodeStates(_ context.Context, nodes []string) (map[string]string, error) {
	a := s.answers[min(s.calls, len(s.answers)-1)]
	s.calls++
	out := map[string]string{}
	for _, n := range nodes {
		out[n] = a[n]
	}
	return out, nil
}

// fenceRunner is a runner that can lift fences; it records the nodes.
type fenceRunner struct {
	fakeRunner
	unfenced []string
	gone     []string // reported by Check as launches that vanished
}

func (f *fenceRunner) Unfence(_ context.Context, nodes []string) []trainer.Action {
	f.unfenced = append(f.unfenced, nodes...)
	var acts []trainer.Action
	for _, n := range nodes {
		acts = append(acts, trainer.Action{Node: n, Op: "unfence"})
	}
	return acts
}

func (f *fenceRunner) Check(context.Context) ([]trainer.Exit, []trainer.Action) {
	var acts []trainer.Action
	for _, n := range f.gone {
		acts = append(acts, trainer.Action{Trainer: "t1", Node: n, Op: "gone"})
	}
	f.gone = nil
	return nil, acts
}

// TestUnfenceConfirmedTwice: a node the scheduler confirms idle after a
// release has its fence lifted (its epilog may never have run) and is
// asked about once more; a job that started there meanwhile keeps it out
// of the pool.
func TestUnfenceConfirmedTwice(t *testing.T) {
	for _, tt := range []struct {
		name   string
		second string
		want   pool.NodeState
	}{
		{"still idle", "idle", pool.Idle},
		{"a job started meanwhile", "alloc", pool.Pending},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			db := MustDB(t)
			now := time.Now()
			if _, err := db.Append(ctx,
				store.Event{At: now, Kind: store.KindLeave, Source: "test", Job: "7", Nodes: []string{"n1"}},
				store.Event{At: now, Kind: store.KindRelease, Source: "test", Job: "7", Nodes: []string{"n1"}}); err != nil {
				t.Fatal(err)
			}
			sched := &seqScheduler{answers: []map[string]string{{"n1": "idle"}, {"n1": tt.second}}}
			run := &fenceRunner{}
			r := &Reconciler{DB: db, Runner: run, Pool: pool.Config{TFwd: 10}, Scheduler: sched, IdleWait: time.Hour}
			if _, err := r.Round(ctx); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(run.unfenced, []string{"n1"}) || sched.calls != 2 {
				t.Fatalf("unfenced %v after %d listings, want n1 after 2", run.unfenced, sched.calls)
			}
			if got := nodeState(t, db, "n1"); got != tt.want {
				t.Fatalf("n1 is %q, want %q", got, tt.want)
			}
			if evs, _ := db.Events(ctx, store.Filter{Kinds: []store.Kind{store.KindAction}}); len(evs) != 1 || evs[0].Context != "unfence" {
				t.Fatalf("history %+v, want the unfence", evs)
			}
		})
	}
}

// TestSyncEventsAfterSnapshotWin: a leave recorded after sync asked the
// scheduler wins over the release sync recorded from that answer, in
// whatever order the two reach the history; a node sync saw idle with no
// later event is released and joins.
func TestSyncEventsAfterSnapshotWin(t *testing.T) {
	ctx := context.Background()
	t0 := time.Now().Add(-time.Minute)
	for _, order := range []string{"leave first", "sync first"} {
		t.Run(order, func(t *testing.T) {
			db := MustDB(t)
			if _, err := db.Append(ctx, store.Event{At: t0, Kind: store.KindLeave, Source: "slurm", Job: "5", Nodes: []string{"n1", "n2"}}); err != nil {
				t.Fatal(err)
			}
			r := &Reconciler{DB: db, Pool: pool.Config{TFwd: 10}, Scheduler: fakeScheduler{"n1": "alloc", "n2": "idle"}}
			if _, err := r.Round(ctx); err != nil {
				t.Fatal(err)
			}
			// Job 5's release was lost; sync asks at t1 and sees both idle.
			// Job 6 starts on n1 at t2, after the snapshot.
			t1, t2 := t0.Add(10*time.Second), t0.Add(20*time.Second)
			leave := store.Event{At: t2, Kind: store.KindLeave, Source: "slurm", Job: "6", Nodes: []string{"n1"}}
			release := store.Event{At: t1, Kind: store.KindRelease, Source: syncSource, Nodes: []string{"n1", "n2"}}
			evs := []store.Event{leave, release}
			if order == "sync first" {
				evs = []store.Event{release, leave}
			}
			if _, err := db.Append(ctx, evs...); err != nil {
				t.Fatal(err)
			}
			if _, err := r.Round(ctx); err != nil {
				t.Fatal(err)
			}
			if got := nodeState(t, db, "n1"); got != pool.Busy {
				t.Fatalf("n1 is %q, want busy: job 6's leave came after the snapshot", got)
			}
			if got := nodeState(t, db, "n2"); got != pool.Idle {
				t.Fatalf("n2 is %q, want idle: sync released it and the scheduler confirmed", got)
			}
		})
	}
}

// racingLister is a scheduler whose listing runs while a leave is
// recorded (on n1, for job 6): sync's snapshot is taken before it.
type racingLister struct {
	db     *store.DB
	states map[string]string
}

func (l racingLister) NodeStates(ctx context.Context, nodes []string) (map[string]string, error) {
	if _, err := l.db.Append(ctx, store.Event{At: time.Now(), Kind: store.KindLeave, Source: "slurm", Job: "6", Nodes: []string{"n1"}}); err != nil {
		return nil, err
	}
	return l.states, nil // all nodes: sync asks for all
}

// TestSyncRacingLeave: sync's answer, taken while a job started on n1,
// never puts n1 back in the pool.
func TestSyncRacingLeave(t *testing.T) {
	ctx := context.Background()
	db := MustDB(t)
	if _, err := db.Append(ctx, store.Event{At: time.Now().Add(-time.Minute), Kind: store.KindJoin, Source: "test", Nodes: []string{"n1", "n2"}},
		store.Event{At: time.Now().Add(-time.Minute), Kind: store.KindLeave, Source: "slurm", Job: "5", Nodes: []string{"n1", "n2"}}); err != nil {
		t.Fatal(err)
	}
	// The listing still says idle: the scheduler's answer was made before
	// the job that the concurrent leave is for.
	sched := racingLister{db: db, states: map[string]string{"n1": "idle", "n2": "idle"}}
	joined, _, err := syncNodes(ctx, db, pool.Config{TFwd: 10}, sched, time.Now, "root")
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(joined, "n1") {
		t.Fatalf("sync released n1 from a snapshot older than its leave (joined %v)", joined)
	}
	r := &Reconciler{DB: db, Pool: pool.Config{TFwd: 10}, Scheduler: fakeScheduler{"n1": "alloc", "n2": "idle"}}
	if _, err := r.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if got := nodeState(t, db, "n1"); got != pool.Busy {
		t.Fatalf("n1 is %q, want busy", got)
	}
	if got := nodeState(t, db, "n2"); got != pool.Idle {
		evs, _ := db.Events(ctx, store.Filter{})
		for _, e := range evs {
			t.Logf("%d %s %s %s %v %s", e.ID, e.At.Format("15:04:05.000000"), e.Kind, e.Source, e.Nodes, e.Detail)
		}
		t.Fatalf("n2 is %q, want idle (joined %v)", got, joined)
	}
}

// prologLister is a scheduler whose node is allocated to job 7, and
// whose prolog for it writes the hook's record to the journal while the
// round's start check asks: the race of a prolog with a round.
type prologLister struct {
	j *journal.Journal
}

func (l prologLister) NodeStates(_ context.Context, nodes []string) (map[string]string, error) {
	if _, err := l.j.Write(journal.Record{Events: []store.Event{{Kind: store.KindLeave, Source: "slurm", Job: "7", Nodes: []string{"n1"}}}}); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, n := range nodes {
		out[n] = "alloc"
	}
	return out, nil
}

// TestStartCheckRacingProlog: when the start check finds a node allocated
// because the job's prolog is recording its leave that very moment, the
// history keeps the prolog's leave, with its job, and no start-check
// leave without one; nothing is started on the node.
func TestStartCheckRacingProlog(t *testing.T) {
	ctx := context.Background()
	db := MustDB(t)
	submitted(t, db)
	if _, err := db.SQL().Exec("UPDATE events SET at = ? WHERE kind = 'join'", time.Now().Add(-time.Hour).UTC().Format(store.TimeFormat)); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "journal")
	if err := journal.Create(dir, -1); err != nil {
		t.Fatal(err)
	}
	j := &journal.Journal{Dir: dir}
	run := &fenceRunner{}
	var logged strings.Builder
	r := &Reconciler{DB: db, Journal: j, Runner: run, Pool: pool.Config{TFwd: 10}, Scheduler: prologLister{j}, StartCheck: time.Minute, MaxRounds: 5,
		Log: log.New(&logged, "", 0)}
	if err := r.Run(ctx); err != nil {
		t.Fatal(err)
	}
	// The log names the node the check found busy, and why no leave of
	// its own is recorded.
	if want := "start check: [n1] not idle; deciding again without them (1 recorded by their prologs since the round began)"; !strings.Contains(logged.String(), want) {
		t.Fatalf("the log:\n%s\nwants %q", logged.String(), want)
	}
	for _, w := range run.wants {
		for _, l := range w {
			if slices.Contains(l.Nodes, "n1") {
				t.Fatalf("the runner was asked to start on n1: %+v", run.wants)
			}
		}
	}
	leaves, err := db.Events(ctx, store.Filter{Kinds: []store.Kind{store.KindLeave}})
	if err != nil {
		t.Fatal(err)
	}
	var jobs []string
	for _, e := range leaves {
		jobs = append(jobs, e.Source+":"+e.Job)
	}
	if !slices.Equal(jobs, []string{"slurm:7"}) {
		t.Fatalf("leaves (source:job) %q, want only the prolog's, slurm:7", jobs)
	}
	if got := nodeState(t, db, "n1"); got != pool.Busy {
		t.Fatalf("n1 is %q, want busy", got)
	}
}

// TestStartCheck: before starting a Trainer on a node whose last event
// is old, or where its launch vanished without an exit, the round asks
// the scheduler; a node it says is busy leaves the pool, and nothing is
// started there.
func TestStartCheck(t *testing.T) {
	ctx := context.Background()
	old := time.Now().Add(-time.Hour)
	for _, tt := range []struct {
		name  string
		state string
		age   time.Duration // StartCheck
		gone  bool          // the second round's check finds the launch gone
		want  []string      // nodes the runner is asked for, per round
	}{
		{"old node, scheduler says idle", "idle", time.Minute, false, []string{"n1", "n1"}},
		{"old node, scheduler says allocated", "alloc", time.Minute, false, []string{"", ""}},
		{"recent enough: not asked", "alloc", 2 * time.Hour, false, []string{"n1", "n1"}},
		{"launch gone, scheduler says allocated", "idle", 2 * time.Hour, true, []string{"n1", ""}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			db := MustDB(t)
			submitted(t, db)
			// n1 joined an hour ago.
			if _, err := db.SQL().Exec("UPDATE events SET at = ? WHERE kind = 'join'", old.UTC().Format(store.TimeFormat)); err != nil {
				t.Fatal(err)
			}
			sched := fakeScheduler{"n1": tt.state}
			run := &fenceRunner{}
			r := &Reconciler{DB: db, Runner: run, Pool: pool.Config{TFwd: 10}, Scheduler: sched, StartCheck: tt.age, MaxRounds: 5}
			var got []string
			for round := range 2 {
				if round == 1 && tt.gone {
					run.gone = []string{"n1"}
					sched["n1"] = "alloc"
				}
				run.wants = nil
				if err := r.Run(ctx); err != nil {
					t.Fatal(err)
				}
				on := ""
				if n := len(run.wants); n > 0 && len(run.wants[n-1]) > 0 {
					on = strings.Join(run.wants[n-1][0].Nodes, ",")
				}
				got = append(got, on)
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("the runner was asked for t1 on %q, want %q", got, tt.want)
			}
			leaves, _ := db.Events(ctx, store.Filter{Kinds: []store.Kind{store.KindLeave}, Source: "reconciler"})
			if busy := tt.want[1] == ""; busy != (len(leaves) == 1) {
				t.Fatalf("start-check leaves %+v", leaves)
			}
		})
	}
}
