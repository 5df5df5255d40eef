package alloc

// The curve learner: each Trainer's scaling curve estimated from the
// throughput it achieved, so that a user need not know it.
//
// What it keeps (CurveState, per Trainer, JSON-serialisable and bounded):
// for each node count it ran at, the last Window samples of its measured
// rate, a sample being one or more consecutive intervals at that count
// pooled until it holds MinSample seconds; at most MaxCounts counts (the
// least recently observed is forgotten first); the user's curve, if any;
// the exploration ledger (learn_explore.go). Nothing else: every estimate is
// recomputed from it (a per-count summary is cached beside it, not saved),
// so a saved and reloaded state gives the same curve.
//
// What it assumes, stated once:
//   - An interval's measured rate is trusted only after Settle seconds since
//     the Trainer's last rescale (restart, rendezvous, reloading); an
//     interval that starts earlier counts for its settled part only, one
//     wholly inside is kept only while the count has nothing better, as a
//     loose lower bound (relative SD at least 0.5).
//   - At one count, the samples are draws of one true rate; the noise, the
//     same relative SD at every count, is learnt from the Trainer's own
//     samples. Stragglers, stalls and hiccups are outliers: first trimmed
//     within a count (3 noise scales about the weighted median), then vetted
//     against what the neighbouring counts predict (vet), which catches an
//     outlier even in a count measured once or twice.
//   - Between and beyond measured counts the model of learn_fit.go fills in;
//     a user-given curve is a prior, calibrated in level by the
//     measurements and weighed against them and the model by precision.

import (
	"fmt"
	"math"
	"slices"
)

// CurveLearner holds the settings of the curve estimator and of its priced
// exploration. The zero value is the default: a zero field means its
// default, a negative one (Settle, Drift, …) means 0.
type CurveLearner struct {
	// Settle is how long after a rescale a Trainer's throughput is not yet
	// representative, in seconds (default 30: torchrun restarts measured
	// here take 5–19 s, plus margin).
	Settle float64
	// MinSample is how many settled seconds of consecutive intervals at one
	// count are pooled into one sample (default 60), so that frequent
	// progress reports do not flood the window.
	MinSample float64
	// Window is how many samples are kept per count (default 8).
	Window int
	// MaxCounts is how many counts keep samples per Trainer (default 24).
	MaxCounts int
	// Noise is the relative standard deviation of one sample assumed until
	// the Trainer has measured its own (default 0.05).
	Noise float64
	// PriorSD is the relative standard deviation of a user-given curve at
	// each count, once its level is calibrated (default 0.25).
	PriorSD float64
	// Drift is the relative standard deviation the model's prediction gains
	// per octave of distance from the nearest measured count (default 0.05),
	// on top of the fit's own uncertainty: the model is not the truth.
	Drift float64

	// ProbeEvery: at most one probe in any ProbeEvery consecutive decisions
	// of one Trainer, none before its ProbeEvery-th (default 20).
	ProbeEvery int
	// ProbeInterval is how many seconds at least separate two probes of one
	// Trainer (default 1800).
	ProbeInterval float64
	// ProbeShare is the most probes may be of a Trainer's rescales,
	// counting the probe itself (default 0.05).
	ProbeShare float64
	// ProbeMinSD is the relative standard deviation below which a count is
	// known and never probed (default 0.02).
	ProbeMinSD float64

	// filled is set by settings: the defaults are in, and a 0 is a 0 (a
	// negative setting made it), not a default to fill in again.
	filled bool
}

// DefaultCurveLearner returns the default settings, every field filled in.
func DefaultCurveLearner() CurveLearner { return CurveLearner{}.settings() }

// Settings returns l with every zero field replaced by its default.
func (l CurveLearner) Settings() CurveLearner { return l.settings() }

func (l CurveLearner) settings() CurveLearner {
	if l.filled {
		return l
	}
	l.filled = true
	def := func(x *float64, d float64) {
		switch {
		case *x == 0 || math.IsNaN(*x):
			*x = d
		case *x < 0:
			*x = 0
		}
	}
	def(&l.Settle, 30)
	def(&l.MinSample, 60)
	def(&l.Noise, 0.05)
	def(&l.PriorSD, 0.25)
	def(&l.Drift, 0.05)
	def(&l.ProbeInterval, 1800)
	def(&l.ProbeShare, 0.05)
	def(&l.ProbeMinSD, 0.02)
	if l.Window <= 0 {
		l.Window = 8
	}
	if l.MaxCounts <= 0 {
		l.MaxCounts = 24
	}
	if l.ProbeEvery <= 0 {
		l.ProbeEvery = 20
	}
	return l
}

