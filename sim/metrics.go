package sim

import (
	"math"
	"slices"
	"time"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/pool"
)

// Result is what a Replay measured.
type Result struct {
	Summary  Summary
	Trainers []TrainerResult // in workload order
	Timeline *Timeline       // nil unless Options.Timeline > 0
}

// Summary is a replay's headline figures. Times are measured on the trace's clock from
// t0, the first event replayed. Under alloc.Default semantics a Trainer completes at the
// moment its samples are reached, between events if need be, and frees its nodes then, as
// live; under alloc.Reference it is seen at the next event, as the reference replayer
// only looks at events, and the samples it did past its target are trimmed (Overshoot).
//
//   - MakespanH: hours from t0 to the last completion; if some Trainers did not finish
//     before the trace ended, the hours replayed (Finished < Trainers says so).
//   - MeanJCTH: mean over finished Trainers of the hours from max(Submit, t0) to
//     completion; it includes the wait for a slot (MaxTrainers).
//   - EOvh: Samples / (Samples + RescaleLoss + PreemptLoss), net over gross: the step
//     log's ΣThr / (ΣThr + ΣReScost + ΣPreCost). Samples are net of every loss, the
//     reference's start-up cost of its initial map included, but that cost is booked
//     by no decision, so, as in the reference's log, it is not in RescaleLoss: it is
//     StartupCost, on its own (0 under alloc.Default).
//   - E1Node: Σ_j samples_j / P_j(1) ÷ node-seconds held by Trainers: work done per
//     node-second against running each Trainer on dedicated nodes at one-node efficiency.
//   - Utilisation: node-seconds held by Trainers ÷ idle node-seconds offered, over the
//     makespan.
//   - Rescales: rescales booked by decisions; Reclaims: Trainer-events that lost nodes to the scheduler (each
//     charged R_down·rate once, however many nodes went).
//   - Overshoot: samples done past Trainers' targets before they were seen to finish,
//     trimmed off Samples (work on nodes that would have been free); the gross work is
//     Samples + RescaleLoss + PreemptLoss + StartupCost + Overshoot.
//   - Events: trace rows replayed, t0 included; Between: moments between events the
//     replay decided at (a completion, or a submission with a slot free: default
//     semantics only); Decisions: solver calls.
//   - SolveMsP50, SolveMsP99: nearest-rank percentiles of the wall time per decision
//     the solver was called for (solve and commit), in milliseconds; WallS: the whole
//     replay's wall time in seconds.
type Summary struct {
	Allocator   string  `json:"allocator"`
	Semantics   string  `json:"semantics"`
	Objective   string  `json:"objective"`
	TFwd        float64 `json:"tfwd_s"`
	MaxTrainers int     `json:"max_trainers"` // 0 with admission by value
	Admission   string  `json:"admission"`    // "fcfs" (up to MaxTrainers) or "auto" (by value)
	Trainers    int     `json:"trainers"`
	Finished    int     `json:"finished"`

	MakespanH   float64 `json:"makespan_h"`
	MeanJCTH    float64 `json:"mean_jct_h"`
	EOvh        float64 `json:"e_ovh"`
	E1Node      float64 `json:"e_1node"`
	Utilisation float64 `json:"utilisation"`

	Samples       float64 `json:"samples"`
	RescaleLoss   float64 `json:"rescale_loss"`
	PreemptLoss   float64 `json:"preempt_loss"`
	StartupCost   float64 `json:"startup_cost"` // the reference initial map's P(n)·R_up
	Overshoot     float64 `json:"overshoot"`
	UsedNodeHours float64 `json:"used_node_h"`
	IdleNodeHours float64 `json:"idle_node_h"`

	Rescales int `json:"rescales"`
	Reclaims int `json:"reclaims"`
	// ReclaimsPlanned counts the graceful moves off nodes the scheduler's plan named
	// (Options.Plan; pool.Totals.Moves), ReclaimsSurprise the reclaims no plan
	// foresaw (the prolog's kill: Reclaims), MoveLoss the samples the moves cost.
	ReclaimsPlanned  int     `json:"reclaims_planned"`
	ReclaimsSurprise int     `json:"reclaims_surprise"`
	MoveLoss         float64 `json:"move_loss"`
	// Curves is what the allocator knew of the curves (Options.Curves; omitted
	// for given), CurveNoise the measurement noise when learned, Probes the
	// rescales that were the learner's probes.
	Curves     string  `json:"curves,omitempty"`
	CurveNoise float64 `json:"curve_noise,omitempty"`
	Probes     int     `json:"explore_rescales,omitempty"`
	Events     int     `json:"events"`
	Between    int     `json:"between"`
	// What the inputs left out or could not line up: Trainers submitted before the
	// first event replayed (admitted at t0) and after the last (never run); trace
	// lines skipped and SWF jobs truncated (Trace.Skipped, Trace.Truncated).
	EarlyTrainers int `json:"trainers_before_trace"`
	LateTrainers  int `json:"trainers_after_trace"`
	SkippedLines  int `json:"trace_lines_skipped"`
	TruncatedJobs int `json:"trace_jobs_truncated"`
	Decisions     int `json:"decisions"`
	Kept          int `json:"kept"` // decisions whose plan was not optimal (time limit, solver error)
	// SolverErrors counts the decisions whose solver failed (they kept the allocation,
	// as live); FirstSolverError is the first such error.
	SolverErrors     int     `json:"solver_errors"`
	FirstSolverError string  `json:"first_solver_error,omitempty"`
	SolveMsP50       float64 `json:"solve_ms_p50"`
	SolveMsP99       float64 `json:"solve_ms_p99"`
	WallS            float64 `json:"wall_s"`
}

