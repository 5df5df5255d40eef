package pool_test

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/pool"
)

// problemCurve is the curve the allocator sees for id.
func problemCurve(t *testing.T, p *pool.Pool, id string) alloc.Curve {
	t.Helper()
	for _, tr := range p.Problem().Trainers {
		if tr.ID == id {
			return tr.Curve
		}
	}
	t.Fatalf("%s is not in the problem", id)
	return alloc.Curve{}
}

// settled observes id at n nodes, rate samples/s, three settled minutes.
func settled(t *testing.T, p *pool.Pool, id string, n int, rate float64) {
	t.Helper()
	for range 3 {
		if err := p.Observe(id, alloc.CurveObs{Nodes: n, Rate: rate, Duration: 60, Since: 600}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestModelCurve: a second Trainer of a model starts planned on the shape
// learned of the first (fastest on one node), at the first's level; a
// Trainer of another model, and one without, are planned as before (the
// envelope). The second's own measurement at one node, at half the
// first's rate (another batch size), then rescales the level and keeps the
// shape; the first's shape, folded in when it ends, survives a save and
// load of the pool's state.
func TestModelCurve(t *testing.T) {
	cfg := pool.Config{TFwd: 100, MaxTrainers: 10, Learner: alloc.CurveLearner{Settle: 5, MinSample: 1}}
	p := mustNew(t, cfg)
	p.Join(at(0), []string{"n1", "n2", "n3", "n4"}, "")
	if err := p.Submit(at(0), pool.Spec{ID: "A", Min: 1, Max: 4, Model: "ncf"}); err != nil {
		t.Fatal(err)
	}
	p.Admit()
	if on, _ := p.OnModelCurve("A"); on {
		t.Fatal("A, the first of its model, is planned on its model's curve")
	}
	truth := map[int]float64{1: 100, 2: 41, 4: 30}
	for n, r := range truth {
		settled(t, p, "A", n, r)
	}
	for _, s := range []pool.Spec{{ID: "B", Model: "ncf"}, {ID: "C", Model: "bert"}, {ID: "D"}} {
		s.Min, s.Max = 1, 4
		if err := p.Submit(at(0), s); err != nil {
			t.Fatal(err)
		}
	}
	p.Admit()
	b := problemCurve(t, p, "B")
	if !reflect.DeepEqual(b.Nodes, []int{1, 2, 4}) {
		t.Fatalf("B planned on %+v: want A's counts 1, 2, 4", b)
	}
	for i, n := range b.Nodes {
		if math.Abs(b.Throughput[i]/truth[n]-1) > 0.05 {
			t.Fatalf("B planned on %+v: want A's rates %v within 5 %%", b, truth)
		}
	}
	if on, k := p.OnModelCurve("B"); !on || k != 1 {
		t.Fatalf("OnModelCurve(B) = %v, %d: want true, resting on 1 Trainer", on, k)
	}
	c, d := problemCurve(t, p, "C"), problemCurve(t, p, "D")
	if !reflect.DeepEqual(c, d) || reflect.DeepEqual(c, b) {
		t.Fatalf("C (another model) planned on %+v, D (none) on %+v, B on %+v: want C as D, not as B", c, d, b)
	}
	if on, _ := p.OnModelCurve("C"); on {
		t.Fatal("C, of another model, is planned on a model's curve")
	}

	settled(t, p, "B", 1, 50)
	tb, _ := p.Trainer("B")
	if !tb.Learn.ModelPrior || tb.Learn.Curve.Prior == nil {
		t.Fatalf("B's learner %v: want its model's curve as prior", tb.Learn)
	}
	e, _ := p.Estimate("B")
	r1, _ := e.At(1)
	r2, _ := e.At(2)
	r4, _ := e.At(4)
	// The learner weighs the prior against its own model (linear scaling
	// from one count, wide) and pools a fall within noise: what it keeps of
	// the shape is that no count beats one node.
	if math.Abs(r1/50-1) > 0.05 || r2 > r1*1.001 || r4 > 0.5*r1 {
		t.Fatalf("B's estimate 1: %.4g, 2: %.4g, 4: %.4g: want 50, and none above it (A's shape: 0.41, 0.30 of it)", r1, r2, r4)
	}
	if p := tb.Learn.Curve.Prior; !reflect.DeepEqual(p.Nodes, b.Nodes) || !reflect.DeepEqual(p.Throughput, b.Throughput) {
		t.Fatalf("B's prior %+v: want the model curve it was planned on, %+v", p, b)
	}
	if on, _ := p.OnModelCurve("B"); on {
		t.Fatal("B, measured settled, is still planned on its model's curve rather than its estimate")
	}

	if err := p.Cancel(at(10), "A"); err != nil {
		t.Fatal(err)
	}
	models := p.Totals().Models
	if len(models) != 1 || models[0].Model != "ncf" || models[0].Trainers != 1 || len(models[0].Counts) != 3 {
		t.Fatalf("Totals.Models %+v: want ncf from A, its 3 counts", models)
	}
	before, _ := p.ModelShape("ncf", "B")
	// The store saves Totals as JSON.
	raw, err := json.Marshal(p.State())
	if err != nil {
		t.Fatal(err)
	}
	var st pool.State
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatal(err)
	}
	q, err := pool.New(cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	after, k := q.ModelShape("ncf", "B")
	if k != 1 || !reflect.DeepEqual(before, after) {
		t.Fatalf("ncf's curve after save and load %+v (%d Trainers), before %+v", after, k, before)
	}
	if err := q.Submit(at(20), pool.Spec{ID: "E", Min: 1, Max: 4, Model: "ncf"}); err != nil {
		t.Fatal(err)
	}
	q.Admit()
	if on, k := q.OnModelCurve("E"); !on || k != 2 {
		t.Fatalf("OnModelCurve(E) after reload = %v, %d: want true, resting on A (ended) and B (running)", on, k)
	}
}
