package pool

// A learned prior from the Trainers of the same model (issue 13): users
// run many jobs of one model, and the pool has seen them. What is assumed:
// Trainers of one model (Spec.Model) scale alike — the same shape of
// throughput over node count — while their level (samples/s) may differ
// (another batch size, dataset or node type). So the pool keeps, per
// model, the shape only: at each count, the settled rates each Trainer of
// the model measured there, over that Trainer's own one-node rate (its
// learned estimate at one node: the measurement where it ran on one, the
// fitted model's prediction where not), pooled in log space with one vote
// per Trainer and count; and the mean log one-node rate, the level a new
// Trainer is planned at before it is measured.
//
// A learning Trainer with a model, none of whose counts is measured past
// a settle window, is planned on its model's curve — the shape of the
// Trainers of the model that ended (Totals.Models) and of those running
// with settled measurements, at their mean level. At its first
// measurement that curve becomes its learner's prior
// (alloc.CurveState.Prior), as a user-given curve would: used as given
// until a count is measured settled, then calibrated in level by its own
// measurements and weighed against them (alloc.CurveLearner). A Trainer
// without a model, or the first of its model, is planned as before
// (firstCurve).

import (
	"cmp"
	"math"
	"slices"

	"github.com/bftrainer/bftrainer/alloc"
)

// ModelCurve is what the pool keeps of one model's scaling: the Trainers
// of the model that ended, folded in.
type ModelCurve struct {
	Model string `json:"model"`
	// Trainers is how many ended Trainers were folded in; LogLevel the sum
	// of their log one-node rates (samples/s).
	Trainers int     `json:"trainers"`
	LogLevel float64 `json:"log_level"`
	// Counts are the counts they measured settled, by increasing Nodes.
	Counts []ModelCount `json:"counts"`
}

// ModelCount is one count of a ModelCurve: N Trainers measured it
// settled, SumLog is the sum of their log rate over one-node rate there.
type ModelCount struct {
	Nodes  int     `json:"nodes"`
	N      int     `json:"n"`
	SumLog float64 `json:"sum_log"`
}

// shapeOf is what t contributes to its model's curve: its one-node rate
// and the counts it measured settled, each as log(rate / one-node rate);
// false when it has no settled count.
func (p *Pool) shapeOf(t *Trainer) (level float64, counts []ModelCount, ok bool) {
	if t.Learn.Curve == nil || !measured(t) || !settledCount(t) {
		return 0, nil, false
	}
	e, _ := p.estimate(t)
	one, _ := e.At(1)
	if !(one > 0) {
		return 0, nil, false
	}
	for _, pt := range e.Points {
		if pt.Source&alloc.FromMeasured == 0 || !(pt.Seconds > 0) || !(pt.Rate > 0) {
			continue
		}
		counts = append(counts, ModelCount{Nodes: pt.Nodes, N: 1, SumLog: math.Log(pt.Rate / one)})
	}
	return math.Log(one), counts, len(counts) > 0
}

// foldModel adds an ending Trainer's shape to its model's curve in
// Totals.Models (copied, never changed in place: a State handed out
// shares the slice).
func (p *Pool) foldModel(t *Trainer) {
	if t.Model == "" {
		return
	}
	level, counts, ok := p.shapeOf(t)
	if !ok {
		return
	}
	models := slices.Clone(p.totals.Models)
	i, found := slices.BinarySearchFunc(models, t.Model, func(m ModelCurve, name string) int { return cmp.Compare(m.Model, name) })
	if !found {
		models = slices.Insert(models, i, ModelCurve{Model: t.Model})
	}
	m := models[i]
	m.Trainers++
	m.LogLevel += level
	m.Counts = addCounts(slices.Clone(m.Counts), counts)
	models[i] = m
	p.totals.Models = models
}

// addCounts adds b's votes to a (both by increasing Nodes).
func addCounts(a, b []ModelCount) []ModelCount {
	for _, c := range b {
		i, found := slices.BinarySearchFunc(a, c.Nodes, func(x ModelCount, n int) int { return x.Nodes - n })
		if !found {
			a = slices.Insert(a, i, ModelCount{Nodes: c.Nodes})
		}
		a[i].N += c.N
		a[i].SumLog += c.SumLog
	}
	return a
}

