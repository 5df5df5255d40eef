package sim

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"
)

// TraceModel is a synthetic idle-node trace model fitted to the Summit trace of the
// BFTrainer paper (paper.md §4.1, data/README.md). DefaultTraceModel documents where each
// number comes from. Zero fields take the default's value.
//
// The model, on a time grid of Tick:
//   - Every node alternates idle fragments and busy gaps. An ordinary idle fragment is
//     lognormal(IdleMedian, IdleSigma) truncated to [IdleMin, IdleMax].
//   - All nodes whose idle fragment ends in the same tick are taken by one job: they share
//     one busy gap, lognormal with BusySigma truncated to [BusyMin, BusyMax], so they come
//     back together (joins come in groups, as on Summit). The busy median is not a
//     parameter: it is solved so that the long-run idle share is IdleFraction.
//   - Mass-idle episodes (a large job ending and the next starting minutes later, or a
//     drain for a full-machine job) arrive as a Poisson process, EpisodesPerDay: a share
//     U[EpisodeMinShare, EpisodeMaxShare] of the nodes, drawn among the busy ones, is
//     released at once, stays idle for one shared length, lognormal(EpisodeMedian,
//     EpisodeSigma) truncated to [IdleMin, EpisodeMax], and is then taken at once.
//
// The process starts BusyMax before Start with every node busy, so the trace begins in
// the steady state; its first event (at Start) joins the nodes idle then.
type TraceModel struct {
	Nodes    int           // nodes in the trace
	Start    time.Time     // time of the first event
	Duration time.Duration // trace length
	Tick     time.Duration // time grid: every transition happens on it

	IdleMedian time.Duration // median of the untruncated ordinary idle lognormal
	IdleSigma  float64       // σ of log(idle fragment)
	IdleMin    time.Duration // shortest idle fragment
	IdleMax    time.Duration // longest ordinary idle fragment

	BusySigma    float64       // σ of log(busy gap)
	BusyMin      time.Duration // shortest busy gap
	BusyMax      time.Duration // longest busy gap
	IdleFraction float64       // long-run share of node-time idle, episodes included

	EpisodesPerDay  float64       // mass-idle episodes per day; < 0 for none
	EpisodeMinShare float64       // smallest share of the nodes an episode releases
	EpisodeMaxShare float64       // largest share
	EpisodeMedian   time.Duration // median of the untruncated episode-length lognormal
	EpisodeSigma    float64       // σ of log(episode length)
	EpisodeMax      time.Duration // longest episode
}

// DefaultTraceModel is the Summit-fitted model, sized for a quick demo: 1,024 nodes, two
// days from 2024-01-01 00:00 UTC. Where the numbers come from (paper.md §4.1 and this
// package's own measurements of the Summit trace, [TraceStats], [Trace.IdleFragments],
// [Trace.BusyGaps]):
//   - Tick 30 s: the median time between Summit events.
//   - IdleMin 70 s: the shortest Summit idle fragment (shorter ones were filtered out).
//   - IdleMedian 420 s, IdleSigma 1.6, IdleMax 4 h: fitted by simulation (a grid over the
//     three, 4,734 nodes, 15 days, 6 seeds, least squares on log quantiles) so that all
//     generated fragments, episodes included, match Summit's p50 475 s, mean 1,192 s,
//     p75 1,397 s, p90 3,269 s and p95 4,723 s. The fit gives p50 ~505 s, mean ~1,194 s,
//     p75 ~1,275 s, p90 ~3,115 s, p95 ~4,870 s, p99 ~9,280 s (Summit 9,246 s; its tail is
//     short, p99.9 12,585 s, hence the 4 h cap). The 30 s grid cannot make Summit's many
//     70–90 s fragments (its p10 is 91 s, ours 120 s), which is why the median is a little high.
//   - BusySigma 2.17, BusyMin 10 s, BusyMax 48 h: the log-spread of Summit's 418,822 busy
//     gaps (log-mean 7.68, log-sd 2.17), its shortest busy gap, and about its p99.9 (41.5 h).
//   - IdleFraction 0.083: Summit's time-weighted mean, 391.4 idle of 4,734 nodes.
//   - EpisodesPerDay 4.8, shares U[0.3, 0.6], EpisodeMedian 6 min, EpisodeSigma 1.5,
//     EpisodeMax 3 h: Summit spent 41 % of its idle node-time above 1,500 idle nodes, in
//     71 such periods over 14.9 days (4.8 a day) of 1,500 to 2,800 nodes (0.3 to 0.6 of the
//     machine), median length 6 min, the longest 2.6 h; σ 1.5 gives those episodes the
//     same ~40 % share of idle node-time.
//
// With these, 1,024 nodes give an event every 35–45 s on average (Summit: 54 s mean,
// 30 s median, with 4.6 times the nodes), and the idle share of one two-day trace varies
// between seeds (about 6 to 12 %): a few episodes carry much of the idle time, as on Summit.
func DefaultTraceModel() TraceModel {
	return TraceModel{
		Nodes:    1024,
		Start:    time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC),
		Duration: 48 * time.Hour,
		Tick:     30 * time.Second,

		IdleMedian: 420 * time.Second,
		IdleSigma:  1.6,
		IdleMin:    70 * time.Second,
		IdleMax:    4 * time.Hour,

		BusySigma:    2.17,
		BusyMin:      10 * time.Second,
		BusyMax:      48 * time.Hour,
		IdleFraction: 0.083,

		EpisodesPerDay:  4.8,
		EpisodeMinShare: 0.3,
		EpisodeMaxShare: 0.6,
		EpisodeMedian:   6 * time.Minute,
		EpisodeSigma:    1.5,
		EpisodeMax:      3 * time.Hour,
	}
}

