package sim_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/sim"
)

// TestLosslessBoundByHand: 4 nodes idle from t0 until t0+400 s; jobs of
// 1,000 samples on a linear curve, 10/s per node, at most 2 nodes each:
// a Trainer on 2 nodes finishes 0.02 of itself per second.
func TestLosslessBoundByHand(t *testing.T) {
	t0 := time.Date(2021, 1, 1, 0, 0, 0, 0, time.UTC)
	all := []int32{0, 1, 2, 3}
	tr := &sim.Trace{Nodes: []string{"a", "b", "c", "d"}, Events: []sim.Event{
		{Time: t0, Joined: all},
		{Time: t0.Add(400 * time.Second), Left: all},
		{Time: t0.Add(500 * time.Second)},
	}}
	job := func(id string, at time.Duration) sim.Job {
		return sim.Job{ID: id, Submit: t0.Add(at), Min: 1, Max: 2, Samples: 1000,
			Nodes: []int{1, 2}, Throughput: []float64{10, 20}, Metric: []float64{10, 20}}
	}
	for _, tt := range []struct {
		name  string
		jobs  []sim.Job
		maxJ  int
		wantS float64 // seconds from t0; 0: not done before the trace ends
	}{
		// One slot: 2 jobs at 0.02/s, 100 s.
		{"one at a time", []sim.Job{job("a", 0), job("b", 0)}, 1, 100},
		// Two slots on 4 nodes: 0.04/s, 50 s.
		{"two at once", []sim.Job{job("a", 0), job("b", 0)}, 2, 50},
		// The second is submitted at 30 s: 0.6 done by then on one slot,
		// the 1.4 left at 0.04/s takes 35 s more.
		{"second submitted later", []sim.Job{job("a", 0), job("b", 30*time.Second)}, 2, 65},
		// Ten jobs on one slot need 500 s; the nodes leave at 400 s.
		{"the nodes leave first", []sim.Job{job("a", 0), job("b", 0), job("c", 0), job("d", 0), job("e", 0),
			job("f", 0), job("g", 0), job("h", 0), job("i", 0), job("j", 0)}, 1, 0},
	} {
		h, ok := sim.LosslessBound(tr, tt.jobs, tt.maxJ)
		if tt.wantS == 0 {
			if ok {
				t.Errorf("%s: done at %.1f s, want not before the trace ends", tt.name, h*3600)
			}
			continue
		}
		if !ok || math.Abs(h*3600-tt.wantS) > 1e-6 {
			t.Errorf("%s: %.6f s (ok %v), want %v", tt.name, h*3600, ok, tt.wantS)
		}
	}
	// A mixed workload on 2 nodes: U takes, at each count, the job that
	// finishes the largest share of itself: one half as large finishes
	// 0.02/s on 1 node, so 2 slots do 0.04/s and the three jobs 75 s; but
	// they need 100 + 100 + 50 node-seconds at their best 10/s per node,
	// 125 s on 2 nodes: the later bound holds.
	small := job("s", 0)
	small.Samples = 500
	if h, ok := sim.LosslessBound(&sim.Trace{Nodes: tr.Nodes[:2], Events: []sim.Event{{Time: t0, Joined: all[:2]}, {Time: t0.Add(time.Hour)}}},
		[]sim.Job{job("a", 0), job("b", 0), small}, 2); !ok || math.Abs(h*3600-125) > 1e-6 {
		t.Errorf("mixed: %.6f s (ok %v), want 125", h*3600, ok)
	}
}

// TestLosslessBoundBelowReplays: no allocator's replay finishes before
// the bound, on a generated trace with the built-in (mixed) workload and
// with one of its jobs thirty times over.
func TestLosslessBoundBelowReplays(t *testing.T) {
	tr := sim.GenerateTrace(sim.DefaultTraceModel(), 5)
	mixed := sim.DefaultWorkload(30, tr.Events[0].Time, 5)
	uniform := make([]sim.Job, len(mixed))
	for i, j := range mixed {
		uniform[i] = mixed[0]
		uniform[i].ID, uniform[i].Submit = j.ID, j.Submit
	}
	t.Run("mixed", func(t *testing.T) { boundBelowReplays(t, tr, mixed) })
	t.Run("uniform", func(t *testing.T) { boundBelowReplays(t, tr, uniform) })
}

func boundBelowReplays(t *testing.T, tr *sim.Trace, jobs []sim.Job) {
	bound, ok := sim.LosslessBound(tr, jobs, sim.DefaultMaxTrainers)
	if !ok {
		t.Fatal("no bound: the trace ended first")
	}
	for _, s := range []alloc.Solver{alloc.Adaptive{}, alloc.Exact{}, alloc.EqualShare{}, alloc.Greedy{}} {
		res, err := sim.Replay(context.Background(), tr, jobs, sim.Options{Solver: s})
		if err != nil {
			t.Fatal(err)
		}
		if m := res.Summary; m.Finished == m.Trainers && m.MakespanH < bound {
			t.Errorf("%s finished in %.3f h, below the bound %.3f h", s.Name(), m.MakespanH, bound)
		} else {
			t.Logf("%s: makespan %.3f h, bound %.3f h (%+.1f %%)", s.Name(), m.MakespanH, bound, 100*(m.MakespanH/bound-1))
		}
	}
}
