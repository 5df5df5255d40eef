package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/alloc/milp"
	"github.com/bftrainer/bftrainer/pool"
)

// Options configure a Replay. The zero value replays with the exact solver, bftrainer's
// own semantics, T_fwd = 10 s, 10 Trainers at once and the workload's objective.
type Options struct {
	// Solver decides at every event; nil means alloc.Exact.
	Solver alloc.Solver
	// Semantics selects the reference replayer's rules (alloc.Reference: its step limit,
	// its node order and its initial map, see Replay) or ours (alloc.Default).
	Semantics alloc.Semantics
	// TFwd is the horizon in seconds a decision is worth over (the fixed-horizon
	// allocators'); 0 means 10 (the reference's -Tfwd default), < 0 is an error.
	TFwd float64
	// MaxTrainers is how many Trainers run at once; 0 means 10 (the reference's -maxJ),
	// < 0 is an error.
	MaxTrainers int
	// AutoAdmit admits by value instead of up to MaxTrainers (pool.Config.AutoAdmit);
	// alloc.Default semantics only.
	AutoAdmit bool
	// Objective is what the solver maximises; "" means the workload's own (alloc.Metric
	// when a Job's Metric differs from its Throughput, as in the speedup workload).
	Objective alloc.Objective
	// Progress, if set, is called after every event with the events replayed so far and
	// the trace's event count (a replay that ends early reports done = total last).
	Progress func(done, total int)
	// StepLog, if set, receives one CSV row per event, as the reference's step-logs.csv
	// (output.go documents the columns).
	StepLog io.Writer
	// Timeline is how many samples of node use to keep for the plot (Result.Timeline);
	// 0 keeps none.
	Timeline int
	// Plan gives the pool the scheduler's plan the trace holds (Trace.Plans: an EASY
	// re-simulation's reservation for the head of its queue) before every decision, as
	// the live reconciler gives it squeue's: Trainers move off planned nodes within
	// their lead, and the allocator sees planned nodes as short horizons. The replay
	// also decides at each moment a lead begins (pool.NextMove).
	Plan bool
	// PlanHorizon is which planned nodes the allocator prices with a short
	// horizon (pool.Config.PlanHorizon).
	PlanHorizon pool.PlanHorizon
	// KillLoss is progress a kill loses beyond R_down (pool.Config.KillLoss):
	// a stated model input; 0 is the paper's model.
	KillLoss time.Duration
	// OnChange, if set, is given every change the pool records, in order
	// (diagnostics: SurpriseExplainer.Observe).
	OnChange func(pool.Change)
	// Check verifies every plan with alloc.Check before committing it (tests; slower);
	// a plan that fails, or any solver error, then ends the replay with that error.
	Check bool
	// Curves is what the allocator knows of the curves (curves.go); "" is
	// pool.CurvesGiven.
	Curves pool.CurveMode
	// CurveNoise is the relative standard deviation of each measured rate with
	// pool.CurvesLearned; 0 means DefaultCurveNoise, < 0 none. CurveSeed seeds it.
	CurveNoise float64
	CurveSeed  uint64
	// Models gives each Trainer its job's model name (Job.Model), so that a
	// learning Trainer is planned on the curve of the others of its model
	// (pool/models.go); off, the Trainers have none, as before.
	Models bool
}

// DefaultTFwd and DefaultMaxTrainers are the reference replayer's defaults (-Tfwd, -maxJ).
const (
	DefaultTFwd        = 10.0
	DefaultMaxTrainers = 10
)

func (o Options) withDefaults(jobs []Job) Options {
	if o.Solver == nil {
		o.Solver = alloc.Exact{}
	}
	if o.TFwd == 0 {
		o.TFwd = DefaultTFwd
	}
	if o.MaxTrainers == 0 {
		o.MaxTrainers = DefaultMaxTrainers
	}
	if o.Objective == "" {
		o.Objective = workloadObjective(jobs)
	}
	return o
}

