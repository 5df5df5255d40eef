package pool

// Learning each Trainer's scaling curve from what it achieves (issue 13):
// the pool's side of alloc.CurveLearner.
//
// Which curve the allocator sees, by Config.Curves:
//   - CurvesGiven (the default, live and in a replay): a Trainer submitted
//     with a curve is planned with it until it has been measured, then with
//     the learned estimate, the user's curve its prior; one submitted
//     without a curve is planned with an optimistic provisional curve, the
//     envelope of the other running Trainers' (firstCurve), until its
//     first measurement. The accounting (the
//     pool's own estimate of Done between reports, rescale costs) uses the
//     same curve. A replay measures nothing in this mode: it is today's
//     replay exactly.
//   - CurvesLearned (a replay): Spec.Curve is the truth, hidden from the
//     allocator, which sees only the learned estimate (no prior) of the
//     rates the replay measured (ObserveRunning); the accounting uses the
//     truth.
//   - CurvesLinear (a replay baseline): the allocator assumes linear
//     scaling from the truth's one-node throughput; the accounting uses
//     the truth.
//
// Observations come from two places and go through one method, Observe:
// live, from consecutive progress reports of a Trainer whose node count did
// not change between them (Progress); in a replay, from each interval
// between events at a constant count (ObserveRunning). The learner's
// Settle window discounts the seconds right after a rescale.
//
// Exploration: Propose asks the learner (alloc.CurveLearner.Explore)
// whether a probe is worth its price for each learning Trainer and offers
// the allocator the optimistic curve; Commit records every decision in
// the Trainer's ledger (alloc.CurveState.Decided), so that the learner's
// bound holds whatever the allocator chose.

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/bftrainer/bftrainer/alloc"
)

// CurveMode says which curve the allocator sees and which the accounting
// uses (see the comment above).
type CurveMode string

// Curve modes.
const (
	CurvesGiven   CurveMode = "given"
	CurvesLearned CurveMode = "learned"
	CurvesLinear  CurveMode = "linear"
)

// ParseCurveMode checks a mode's name ("" is CurvesGiven).
func ParseCurveMode(s string) (CurveMode, error) {
	switch m := CurveMode(s); m {
	case "", CurvesGiven:
		return CurvesGiven, nil
	case CurvesLearned, CurvesLinear:
		return m, nil
	}
	return "", fmt.Errorf("curves %q: want given, learned or linear", s)
}

// Learning is what the pool keeps to learn one Trainer's curve; it is
// saved with the Trainer.
type Learning struct {
	// Curve is the learner's state; nil when the Trainer is not learning
	// (CurvesLinear).
	Curve *alloc.CurveState `json:"curve,omitempty"`
	// Steady is when its node count last changed (or it was admitted).
	Steady time.Time `json:"steady,omitzero"`
	// Resumed is when its progress reports first showed it training at
	// that count again (zero: not yet). A restart can take longer than
	// the settle window (torchrun re-forming its world on a loaded
	// machine); reported counts the window from here, so that the stall
	// is never taken for the count's rate.
	Resumed time.Time `json:"resumed,omitzero"`
	// ReportAt and ReportDone are its last progress report; Reports counts
	// them. A Trainer that has reported finishes only by a report reaching
	// its target or by its workers' exit, never on the pool's estimate.
	ReportAt   time.Time `json:"report_at,omitzero"`
	ReportDone float64   `json:"report_done,omitempty"`
	Reports    int       `json:"reports,omitempty"`
	// ReportOn is the node count the last report said it trained on (0:
	// it did not say; ProgressOn).
	ReportOn int `json:"report_on,omitempty"`
	// ModelPrior is set when Curve.Prior is its model's curve (models.go),
	// not the user's.
	ModelPrior bool `json:"model_prior,omitempty"`
	// LogReadings are the launcher's readings of its progress log
	// (readings.go), a second source that reports win over.
	LogReadings
}

// String formats l as its JSON (what the store saves), so that a printed
// Trainer shows the learner's state rather than a pointer.
func (l Learning) String() string {
	b, err := json.Marshal(l)
	if err != nil {
		return fmt.Sprintf("learning: %v", err)
	}
	return string(b)
}

// estCache is a Trainer's last estimate, not saved: recomputed when the
// learner's samples changed in number or MinSample seconds of pool time
// passed since (a sample pooled into the last one moves the estimate
// little).
type estCache struct {
	samples int
	at      time.Time
	est     alloc.CurveEstimate
	curve   alloc.Curve
}

// hasCurve reports whether c has a point with a positive throughput.
func hasCurve(c alloc.Curve) bool {
	for i, n := range c.Nodes {
		if n >= 1 && i < len(c.Throughput) && c.Throughput[i] > 0 {
			return true
		}
	}
	return false
}

