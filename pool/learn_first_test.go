package pool_test

import (
	"reflect"
	"testing"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/pool"
)

// TestFirstCurveEnvelope: a Trainer submitted without a curve is planned,
// until it is measured, with the upper envelope of the other running
// Trainers' curves (extended at their last per-node rate), from its
// minimum count; under the speedup objective with that count alone; with
// no other Trainer to go by, one sample/s per node at its minimum count.
func TestFirstCurveEnvelope(t *testing.T) {
	for _, c := range []struct {
		objective alloc.Objective
		others    []alloc.Curve
		want      alloc.Curve
	}{
		{alloc.Throughput, nil, alloc.Curve{Nodes: []int{2}, Throughput: []float64{2}}},
		{alloc.Throughput,
			[]alloc.Curve{
				{Nodes: []int{1, 2, 4}, Throughput: []float64{10, 19, 36}},
				{Nodes: []int{1, 3}, Throughput: []float64{12, 24}},
			},
			// 2: max(19, 18); 3: max(27.5, 24); 4: max(36, 24·4/3); 6: max(36·6/4, 24·6/3).
			alloc.Curve{Nodes: []int{2, 3, 4, 6}, Throughput: []float64{19, 27.5, 36, 54}}},
		{alloc.Speedup,
			[]alloc.Curve{{Nodes: []int{1, 2, 4}, Throughput: []float64{10, 19, 36}}},
			alloc.Curve{Nodes: []int{2}, Throughput: []float64{19}}},
	} {
		p := mustNew(t, pool.Config{TFwd: 100, Objective: c.objective, MaxTrainers: 10})
		p.Join(at(0), []string{"n1", "n2", "n3", "n4", "n5", "n6"}, "")
		for i, curve := range c.others {
			if err := p.Submit(at(0), pool.Spec{ID: string(rune('A' + i)), Min: 1, Max: 6, Curve: curve}); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.Submit(at(0), pool.Spec{ID: "L", Min: 2, Max: 6}); err != nil {
			t.Fatal(err)
		}
		p.Admit()
		pr := p.Problem()
		got := pr.Trainers[len(pr.Trainers)-1]
		if got.ID != "L" || !reflect.DeepEqual(got.Curve, c.want) {
			t.Fatalf("%s, others %v: L planned with %+v, want %+v", c.objective, c.others, got.Curve, c.want)
		}
	}
}