// CurveObs is what a Trainer achieved over one interval at a constant node
// count.
type CurveObs struct {
	Nodes    int     // nodes it ran on, ≥ 1
	Rate     float64 // measured samples per second over the interval, ≥ 0
	Duration float64 // length of the interval, seconds, > 0
	// Since is how long after the Trainer's last rescale (or start) the
	// interval began, seconds ≥ 0. Consecutive intervals of one run at one
	// count have Since equal to the previous interval's Since+Duration.
	Since float64
}

// CurveState is what the learner keeps about one Trainer. Create it with
// NewCurveState; change it only through CurveLearner.Observe and Decided.
// It is plain data, saved with the pool as JSON.
type CurveState struct {
	Min   int    `json:"min"`
	Max   int    `json:"max"`
	Prior *Curve `json:"prior,omitempty"` // the user's curve, if any

	Counts []CountSamples `json:"counts,omitempty"` // by increasing Nodes
	Seq    int            `json:"seq"`              // observations taken
	// LastNodes and LastEnd describe the last observation (its count and
	// Since+Duration), to pool the next one into the same sample.
	LastNodes int     `json:"last_nodes,omitempty"`
	LastEnd   float64 `json:"last_end,omitempty"`

	// The exploration ledger (see Decided).
	Decisions  int     `json:"decisions"`            // decisions taken while it was active
	Rescales   int     `json:"rescales"`             // of which changed its count while it ran
	Probes     int     `json:"probes"`               // of which were probes
	SinceProbe int     `json:"since_probe"`          // decisions recorded since the last probe (or ever)
	LastProbe  float64 `json:"last_probe,omitempty"` // caller's clock at the last probe
}

// CountSamples is the window of samples kept at one node count.
type CountSamples struct {
	Nodes int `json:"nodes"`
	Seq   int `json:"seq"` // CurveState.Seq when last observed
	// Rates and Seconds are the samples, oldest first: each one's measured
	// rate and the settled seconds it covers (its weight).
	Rates   []float64 `json:"rates"`
	Seconds []float64 `json:"seconds"`
	// Unsettled is set while every sample lies inside a settle window.
	Unsettled bool `json:"unsettled,omitempty"`

	memo countMemo // derived from the samples; not saved
}

// countMemo caches what Estimate derives from one count's samples alone,
// valid while seq equals the count's Seq (Observe changes Seq whenever it
// touches the count; a loaded state starts with none).
type countMemo struct {
	seq   int
	med   float64   // weighted median rate
	mad   float64   // 1.4826 × relative weighted median absolute deviation; −1 if not used
	logs  []float64 // log rate of each sample, −Inf for 0
	order []int     // samples by increasing rate
}

// summary returns c's memo, computing it if stale.
func (c *CountSamples) summary() *countMemo {
	m := &c.memo
	if m.seq == c.Seq && m.seq != 0 && len(m.logs) == len(c.Rates) {
		return m
	}
	n := len(c.Rates)
	m.seq = c.Seq
	m.logs = make([]float64, n)
	m.order = make([]int, n)
	for k, r := range c.Rates {
		m.logs[k] = math.Log(r) // −Inf for a zero rate
	}
	m.med = weightedMedian(c.Rates, c.Seconds, m.order)
	m.mad = -1
	if n >= 3 && !c.Unsettled && m.med > 0 {
		dev := make([]float64, n)
		idx := make([]int, n)
		for k, r := range c.Rates {
			dev[k] = math.Abs(r-m.med) / m.med
		}
		m.mad = 1.4826 * weightedMedian(dev, c.Seconds, idx)
	}
	return m
}