// withDefaults fills zero fields from DefaultTraceModel.
func (m TraceModel) withDefaults() TraceModel {
	d := DefaultTraceModel()
	fill := func(v *time.Duration, def time.Duration) {
		if *v <= 0 {
			*v = def
		}
	}
	fillF := func(v *float64, def float64) {
		if *v == 0 {
			*v = def
		}
	}
	if m.Nodes <= 0 {
		m.Nodes = d.Nodes
	}
	if m.Start.IsZero() {
		m.Start = d.Start
	}
	fill(&m.Duration, d.Duration)
	fill(&m.Tick, d.Tick)
	fill(&m.IdleMedian, d.IdleMedian)
	fillF(&m.IdleSigma, d.IdleSigma)
	fill(&m.IdleMin, d.IdleMin)
	fill(&m.IdleMax, d.IdleMax)
	fillF(&m.BusySigma, d.BusySigma)
	fill(&m.BusyMin, d.BusyMin)
	fill(&m.BusyMax, d.BusyMax)
	fillF(&m.IdleFraction, d.IdleFraction)
	fillF(&m.EpisodesPerDay, d.EpisodesPerDay)
	fillF(&m.EpisodeMinShare, d.EpisodeMinShare)
	fillF(&m.EpisodeMaxShare, d.EpisodeMaxShare)
	fill(&m.EpisodeMedian, d.EpisodeMedian)
	fillF(&m.EpisodeSigma, d.EpisodeSigma)
	fill(&m.EpisodeMax, d.EpisodeMax)
	m.Nodes = min(m.Nodes, maxTraceNodes)
	m.IdleFraction = min(max(m.IdleFraction, 1e-4), 0.99)
	m.EpisodeMinShare = min(max(m.EpisodeMinShare, 0), 1)
	m.EpisodeMaxShare = min(max(m.EpisodeMaxShare, m.EpisodeMinShare), 1)
	m.IdleMax = max(m.IdleMax, m.IdleMin)
	m.BusyMax = max(m.BusyMax, m.BusyMin)
	m.EpisodeMax = max(m.EpisodeMax, m.IdleMin)
	return m
}

// Second PCG words of the generators: the same seed gives independent streams to the
// trace, Philly and default-workload generators.
const (
	traceStream           = 0x7472616365     // "trace"
	phillyStream          = 0x7068696c6c79   // "philly"
	defaultWorkloadStream = 0x64656661756c74 // "default"
)

// truncLogNormal is a lognormal truncated to [lo, hi], sampled by inverting its CDF.
type truncLogNormal struct {
	mu, sigma, lo, hi float64
	plo, phi          float64 // CDF of the untruncated law at lo and hi
}

