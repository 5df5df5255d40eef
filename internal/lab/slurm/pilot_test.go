package slurm

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/sim"
	"github.com/bftrainer/bftrainer/trainer/trainertest"
)

// thetaLog finds the Theta 2022 SWF log (../shared/data from the main
// checkout, whatever the worktree depth), or skips.
func thetaLog(tb testing.TB) string {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		p := filepath.Join(dir, "shared", "data", "theta", "theta_2022.swf")
		if _, err := os.Stat(p); err == nil {
			return p
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Skip("shared data absent: no shared/data/theta/theta_2022.swf in any parent directory")
		}
		dir = parent
	}
}

// TestScaleSlice: sizes proportional to the machine and rounded up, at
// least one node and at most the lab; times divided by the speed; the
// limit never below the run time.
func TestScaleSlice(t *testing.T) {
	const swf = `; MaxNodes: 100
1 1000 5 600 10 -1 -1 10 1200 -1 0 -1 -1 -1 -1 -1 -1 -1
2 1600 0 3000 100 -1 -1 100 1200 -1 0 -1 -1 -1 -1 -1 -1 -1
3 1300 0 60 51 -1 -1 51 60 -1 0 -1 -1 -1 -1 -1 -1 -1
`
	l, err := sim.ReadSWF(strings.NewReader(swf))
	if err != nil {
		t.Fatal(err)
	}
	js, err := ScaleSlice(l, 0, 3, 8, 60)
	if err != nil {
		t.Fatal(err)
	}
	want := []PilotJob{
		{LogID: 1, At: 0, Nodes: 1, Hold: 10 * time.Second, Limit: 1},                // 10 % of 8 = 0.8 → 1; 1200/60 = 20 s + 30 s → 1 min
		{LogID: 3, At: 5 * time.Second, Nodes: 5, Hold: time.Second, Limit: 1},       // 51 % of 8 = 4.08 → 5
		{LogID: 2, At: 10 * time.Second, Nodes: 8, Hold: 50 * time.Second, Limit: 2}, // run 3000 > request 1200: 50 s + 30 s → 2 min
	}
	if len(js) != len(want) {
		t.Fatalf("got %d jobs, want %d: %+v", len(js), len(want), js)
	}
	for i := range want {
		if js[i] != want[i] {
			t.Errorf("job %d: got %+v, want %+v", i, js[i], want[i])
		}
	}
	if _, err := ScaleSlice(l, 2, 2, 8, 60); err == nil {
		t.Error("a slice past the log's end was taken")
	}
}

// TestPilotCI is the pilot at CI's size (issue 27): 6 nodes, 25 jobs of
// the Theta log at 900× (about 65 s of submits), an elastic train.py
// Trainer and an exec one harvesting, slurmctld restarted at a random
// moment. The goals that make sense at this size: no main job failed,
// requeued or drained; no Trainer process seen by a main job's own watch;
// bftrainer audit finds nothing; every job start and end in sacct is in
// the history.
func TestPilotCI(t *testing.T) {
	if err := Need(); err != nil {
		t.Skip(err)
	}
	if err := NeedAccounting(); err != nil {
		t.Skip(err)
	}
	if testing.Short() {
		t.Skip("the lab in -short mode")
	}
	log := thetaLog(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	r, err := Pilot(ctx, PilotOptions{Repo: trainertest.RepoRoot(t), Log: log, From: 15000, Jobs: 25, Nodes: 6, Prefix: "pci",
		Speed: 900, Elastic: 1, Exec: 1, Nemeses: []string{NemesisCtld}, Seed: 1, Drain: 2 * time.Minute,
		SyncEvery: 20 * time.Second, Keep: os.Getenv("BFT_PILOT_KEEP") != "", Logf: t.Logf})
	if r != nil {
		t.Log(r.Line())
		for _, l := range r.NemesisLines() {
			t.Log(l)
		}
		for _, p := range r.Problems {
			t.Errorf("problem: %s", p)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	if r.MainJobs != 25 || r.Failed != 0 || r.Requeued != 0 || r.Drained != 0 {
		t.Errorf("main jobs %d (want 25), failed %d, requeued %d, drained %d; want none", r.MainJobs, r.Failed, r.Requeued, r.Drained)
	}
	if r.BesideS != 0 {
		t.Errorf("a main job's watch saw a Trainer process for %.1f s", r.BesideS)
	}
	if r.AuditViolations != 0 || r.EventsLost != 0 {
		t.Errorf("audit violations %d, events lost %d; want none", r.AuditViolations, r.EventsLost)
	}
	if len(r.Nemeses) != 1 || r.Nemeses[0].Err != nil {
		t.Errorf("nemesis: %v", r.NemesisLines())
	}
	if r.HarvestedNodeH <= 0 {
		t.Errorf("the Trainers harvested %.4f node-hours: nothing ran", r.HarvestedNodeH)
	}
}

// TestHeldNodeHours: the held-node samples integrate step-wise (each
// sample's count until the next), clipped to the window.
func TestHeldNodeHours(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	ss := []heldSample{{t0, 2}, {t0.Add(10 * time.Second), 4}, {t0.Add(20 * time.Second), 0}, {t0.Add(30 * time.Second), 1}}
	// [5, 25]: 5 s × 2 + 10 s × 4 + 5 s × 0 = 50 node-seconds.
	if got, want := heldNodeHours(ss, t0.Add(5*time.Second), t0.Add(25*time.Second)), 50.0/3600; math.Abs(got-want) > 1e-12 {
		t.Errorf("got %v node-hours, want %v", got, want)
	}
}