// workloadObjective is the objective a workload asks for: alloc.Metric when any Job's
// Metric (the file's os column) differs from its Throughput (ps) — the speedup workload,
// os = ps/ps[1] — and alloc.Throughput otherwise.
func workloadObjective(jobs []Job) alloc.Objective {
	for _, j := range jobs {
		if len(j.Metric) != len(j.Throughput) {
			return alloc.Metric
		}
		for i, m := range j.Metric {
			if math.Abs(m-j.Throughput[i]) > 1e-9*math.Max(1, math.Abs(j.Throughput[i])) {
				return alloc.Metric
			}
		}
	}
	return alloc.Throughput
}

// StartEvent is the event a replay of jobs on t should start from: the last event at or
// before the first submit time (0 if none is). On the Summit trace with the paper's
// workloads (first submit 2021-02-10 20:21:15) it is 1000, the reference replayer's
// fixed starting row.
func StartEvent(t *Trace, jobs []Job) int {
	if len(jobs) == 0 || len(t.Events) == 0 {
		return 0
	}
	first := jobs[0].Submit
	for _, j := range jobs[1:] {
		if j.Submit.Before(first) {
			first = j.Submit
		}
	}
	i := sort.Search(len(t.Events), func(i int) bool { return t.Events[i].Time.After(first) })
	return max(i-1, 0)
}

// errEmptyTrace is returned by Replay for a trace without events.
var errEmptyTrace = errors.New("trace has no events")

// Replay drives pool.Pool and opt.Solver — the code the live sidecar runs — over the
// trace tr with the Trainers jobs, in memory, and measures what the idle pool yields.
//
// The trace is replayed from its first event, t0 (window it first: Trace.Window with
// StartEvent or the reference's row 1000). At t0 every node the first event joins is
// idle. Every job is submitted at t0 and becomes eligible at its Submit time; admission
// is first come first served, in workload order, up to MaxTrainers. Nodes are ordered by
// the trace's column order (alloc.Node.Order = column index) among nodes idle since the
// same instant.
//
// With alloc.Reference semantics the start follows the reference replayer
// (BFTrainer-replay.py, notes §3.1): the jobs with Submit ≤ t0 are admitted, in file
// order up to MaxTrainers, and given the initial map of gen_rand_job_map with its random
// draw replaced by a deterministic deal — the idle nodes, in column order, are dealt
// round robin to the admitted jobs (node k to job k mod J, the map a uniform draw gives
// on average); then a job below its minimum holds nothing, and a job above its maximum
// gives up its first nodes until it holds its maximum. With one job at t0, as in every
// shipped workload, this is exactly the reference's map: that job keeps the last Max of
// the idle nodes. Each job then runs at P(n) and owes a start-up cost of P(n)·R_up
// samples, charged over the first interval, and no decision is taken at t0.
//
// With alloc.Default semantics nothing is pre-assigned: the pool starts as the live
// sidecar does, empty, admits the eligible jobs at t0 and decides then, and a Trainer
// starting from 0 nodes pays nothing (as every later start does in both semantics).
//
// Every later event is one pool.Step — progress, reclaims charged R_down·rate once per
// Trainer, finishes with the overshoot trimmed, joins, admission — then one decision,
// pool.Decide, as the live reconciler makes it: with no Trainer running nothing is
// decided; with no idle node the solver is not called and every running Trainer simply
// holds nothing, as in the reference; otherwise the solver's plan is committed (a plan
// that is not optimal keeps the nodes and books nothing). The replay stops at the event
// where no Trainer is running or queued, or at the end of the trace (the unfinished
// Trainers are then reported as such).
//
// A solver error keeps the allocation, as it does live, and the replay goes on: the
// Summary counts such decisions (SolverErrors) and keeps the first error. A solver
// whose program is not installed (milp.ErrBackendAbsent) is no passing failure: it
// would fail at every decision and the replay would measure nothing, so it ends the
// replay with that error at once. ctx is checked at every event.
func Replay(ctx context.Context, tr *Trace, jobs []Job, opt Options) (*Result, error) {
	if tr == nil || len(tr.Events) == 0 {
		return nil, fmt.Errorf("replay: %w", errEmptyTrace)
	}
	if !(opt.TFwd >= 0) || math.IsInf(opt.TFwd, 1) {
		return nil, fmt.Errorf("replay: T_fwd %v: want a number of seconds > 0 (0: the default)", opt.TFwd)
	}
	if opt.MaxTrainers < 0 {
		return nil, fmt.Errorf("replay: max trainers %d: want a positive number (0: the default)", opt.MaxTrainers)
	}
	if opt.AutoAdmit && opt.Semantics == alloc.Reference {
		return nil, errors.New("replay: admission by value needs the default semantics (the reference admits up to maxJ)")
	}
	if _, err := pool.ParseCurveMode(string(opt.Curves)); err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	opt = opt.withDefaults(jobs)
	if opt.Objective == alloc.Metric && opt.Curves != "" && opt.Curves != pool.CurvesGiven {
		return nil, fmt.Errorf("replay: curves %s: the metric objective reads the user's own values, which cannot be learned or assumed (use the speedup objective)", opt.Curves)
	}
	r, err := newReplayer(tr, jobs, opt)
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	if err := r.run(ctx); err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	return r.result(), nil
}