func newTruncLogNormal(median, sigma, lo, hi float64) truncLogNormal {
	d := truncLogNormal{mu: math.Log(median), sigma: sigma, lo: lo, hi: hi}
	d.plo, d.phi = normCDF((math.Log(lo)-d.mu)/sigma), normCDF((math.Log(hi)-d.mu)/sigma)
	return d
}

func (d truncLogNormal) sample(r *rand.Rand) float64 { return d.quantile(r.Float64()) }

// quantile is the p-quantile of the truncated law.
func (d truncLogNormal) quantile(p float64) float64 {
	u := d.plo + p*(d.phi-d.plo)
	x := math.Exp(d.mu + d.sigma*math.Sqrt2*math.Erfinv(2*u-1))
	return min(max(x, d.lo), d.hi)
}

// mean is E[X | lo ≤ X ≤ hi].
func (d truncLogNormal) mean() float64 {
	if d.phi-d.plo < 1e-300 {
		return min(max(math.Exp(d.mu), d.lo), d.hi)
	}
	s2 := d.sigma * d.sigma
	num := normCDF((math.Log(d.hi)-d.mu-s2)/d.sigma) - normCDF((math.Log(d.lo)-d.mu-s2)/d.sigma)
	return math.Exp(d.mu+s2/2) * num / (d.phi - d.plo)
}

func normCDF(z float64) float64 { return 0.5 * math.Erfc(-z/math.Sqrt2) }

// busyLaw returns the busy-gap law whose median makes the long-run idle share
// IdleFraction. Per node, time is ordinary idle (share f_o), episode idle (f_e) or busy
// (f_b = 1 − IdleFraction). Episodes release EpisodesPerDay × E[share] × Nodes busy nodes
// a day for E[episode] each, so f_e = EpisodesPerDay/86400 × E[share] × E[episode], and a
// busy node is released at rate λ = EpisodesPerDay/86400 × E[share] / f_b. A busy gap B is
// thus cut short by an exponential X of rate λ: busy phases last E[min(B, X)] and end in
// an ordinary idle fragment with probability E[exp(−λB)], which gives
// f_o / f_b = E[exp(−λB)] × E[idle] / E[min(B, X)]. The median is found by bisection,
// the expectations by quadrature over B's quantiles.
func (m TraceModel) busyLaw(idleLaw, epLaw truncLogNormal) truncLogNormal {
	fb := 1 - m.IdleFraction
	lambda, fe := 0.0, 0.0
	if m.EpisodesPerDay > 0 {
		rate := m.EpisodesPerDay / 86400 * (m.EpisodeMinShare + m.EpisodeMaxShare) / 2
		lambda, fe = rate/fb, rate*epLaw.mean()
	}
	fo := max(m.IdleFraction-fe, m.IdleFraction/10)
	want := idleLaw.mean() * fb / fo // = E[min(B, X)] / E[exp(−λB)]
	lo, hi := m.BusyMin.Seconds(), m.BusyMax.Seconds()
	ratio := func(median float64) float64 {
		d := newTruncLogNormal(median, m.BusySigma, lo, hi)
		const k = 2048
		var held, done float64
		for i := range k {
			b := d.quantile((float64(i) + 0.5) / k)
			if lambda == 0 {
				held += b
				done++
				continue
			}
			e := math.Exp(-lambda * b)
			held += (1 - e) / lambda
			done += e
		}
		return held / max(done, 1e-300)
	}
	a, b := math.Log(lo)-10*m.BusySigma, math.Log(hi)+10*m.BusySigma
	for range 100 {
		mid := (a + b) / 2
		if ratio(math.Exp(mid)) < want {
			a = mid
		} else {
			b = mid
		}
	}
	return newTruncLogNormal(math.Exp((a+b)/2), m.BusySigma, lo, hi)
}