// NewCurveState returns an empty state for a Trainer with node bounds
// min..max and, if prior is not nil, a user-given curve (copied).
func NewCurveState(min, max int, prior *Curve) (*CurveState, error) {
	if min < 0 || max < 1 || min > max {
		return nil, fmt.Errorf("curve state: bounds %d..%d: want 0 ≤ min ≤ max, max ≥ 1", min, max)
	}
	s := &CurveState{Min: min, Max: max}
	if prior != nil {
		t := Trainer{ID: "prior", Min: min, Max: max, Curve: *prior}
		if err := t.validate(Throughput); err != nil {
			return nil, fmt.Errorf("curve state: prior: %w", err)
		}
		s.Prior = &Curve{
			Nodes:      slices.Clone(prior.Nodes),
			Throughput: slices.Clone(prior.Throughput),
			Metric:     slices.Clone(prior.Metric),
		}
	}
	return s, nil
}

// Observe adds one interval to the state. It rejects an observation that is
// not a finite rate over a positive duration at one node or more.
func (l CurveLearner) Observe(s *CurveState, o CurveObs) error {
	l = l.settings()
	switch {
	case o.Nodes < 1:
		return fmt.Errorf("curve observation: %d nodes: want ≥ 1", o.Nodes)
	case !finite(o.Rate) || o.Rate < 0:
		return fmt.Errorf("curve observation: rate %v: want a finite number ≥ 0", o.Rate)
	case !finite(o.Duration) || o.Duration <= 0:
		return fmt.Errorf("curve observation: duration %v: want a finite number > 0", o.Duration)
	case !finite(o.Since) || o.Since < 0:
		return fmt.Errorf("curve observation: since %v: want a finite number ≥ 0", o.Since)
	}
	end := o.Since + o.Duration
	settled := end - max(o.Since, l.Settle)
	unsettled := settled <= 0
	if unsettled {
		settled = o.Duration
	}
	continues := s.LastNodes == o.Nodes && math.Abs(o.Since-s.LastEnd) <= 1e-6*max(1, end)
	s.Seq++
	s.LastNodes, s.LastEnd = o.Nodes, end

	c := s.count(o.Nodes, l.MaxCounts)
	continues = continues && c.Seq == s.Seq-1 && len(c.Rates) > 0
	c.Seq = s.Seq
	switch {
	case unsettled && len(c.Rates) > 0 && !c.Unsettled:
		return nil // a settled sample is better than any unsettled one
	case !unsettled && c.Unsettled:
		c.Rates, c.Seconds, c.Unsettled = c.Rates[:0], c.Seconds[:0], false
		continues = false
	case len(c.Rates) == 0:
		c.Unsettled = unsettled
	}
	if last := len(c.Rates) - 1; continues && c.Seconds[last] < l.MinSample {
		w := c.Seconds[last] + settled
		c.Rates[last] += (o.Rate - c.Rates[last]) * (settled / w) // the weighted mean, without overflow
		c.Seconds[last] = w
		return nil
	}
	c.Rates = append(c.Rates, o.Rate)
	c.Seconds = append(c.Seconds, settled)
	if drop := len(c.Rates) - l.Window; drop > 0 {
		c.Rates = slices.Delete(c.Rates, 0, drop)
		c.Seconds = slices.Delete(c.Seconds, 0, drop)
	}
	return nil
}

// count returns the samples at n, adding them (and forgetting the least
// recently observed count if there are already limit) if absent.
func (s *CurveState) count(n, limit int) *CountSamples {
	i, found := slices.BinarySearchFunc(s.Counts, n, func(c CountSamples, n int) int { return c.Nodes - n })
	if found {
		return &s.Counts[i]
	}
	if len(s.Counts) >= limit {
		old := 0
		for j := range s.Counts {
			if s.Counts[j].Seq < s.Counts[old].Seq {
				old = j
			}
		}
		s.Counts = slices.Delete(s.Counts, old, old+1)
		if old < i {
			i--
		}
	}
	s.Counts = slices.Insert(s.Counts, i, CountSamples{Nodes: n})
	return &s.Counts[i]
}

// measuredRate is one count's robust aggregate.
type measuredRate struct {
	nodes     int
	rate      float64 // samples/s
	neff      float64 // effective number of samples kept
	seconds   float64 // settled seconds kept
	unsettled bool
	median    float64 // weighted median of the samples
	all       bool    // no sample was near the median: all were kept
	samples   *CountSamples
	shrunk    bool      // vetted: rate and sd are the posterior given the other counts
	sd        float64   // relative standard deviation, if shrunk
	plain     float64   // weighted mean of the good samples, if shrunk
	logs      []float64 // log of each sample's rate
}

