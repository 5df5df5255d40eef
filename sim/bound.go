package sim

import (
	"slices"
	"sort"
	"time"
)

// LosslessBound is a makespan no allocator can beat when it replays jobs
// on tr (from its first event, as Replay does) with at most maxTrainers
// running at once: hours from the trace's first event until the work
// could be done if no rescale or reclaim cost anything and every idle
// node were usable at once. It is the reference point of the yield table
// (docs/allocation.md, "How far from any allocator's best"), not a
// prediction: real allocators pay for every rescale and reclaim.
//
// Progress is counted in jobs: Trainer j on k nodes finishes 1/T_j(k) of
// itself per second, T_j(k) = Samples_j / P_j(k). At each instant, with n
// nodes idle and J Trainers allowed (maxTrainers, or fewer while fewer
// jobs have been submitted), no allocator does more than
//
//	R(n) = max { Σ_{i≤J} U(k_i) : Σ k_i ≤ n },  U(k) = max_j P_j(k) / Samples_j
//
// over the submitted jobs j with Max_j ≥ k (the relaxation lets several
// slots run the same best job and ignores minimums and completions), and
// the jobs are done when ∫ R dt reaches their number. For a workload of
// one curve and one size (the paper's hps-1000J) U is that curve, and the
// bound is the lossless, perfectly balanced schedule. For a mixed one it
// is looser, and a second bound counts node-seconds: job j needs at least
// Samples_j / e_j of them, e_j its best samples per node-second over
// 1 … Max_j, and at most min(n, J·max Max) nodes work at once; the bound
// is the later of the two. ok is false when the trace ends first (Replay
// ends there too).
func LosslessBound(tr *Trace, jobs []Job, maxTrainers int) (hours float64, ok bool) {
	if len(tr.Events) == 0 || len(jobs) == 0 || maxTrainers <= 0 {
		return 0, false
	}
	t0 := tr.Events[0].Time
	subs := slices.Clone(jobs)
	sort.SliceStable(subs, func(a, b int) bool { return subs[a].Submit.Before(subs[b].Submit) })
	maxK := 0
	for _, j := range jobs {
		maxK = max(maxK, j.Max)
	}
	b := boundRates{J: maxTrainers, u: make([]float64, maxK+1)}
	left := float64(len(jobs)) // jobs still to do, in the first bound
	work := 0.0                // node-seconds still to do, in the second
	for _, j := range jobs {
		e := 0.0
		for k := 1; k <= j.Max; k++ {
			e = max(e, j.ThroughputAt(float64(k))/float64(k))
		}
		work += j.Samples / e
	}
	var byJobs, byNodes time.Time // when each bound is reached
	next := 0                     // subs[:next] are submitted
	idle := 0
	for i, e := range tr.Events {
		idle += len(e.Joined) - len(e.Left)
		var end time.Time // zero after the last event
		if i+1 < len(tr.Events) {
			end = tr.Events[i+1].Time
		}
		at := e.Time
		for {
			// The interval [at, stop): no submission inside it.
			stop := end
			for next < len(subs) && !subs[next].Submit.After(at) {
				b.add(subs[next])
				next++
			}
			if next < len(subs) && (stop.IsZero() || subs[next].Submit.Before(stop)) {
				stop = subs[next].Submit
			}
			if stop.IsZero() {
				return 0, false // the trace ends, as the replay does
			}
			d := stop.Sub(at).Seconds()
			if byJobs.IsZero() {
				if r := b.rate(idle, next); r*d >= left {
					byJobs = at.Add(time.Duration(left / r * 1e9))
				} else {
					left -= r * d
				}
			}
			if byNodes.IsZero() {
				if w := float64(min(idle, min(next, maxTrainers)*maxK)); w*d >= work {
					byNodes = at.Add(time.Duration(work / w * 1e9))
				} else {
					work -= w * d
				}
			}
			if !byJobs.IsZero() && !byNodes.IsZero() {
				if byNodes.After(byJobs) {
					return byNodes.Sub(t0).Hours(), true
				}
				return byJobs.Sub(t0).Hours(), true
			}
			if stop.Equal(end) {
				break
			}
			at = stop
		}
	}
	return 0, false
}

// boundRates is LosslessBound's R(n), per number of slots, recomputed
// when a submission changes U.
type boundRates struct {
	J    int
	u    []float64   // U(k), k = 0 … max Max
	best [][]float64 // best[J][m]: R(m) with J slots; nil: not computed
}

// add folds a submitted job into U.
func (b *boundRates) add(j Job) {
	for k := 1; k <= j.Max && k < len(b.u); k++ {
		if v := j.ThroughputAt(float64(k)) / j.Samples; v > b.u[k] {
			b.u[k], b.best = v, nil
		}
	}
}

// rate is R(n) with min(b.J, submitted) slots.
func (b *boundRates) rate(n, submitted int) float64 {
	J := min(b.J, submitted)
	if J == 0 || n <= 0 {
		return 0
	}
	if b.best == nil {
		// One slot at a time: best[c][m], the most c slots give on m
		// nodes, for every m up to what b.J slots can use.
		most := b.J * (len(b.u) - 1)
		b.best = make([][]float64, b.J+1)
		b.best[0] = make([]float64, most+1)
		for c := 1; c <= b.J; c++ {
			prev, cur := b.best[c-1], slices.Clone(b.best[c-1])
			for m := 1; m <= most; m++ {
				for k := 1; k <= m && k < len(b.u); k++ {
					cur[m] = max(cur[m], prev[m-k]+b.u[k])
				}
			}
			b.best[c] = cur
		}
	}
	row := b.best[J]
	return row[min(n, len(row)-1)]
}