// GenerateTrace draws a synthetic idle-node trace from model m (see TraceModel), fully
// determined by m and seed (math/rand/v2 PCG).
func GenerateTrace(m TraceModel, seed uint64) *Trace {
	m = m.withDefaults()
	r := rand.New(rand.NewPCG(seed, traceStream))
	tick := m.Tick.Seconds()
	toTicks := func(sec float64) int64 { return max(1, int64(math.Round(sec/tick))) }

	idleLaw := newTruncLogNormal(m.IdleMedian.Seconds(), m.IdleSigma, m.IdleMin.Seconds(), m.IdleMax.Seconds())
	epLaw := newTruncLogNormal(m.EpisodeMedian.Seconds(), m.EpisodeSigma, m.IdleMin.Seconds(), m.EpisodeMax.Seconds())
	busyLaw := m.busyLaw(idleLaw, epLaw)
	minIdle := int64(math.Ceil(m.IdleMin.Seconds() / tick))
	idleTicks := func(sec float64) int64 { return max(minIdle, toTicks(sec)) }

	warm := toTicks(m.BusyMax.Seconds())
	horizon := warm + int64(math.Ceil(m.Duration.Seconds()/tick))
	due := make([][]int32, horizon+1) // nodes whose state ends at each tick
	next := make([]int64, m.Nodes)    // tick at which each node's state ends
	idle := make([]bool, m.Nodes)
	schedule := func(n int32, at int64) {
		next[n] = at
		if at <= horizon {
			due[at] = append(due[at], n)
		}
	}
	for n := range int32(m.Nodes) {
		schedule(n, max(1, int64(r.Float64()*float64(toTicks(busyLaw.sample(r))))))
	}
	nextEpisode := int64(math.MaxInt64)
	drawEpisode := func(from int64) {
		if m.EpisodesPerDay > 0 {
			nextEpisode = from + toTicks(min(r.ExpFloat64()*86400/m.EpisodesPerDay, 1e15))
		}
	}
	drawEpisode(0)

	names := make([]string, m.Nodes)
	for i := range names {
		names[i] = fmt.Sprintf("n%05d", i)
	}
	t := &Trace{Nodes: names}
	d := newDeltaTracker(m.Nodes)
	var busy, leaving []int32
	for now := int64(1); now <= horizon; now++ {
		if now == nextEpisode {
			// Release a share of the busy nodes, drawn uniformly, for one shared length.
			busy = busy[:0]
			for n, ok := range idle {
				if !ok {
					busy = append(busy, int32(n))
				}
			}
			share := m.EpisodeMinShare + r.Float64()*(m.EpisodeMaxShare-m.EpisodeMinShare)
			k := min(len(busy), int(math.Round(share*float64(m.Nodes))))
			until := now + idleTicks(epLaw.sample(r))
			for i := range k {
				j := i + r.IntN(len(busy)-i)
				busy[i], busy[j] = busy[j], busy[i]
				n := busy[i]
				d.touch(n, false)
				idle[n] = true
				schedule(n, until)
			}
			drawEpisode(now)
		}
		leaving = leaving[:0]
		for _, n := range due[now] {
			if next[n] != now {
				continue // rescheduled by an episode
			}
			if idle[n] {
				leaving = append(leaving, n)
				continue
			}
			d.touch(n, false)
			idle[n] = true
			schedule(n, now+idleTicks(idleLaw.sample(r)))
		}
		due[now] = nil
		if len(leaving) > 0 {
			slices.Sort(leaving)
			until := now + toTicks(busyLaw.sample(r))
			for _, n := range leaving {
				d.touch(n, true)
				idle[n] = false
				schedule(n, until)
			}
		}
		switch {
		case now < warm:
			d.reset()
		case now == warm:
			e := Event{Time: m.Start}
			for n, ok := range idle {
				if ok {
					e.Joined = append(e.Joined, int32(n))
				}
			}
			t.Events = append(t.Events, e)
			d.reset()
		default:
			e := Event{Time: m.Start.Add(time.Duration(now-warm) * m.Tick)}
			if e.Joined, e.Left = d.flush(idle); len(e.Joined) > 0 || len(e.Left) > 0 {
				t.Events = append(t.Events, e)
			}
		}
	}
	t.Source = fmt.Sprintf("generated trace (%d nodes, %s, seed %d, %d events)", m.Nodes, m.Duration, seed, len(t.Events))
	return t
}

// phillyOptions sets how GeneratePhillyWorkload maps Philly jobs onto Trainers. Zero
// fields take the defaults given.
type phillyOptions struct {
	Start        time.Time     // submit time of the first job (default 2024-01-01 00:00 UTC)
	GPUsPerNode  int           // GPUs of one node of the curves' machine (default 6, Summit)
	Scale        int           // elastic headroom: Max is Scale × the job's node count, rounded up (default 4)
	MaxNodes     int           // cap on Max (default 64; never above the curve's last breakpoint)
	ArrivalScale float64       // factor on the drawn inter-arrival times (default 1)
	MinGPUTime   time.Duration // drop Philly jobs with less GPU time than this (default 0: keep all)
	Speedup      bool          // metric = speedup over one node (ps/ps[1]) instead of throughput
}