// weightedMedian returns the weighted median of xs: the value at which the
// cumulative weight reaches half, the mean of the two neighbours on an
// exact tie. idx is scratch space of len(xs); it is left holding the
// indices of xs by increasing value.
func weightedMedian(xs, ws []float64, idx []int) float64 {
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int {
		switch {
		case xs[a] < xs[b]:
			return -1
		case xs[a] > xs[b]:
			return 1
		}
		return a - b
	})
	total := 0.0
	for _, w := range ws {
		total += w
	}
	cum := 0.0
	for k, i := range idx {
		cum += ws[i]
		if cum >= total/2*(1-1e-12) {
			if math.Abs(cum-total/2) <= 1e-12*total && k+1 < len(idx) {
				return (xs[i] + xs[idx[k+1]]) / 2
			}
			return xs[i]
		}
	}
	return xs[idx[len(idx)-1]]
}

// maxNoise caps the noise per sample: beyond a factor e the samples say
// nothing a standard deviation could describe.
const maxNoise = 1.0

// keep reports whether a sample r lies within 3 noise scales of med.
func keep(r, med, noise float64) bool {
	return math.Abs(r-med) <= max(3*noise*med, 1e-12*math.Abs(med))
}

// robust aggregates one count's samples, of weighted median med: the
// weighted mean of the samples within 3 noise scales of it.
func robust(c *CountSamples, med, noise float64, logs []float64) measuredRate {
	m := measuredRate{nodes: c.Nodes, unsettled: c.Unsettled, samples: c, median: med, logs: logs}
	if len(c.Rates) == 0 {
		return m
	}
	m.rate, m.seconds, m.neff = weightedMean(c, func(k int) bool { return keep(c.Rates[k], med, noise) })
	if m.seconds == 0 {
		// Every sample is as far from the median (an even number of
		// samples, far apart): which is right cannot be told, so all count.
		m.all = true
		m.rate, m.seconds, m.neff = weightedMean(c, func(int) bool { return true })
	}
	return m
}

// weightedMean returns the settled-time-weighted mean of the samples of c
// that keep selects, their seconds and their effective number (Kish's
// (Σw)²/Σw²); seconds is 0 when none is selected. Weights are scaled by the
// largest so that huge rates cannot overflow.
func weightedMean(c *CountSamples, keep func(int) bool) (rate, seconds, neff float64) {
	top := 0.0
	for k := range c.Rates {
		if keep(k) {
			top = max(top, c.Seconds[k])
		}
	}
	if top == 0 {
		return 0, 0, 0
	}
	var w, w2, wr float64
	for k, r := range c.Rates {
		if keep(k) {
			s := c.Seconds[k] / top
			w += s
			w2 += s * s
			wr += s * r
		}
	}
	return wr / w, w * top, w * w / w2
}

// measured returns the robust rate of every count with samples, by
// increasing count, and the Trainer's relative noise per sample: the pooled
// standard deviation of its samples' log rates about their counts' robust
// rates, once it has three degrees of freedom; before, that blended with
// the assumed l.Noise as three prior degrees of freedom; at most maxNoise.
// Samples are first trimmed with a robust scale: the median over counts of
// each count's relative median absolute deviation.
func (l CurveLearner) measured(s *CurveState) ([]measuredRate, float64) {
	meds := make([]float64, len(s.Counts))
	logs := make([][]float64, len(s.Counts))
	var mads []float64
	for i := range s.Counts {
		c := &s.Counts[i]
		if len(c.Rates) == 0 {
			continue
		}
		sum := c.summary()
		meds[i], logs[i] = sum.med, sum.logs
		if sum.mad >= 0 {
			mads = append(mads, sum.mad)
		}
	}
	trim := l.Noise
	if len(mads) > 0 {
		slices.Sort(mads)
		trim = mads[len(mads)/2]
	}
	var ss, dof float64
	for i := range s.Counts {
		c := &s.Counts[i]
		if len(c.Rates) < 2 || c.Unsettled {
			continue
		}
		m := robust(c, meds[i], trim, logs[i])
		if m.rate <= 0 || m.neff < 2-1e-9 {
			continue
		}
		// Unweighted variance of the kept samples' log rates.
		k, sum, sq, lr := 0.0, 0.0, 0.0, math.Log(m.rate)
		for j, r := range c.Rates {
			if r > 0 && (m.all || keep(r, m.median, trim)) {
				x := logs[i][j] - lr
				k++
				sum += x
				sq += x * x
			}
		}
		if k >= 2 {
			ss += max(0, sq-sum*sum/k)
			dof += k - 1
		}
	}
	noise := 0.0
	if dof >= 3 {
		noise = min(math.Sqrt(ss/dof), maxNoise)
	} else {
		const prior = 3
		noise = min(math.Sqrt((prior*l.Noise*l.Noise+ss)/(prior+dof)), maxNoise)
	}
	out := make([]measuredRate, 0, len(s.Counts))
	for i := range s.Counts {
		if len(s.Counts[i].Rates) > 0 {
			out = append(out, robust(&s.Counts[i], meds[i], noise, logs[i]))
		}
	}
	return out, noise
}