// TrainerResult is one Trainer's outcome.
type TrainerResult struct {
	ID          string    `json:"id"`
	Model       string    `json:"model"`
	Submit      time.Time `json:"submit"`
	Admitted    time.Time `json:"admitted"` // zero if never admitted
	Ended       time.Time `json:"ended"`    // zero if unfinished
	Finished    bool      `json:"finished"`
	JCTH        float64   `json:"jct_h"` // hours from max(Submit, t0) to Ended; 0 if unfinished
	Samples     float64   `json:"samples"`
	RescaleLoss float64   `json:"rescale_loss"`
	PreemptLoss float64   `json:"preempt_loss"`
	Rescales    int       `json:"rescales"`
	Reclaims    int       `json:"reclaims"`
	NodeHours   float64   `json:"node_h"`
}

func (r *replayer) result() *Result {
	res := &Result{Trainers: make([]TrainerResult, len(r.jobs))}
	end := r.p.Now()
	s := &res.Summary
	*s = Summary{Allocator: r.opt.Solver.Name(), Semantics: r.opt.Semantics.String(),
		Objective: string(r.opt.Objective), TFwd: r.opt.TFwd, MaxTrainers: r.opt.MaxTrainers, Admission: "fcfs",
		Trainers: len(r.jobs), Events: r.events, Decisions: len(r.solves), Kept: r.kept,
		SolverErrors: r.failed, FirstSolverError: r.firstErr, StartupCost: r.initial}
	live := map[string]*pool.Trainer{}
	for _, t := range r.p.Running() {
		live[t.ID] = t
	}
	var jct, oneNode float64
	for i := range r.jobs {
		j := &r.jobs[i]
		tr := &res.Trainers[i]
		*tr = TrainerResult{ID: j.ID, Model: j.Model, Submit: j.Submit}
		t := r.done[i]
		if t == nil {
			t = live[j.ID] // still running when the trace ended
		}
		if t == nil {
			continue // never admitted
		}
		tr.Admitted, tr.Samples = t.Admitted, t.Done
		tr.RescaleLoss, tr.PreemptLoss = t.RescaleLoss, t.PreemptLoss
		tr.Rescales, tr.Reclaims = t.Rescales, t.Preemptions
		tr.NodeHours = t.NodeSeconds / 3600
		if p1 := alloc.Interp(j.Nodes, j.Throughput, 1); p1 > 0 {
			oneNode += t.Done / p1
		}
		if t.Status == pool.Finished {
			tr.Ended, tr.Finished = t.Ended, true
			from := j.Submit
			if from.Before(r.t0) {
				from = r.t0
			}
			tr.JCTH = t.Ended.Sub(from).Hours()
			jct += tr.JCTH
			s.Finished++
		}
	}
	tot := r.p.Totals()
	s.MakespanH = end.Sub(r.t0).Hours()
	if s.Finished > 0 {
		s.MeanJCTH = jct / float64(s.Finished)
	}
	s.Samples, s.RescaleLoss, s.PreemptLoss = tot.Samples, tot.RescaleLoss, tot.PreemptLoss
	s.UsedNodeHours, s.IdleNodeHours = tot.UsedNodeSeconds/3600, tot.IdleNodeSeconds/3600
	s.EOvh = ratio(tot.Samples, tot.Samples+tot.RescaleLoss+tot.PreemptLoss)
	s.E1Node = ratio(oneNode, tot.UsedNodeSeconds)
	s.Utilisation = ratio(tot.UsedNodeSeconds, tot.IdleNodeSeconds)
	s.Rescales, s.Reclaims = tot.Rescales, tot.Preemptions
	s.ReclaimsPlanned, s.ReclaimsSurprise, s.MoveLoss = tot.Moves, tot.Preemptions, tot.MoveLoss
	if m := r.opt.Curves; m != "" && m != pool.CurvesGiven {
		s.Curves, s.Probes = string(m), tot.Probes
		if r.meas != nil {
			s.CurveNoise = r.meas.noise
		}
	}
	s.Overshoot, s.Between = tot.Overshoot, r.midway
	if r.opt.AutoAdmit {
		s.Admission, s.MaxTrainers = "auto", 0
	}
	s.SkippedLines, s.TruncatedJobs = r.tr.Skipped, r.tr.Truncated
	last := r.tr.Events[len(r.tr.Events)-1].Time
	for i := range r.jobs {
		switch sub := r.jobs[i].Submit; {
		case sub.Before(r.t0):
			s.EarlyTrainers++
		case sub.After(last):
			s.LateTrainers++
		}
	}
	s.SolveMsP50, s.SolveMsP99 = percentileMs(r.solves, 0.50), percentileMs(r.solves, 0.99)
	s.WallS = r.wall.Seconds()
	if r.tl != nil {
		res.Timeline = r.tl.sample(r.opt.Timeline)
	}
	return res
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// percentileMs is the nearest-rank q-quantile of ds in milliseconds (0 for none).
func percentileMs(ds []time.Duration, q float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	k := int(math.Ceil(q*float64(len(s)))) - 1
	k = max(0, min(k, len(s)-1))
	return float64(s[k]) / float64(time.Millisecond)
}

// Timeline is a replay's node use over time, sampled for plotting: after each sample's
// instant, Idle nodes were idle (free or held), Used held by Trainers, and Shares lists
// the Trainers holding nodes, in admission order.
type Timeline struct {
	Times  []time.Time
	Idle   []int
	Used   []int
	Shares [][]Share
}

// Share is one Trainer's nodes at a Timeline sample; Trainer indexes Result.Trainers.
type Share struct {
	Trainer int32
	Nodes   int32
}

// timelineRecorder keeps the pool's node use after every event, flat.
type timelineRecorder struct {
	times  []time.Time
	idle   []int32
	used   []int32
	off    []int32 // end of each record's shares in shares
	shares []Share
}

// sample returns at most n samples on an even time grid from the first record to the
// last, each the state in force at its instant (the last record at or before it); every
// record if there are no more than n.
func (tl *timelineRecorder) sample(n int) *Timeline {
	out := &Timeline{}
	m := len(tl.times)
	if m == 0 || n <= 0 {
		return out
	}
	add := func(k int) {
		lo := int32(0)
		if k > 0 {
			lo = tl.off[k-1]
		}
		out.Times = append(out.Times, tl.times[k])
		out.Idle = append(out.Idle, int(tl.idle[k]))
		out.Used = append(out.Used, int(tl.used[k]))
		out.Shares = append(out.Shares, slices.Clone(tl.shares[lo:tl.off[k]]))
	}
	if m <= n || n == 1 {
		for k := range m {
			if n == 1 && k > 0 {
				break
			}
			add(k)
		}
		return out
	}
	t0, span := tl.times[0], tl.times[m-1].Sub(tl.times[0])
	k := 0
	for s := range n {
		at := t0.Add(time.Duration(float64(span) * float64(s) / float64(n-1)))
		for k+1 < m && !tl.times[k+1].After(at) {
			k++
		}
		add(k)
		out.Times[len(out.Times)-1] = at
	}
	return out
}