func (o phillyOptions) withDefaults() phillyOptions {
	if o.Start.IsZero() {
		o.Start = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	if o.GPUsPerNode <= 0 {
		o.GPUsPerNode = 6
	}
	if o.Scale <= 0 {
		o.Scale = 4
	}
	if o.MaxNodes <= 0 {
		o.MaxNodes = 64
	}
	if o.ArrivalScale <= 0 {
		o.ArrivalScale = 1
	}
	return o
}

// phillyJob is one usable row of the Philly trace.
type phillyJob struct {
	gpus    int
	gpuTime float64 // GPU-seconds
}

// generatePhillyWorkload draws n Trainers whose arrivals and sizes come from the Philly
// trace (columns timestamp,duration,num_gpus,gpu_time,cluster) and whose scaling curves
// come from measured models (model-scalability.csv: model,nodes,throughput_samples_per_s,
// …; nodes need not include 0, the curve starts at (0, 0)). It is fully determined by its
// inputs and seed (math/rand/v2 PCG). The rules:
//   - inter-arrival times are drawn independently from the Philly trace's (the gaps
//     between its submissions sorted by time), times ArrivalScale; the first job is
//     submitted at Start;
//   - each job draws one Philly job (num_gpus g, gpu_time) uniformly, and a model
//     uniformly among the curves;
//   - node bounds: the job used b = ⌈g / GPUsPerNode⌉ nodes; Min = 1 (every Trainer of
//     the paper's workloads can run on one node); Max = the smallest power of two
//     ≥ Scale·b, capped at MaxNodes and at the curve's last breakpoint;
//   - samples: the Philly job's GPU-seconds at the model's per-GPU throughput on one node,
//     gpu_time × P(1) / GPUsPerNode: the work it did, in this model's samples;
//   - rescale costs RUp ~ U[17, 19] s, RDown ~ U[11, 13] s, as in the paper's data;
//   - IDs are P00000-<model>, P00001-<model>, … in submit order.
//
// Philly rows that cannot be parsed are an error naming the line; rows with no GPU or no
// GPU time, or under MinGPUTime, are left out.
func generatePhillyWorkload(philly io.Reader, curves io.Reader, n int, seed uint64, opts phillyOptions) ([]Job, error) {
	opts = opts.withDefaults()
	if n < 0 {
		return nil, fmt.Errorf("philly workload: negative job count %d", n)
	}
	pool, gaps, err := readPhilly(philly, opts.MinGPUTime.Seconds())
	if err != nil {
		return nil, fmt.Errorf("philly workload: %w", err)
	}
	models, err := readCurves(curves)
	if err != nil {
		return nil, fmt.Errorf("philly workload: curves: %w", err)
	}
	r := rand.New(rand.NewPCG(seed, phillyStream))
	jobs := make([]Job, 0, n)
	at := opts.Start.UTC()
	for i := range n {
		if i > 0 && len(gaps) > 0 {
			at = at.Add(time.Duration(gaps[r.IntN(len(gaps))] * opts.ArrivalScale * float64(time.Second)))
		}
		pj := pool[r.IntN(len(pool))]
		m := models[r.IntN(len(models))]
		base := (pj.gpus + opts.GPUsPerNode - 1) / opts.GPUsPerNode
		maxN := min(nextPowerOfTwo(opts.Scale*base), opts.MaxNodes, m.nodes[len(m.nodes)-1])
		j := m.job(fmt.Sprintf("P%05d-%s", i, m.name), at, opts.Speedup)
		j.Max = max(maxN, 1)
		j.Samples = pj.gpuTime * m.perNode() / float64(opts.GPUsPerNode)
		j.RUp, j.RDown = 17+2*r.Float64(), 11+2*r.Float64()
		jobs = append(jobs, j)
	}
	return jobs, nil
}

func nextPowerOfTwo(x int) int {
	p := 1
	for p < x && p < 1<<30 {
		p *= 2
	}
	return p
}

// readPhilly returns the usable jobs and the inter-arrival gaps in seconds.
func readPhilly(r io.Reader, minGPUTime float64) ([]phillyJob, []float64, error) {
	r, err := maybeGunzip(r)
	if err != nil {
		return nil, nil, err
	}
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	head, err := cr.Read()
	if err != nil {
		return nil, nil, fmt.Errorf("header: %w", err)
	}
	col := map[string]int{}
	for i, h := range head {
		col[strings.TrimSpace(h)] = i
	}
	for _, c := range []string{"timestamp", "num_gpus", "gpu_time"} {
		if _, ok := col[c]; !ok {
			return nil, nil, fmt.Errorf("line 1: no column %q", c)
		}
	}
	var (
		jobs  []phillyJob
		times []int64
	)
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, nil, err
		}
		line, _ := cr.FieldPos(0)
		ts, err := parseTraceTime(strings.TrimSpace(rec[col["timestamp"]]))
		if err != nil {
			return nil, nil, fmt.Errorf("line %d, column %q: %w", line, "timestamp", err)
		}
		g, err := strconv.ParseFloat(strings.TrimSpace(rec[col["num_gpus"]]), 64)
		if err != nil || math.IsNaN(g) {
			return nil, nil, fmt.Errorf("line %d, column %q: not a number", line, "num_gpus")
		}
		gt, err := strconv.ParseFloat(strings.TrimSpace(rec[col["gpu_time"]]), 64)
		if err != nil || math.IsNaN(gt) || math.IsInf(gt, 0) {
			return nil, nil, fmt.Errorf("line %d, column %q: not a finite number", line, "gpu_time")
		}
		times = append(times, ts.Unix())
		if g < 1 || g > 1<<20 || gt <= 0 || gt < minGPUTime {
			continue
		}
		jobs = append(jobs, phillyJob{gpus: int(g), gpuTime: gt})
	}
	if len(jobs) == 0 {
		return nil, nil, fmt.Errorf("no usable job")
	}
	slices.Sort(times)
	gaps := make([]float64, 0, len(times))
	for i := 1; i < len(times); i++ {
		gaps = append(gaps, float64(times[i]-times[i-1]))
	}
	return jobs, gaps, nil
}