// replayer is one Replay's state.
type replayer struct {
	tr    *Trace
	jobs  []Job
	opt   Options
	p     *pool.Pool
	t0    time.Time
	byID  map[string]int // job ID → index in jobs
	done  []*pool.Trainer
	steps *stepWriter
	tl    *timelineRecorder
	meas  *measurer // learned curves: the replay's measurements

	events int // trace rows replayed, t0 included
	midway int // moments between events the pool advanced to (completions, submits)
	solves []time.Duration
	kept   int // decisions that kept the allocation (solver not optimal, or failed)

	failed   int    // decisions whose solver failed
	firstErr string // the first of those failures
	initial  float64
	wall     time.Duration
	start    time.Time

	joinBuf  []pool.JoinNode
	leaveBuf []string
	planIdx  int // the plan in effect (Trace.Plans), for setPlan
}

func newReplayer(tr *Trace, jobs []Job, opt Options) (*replayer, error) {
	r := &replayer{tr: tr, jobs: jobs, opt: opt, t0: tr.Events[0].Time,
		byID: make(map[string]int, len(jobs)), done: make([]*pool.Trainer, len(jobs))}
	for i, j := range jobs {
		if _, dup := r.byID[j.ID]; dup {
			return nil, fmt.Errorf("job %q listed twice", j.ID)
		}
		r.byID[j.ID] = i
	}
	if opt.StepLog != nil {
		r.steps = newStepWriter(opt.StepLog)
	}
	if opt.Timeline > 0 {
		r.tl = &timelineRecorder{}
	}
	return r, nil
}

// spec turns a Job into what the pool takes.
func (r *replayer) spec(j *Job) pool.Spec {
	c := alloc.Curve{Nodes: j.Nodes, Throughput: j.Throughput}
	if r.opt.Objective == alloc.Metric {
		c.Metric = j.Metric
	}
	s := pool.Spec{ID: j.ID, Min: j.Min, Max: j.Max, Curve: c, RUp: j.RUp, RDown: j.RDown,
		Samples: j.Samples, Submit: j.Submit}
	if r.opt.Models {
		s.Model = j.Model
	}
	return s
}

