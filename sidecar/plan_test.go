package sidecar

import (
	"bytes"
	"context"
	"encoding/json"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/hooks"
	"github.com/bftrainer/bftrainer/journal"
	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/store"
	"github.com/bftrainer/bftrainer/trainer"
)

// fakeSqueue writes an squeue one layer up: a script that counts its
// calls in dir/calls and runs body.
func fakeSqueue(tb testing.TB, dir, body string) string {
	tb.Helper()
	prog := filepath.Join(dir, "squeue")
	script := "#!/bin/sh\necho x >> " + filepath.Join(dir, "calls") + "\n" + body + "\n"
	if err := os.WriteFile(prog+".tmp", []byte(script), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.Rename(prog+".tmp", prog); err != nil {
		tb.Fatal(err)
	}
	return prog
}

func calls(tb testing.TB, dir string) int {
	tb.Helper()
	b, _ := os.ReadFile(filepath.Join(dir, "calls"))
	return strings.Count(string(b), "x")
}

// slurmPlanSource is what Core.planner builds for Slurm, on prog.
func slurmPlanSource(prog string, every, timeout time.Duration, lg *log.Logger) *planSource {
	s, _ := hooks.Builtin().Lookup(hooks.Slurm)
	return &planSource{Name: s.Name, Every: every, Timeout: timeout, Log: lg,
		Read: func(ctx context.Context) ([]hooks.PlannedStart, error) { return s.Plan.Read(ctx, prog) }}
}

// twoNodes records n1 and n2 idle and a Trainer t1 that takes both.
func twoNodes(tb testing.TB, db *store.DB) {
	tb.Helper()
	spec, _ := json.Marshal(trainer.Spec{Argv: []string{"/bin/true"}})
	req, _ := json.Marshal(SubmitRequest{ID: "t1", Min: 1, Max: 2, Curve: alloc.Curve{Nodes: []int{0, 1, 2}, Throughput: []float64{0, 1, 2}},
		RDown: 1, Launch: store.Launch{Launcher: trainer.Exec, Spec: spec}})
	now := time.Now()
	if _, err := db.Append(context.Background(),
		store.Event{At: now, Kind: store.KindJoin, Source: "test", Nodes: []string{"n1", "n2"}},
		store.Event{At: now, Kind: store.KindSubmit, Source: "test", Trainer: "t1", User: "alice", Detail: req}); err != nil {
		tb.Fatal(err)
	}
}

func kinds(tb testing.TB, db *store.DB, kind store.Kind) []store.Event {
	tb.Helper()
	evs, err := db.Events(context.Background(), store.Filter{})
	if err != nil {
		tb.Fatal(err)
	}
	return slices.DeleteFunc(evs, func(e store.Event) bool { return e.Kind != kind })
}

// TestPlanMovesTrainerOff: squeue (a fake one layer up, printing what
// Slurm's backfill pass would) plans job 7 on n2 in 30 s, within the
// lead: the round shrinks t1 off n2 — the runner is asked for n1 only, the
// history has a move, not a preempt — and when job 7 takes n2, nothing of
// t1 is there to reclaim. When the plan is withdrawn, n2 is lent again.
func TestPlanMovesTrainerOff(t *testing.T) {
	db := MustDB(t)
	twoNodes(t, db)
	dir := t.TempDir()
	prog := fakeSqueue(t, dir, "")
	f := &fakeRunner{}
	r := &Reconciler{DB: db, Runner: f, Pool: pool.Config{TFwd: 10, PlanLead: time.Minute},
		Plan: slurmPlanSource(prog, 0, time.Second, nil)}
	ctx := context.Background()
	if _, err := r.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if got := f.wants[len(f.wants)-1][0].Nodes; len(got) != 2 {
		t.Fatalf("t1 wants %v, want both nodes", got)
	}
	start := time.Now().Add(30 * time.Second).UTC().Format("2006-01-02T15:04:05")
	fakeSqueue(t, dir, "echo '7|"+start+"|n[2-3]|1:00:00'\necho '8|N/A|(null)|10:00'")
	if _, err := r.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if got := f.wants[len(f.wants)-1][0].Nodes; !slices.Equal(got, []string{"n1"}) {
		t.Fatalf("t1 wants %v after the plan, want [n1]", got)
	}
	moves := kinds(t, db, store.KindMove)
	if len(moves) != 1 || moves[0].Job != "7" || !slices.Equal(moves[0].Nodes, []string{"n2"}) || moves[0].Trainer != "t1" {
		t.Fatalf("move rows %+v, want one of t1 off n2 for job 7", moves)
	}
	if _, err := db.Append(ctx, store.Event{At: time.Now(), Kind: store.KindLeave, Source: "slurm", Job: "7", Nodes: []string{"n2"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if p := kinds(t, db, store.KindPreempt); len(p) != 0 {
		t.Fatalf("job 7's start preempted: %+v", p)
	}
	// Job 7 ends; the scheduler plans nothing any more: n2 is lent again.
	fakeSqueue(t, dir, "")
	if _, err := db.Append(ctx, store.Event{At: time.Now(), Kind: store.KindJoin, Source: "test", Job: "7", Nodes: []string{"n2"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if got := f.wants[len(f.wants)-1][0].Nodes; len(got) != 2 {
		t.Fatalf("t1 wants %v once the plan is gone, want both nodes", got)
	}
}

// TestPlanDegrades: squeue hanging or failing is "no plan" with the
// reason logged — the round goes on, the Trainer keeps its nodes — and a
// failed read is not retried before plan_every.
func TestPlanDegrades(t *testing.T) {
	for _, tt := range []struct {
		name, body, log string
	}{
		{"hangs", "exec sleep 60", "did not answer within 200ms"},
		{"fails", "echo 'squeue: error: Unable to contact slurm controller' >&2; exit 1", "Unable to contact slurm controller"},
		{"talks nonsense", "echo 'JOBID START'", "want \"JOBID|START|SCHEDNODES|TIMELIMIT\""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			db := MustDB(t)
			twoNodes(t, db)
			dir := t.TempDir()
			prog := fakeSqueue(t, dir, tt.body)
			var logs bytes.Buffer
			lg := log.New(&logs, "", 0)
			f := &fakeRunner{}
			r := &Reconciler{DB: db, Runner: f, Pool: pool.Config{TFwd: 10, PlanLead: time.Minute}, Log: lg,
				Plan: slurmPlanSource(prog, time.Hour, 200*time.Millisecond, lg)}
			for range 2 {
				if _, err := r.Round(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			if !strings.Contains(logs.String(), tt.log) || !strings.Contains(logs.String(), "deciding without a plan") {
				t.Fatalf("log %q, want %q and that the round decided without a plan", logs.String(), tt.log)
			}
			if got := f.wants[len(f.wants)-1][0].Nodes; len(got) != 2 {
				t.Fatalf("t1 wants %v, want both nodes", got)
			}
			if got := calls(t, dir); got != 1 {
				t.Fatalf("squeue ran %d times in two rounds within plan_every, want 1", got)
			}
		})
	}
}

// TestHookNeverReadsPlan: a controller prolog with a hanging squeue
// configured returns and records as ever: no hook reads the plan.
func TestHookNeverReadsPlan(t *testing.T) {
	dir := t.TempDir()
	prog := fakeSqueue(t, dir, "exec sleep 60")
	jdir := filepath.Join(dir, "journal")
	if err := journal.Create(jdir, -1); err != nil {
		t.Fatal(err)
	}
	c, err := New(Options{Database: filepath.Join(dir, "b.db"), Journal: jdir, Scheduler: hooks.Slurm,
		Listings: map[string]string{"squeue": prog}, Hook: HookOptions{Deadline: 200 * time.Millisecond}, PlanTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	slurmPrologReturns(t, c, 30*time.Second)
	if got := calls(t, dir); got != 0 {
		t.Fatalf("squeue ran %d times during a hook, want 0", got)
	}
	if files, _ := os.ReadDir(jdir); len(files) == 0 {
		t.Fatal("the hook recorded nothing")
	}
}

// TestCorePlanner: the configured scheduler's planner, with its program
// from the configuration; none when it is turned off (""), not
// installed, or the scheduler states no plan (LSF).
func TestCorePlanner(t *testing.T) {
	prog := fakeSqueue(t, t.TempDir(), "")
	for _, tt := range []struct {
		name, scheduler, prog string
		want                  bool
	}{
		{"slurm", hooks.Slurm, prog, true},
		{"turned off", hooks.Slurm, "", false},
		{"not installed", hooks.Slurm, filepath.Join(t.TempDir(), "squeue"), false},
		{"lsf has none", "lsf", prog, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(Options{Database: filepath.Join(t.TempDir(), "b.db"), Scheduler: tt.scheduler,
				Listings: map[string]string{"squeue": tt.prog}})
			if err != nil {
				t.Fatal(err)
			}
			if got := c.planner() != nil; got != tt.want {
				t.Fatalf("planner: %v, want %v", got, tt.want)
			}
		})
	}
}