// modelCurve is one model's measured throughput curve.
type modelCurve struct {
	name       string
	nodes      []int     // from 0
	throughput []float64 // samples/s, 0 at 0 nodes
}

// perNode is the throughput on one node (the first breakpoint ≥ 1 interpolated at 1).
func (c modelCurve) perNode() float64 { return jobCurveAt(c.nodes, c.throughput, 1) }

// job builds a Trainer on this curve with the paper's fixed fields (Min 1, Max the last
// breakpoint, 1.3e8 samples, 18 s / 12 s rescale costs); callers override what they draw.
func (c modelCurve) job(id string, submit time.Time, speedup bool) Job {
	j := Job{ID: id, Model: c.name, Submit: submit, RUp: 18, RDown: 12, Min: 1,
		Max: c.nodes[len(c.nodes)-1], Samples: paperSamples,
		Nodes: slices.Clone(c.nodes), Throughput: slices.Clone(c.throughput)}
	j.Metric = slices.Clone(c.throughput)
	if speedup {
		one := c.perNode()
		for i := range j.Metric {
			j.Metric[i] /= one
		}
	}
	return j
}

// paperSamples is the work of every Trainer of the paper's workloads: 1.3e8 samples,
// about 100 ImageNet epochs.
const paperSamples = 1.3e8