// initialState is the pool at t0: the first event's nodes idle since t0, every job
// queued, and under Reference semantics the admitted jobs with their initial map.
func (r *replayer) initialState() (pool.State, error) {
	first := r.tr.Events[0]
	st := pool.State{Now: r.t0, Nodes: make([]pool.Node, 0, len(first.Joined))}
	idle := slices.Clone(first.Joined)
	slices.Sort(idle) // column order
	for _, i := range idle {
		if int(i) < 0 || int(i) >= len(r.tr.Nodes) {
			return st, fmt.Errorf("event 0: node %d out of range", i)
		}
		st.Nodes = append(st.Nodes, pool.Node{Name: r.tr.Nodes[i], State: pool.Idle, Since: r.t0, Order: int(i)})
	}
	var admitted []int
	if r.opt.Semantics == alloc.Reference {
		for i := range r.jobs {
			if len(admitted) < r.opt.MaxTrainers && !r.jobs[i].Submit.After(r.t0) {
				admitted = append(admitted, i)
			}
		}
	}
	held := initialMap(len(st.Nodes), r.jobs, admitted)
	taken := make([]bool, len(r.jobs))
	for k, ji := range admitted {
		j := &r.jobs[ji]
		t := pool.Trainer{Spec: r.spec(j), Status: pool.Running, Admitted: r.t0}
		for _, n := range held[k] {
			t.Nodes = append(t.Nodes, alloc.Node{Name: st.Nodes[n].Name})
		}
		t.Rate = t.Curve.SamplesPerSecond(len(t.Nodes), j.Min)
		// The reference's start-up cost: charged over the first interval, but never
		// booked by a decision, so its step log (and E_ovh) leaves it out; the
		// summary reports it on its own.
		t.PendingCost = t.Rate * j.RUp
		r.initial += t.PendingCost
		st.Trainers = append(st.Trainers, t)
		taken[ji] = true
	}
	for i := range r.jobs {
		if !taken[i] {
			st.Trainers = append(st.Trainers, pool.Trainer{Spec: r.spec(&r.jobs[i]), Status: pool.Queued})
		}
	}
	return st, nil
}

// initialMap is the reference's gen_rand_job_map made deterministic: n idle nodes (by
// position, column order) dealt round robin to the admitted jobs, then a job below its
// minimum cleared and a job above its maximum stripped of its first nodes. It returns
// each admitted job's node positions, ascending.
func initialMap(n int, jobs []Job, admitted []int) [][]int {
	out := make([][]int, len(admitted))
	if len(admitted) == 0 {
		return out
	}
	for k := range n {
		out[k%len(admitted)] = append(out[k%len(admitted)], k)
	}
	for k, ji := range admitted {
		j := &jobs[ji]
		hi := j.Max
		if last := j.Nodes[len(j.Nodes)-1]; last < hi {
			hi = last // the curve ends there: the solver could not hold more
		}
		switch got := len(out[k]); {
		case got < j.Min:
			out[k] = nil
		case got > hi:
			out[k] = out[k][got-hi:]
		}
	}
	return out
}

func (r *replayer) run(ctx context.Context) error {
	r.start = time.Now()
	st, err := r.initialState()
	if err != nil {
		return err
	}
	cfg := pool.Config{MaxTrainers: r.opt.MaxTrainers, AutoAdmit: r.opt.AutoAdmit, TFwd: r.opt.TFwd,
		Objective: r.opt.Objective, Semantics: r.opt.Semantics, Curves: r.opt.Curves, PlanHorizon: r.opt.PlanHorizon, KillLoss: r.opt.KillLoss}
	p, err := pool.New(cfg, st)
	if err != nil {
		return err
	}
	r.p = p
	if r.opt.Curves == pool.CurvesLearned {
		r.meas = newMeasurer(p, r.opt)
	}
	if r.steps != nil {
		if err := r.steps.header(); err != nil {
			return err
		}
	}
	r.events = 1
	first := r.tr.Events[0]
	row := stepRow{At: r.t0, Event: 0, Joined: len(first.Joined)}
	if r.opt.Semantics != alloc.Reference {
		// Our pool starts empty and decides at once; the reference does not decide at
		// t0 (its initial map stands in for a decision) and logs nothing for it.
		p.Admit()
		r.harvest()
		if row.ReScost, err = r.decide(ctx, 0); err != nil {
			return err
		}
		if err := r.log(row); err != nil {
			return err
		}
	}
	r.record()
	total := len(r.tr.Events)
	r.progress(1, total)
	for i := 1; i < total; i++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		ev := &r.tr.Events[i]
		before := p.Totals()
		between, err := r.between(ctx, ev.Time, i)
		if err != nil {
			return err
		}
		if len(p.Running()) == 0 && len(p.Queued()) == 0 {
			// The last Trainer finished before this event: the replay ends then.
			after := p.Totals()
			row := stepRow{At: p.Now(), Event: i, Thr: after.Samples - before.Samples, ReScost: between}
			if err := r.log(row); err != nil {
				return err
			}
			break
		}
		r.meas.observe(ev.Time)
		p.Step(r.event(ev))
		r.setPlan(ev.Time)
		r.harvest()
		r.events++
		after := p.Totals()
		row := stepRow{At: ev.Time, Event: i, Left: len(ev.Left), Joined: len(ev.Joined),
			Thr: after.Samples - before.Samples, PreCost: after.PreemptLoss - before.PreemptLoss,
			Preempted: after.Preemptions - before.Preemptions}
		if len(p.Running()) == 0 && len(p.Queued()) == 0 {
			if err := r.log(row); err != nil {
				return err
			}
			r.record()
			break
		}
		if row.ReScost, err = r.decide(ctx, i); err != nil {
			return err
		}
		row.ReScost += between
		if err := r.log(row); err != nil {
			return err
		}
		r.record()
		r.progress(i+1, total)
	}
	r.progress(total, total)
	if r.steps != nil {
		if err := r.steps.flush(); err != nil {
			return err
		}
	}
	r.wall = time.Since(r.start)
	return nil
}