// ModelShape returns the curve the pool has learned of a model — the
// Trainers of it that ended and those running with a settled
// measurement, except the Trainer named except — at their mean level,
// and how many Trainers it rests on; 0 when none.
func (p *Pool) ModelShape(model, except string) (alloc.Curve, int) {
	if model == "" {
		return alloc.Curve{}, 0
	}
	var counts []ModelCount
	trainers, level := 0, 0.0
	i, found := slices.BinarySearchFunc(p.totals.Models, model, func(m ModelCurve, name string) int { return cmp.Compare(m.Model, name) })
	if found {
		m := p.totals.Models[i]
		trainers, level = m.Trainers, m.LogLevel
		counts = slices.Clone(m.Counts)
	}
	for _, u := range p.running {
		if u.ID == except || u.Model != model {
			continue
		}
		if l, c, ok := p.shapeOf(u); ok {
			trainers++
			level += l
			counts = addCounts(counts, c)
		}
	}
	if trainers == 0 {
		return alloc.Curve{}, 0
	}
	lv := math.Exp(level / float64(trainers))
	c := alloc.Curve{Nodes: []int{1}, Throughput: []float64{lv}}
	for _, k := range counts {
		if k.Nodes == 1 || k.N == 0 {
			continue // one node is the reference: 1 by construction
		}
		c.Nodes = append(c.Nodes, k.Nodes)
		c.Throughput = append(c.Throughput, lv*math.Exp(k.SumLog/float64(k.N)))
	}
	return c, trainers
}

// sameModel reports whether t may be planned on its model's curve: it
// learns, has a model, the allocator sees no curve of the user's, and
// none of its counts is measured settled.
func (p *Pool) sameModel(t *Trainer) bool {
	return t.Model != "" && t.Learn.Curve != nil && p.cfg.Curves != CurvesLinear &&
		(p.cfg.Curves == CurvesLearned || !hasCurve(t.Curve)) && !settledCount(t)
}

// modelCurve is the curve t is planned on from its model, within its
// bounds, and whether it has one: its prior once adopted (adoptModel),
// else the model's curve now.
func (p *Pool) modelCurve(t *Trainer) (alloc.Curve, bool) {
	if !p.sameModel(t) {
		return alloc.Curve{}, false
	}
	if t.Learn.ModelPrior && t.Learn.Curve.Prior != nil {
		return *t.Learn.Curve.Prior, true
	}
	if measured(t) {
		return alloc.Curve{}, false // measured without one: planned as before
	}
	return p.boundedModelCurve(t)
}

// boundedModelCurve is the model's curve cut to t's learner's bounds
// (it always has its one-node point, which the speedup objective needs).
func (p *Pool) boundedModelCurve(t *Trainer) (alloc.Curve, bool) {
	c, n := p.ModelShape(t.Model, t.ID)
	if n == 0 {
		return alloc.Curve{}, false
	}
	top := t.Learn.Curve.Max
	out := alloc.Curve{}
	for i, k := range c.Nodes {
		if k == 1 || k <= top {
			out.Nodes = append(out.Nodes, k)
			out.Throughput = append(out.Throughput, c.Throughput[i])
		}
	}
	return out, true
}

// adoptModel makes t's model curve its learner's prior at its first
// observation (a Trainer measured without one keeps learning as before).
func (p *Pool) adoptModel(t *Trainer) {
	if measured(t) || t.Learn.Curve.Prior != nil || !p.sameModel(t) {
		return
	}
	c, ok := p.boundedModelCurve(t)
	if !ok {
		return
	}
	s, err := alloc.NewCurveState(t.Learn.Curve.Min, t.Learn.Curve.Max, &c)
	if err != nil {
		return // a curve the learner refuses: learn without it
	}
	t.Learn.Curve.Prior = s.Prior
	t.Learn.ModelPrior = true
}

// OnModelCurve reports whether the active Trainer id is planned on the
// curve learned from the other Trainers of its model (models.go), and
// how many Trainers that curve rests on (0 once adopted as its prior).
func (p *Pool) OnModelCurve(id string) (bool, int) {
	t, ok := p.byID[id]
	if !ok {
		return false, 0
	}
	if _, ok := p.modelCurve(t); !ok {
		return false, 0
	}
	if t.Learn.ModelPrior {
		return true, 0
	}
	_, n := p.ModelShape(t.Model, t.ID)
	return true, n
}
