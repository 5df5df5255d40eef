package alloc

// The learner's model and how an estimate is assembled.
//
// The model. A data-parallel step on n nodes costs compute plus
// communication, so the time per sample per node, τ(n) = n / T(n), is
//
//	τ(n) = a + b·(1 − 1/n) + c·log₂ n + d·(n − 1) + e·(n − 1)²
//	a > 0;  b, c, d, e ≥ 0
//
// a: compute; b: a bandwidth-bound ring all-reduce, 2(n−1)/n of the
// gradient per step, so the first step off one node costs most and then it
// saturates (it can make 2 nodes slower than 1, as measured on Pollux's
// traces); c: latency of tree collectives; d: contention growing with n;
// e: all-to-all or incast traffic, which makes T peak and fall. All ≥ 0
// means τ never falls: the per-node efficiency T(n)/(n·T(1)) never rises
// with n — the star-shaped form of concavity (a curve concave through the
// origin has it). Concavity itself is not imposed: measured curves break it
// (Summit's go better from 4 to 8 nodes than from 2 to 4). T(n) = n/τ(n) is
// positive for every n; it falls past some n only if d > a or e > 0.
//
// The fit. τ is linear in (a, b, c, d, e): a weighted least-squares fit of
// τᵢ = nᵢ/Tᵢ with weights 1/(τᵢ·σᵢ)² (σᵢ the relative standard deviation
// of Tᵢ, at least 1 %: the model is not exact), non-negativity imposed by
// enumerating the active sets, and a half-normal prior centred on 0 for
// each overhead, scaled so that at the Trainer's largest count N each
// overhead is a priori about as large as the compute: b ~ a₀,
// c ~ a₀/log₂ N, d ~ a₀/(N−1), e ~ a₀/(N−1)², a₀ = τ at the smallest
// measured count. With one measured count the fit is linear scaling with
// wide error bars; every further count narrows them. The uncertainty of a
// prediction is the fit's (the inverse of the penalised normal matrix,
// scaled up by the reduced χ² of points and prior when they disagree with
// the model) plus Drift per octave from the nearest measured count, at most
// a factor e (maxSD).
//
// Assembly, per count of the estimate (a geometric grid 1, 2, 3, 4, 6, 8,
// 12, … up to Max, plus Min, Max, the measured counts and the prior's):
//   - each measured count is vetted against its neighbours (learn.go, vet):
//     outlying samples are dropped, and a thinly measured count is pulled
//     towards their prediction, as far as their roughness allows;
//   - a measured count is then that rate;
//   - an unmeasured one is the model, corrected by the measured residuals
//     (log measured/model) interpolated in log₂ n between the measured
//     counts around it and decaying by e per octave beyond the outer ones;
//   - a user curve U is calibrated in level, U·e^(−L), L estimated from
//     the measured log-ratios (a level error common to all counts, SD 1,
//     plus a shape error per count, SD PriorSD), and then combined with
//     either of the above by precision, in log space;
//   - finally adjacent counts whose rate falls with n are pooled (by
//     precision) unless the fall exceeds 2 standard deviations: a
//     measured fall is kept, noise is not.

import (
	"math"
	"slices"
	"strings"
)

// CurveSource says what a point of a CurveEstimate rests on.
type CurveSource uint8

const (
	// FromMeasured: the Trainer's own samples at that count.
	FromMeasured CurveSource = 1 << iota
	// FromModel: the fitted model, corrected by nearby measurements.
	FromModel
	// FromPrior: the user-given curve, calibrated in level.
	FromPrior
)