func (r *replayer) progress(done, total int) {
	if r.opt.Progress != nil {
		r.opt.Progress(done, total)
	}
}

// event converts a trace event into a pool event, reusing buffers: the pool copies what
// it keeps.
func (r *replayer) event(ev *Event) pool.Event {
	r.joinBuf = r.joinBuf[:0]
	for _, i := range ev.Joined {
		r.joinBuf = append(r.joinBuf, pool.JoinNode{Name: r.tr.Nodes[i], Order: int(i)})
	}
	r.leaveBuf = r.leaveBuf[:0]
	for _, i := range ev.Left {
		r.leaveBuf = append(r.leaveBuf, r.tr.Nodes[i])
	}
	return pool.Event{At: ev.Time, Join: r.joinBuf, Leave: r.leaveBuf}
}

// between replays, under alloc.Default semantics, what happens before the trace event
// at next: each moment a Trainer reaches its samples (it ends and frees its nodes then)
// or a queued Trainer's submit time comes with a slot free, the pool advances to it and
// decides, as the sidecar does on a Trainer's exit or submission. It returns the rescale
// cost those decisions booked. Under alloc.Reference nothing happens between events (the
// reference looks only at events).
func (r *replayer) between(ctx context.Context, next time.Time, event int) (float64, error) {
	if r.opt.Semantics == alloc.Reference {
		return 0, nil
	}
	cost := 0.0
	for {
		at, ok := r.p.NextCompletion()
		if adm, ok2 := r.p.NextAdmission(); ok2 && (!ok || adm.Before(at)) {
			at, ok = adm, true
		}
		if mv, ok2 := r.nextMove(); ok2 && (!ok || mv.Before(at)) {
			at, ok = mv, true
		}
		if pc, ok2 := r.nextPlanChange(); ok2 && (!ok || pc.Before(at)) && pc.Before(next) {
			// The scheduler planned anew where no node changed: the pool
			// learns it, and decides only if a move is due at once (the
			// live reconciler reads the plan at its rounds; deciding at
			// every pass would add rescales no event asked for).
			r.p.Advance(pc)
			r.setPlan(pc)
			r.harvest()
			if !r.p.MoveDue() {
				continue
			}
			at, ok = pc, true
		}
		if !ok || !at.Before(next) {
			return cost, nil
		}
		r.meas.observe(at)
		r.p.Advance(at)
		r.setPlan(at)
		r.harvest()
		r.midway++
		if len(r.p.Running()) == 0 && len(r.p.Queued()) == 0 {
			return cost, nil
		}
		c, err := r.decide(ctx, event)
		if err != nil {
			return cost, err
		}
		cost += c
		r.record()
	}
}