// provisional is the curve of a Trainer nothing is known of: one sample/s
// per node, up to its maximum (what CheckSpec validates; a single point
// for a Trainer of one node at most).
func provisional(max int) alloc.Curve {
	if max <= 1 {
		return alloc.Curve{Nodes: []int{1}, Throughput: []float64{1}}
	}
	return alloc.Curve{Nodes: []int{1, max}, Throughput: []float64{1, float64(max)}}
}

// firstCurve is the curve a learning Trainer is planned with until its
// first measurement. Nothing it did bounds its rate yet, so it is taken
// optimistically (upper confidence), but no more than the pool's own
// Trainers justify: at each count, the most any other running Trainer with
// a curve that rests on something (measured, or given in CurvesGiven)
// achieves there, held at that Trainer's per-node rate beyond its last
// count — the learner's model says per-node efficiency never rises with n,
// so that is the bound it allows (envelope). Its slot is taken already: a
// prior below the others' would leave it without nodes, unmeasured, until
// nodes are spare, and planning it small to measure it first costs a
// second rescale of it and of the Trainers that make room. An optimistic
// start costs one correction, made as soon as it is measured.
//
// Under the speedup objective every count is judged against one node,
// which only a measurement at its smallest count tells: there it starts at
// its minimum count (at least one node) and nothing more, at the same
// optimistic level, and its estimate grows it from there. With no other
// Trainer to go by, it is that count at one sample/s per node. A Trainer
// of a model the pool has seen is planned on its model's curve instead
// (modelCurve).
func (p *Pool) firstCurve(t *Trainer) alloc.Curve {
	if c, ok := p.modelCurve(t); ok {
		return c
	}
	n := max(t.Min, 1)
	top := t.Max
	if t.Learn.Curve != nil {
		top = t.Learn.Curve.Max
	}
	top = max(top, n)
	if p.cfg.Objective == alloc.Speedup {
		top = n
	}
	if c, ok := p.envelope(t, n, top); ok {
		return c
	}
	return alloc.Curve{Nodes: []int{n}, Throughput: []float64{float64(n)}}
}

// envelope is the upper envelope over lo..top of the curves the allocator
// sees for the running Trainers other than t that rest on something, each
// extended linearly beyond its last count; false if there is none.
func (p *Pool) envelope(t *Trainer, lo, top int) (alloc.Curve, bool) {
	var curves []alloc.Curve
	counts := []int{lo, top}
	for _, u := range p.running {
		if u == t {
			continue
		}
		var c alloc.Curve
		switch {
		case p.planLearned(u):
			_, c = p.estimate(u)
		case p.cfg.Curves == CurvesGiven && hasCurve(u.Curve):
			c = u.Curve
		default:
			continue
		}
		if !hasCurve(c) {
			continue
		}
		curves = append(curves, c)
		for _, k := range c.Nodes {
			if k > lo && k < top {
				counts = append(counts, k)
			}
		}
	}
	if len(curves) == 0 {
		return alloc.Curve{}, false
	}
	slices.Sort(counts)
	counts = slices.Compact(counts)
	env := alloc.Curve{}
	for _, k := range counts {
		best := 0.0
		for _, c := range curves {
			last := c.Nodes[len(c.Nodes)-1]
			if k <= last {
				best = max(best, alloc.Interp(c.Nodes, c.Throughput, k))
			} else {
				best = max(best, alloc.Interp(c.Nodes, c.Throughput, last)*float64(k)/float64(last))
			}
		}
		if best > 0 {
			env.Nodes = append(env.Nodes, k)
			env.Throughput = append(env.Throughput, best)
		}
	}
	return env, len(env.Nodes) > 0
}

// startLearning sets up a new Trainer's learner.
func (p *Pool) startLearning(t *Trainer) error {
	var prior *alloc.Curve
	top := t.Max
	switch p.cfg.Curves {
	case CurvesLinear:
		return nil
	case CurvesLearned:
		// The truth is hidden; its range is the Trainer's (a given-curve
		// allocator cannot hold more nodes than the curve has either).
		if hasCurve(t.Curve) {
			top = max(1, min(top, t.Curve.Nodes[len(t.Curve.Nodes)-1]))
		}
	default:
		if hasCurve(t.Curve) {
			c := t.Curve
			prior = &c
		}
	}
	s, err := alloc.NewCurveState(min(t.Min, top), top, prior)
	if err != nil {
		return err
	}
	t.Learn.Curve = s
	return nil
}

