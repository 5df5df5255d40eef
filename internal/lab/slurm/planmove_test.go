package slurm

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/trainer/trainertest"
)

// TestSlurmPlannedMove: the scheduler's plan moves a live Trainer off
// before a main job lands, and the same scenario with the plan ignored
// is a kill (PlannedReclaim: an elastic train.py on three of four nodes;
// job A holds the fourth to its 1-minute limit; job B needs A's node and
// two of the Trainer's, so it waits for A and Slurm's backfill pass plans
// it). Plan on: the reconciler service reads the plan (squeue --start)
// and, within its 30 s lead, shrinks the Trainer off B's two nodes
// before B starts; B's own check finds nothing of it on any node; the
// history shows a move and neither a kill nor a preempt for B. Plan
// off: B's prologs kill the Trainer's workers there, and the history
// says so. In both the Trainer trains on, on the node it kept, while B
// runs. It prints `slurm planned_reclaim lead_s=… lost_s=…
// vs_surprise_lost_s=…`: how long before B's first line the Trainer was
// off its nodes, and the training seconds each arm's change cost
// (MeasureChange).
func TestSlurmPlannedMove(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real Slurm cluster and an elastic Trainer (about 2 minutes)")
	}
	if err := Need(); err != nil {
		t.Skip(err)
	}
	trainertest.NeedTorch(t)
	ctx := context.Background()
	c, err := Up(ctx, ClusterOptions{Repo: trainertest.RepoRoot(t), Nodes: 4, Prefix: "mlab", RootOwner: true, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("debug:\n%s", c.Debug(context.Background()))
		}
		if err := c.Down(context.Background(), false); err != nil {
			t.Errorf("stopping the cluster: %v", err)
		}
	})
	var arms [2]PlannedResult
	for i, plan := range []bool{true, false} {
		r, err := PlannedReclaim(ctx, c, PlannedOptions{Plan: plan})
		if err != nil {
			t.Fatalf("plan %v: %v", plan, err)
		}
		arms[i] = r
		checkPlannedArm(t, r)
	}
	fmt.Println(PlannedLine(arms[:1], arms[1:]))
}

// checkPlannedArm checks what one arm must show: B found its nodes
// free, a move and no kill with the plan on, a kill and no move with
// it off, and the Trainer training on its kept node while B ran.
func checkPlannedArm(t *testing.T, r PlannedResult) {
	t.Helper()
	for _, n := range r.Taken {
		if p := r.Report.Procs[n]; p != "none" {
			t.Errorf("plan %v: job %s found Trainer processes on %s: %q", r.Plan, r.Main.ID, n, p)
		}
	}
	if len(r.Report.Found) > 0 {
		t.Errorf("plan %v: job %s's watch found Trainer processes: %v", r.Plan, r.Main.ID, r.Report.Found)
	}
	for _, m := range r.Moves {
		t.Logf("plan %v: move: %s off %v at %s (%s)", r.Plan, m.Trainer, m.Nodes, m.At.Format(time.RFC3339Nano), m.Detail)
	}
	for _, k := range append(slices.Clone(r.Kills), r.Preempts...) {
		t.Logf("plan %v: %s: %s on %v, value %v at %s", r.Plan, k.Kind, k.Trainer, k.Nodes, k.Value, k.At.Format(time.RFC3339Nano))
	}
	t.Logf("plan %v: change %+v; %d steps on %s after B began", r.Plan, r.Change, r.After, r.Kept)
	if r.Plan {
		var moved []string
		for _, m := range r.Moves {
			if m.Trainer != r.Trainer.Name {
				t.Errorf("plan on: a move for job %s by %s, want only %s", r.Main.ID, m.Trainer, r.Trainer.Name)
			}
			moved = append(moved, m.Nodes...)
		}
		slices.Sort(moved)
		if !slices.Equal(moved, r.Taken) {
			t.Errorf("plan on: moves for job %s off %v, want off %v", r.Main.ID, moved, r.Taken)
		}
		if len(r.Kills) > 0 || len(r.Preempts) > 0 {
			t.Errorf("plan on: job %s's prologs killed (%d rows) or the Trainer was preempted (%d): want nothing left to kill", r.Main.ID, len(r.Kills), len(r.Preempts))
		}
		if r.Lead <= 0 {
			t.Errorf("plan on: the Trainer was off at %s, after job %s began at %s", r.Off, r.Main.ID, r.Report.First)
		}
	} else {
		if len(r.Moves) > 0 {
			t.Errorf("plan off: %d moves for job %s, want none (no plan read)", len(r.Moves), r.Main.ID)
		}
		var killed []string
		for _, k := range r.Kills {
			killed = append(killed, k.Nodes...)
		}
		slices.Sort(killed)
		var preempted []string
		for _, p := range r.Preempts {
			preempted = append(preempted, p.Nodes...)
		}
		slices.Sort(preempted)
		if !slices.Equal(killed, r.Taken) || !slices.Equal(preempted, r.Taken) {
			t.Errorf("plan off: job %s's prologs killed on %v, the Trainer preempted off %v; want both %v", r.Main.ID, killed, preempted, r.Taken)
		}
	}
	if r.After < 2 {
		t.Errorf("plan %v: %d steps on %s after job %s began, want the Trainer to train on", r.Plan, r.After, r.Kept, r.Main.ID)
	}
}