// setPlan gives the pool the trace's plan in effect at at (Options.Plan).
func (r *replayer) setPlan(at time.Time) {
	if !r.opt.Plan || len(r.tr.Plans) == 0 {
		return
	}
	var tp *TracePlan
	tp, r.planIdx = planAt(r.tr.Plans, r.planIdx, at)
	if tp == nil || (len(tp.Nodes) == 0 && len(tp.Beyond) == 0) {
		r.p.SetPlan(nil)
		return
	}
	r.p.SetPlan(tp.planned(r.tr.Nodes))
}

// nextMove is, with a plan on, the moment the next Trainer's lead before a
// planned start begins.
func (r *replayer) nextMove() (time.Time, bool) {
	if !r.opt.Plan {
		return time.Time{}, false
	}
	return r.p.NextMove()
}

// nextPlanChange is, with a plan on, the next moment the plan changes: the
// scheduler plans anew at every pass, also where no node changes state.
func (r *replayer) nextPlanChange() (time.Time, bool) {
	if !r.opt.Plan {
		return time.Time{}, false
	}
	now := r.p.Now()
	for i := r.planIdx; i < len(r.tr.Plans); i++ {
		if c := r.tr.Plans[i].At; c.After(now) {
			return c, true
		}
	}
	return time.Time{}, false
}

// harvest drains the pool's change log, keeping the final state of Trainers that ended.
func (r *replayer) harvest() {
	for _, c := range r.p.Changes() {
		if r.opt.OnChange != nil {
			r.opt.OnChange(c)
		}
		if c.Kind == pool.Ended && c.Final != nil {
			if i, ok := r.byID[c.Trainer]; ok {
				r.done[i] = c.Final
			}
		}
	}
}

// decide makes the event's decision with pool.Decide, the live reconciler's own step
// (its policy for an empty pool and for solver errors is pool.Propose's), and returns
// the rescale cost it booked.
func (r *replayer) decide(ctx context.Context, event int) (float64, error) {
	before := r.p.Totals().RescaleLoss
	start := time.Now()
	d, err := r.p.Decide(ctx, r.opt.Solver, r.opt.Check)
	if d.Solved {
		r.solves = append(r.solves, time.Since(start))
	}
	if err != nil {
		return 0, fmt.Errorf("event %d: %w", event, err)
	}
	if d.Err != nil {
		if r.opt.Check || errors.Is(d.Err, milp.ErrBackendAbsent) {
			return 0, fmt.Errorf("event %d: %w", event, d.Err)
		}
		r.failed++
		if r.firstErr == "" {
			r.firstErr = fmt.Sprintf("event %d: %v", event, d.Err)
		}
	}
	if d.Plan.Status != alloc.Optimal {
		r.kept++
	}
	r.harvest()
	return r.p.Totals().RescaleLoss - before, nil
}

// log completes a step-log row with the pool's state after the decision and writes it.
func (r *replayer) log(row stepRow) error {
	if r.steps == nil {
		return nil
	}
	for _, t := range r.p.Running() {
		row.Rate += t.Rate
		if n := len(t.Nodes); n > 0 {
			row.JobsRunning++
			row.NodesRunning += n
		}
	}
	row.Jobs = len(r.p.Running())
	row.Nodes = r.p.IdleCount()
	return r.steps.write(row)
}

// record adds the pool's node use now to the timeline.
func (r *replayer) record() {
	if r.tl == nil {
		return
	}
	r.tl.times = append(r.tl.times, r.p.Now())
	r.tl.idle = append(r.tl.idle, int32(r.p.IdleCount()))
	used := 0
	for _, t := range r.p.Running() {
		if n := len(t.Nodes); n > 0 {
			used += n
			r.tl.shares = append(r.tl.shares, Share{Trainer: int32(r.byID[t.ID]), Nodes: int32(n)})
		}
	}
	r.tl.used = append(r.tl.used, int32(used))
	r.tl.off = append(r.tl.off, int32(len(r.tl.shares)))
}