// estimate returns a learning Trainer's estimate, cached.
func (p *Pool) estimate(t *Trainer) (alloc.CurveEstimate, alloc.Curve) {
	s := t.Learn.Curve
	n := 0
	for _, c := range s.Counts {
		n += len(c.Rates)
	}
	c, ok := p.est[t.ID]
	if ok && c.samples == n && p.now.Sub(c.at).Seconds() < p.learner.MinSample {
		return c.est, c.curve
	}
	e := p.learner.Estimate(s)
	c = estCache{samples: n, at: p.now, est: e, curve: e.Curve()}
	p.est[t.ID] = c
	return c.est, c.curve
}

// measured reports whether the learner has measured the Trainer at all.
func measured(t *Trainer) bool {
	if t.Learn.Curve == nil {
		return false
	}
	for _, c := range t.Learn.Curve.Counts {
		if len(c.Rates) > 0 {
			return true
		}
	}
	return false
}

// settledCount reports whether the learner has a sample of t taken past
// a settle window.
func settledCount(t *Trainer) bool {
	for _, c := range t.Learn.Curve.Counts {
		if len(c.Rates) > 0 && !c.Unsettled {
			return true
		}
	}
	return false
}

// planLearned reports whether the allocator sees t's learned estimate: it
// has been measured and, if the user gave a curve that the allocator may
// see, a count of it is measured past its settle window — restarts alone
// are no reason to overrule the user.
func (p *Pool) planLearned(t *Trainer) bool {
	return p.cfg.Curves != CurvesLinear && measured(t) && (settledCount(t) || p.cfg.Curves == CurvesLearned || !hasCurve(t.Curve)) && !(t.Learn.ModelPrior && !settledCount(t))
}

// planCurve is the curve the allocator sees for t.
func (p *Pool) planCurve(t *Trainer) alloc.Curve {
	switch {
	case p.cfg.Curves == CurvesLinear:
		return linearFrom(t.Curve)
	case p.planLearned(t):
		_, c := p.estimate(t)
		return c
	case p.cfg.Curves == CurvesLearned || !hasCurve(t.Curve):
		return p.firstCurve(t)
	}
	return t.Curve
}

// trueCurve is the curve the accounting uses for t.
func (p *Pool) trueCurve(t *Trainer) alloc.Curve {
	if p.cfg.Curves == CurvesLearned || p.cfg.Curves == CurvesLinear {
		return t.Curve
	}
	return p.planCurve(t)
}

// linearFrom is c's one-node throughput scaled linearly to c's last count.
func linearFrom(c alloc.Curve) alloc.Curve {
	if len(c.Nodes) == 0 {
		return c
	}
	last := max(1, c.Nodes[len(c.Nodes)-1])
	r1 := alloc.Interp(c.Nodes, c.Throughput, 1)
	out := alloc.Curve{Nodes: []int{1, last}, Throughput: []float64{r1, r1 * float64(last)}}
	if c.Metric != nil {
		m1 := alloc.Interp(c.Nodes, c.Metric, 1)
		out.Metric = []float64{m1, m1 * float64(last)}
	}
	if last == 1 {
		out.Nodes, out.Throughput = out.Nodes[:1], out.Throughput[:1]
		if out.Metric != nil {
			out.Metric = out.Metric[:1]
		}
	}
	return out
}

// setCount notes that t's node count changed now.
func (p *Pool) setCount(t *Trainer) { t.Learn.Steady, t.Learn.Resumed = p.now, time.Time{} }

// Observe records what a running Trainer achieved over an interval at a
// constant count (the learner's CurveObs) and records a history change. A
// Trainer that does not learn ignores it. The learner discounts the part
// of it within its settle window after a rescale (alloc.CurveLearner:
// such a count is a lower bound until it is measured settled).
func (p *Pool) Observe(id string, o alloc.CurveObs) error { return p.observe(id, o, "") }

// observe is Observe of an observation from source (SourceReport,
// SourceLog; "" in a replay), which the history row says.
func (p *Pool) observe(id string, o alloc.CurveObs, source string) error {
	t, ok := p.byID[id]
	if !ok {
		return fmt.Errorf("observe %q: %w", id, ErrUnknownTrainer)
	}
	if t.Learn.Curve == nil {
		return nil
	}
	p.adoptModel(t)
	if err := p.learner.Observe(t.Learn.Curve, o); err != nil {
		return fmt.Errorf("observe %q: %w", id, err)
	}
	obs := o
	p.record(Change{Kind: CurveUpdated, Trainer: id, To: o.Nodes, Obs: &obs, Source: source})
	return nil
}

// ObserveRunning records, for every running Trainer that learns and holds
// nodes, the interval from the pool's clock to at at the count it holds,
// at the rate measure gives it (a replay's noisy measurement of the true
// rate). Call it before the event at at is applied.
func (p *Pool) ObserveRunning(at time.Time, measure func(t *Trainer) float64) {
	dt := at.Sub(p.now).Seconds()
	if dt <= 0 || p.now.IsZero() {
		return
	}
	for _, t := range p.running {
		n := len(t.Nodes)
		if t.Learn.Curve == nil || n < max(t.Min, 1) {
			continue
		}
		since := max(0, p.now.Sub(t.Learn.Steady).Seconds())
		_ = p.Observe(t.ID, alloc.CurveObs{Nodes: n, Rate: max(0, measure(t)), Duration: dt, Since: since}) // valid by construction
	}
}