func (s CurveSource) String() string {
	var parts []string
	for _, p := range []struct {
		bit  CurveSource
		name string
	}{{FromMeasured, "measured"}, {FromModel, "model"}, {FromPrior, "prior"}} {
		if s&p.bit != 0 {
			parts = append(parts, p.name)
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "+")
}

// CurvePoint is the estimate at one node count.
type CurvePoint struct {
	Nodes   int         `json:"nodes"`
	Rate    float64     `json:"rate"` // samples per second, ≥ 0
	SD      float64     `json:"sd"`   // relative standard deviation of Rate
	Source  CurveSource `json:"source"`
	Seconds float64     `json:"seconds,omitempty"` // settled seconds measured here
	Samples float64     `json:"samples,omitempty"` // effective number of samples kept
	Metric  float64     `json:"metric,omitempty"`  // the prior's metric here, if it has one
}

// CurveEstimate is a Trainer's learned curve with its uncertainty.
type CurveEstimate struct {
	Points []CurvePoint `json:"points"` // by increasing Nodes
	// Noise is the Trainer's relative noise per sample.
	Noise float64 `json:"noise"`
	// Model is (a, b, c, d, e) of τ(n) = a + b(1−1/n) + c·log₂n + d(n−1) +
	// e(n−1)², in node-seconds per sample; all zero when nothing was fitted.
	Model [nModel]float64 `json:"model"`
	// HasMetric is set when the prior carries a Metric column.
	HasMetric bool `json:"has_metric,omitempty"`
}

// Known reports whether the estimate rests on anything: a measurement or a
// user-given curve. An unknown Trainer needs a provisional curve from the
// caller until its first interval is observed.
func (e CurveEstimate) Known() bool { return len(e.Points) > 0 }

// Curve returns the estimate as the allocator's input: the rate at each
// point, and the prior's metric if it has one. Empty when not Known.
func (e CurveEstimate) Curve() Curve {
	c := Curve{Nodes: make([]int, len(e.Points)), Throughput: make([]float64, len(e.Points))}
	if e.HasMetric {
		c.Metric = make([]float64, len(e.Points))
	}
	for i, p := range e.Points {
		c.Nodes[i], c.Throughput[i] = p.Nodes, p.Rate
		if e.HasMetric {
			c.Metric[i] = p.Metric
		}
	}
	return c
}

// At returns the rate and its relative standard deviation at n nodes,
// linearly interpolated between points (as the allocator interpolates the
// curve); beyond the last point the last is held, and 0 nodes give 0.
func (e CurveEstimate) At(n int) (rate, sd float64) {
	if n <= 0 || len(e.Points) == 0 {
		return 0, 0
	}
	i, found := slices.BinarySearchFunc(e.Points, n, func(p CurvePoint, n int) int { return p.Nodes - n })
	switch {
	case found:
		return e.Points[i].Rate, e.Points[i].SD
	case i == len(e.Points):
		p := e.Points[i-1]
		return p.Rate, p.SD
	case i == 0:
		p := e.Points[0]
		return p.Rate * float64(n) / float64(p.Nodes), p.SD
	}
	p, q := e.Points[i-1], e.Points[i]
	f := float64(n-p.Nodes) / float64(q.Nodes-p.Nodes)
	return p.Rate + f*(q.Rate-p.Rate), p.SD + f*(q.SD-p.SD)
}

// unsettledSD is the relative standard deviation given to a count known
// only from intervals inside a settle window: a loose lower bound.
const unsettledSD = 0.5

// Estimate returns the Trainer's curve as learned so far.
func (l CurveLearner) Estimate(s *CurveState) CurveEstimate {
	l = l.settings()
	raw, noise := l.measured(s)
	est := CurveEstimate{Noise: noise}
	if len(raw) == 0 && s.Prior == nil {
		return est
	}
	nref := max(s.Max, 2)
	if len(raw) > 0 {
		nref = max(nref, raw[len(raw)-1].nodes)
	}
	meas := l.vetAll(raw, noise, float64(nref))
	// Anchors: the points the model is fitted to and corrected by — the
	// measured counts with a positive rate or, with none, the prior's.
	var anchors []fitPoint
	settled := false
	for _, m := range meas {
		settled = settled || m.rate > 0 && !m.unsettled
	}
	for _, m := range meas {
		// A count known only from inside a settle window is a lower
		// bound, not an anchor, once some count is settled.
		if m.rate > 0 && !(settled && m.unsettled) {
			anchors = append(anchors, fitPoint{n: m.nodes, rate: m.rate, sd: measuredSD(m, noise)})
		}
	}
	fromPrior := len(anchors) == 0 && s.Prior != nil
	if fromPrior {
		for i, n := range s.Prior.Nodes {
			if v := s.Prior.Throughput[i]; n >= 1 && v > 0 {
				anchors = append(anchors, fitPoint{n: n, rate: v, sd: l.PriorSD})
			}
		}
	}
	if fromPrior {
		nref = max(nref, anchors[len(anchors)-1].n)
	}
	model := fitCurveModel(anchors, float64(nref))
	if model.ok {
		est.Model = model.theta
	}
	resid := make([]float64, len(anchors))
	for i, a := range anchors {
		resid[i] = math.Log(a.rate) - math.Log(model.rate(float64(a.n)))
	}
	level, levelVar := l.calibrate(s.Prior, meas, noise)
	est.HasMetric = s.Prior != nil && s.Prior.Metric != nil

	grid := learnGrid(s, raw)
	est.Points = make([]CurvePoint, 0, len(grid))
	lv := make([]float64, 0, len(grid)) // log rate, for pooling
	mi := 0
	for _, n := range grid {
		p := CurvePoint{Nodes: n}
		if est.HasMetric {
			p.Metric = Interp(s.Prior.Nodes, s.Prior.Metric, n)
		}
		var acc precisionSum
		for mi < len(meas) && meas[mi].nodes < n {
			mi++
		}
		switch {
		case mi < len(meas) && meas[mi].nodes == n:
			m := meas[mi]
			p.Source, p.Seconds, p.Samples = FromMeasured, m.seconds, m.neff
			if m.shrunk {
				p.Source |= FromModel // pulled towards its neighbours' prediction
			}
			if m.rate <= 0 {
				// Measured to make no progress at all: kept as is.
				est.Points = append(est.Points, p)
				lv = append(lv, math.Inf(-1))
				continue
			}
			if settled && m.unsettled && !fromPrior && model.ok {
				// A loose lower bound: where the settled counts'
				// model predicts more, the model it is.
				if v := math.Log(model.rate(float64(n))) + residualAt(anchors, resid, n); v > math.Log(m.rate) {
					p.Source |= FromModel
					acc.add(v, max(l.modelSD(model, anchors, n), unsettledSD))
					break
				}
			}
			acc.add(math.Log(m.rate), measuredSD(m, noise))
		case !fromPrior && model.ok:
			p.Source = FromModel
			acc.add(math.Log(model.rate(float64(n)))+residualAt(anchors, resid, n), l.modelSD(model, anchors, n))
		}
		if s.Prior != nil {
			lo, hi := s.Prior.Nodes[0], s.Prior.Nodes[len(s.Prior.Nodes)-1]
			if u := Interp(s.Prior.Nodes, s.Prior.Throughput, n); n >= lo && n <= hi && u > 0 {
				p.Source |= FromPrior
				acc.add(math.Log(u)+level, math.Sqrt(l.PriorSD*l.PriorSD+levelVar))
			} else if fromPrior && model.ok && p.Source == 0 {
				// Beyond the user's curve, with nothing measured: the
				// model fitted to the user's curve extends it.
				p.Source = FromModel | FromPrior
				sd := l.modelSD(model, anchors, n)
				acc.add(math.Log(model.rate(float64(n)))+residualAt(anchors, resid, n), math.Sqrt(sd*sd+levelVar))
			}
		}
		if acc.empty() {
			continue
		}
		v, sd := acc.mean()
		p.Rate, p.SD = math.Exp(v), sd
		est.Points = append(est.Points, p)
		lv = append(lv, v)
	}
	poolFalls(est.Points, lv)
	return est
}

// vetAll checks each measured count against what the others predict for
// it (see vet) and returns those that keep a good sample. The prediction
// for count n is the model fitted to the counts' rates, corrected by the
// residuals of the others interpolated at n (not n's own); its SD adds to the
// model's the roughness of those residuals — how far each count's residual
// is from its neighbours' interpolation, a robust RMS — so a curve the
// model fits badly vets loosely. Two rounds: the first with every count's
// own robust rate, the second with the rates of the first round's good
// samples only, so that a count made only of outliers does not mislead its
// neighbours' check. Needs three counts.
func (l CurveLearner) vetAll(meas []measuredRate, noise, nref float64) []measuredRate {
	if noise <= 0 {
		return meas
	}
	use := func(m measuredRate) bool { return m.rate > 0 && !m.unsettled }
	anchorsOf := func(ms []measuredRate, rate func(measuredRate) float64) []fitPoint {
		var a []fitPoint
		for _, m := range ms {
			if use(m) {
				a = append(a, fitPoint{n: m.nodes, rate: rate(m), sd: noise / math.Sqrt(max(m.neff, 1))})
			}
		}
		return a
	}
	round := func(anchors []fitPoint) ([]measuredRate, bool) {
		if len(anchors) < 3 {
			return nil, false
		}
		p, ok := l.newPredictor(anchors, nref)
		if !ok {
			return nil, false
		}
		var kept []measuredRate
		for _, m := range meas {
			if !use(m) {
				kept = append(kept, m)
				continue
			}
			ref, refSD := p.leaveOut(m.nodes)
			if v, ok := vet(m, noise, ref, refSD); ok {
				kept = append(kept, v)
			}
		}
		return kept, true
	}
	first, ok := round(anchorsOf(meas, func(m measuredRate) float64 { return m.rate }))
	if !ok {
		return meas
	}
	same := len(first) == len(meas)
	for i := 0; same && i < len(first); i++ {
		same = !first[i].shrunk || first[i].plain == meas[i].rate
	}
	if same {
		return first // the second round would see the same rates
	}
	second, ok := round(anchorsOf(first, func(m measuredRate) float64 {
		if m.shrunk {
			return m.plain
		}
		return m.rate
	}))
	if !ok {
		return first
	}
	return second
}

// predictor predicts a count's log rate from anchors other than itself.
type predictor struct {
	l       CurveLearner
	anchors []fitPoint
	model   curveModel
	resid   []float64
	rough2  float64
}

func (l CurveLearner) newPredictor(anchors []fitPoint, nref float64) (predictor, bool) {
	p := predictor{l: l, anchors: anchors, model: fitCurveModel(anchors, nref)}
	if !p.model.ok {
		return p, false
	}
	p.resid = make([]float64, len(anchors))
	for i, a := range anchors {
		p.resid[i] = math.Log(a.rate) - math.Log(p.model.rate(float64(a.n)))
	}
	sq := make([]float64, len(anchors))
	for i, a := range anchors {
		d := p.resid[i] - p.looResidual(a.n)
		sq[i] = d * d
	}
	slices.Sort(sq)
	p.rough2 = sq[len(sq)/2] / 0.4549 // the median of χ²(1) is 0.4549
	return p, true
}

// looResidual interpolates the residuals at n from the anchors other than n.
func (p predictor) looResidual(n int) float64 {
	i, found := slices.BinarySearchFunc(p.anchors, n, func(a fitPoint, n int) int { return a.n - n })
	if !found {
		return residualAt(p.anchors, p.resid, n)
	}
	switch {
	case len(p.anchors) == 1:
		return 0
	case i == 0:
		return p.resid[1] * math.Exp(-math.Log2(float64(p.anchors[1].n)/float64(n)))
	case i == len(p.anchors)-1:
		return p.resid[i-1] * math.Exp(-math.Log2(float64(n)/float64(p.anchors[i-1].n)))
	}
	x0, x1 := math.Log2(float64(p.anchors[i-1].n)), math.Log2(float64(p.anchors[i+1].n))
	f := (math.Log2(float64(n)) - x0) / (x1 - x0)
	return p.resid[i-1] + f*(p.resid[i+1]-p.resid[i-1])
}

// leaveOut returns the predicted log rate at n and its SD, from the
// anchors other than n.
func (p predictor) leaveOut(n int) (ref, sd float64) {
	d := p.l.Drift * octavesToNearest(p.anchors, n, true)
	return math.Log(p.model.rate(float64(n))) + p.looResidual(n), math.Sqrt(p.model.relVar(float64(n)) + d*d + p.rough2)
}

// measuredSD is the relative standard deviation of a count's robust rate.
func measuredSD(m measuredRate, noise float64) float64 {
	if m.shrunk {
		return m.sd
	}
	sd := noise / math.Sqrt(max(m.neff, 1))
	if m.unsettled {
		sd = max(sd, unsettledSD)
	}
	return sd
}

// modelSD is the relative standard deviation of the model at n: the fit's,
// plus Drift per octave from the nearest anchor.
func (l CurveLearner) modelSD(m curveModel, anchors []fitPoint, n int) float64 {
	d := l.Drift * octavesToNearest(anchors, n, false)
	return math.Sqrt(m.relVar(float64(n)) + d*d)
}

// octavesToNearest returns |log₂(n/a)| for the anchor a nearest n (by
// increasing n), skipping an anchor at n itself if skipSelf; +Inf if none.
func octavesToNearest(anchors []fitPoint, n int, skipSelf bool) float64 {
	i, found := slices.BinarySearchFunc(anchors, n, func(a fitPoint, n int) int { return a.n - n })
	oct := math.Inf(1)
	if found && !skipSelf {
		return 0
	}
	hi := i
	if found {
		hi = i + 1
	}
	if i > 0 {
		oct = math.Log2(float64(n) / float64(anchors[i-1].n))
	}
	if hi < len(anchors) {
		oct = min(oct, math.Log2(float64(anchors[hi].n)/float64(n)))
	}
	return oct
}

// residualAt interpolates the anchors' log residuals at n, linearly in
// log₂ n between anchors, decaying by e per octave beyond the outer ones.
func residualAt(anchors []fitPoint, resid []float64, n int) float64 {
	if len(anchors) == 0 {
		return 0
	}
	x := math.Log2(float64(n))
	i, _ := slices.BinarySearchFunc(anchors, n, func(a fitPoint, n int) int { return a.n - n })
	switch {
	case i == 0:
		return resid[0] * math.Exp(-(math.Log2(float64(anchors[0].n)) - x))
	case i == len(anchors):
		return resid[i-1] * math.Exp(-(x - math.Log2(float64(anchors[i-1].n))))
	}
	x0, x1 := math.Log2(float64(anchors[i-1].n)), math.Log2(float64(anchors[i].n))
	f := (x - x0) / (x1 - x0)
	return resid[i-1] + f*(resid[i]-resid[i-1])
}

// priorLevelSD is the standard deviation of a user curve's log level
// error: a factor e, weak on purpose — a curve measured on other hardware,
// with another batch size, or guessed, is often off in level by far more
// than in shape. PriorSD is the shape's.
const priorLevelSD = 1.0

// calibrate estimates the log level error L of the prior from the
// measured counts within its range, U = T·e^(L+e), L ~ N(0, priorLevelSD²)
// common to all counts, e ~ N(0, PriorSD²) per count. It returns the
// correction −L̂ to add to log U and its variance.
func (l CurveLearner) calibrate(prior *Curve, meas []measuredRate, noise float64) (mean, variance float64) {
	if prior == nil {
		return 0, 0
	}
	shape := l.PriorSD * l.PriorSD
	lo, hi := prior.Nodes[0], prior.Nodes[len(prior.Nodes)-1]
	prec, sum := 1/(priorLevelSD*priorLevelSD), 0.0
	for _, m := range meas {
		u := Interp(prior.Nodes, prior.Throughput, m.nodes)
		if m.rate <= 0 || u <= 0 || m.nodes < lo || m.nodes > hi {
			continue
		}
		sd := measuredSD(m, noise)
		w := 1 / (sd*sd + shape)
		prec += w
		sum += w * math.Log(u/m.rate)
	}
	return -sum / prec, 1 / prec
}

// maxSD is the largest relative standard deviation an estimate carries:
// beyond a factor e either way a rate is simply unknown, and wider bands
// would only inflate the value of probing it.
const maxSD = 1.0

// precisionSum combines estimates in log space by precision; an exact one
// (SD 0) overrides every inexact one; none is vaguer than maxSD.
type precisionSum struct {
	w, wv    float64
	exact    int
	exactSum float64
}

func (p *precisionSum) add(v, sd float64) {
	sd = min(sd, maxSD)
	if sd <= 0 {
		p.exact++
		p.exactSum += v
		return
	}
	w := 1 / (sd * sd)
	p.w += w
	p.wv += w * v
}

func (p *precisionSum) empty() bool { return p.w == 0 && p.exact == 0 }

func (p *precisionSum) mean() (v, sd float64) {
	if p.exact > 0 {
		return p.exactSum / float64(p.exact), 0
	}
	return p.wv / p.w, 1 / math.Sqrt(p.w)
}

// learnGrid returns the counts an estimate has points at.
func learnGrid(s *CurveState, meas []measuredRate) []int {
	var g []int
	for p := 1; p <= s.Max; p *= 2 {
		g = append(g, p)
		if q := p + p/2; p >= 2 && q <= s.Max {
			g = append(g, q)
		}
	}
	g = append(g, s.Max)
	if s.Min >= 1 {
		g = append(g, s.Min)
	}
	for _, m := range meas {
		g = append(g, m.nodes)
	}
	if s.Prior != nil {
		for _, n := range s.Prior.Nodes {
			if n >= 1 && n <= s.Max {
				g = append(g, n)
			}
		}
	}
	slices.Sort(g)
	return slices.Compact(g)
}

// poolFalls pools adjacent points whose rate falls with n by less than two
// standard deviations (significance-limited pool-adjacent-violators, in log
// space, by precision). Points with rate 0 are left alone and separate
// blocks. Each point keeps its own SD.
func poolFalls(pts []CurvePoint, lv []float64) {
	type block struct {
		from, to int // points [from, to)
		w, wv    float64
	}
	mean := func(b block) float64 { return b.wv / b.w }
	var blocks []block
	flush := func() {
		for _, b := range blocks {
			v := mean(b)
			for i := b.from; i < b.to; i++ {
				pts[i].Rate = math.Exp(v)
			}
		}
		blocks = blocks[:0]
	}
	for i := range pts {
		if math.IsInf(lv[i], -1) {
			flush()
			continue
		}
		w := 1 / max(pts[i].SD*pts[i].SD, 1e-24)
		blocks = append(blocks, block{from: i, to: i + 1, w: w, wv: w * lv[i]})
		for len(blocks) >= 2 {
			a, b := blocks[len(blocks)-2], blocks[len(blocks)-1]
			fall := mean(a) - mean(b)
			if fall <= 0 || fall > 2*math.Sqrt(1/a.w+1/b.w) {
				break
			}
			blocks = blocks[:len(blocks)-1]
			blocks[len(blocks)-1] = block{from: a.from, to: b.to, w: a.w + b.w, wv: a.wv + b.wv}
		}
	}
	flush()
}

// fitPoint is one point the model is fitted to.
type fitPoint struct {
	n    int
	rate float64 // samples/s, > 0
	sd   float64 // relative standard deviation
}

// curveModel is a fitted τ(n) = θ·f(n) with its covariance.
type curveModel struct {
	theta [nModel]float64
	cov   [nModel][nModel]float64
	ok    bool
}

// nModel is the number of the model's parameters.
const nModel = 5

func curveFeatures(n float64) [nModel]float64 {
	return [nModel]float64{1, 1 - 1/n, math.Log2(n), n - 1, (n - 1) * (n - 1)}
}

// rate returns the model's T(n) = n/τ(n).
func (m curveModel) rate(n float64) float64 {
	f := curveFeatures(n)
	tau := 0.0
	for k := range f {
		tau += m.theta[k] * f[k]
	}
	return n / tau
}

// relVar returns the relative variance of T(n): var(τ)/τ².
func (m curveModel) relVar(n float64) float64 {
	f := curveFeatures(n)
	tau, v := 0.0, 0.0
	for i := range f {
		tau += m.theta[i] * f[i]
		for j := range f {
			v += f[i] * m.cov[i][j] * f[j]
		}
	}
	return max(v, 0) / (tau * tau)
}

// fitFloor is the least relative error a point is fitted with.
const fitFloor = 0.01

// fitCurveModel fits the model to pts (sorted by n); nref is the Trainer's
// largest count, which scales the prior on the overheads.
func fitCurveModel(pts []fitPoint, nref float64) curveModel {
	var m curveModel
	if len(pts) == 0 {
		return m
	}
	a0 := float64(pts[0].n) / pts[0].rate
	lam := [nModel]float64{0, a0, a0 / math.Log2(max(nref, 2)), a0 / max(nref-1, 1), a0 / (max(nref-1, 1) * max(nref-1, 1))}
	var h [nModel][nModel]float64
	var g [nModel]float64
	for _, p := range pts {
		tau := float64(p.n) / p.rate
		sd := max(p.sd, fitFloor) * tau
		w := 1 / (sd * sd)
		f := curveFeatures(float64(p.n))
		for i := range f {
			g[i] += w * f[i] * tau
			for j := range f {
				h[i][j] += w * f[i] * f[j]
			}
		}
	}
	for k := 1; k < nModel; k++ {
		h[k][k] += 1 / (lam[k] * lam[k])
	}
	// The non-negative optimum is the best feasible one among the
	// unconstrained optima on each support: a always free, each overhead
	// free or held at 0.
	best := math.Inf(1)
	var buf [nModel]int
	for mask := range 1 << (nModel - 1) {
		free := append(buf[:0], 0)
		for k := 1; k < nModel; k++ {
			if mask&(1<<(k-1)) != 0 {
				free = append(free, k)
			}
		}
		theta, ok := solveSPD(h, g, free)
		if !ok || theta[0] <= 0 {
			continue
		}
		feasible, obj := true, 0.0
		for _, k := range free {
			if theta[k] < 0 {
				feasible = false
			}
			obj -= g[k] * theta[k]
		}
		if feasible && obj < best {
			best, m.theta = obj, theta
		}
	}
	if math.IsInf(best, 1) {
		return m
	}
	inv, ok := invertSPD(h)
	if !ok {
		return m
	}
	// Scale the covariance up when the points disagree with the model more
	// than their errors say.
	// The prior's pseudo-observations count too: data far outside it (two
	// nodes much slower than one) widen the predictions.
	chi2 := 0.0
	for _, p := range pts {
		tau := float64(p.n) / p.rate
		sd := max(p.sd, fitFloor) * tau
		fit := float64(p.n) / m.rate(float64(p.n))
		chi2 += (tau - fit) * (tau - fit) / (sd * sd)
	}
	for k := 1; k < nModel; k++ {
		chi2 += (m.theta[k] / lam[k]) * (m.theta[k] / lam[k])
	}
	scale := 1.0
	if dof := len(pts) - 1; dof > 0 { // points + priors − parameters
		scale = max(1, chi2/float64(dof))
	}
	for i := range inv {
		for j := range inv[i] {
			m.cov[i][j] = inv[i][j] * scale
		}
	}
	m.ok = true
	return m
}

// solveSPD solves h[free,free]·x = g[free] by Cholesky; x is 0 elsewhere.
func solveSPD(h [nModel][nModel]float64, g [nModel]float64, free []int) ([nModel]float64, bool) {
	var x [nModel]float64
	k := len(free)
	var l [nModel][nModel]float64
	for i := range k {
		for j := 0; j <= i; j++ {
			s := h[free[i]][free[j]]
			for p := range j {
				s -= l[i][p] * l[j][p]
			}
			if i == j {
				if s <= 0 {
					return x, false
				}
				l[i][i] = math.Sqrt(s)
			} else {
				l[i][j] = s / l[j][j]
			}
		}
	}
	var y [nModel]float64
	for i := range k {
		s := g[free[i]]
		for p := range i {
			s -= l[i][p] * y[p]
		}
		y[i] = s / l[i][i]
	}
	for i := k - 1; i >= 0; i-- {
		s := y[i]
		for p := i + 1; p < k; p++ {
			s -= l[p][i] * x[free[p]]
		}
		x[free[i]] = s / l[i][i]
	}
	return x, true
}

// invertSPD inverts h, column by column.
func invertSPD(h [nModel][nModel]float64) ([nModel][nModel]float64, bool) {
	var inv [nModel][nModel]float64
	all := []int{0, 1, 2, 3, 4}
	for c := range nModel {
		var e [nModel]float64
		e[c] = 1
		x, ok := solveSPD(h, e, all)
		if !ok {
			return inv, false
		}
		for r := range nModel {
			inv[r][c] = x[r]
		}
	}
	return inv, true
}