// readCurves reads model,nodes,throughput_samples_per_s rows (extra columns ignored),
// grouping rows by model in first-appearance order.
func readCurves(r io.Reader) ([]modelCurve, error) {
	r, err := maybeGunzip(r)
	if err != nil {
		return nil, err
	}
	cr := csv.NewReader(r)
	recs, err := cr.ReadAll()
	if err != nil {
		return nil, err
	}
	if len(recs) < 2 {
		return nil, fmt.Errorf("no rows")
	}
	col := map[string]int{}
	for i, h := range recs[0] {
		col[strings.TrimSpace(h)] = i
	}
	for _, c := range []string{"model", "nodes", "throughput_samples_per_s"} {
		if _, ok := col[c]; !ok {
			return nil, fmt.Errorf("line 1: no column %q", c)
		}
	}
	var out []modelCurve
	index := map[string]int{}
	for k, rec := range recs[1:] {
		line := k + 2
		name := strings.TrimSpace(rec[col["model"]])
		nodes, err := strconv.Atoi(strings.TrimSpace(rec[col["nodes"]]))
		if err != nil || nodes < 1 || nodes > maxTraceNodes {
			return nil, fmt.Errorf("line %d, column %q: not a node count", line, "nodes")
		}
		tp, err := strconv.ParseFloat(strings.TrimSpace(rec[col["throughput_samples_per_s"]]), 64)
		if err != nil || math.IsNaN(tp) || math.IsInf(tp, 0) || tp < 0 {
			return nil, fmt.Errorf("line %d, column %q: not a throughput", line, "throughput_samples_per_s")
		}
		i, ok := index[name]
		if !ok {
			i = len(out)
			index[name] = i
			out = append(out, modelCurve{name: name, nodes: []int{0}, throughput: []float64{0}})
		}
		c := &out[i]
		if nodes <= c.nodes[len(c.nodes)-1] {
			return nil, fmt.Errorf("line %d, column %q: %d not above %d for %s", line, "nodes", nodes, c.nodes[len(c.nodes)-1], name)
		}
		c.nodes = append(c.nodes, nodes)
		c.throughput = append(c.throughput, tp)
	}
	for _, c := range out {
		if c.perNode() <= 0 {
			return nil, fmt.Errorf("model %s: no throughput on one node", c.name)
		}
	}
	return out, nil
}

// paperCurves are the seven measured Summit scaling curves of the paper's ImageNet
// workloads (paper.md §4.2, data/workloads/model-scalability.csv): images/s on 1, 2, 4,
// 8, 16, 32 and 64 nodes.
var paperCurves = [...]struct {
	name       string
	throughput [7]float64
}{
	{"AlexNet", [7]float64{7115.3, 13071.7, 21066.1, 40484.9, 74002.9, 130762.0, 202135.4}},
	{"vgg16", [7]float64{1193.3, 2389.2, 4691.7, 9257.9, 18348.9, 36208.5, 70151.7}},
	{"resnet18", [7]float64{5218.8, 10582.5, 20436.0, 39584.0, 78023.8, 144762.5, 262723.0}},
	{"DenseNet", [7]float64{989.9, 1952.5, 3849.8, 7608.1, 14993.2, 28812.2, 57773.9}},
	{"mnasnet1", [7]float64{3245.7, 6001.9, 11489.3, 23075.6, 43899.7, 83474.2, 160493.6}},
	{"shufflenet", [7]float64{2831.0, 5259.0, 9988.0, 20379.2, 38895.3, 74125.1, 145081.5}},
	{"mobilenet", [7]float64{3039.9, 5893.0, 11386.0, 22024.8, 42488.4, 82268.3, 155213.8}},
}

// paperBreakpoints are the node counts of paperCurves, with the (0, 0) point first.
var paperBreakpoints = [...]int{0, 1, 2, 4, 8, 16, 32, 64}

// DefaultWorkload is a built-in workload that needs no data file, for demos: n Trainers,
// one every 36 s from start (the paper's 1000-job spacing), each on one of the seven
// measured curves of paper.md §4.2 drawn uniformly, maximising throughput, with the
// paper's other fields: Min 1, Max 64, 1.3e8 samples, RUp ~ U[17, 19] s, RDown ~ U[11, 13] s.
// IDs are D00000-<model>, …. Fully determined by n, start and seed (math/rand/v2 PCG).
func DefaultWorkload(n int, start time.Time, seed uint64) []Job {
	r := rand.New(rand.NewPCG(seed, defaultWorkloadStream))
	jobs := make([]Job, 0, max(n, 0))
	for i := range n {
		pc := paperCurves[r.IntN(len(paperCurves))]
		c := modelCurve{name: pc.name, nodes: paperBreakpoints[:], throughput: append([]float64{0}, pc.throughput[:]...)}
		j := c.job(fmt.Sprintf("D%05d-%s", i, pc.name), start.Add(time.Duration(i)*36*time.Second).UTC(), false)
		j.RUp, j.RDown = 17+2*r.Float64(), 11+2*r.Float64()
		jobs = append(jobs, j)
	}
	return jobs
}