// TrueRate is what t achieves now by the accounting's curve (the truth in
// a replay), 0 below its minimum.
func (p *Pool) TrueRate(t *Trainer) float64 {
	c := p.trueCurve(t)
	return c.SamplesPerSecond(len(t.Nodes), t.Min)
}

// reported folds a progress report into t's learning: the samples since
// the previous report, if its count did not change in between, are an
// observation. Its settle window counts from the first report that showed
// progress at the count (Learning.Resumed); until then an interval is
// only a lower bound (Since 0), whatever time has passed since the
// change. A report on another count (on > 0, ProgressOn) is none, and
// the window starts again.
func (p *Pool) reported(t *Trainer, samples float64, on int) {
	l := &t.Learn
	n := len(t.Nodes)
	switch {
	case on > 0 && on != n:
		// Not (yet, or no longer) training at the count it holds.
		l.Resumed = time.Time{}
	case on > 0 && l.ReportOn != on:
		// The interval spans the change to the held count: no rate of
		// either; the window starts here.
		l.Resumed = p.now
	case l.Reports > 0 && !l.ReportAt.Before(l.Steady) && n >= max(t.Min, 1) && samples >= l.ReportDone:
		if dt := p.now.Sub(l.ReportAt).Seconds(); dt > 0 {
			since := 0.0
			if !l.Resumed.IsZero() {
				since = max(0, l.ReportAt.Sub(l.Resumed).Seconds())
			}
			_ = p.observe(t.ID, alloc.CurveObs{Nodes: n, Rate: (samples - l.ReportDone) / dt, Duration: dt, Since: since}, SourceReport)
		}
		if l.Resumed.IsZero() && samples > l.ReportDone {
			l.Resumed = p.now
		}
	}
	l.ReportAt, l.ReportDone, l.ReportOn = p.now, samples, on
	l.Reports++
}

// Estimate returns the learned curve of an active Trainer and whether it
// learns.
func (p *Pool) Estimate(id string) (alloc.CurveEstimate, bool) {
	t, ok := p.byID[id]
	if !ok || t.Learn.Curve == nil {
		return alloc.CurveEstimate{}, false
	}
	e, _ := p.estimate(t)
	return e, true
}

// Probe is a probe offered to the allocator at one decision.
type Probe struct {
	Trainer string
	alloc.CurveProbe
}

// exploreHorizon is how long what a probe learns is taken to be used:
// for the rest of the Trainer's run (Explore caps it by its remaining
// samples at the estimated rate), at most a day.
const exploreHorizon = 86400

// explore asks the learner, for each learning running Trainer, whether the
// decision may probe, and puts the optimistic curve into pr.
func (p *Pool) explore(pr *alloc.Problem) []Probe {
	if p.cfg.Curves == CurvesLinear || len(pr.Free) == 0 {
		return nil
	}
	var out []Probe
	for i, t := range p.running {
		if t.Learn.Curve == nil || !measured(t) {
			continue
		}
		e, _ := p.estimate(t)
		pb := p.learner.Explore(t.Learn.Curve, &e, alloc.ProbeSituation{
			Now: p.now.Sub(time.Time{}).Seconds(), Held: len(t.Nodes), Avail: len(t.Nodes) + len(pr.Free),
			RUp: t.RescaleUp(), RDown: t.RescaleDown(), Remaining: remaining(t),
			Horizon: exploreHorizon, Objective: p.cfg.Objective,
		})
		if pb.Nodes == 0 {
			continue
		}
		pr.Trainers[i].Curve = e.Optimistic(pb, p.cfg.TFwd)
		out = append(out, Probe{Trainer: t.ID, CurveProbe: pb})
	}
	return out
}

// decided records a committed decision in every learning Trainer's
// ledger; probes are those Propose offered.
func (p *Pool) decided(pl *alloc.Plan, probes []Probe) {
	for i, a := range pl.Trainers {
		t := p.running[i]
		if t.Learn.Curve == nil || len(t.Nodes) == 0 && a.From == 0 {
			continue
		}
		probed := false
		for _, pb := range probes {
			if pb.Trainer == t.ID && pb.Nodes == a.To && a.To != a.From {
				probed = true
			}
		}
		t.Learn.Curve.Decided(p.now.Sub(time.Time{}).Seconds(), a.To != a.From, probed)
		if probed {
			p.totals.Probes++
		}
	}
}