// Vetting a count against its neighbours. Within one count, trimming about
// the median rejects an outlier only when the other samples outvote it; a
// count with one or two samples cannot. So each count is also checked
// against what the other counts predict for it (ref ± refSD, log rate): a
// sample is an outlier with probability vetOutlier, spread evenly over
// vetSpread in log rate, and otherwise ~ N(true, noise²); the count's true
// log rate has the prior N(ref, refSD²). Which samples are good is the
// assignment of highest posterior; good samples lie together, so it is a
// run of the sorted samples (or none), and every run is tried. The count's
// rate is then the posterior given those: its good samples' log rates
// (each of variance noise²) and the prior, by precision. With many samples
// the prior hardly moves it; with one or two it pulls a noisy count towards
// its neighbours, as much as their roughness allows. A count none of whose
// samples is good is dropped: the model fills it in.
const (
	vetOutlier = 0.1
	vetSpread  = 4.6 // ln 100: two decades
)

// vet re-examines m (of a count with samples c) against ref ± refSD. It
// returns the new aggregate and false if every sample is an outlier.
func vet(m measuredRate, noise, ref, refSD float64) (measuredRate, bool) {
	c := m.samples
	if noise <= 0 || refSD <= 0 || c == nil || m.unsettled || m.rate <= 0 {
		return m, true
	}
	// The samples' log rates, sorted; a zero rate is always an outlier.
	type sample struct {
		x float64
		i int
	}
	xs := make([]sample, 0, len(c.Rates))
	for _, i := range c.summary().order {
		if c.Rates[i] > 0 {
			xs = append(xs, sample{m.logs[i], i})
		}
	}
	pp, pn := 1/(refSD*refSD), 1/(noise*noise)
	logGood := math.Log((1 - vetOutlier) / (noise * math.Sqrt(2*math.Pi)))
	logBad := math.Log(vetOutlier / vetSpread)
	// Score of the run [i, j) as the good samples: log prior and
	// likelihood at the posterior mode given them.
	best, bi, bj := math.Inf(-1), 0, 0
	for i := 0; i <= len(xs); i++ {
		sum, sq := 0.0, 0.0
		for j := i; j <= len(xs); j++ {
			if j > i {
				sum += xs[j-1].x
				sq += xs[j-1].x * xs[j-1].x
			} else if i > 0 {
				continue // the empty run is the same for every i
			}
			k := float64(j - i)
			theta := (ref*pp + sum*pn) / (pp + k*pn)
			d := theta - ref
			sse := sq - 2*theta*sum + k*theta*theta
			score := -d*d*pp/2 + k*logGood - sse*pn/2 + float64(len(c.Rates)-(j-i))*logBad
			if score > best {
				best, bi, bj = score, i, j
			}
		}
	}
	if bi == bj {
		return m, false
	}
	good := make([]bool, len(c.Rates))
	num, den := ref*pp, pp
	for _, s := range xs[bi:bj] {
		good[s.i] = true
		num += s.x * pn
		den += pn
	}
	out := measuredRate{nodes: m.nodes, samples: c, median: m.median, logs: m.logs, shrunk: true}
	out.plain, out.seconds, out.neff = weightedMean(c, func(i int) bool { return good[i] })
	out.rate, out.sd = math.Exp(num/den), 1/math.Sqrt(den)
	return out, true
}
