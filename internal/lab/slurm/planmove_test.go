package slurm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/store"
	"github.com/bftrainer/bftrainer/trainer/trainertest"
)

// TestSlurmPlannedMove: the scheduler's plan moves Trainers off before a
// main job lands. On three nodes, job A holds mlab1 with a 1-minute limit
// (it runs to its limit); two one-node Trainers hold mlab2 and mlab3. Job
// B needs all three nodes, so it waits for A, and Slurm's backfill pass
// plans it at A's limit on mlab[1-3]. The reconciler service reads that
// plan (squeue --start) and, within its 30 s lead, shrinks both Trainers
// off before B starts: B's own check finds nothing of them on any node,
// the history shows a move for each and neither a kill nor a preempt for
// B. It prints `slurm planned_reclaim lead_s=…`: how long before B's first
// line the Trainers were off its nodes.
func TestSlurmPlannedMove(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real Slurm cluster (about 2 minutes)")
	}
	if err := Need(); err != nil {
		t.Skip(err)
	}
	ctx := context.Background()
	c, err := Up(ctx, ClusterOptions{Repo: trainertest.RepoRoot(t), Nodes: 3, Prefix: "mlab", RootOwner: true, Logf: t.Logf})
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
	// squeue, like sinfo, with the lab's SLURM_CONF; the plan read every
	// second, Trainers moved 30 s ahead.
	squeue := filepath.Join(filepath.Dir(c.In.Sinfo), "squeue")
	if err := os.WriteFile(squeue, []byte(fmt.Sprintf("#!/bin/sh\nSLURM_CONF=%s exec /usr/bin/squeue \"$@\"\n", c.Lab.Conf)), 0o755); err != nil {
		t.Fatal(err)
	}
	s := c.Settings
	text := c.In.configText(s)
	text = strings.Replace(text, "[reconciler]\n", "[reconciler]\nplan_every = \"1s\"\nplan_lead = \"30s\"\n", 1)
	text = strings.Replace(text, "squeue = \"\"\n", fmt.Sprintf("squeue = %q\n", squeue), 1)
	s.Raw = text
	if err := c.Configure(s); err != nil {
		t.Fatal(err)
	}

	a, err := c.Lab.Submit(ctx, JobSpec{Nodes: 1, NodeList: "mlab1", Held: true, Name: "a", Args: []string{"--time=1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	if _, err := a.WaitChecked(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Run(ctx, "sync"); err != nil {
		t.Fatal(err)
	}
	var trainers []string
	for _, short := range []string{"s1", "s2"} {
		name, err := c.SubmitSleeper(ctx, short)
		if err != nil {
			t.Fatal(err)
		}
		trainers = append(trainers, name)
	}
	svc, err := c.StartService(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Kill()
	err = Poll(ctx, time.Minute, func() (bool, error) {
		held, err := c.In.Held(ctx)
		return err == nil && len(held[trainers[0]]) == 1 && len(held[trainers[1]]) == 1, err
	})
	if err != nil {
		t.Fatalf("the Trainers did not take mlab2 and mlab3: %v", err)
	}
	b, err := c.Lab.Submit(ctx, JobSpec{Nodes: 3, Held: true, Watch: true, Name: "b", Args: []string{"--time=1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	rb, err := b.WaitChecked(ctx, 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Lab.Nodes {
		if p := rb.Procs[n]; p != "none" {
			t.Errorf("job %s found Trainer processes on %s: %s", b.ID, n, p)
		}
	}
	if len(rb.Found) > 0 {
		t.Errorf("job %s's watch found Trainer processes: %v", b.ID, rb.Found)
	}
	moves, err := c.In.Events(ctx, store.Filter{Kinds: []string{store.KindMove}, Job: b.ID})
	if err != nil {
		t.Fatal(err)
	}
	var moved []string
	last := time.Time{}
	for _, m := range moves {
		moved = append(moved, m.Trainer)
		last = later(last, m.At)
		t.Logf("move: %s off %v at %s (%s)", m.Trainer, m.Nodes, m.At.Format(time.RFC3339Nano), m.Detail)
	}
	slices.Sort(moved)
	if want := slices.Sorted(slices.Values(trainers)); !slices.Equal(moved, want) {
		t.Fatalf("moves for job %s by %v, want one by each of %v", b.ID, moved, want)
	}
	// Off the nodes means the runner stopped them there: its stop actions.
	stops, err := c.In.Events(ctx, store.Filter{Kinds: []string{store.KindAction}, Since: last.Add(-time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	off := last
	for _, e := range stops {
		if e.Context == "stop" && slices.Contains(trainers, e.Trainer) {
			off = later(off, e.At)
		}
	}
	kills, err := c.In.Events(ctx, store.Filter{Kinds: []string{store.KindKill, store.KindPreempt}, Job: b.ID})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range kills {
		if k.Kind == store.KindPreempt || k.Value > 0 {
			t.Errorf("job %s's start %s %v (value %v): want nothing left to kill", b.ID, k.Kind, k.Nodes, k.Value)
		}
	}
	lead := rb.First.Sub(off)
	if lead <= 0 {
		t.Errorf("the Trainers were off at %s, after job %s began at %s", off, b.ID, rb.First)
	}
	fmt.Printf("slurm planned_reclaim lead_s=%.1f moves=%d kills=0 nodes=%d\n", lead.Seconds(), len(moves), len(c.Lab.Nodes)-1)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
