package sim

import (
	"fmt"
	"slices"

	"github.com/bftrainer/bftrainer/pool"
)

// DefaultPlanDepth is how many queued jobs a plan beyond the head covers
// by default: Slurm's bf_max_job_test default, the jobs its backfill pass
// tests (and plans a start for) per pass.
const DefaultPlanDepth = 500

// EASYTracePlan is EASYTracePlanned with the plan covering up to depth
// queued jobs, the head first (1: the head only, as EASYTracePlanned;
// more: the starts a backfill pass plans for the jobs after it, see
// planBeyond). Every start is planned from requested wall times only.
func (l *SWFLog) EASYTracePlan(nodes int, planScale float64, depth int) (*Trace, EASYStats, error) {
	if !(planScale > 0) || depth < 1 {
		return nil, EASYStats{}, fmt.Errorf("easy trace: plan scale %v depth %d, want > 0 and ≥ 1", planScale, depth)
	}
	return l.easyTrace(nodes, planScale, depth)
}

// planEnd is a running job's expected end (from its request, never before
// now) and its size.
type planEnd struct {
	at   int64
	size int
}

// planBeyond plans, after the pass at now, the queued jobs after the head
// as a backfill pass does, from requested wall times only (scaled by
// s.planScale, as the head's plan): in queue order, up to s.planDepth jobs
// with the head, each takes the earliest start at which enough nodes stay
// free for its whole request in the profile left by the running jobs'
// expected ends (ends, sorted) and the reservations made before it (the
// head's, head, first). It returns the jobs that take nodes free now, in
// queue order, with how many: a reservation takes first the nodes freed
// by then that no earlier reservation holds, then nodes free now, as the
// trace's nodes rule (a start takes the most recently freed) assigns them.
// Nothing here changes what EASY starts.
func (s *easySim) planBeyond(now int64, ends []planEnd, head easyPlan) []easyPlanned {
	prof := newProfile(now, s.free, ends)
	type resv struct {
		start, end int64
		size, idle int
	}
	var rs []resv
	idleLeft := s.free
	reserve := func(start int64, size int, req int64, idle int) {
		end := start + max(1, int64(float64(req)*s.planScale))
		prof.take(start, end, size)
		rs = append(rs, resv{start, end, size, idle})
		idleLeft -= idle
	}
	hj := &s.jobs[s.queue[0]]
	if head.shadow >= now {
		reserve(head.shadow, hj.size, hj.req, head.count)
	}
	var out []easyPlanned
	for i := 1; i < len(s.queue) && i < s.planDepth; i++ {
		j := &s.jobs[s.queue[i]]
		d := max(1, int64(float64(j.req)*s.planScale))
		start := prof.earliest(j.size, d)
		// Nodes freed by start that no reservation holds then.
		freed := 0
		for _, e := range ends {
			if e.at <= start {
				freed += e.size
			}
		}
		for _, r := range rs {
			if r.start <= start {
				freed -= r.size - r.idle
			}
			if r.end <= start {
				freed += r.size
			}
		}
		idle := min(max(0, j.size-max(0, freed)), idleLeft)
		if start <= now && idle == j.size {
			// It would fit in nodes free now, yet the pass did not start
			// it: a plan the scheduler itself contradicts (one from other
			// requests than the schedule's). It holds its nodes in the
			// profile but names none. (One planned now on nodes of jobs
			// past their requests waits for them to end, as EASY's head.)
			idle = 0
		}
		reserve(start, j.size, j.req, idle)
		if idle > 0 {
			out = append(out, easyPlanned{shadow: start, count: idle})
		}
		if idleLeft == 0 {
			break
		}
	}
	return out
}

// profile is the number of nodes free over time: free[k] on [at[k], at[k+1]),
// the last step lasting for ever.
type profile struct {
	at   []int64
	free []int
}

func newProfile(now int64, free int, ends []planEnd) *profile {
	p := &profile{at: []int64{now}, free: []int{free}}
	for _, e := range ends {
		if n := len(p.at); p.at[n-1] == e.at {
			p.free[n-1] += e.size
			continue
		}
		p.at = append(p.at, e.at)
		p.free = append(p.free, p.free[len(p.free)-1]+e.size)
	}
	return p
}

// split makes t a step boundary and returns its index (t ≥ at[0]).
func (p *profile) split(t int64) int {
	i, ok := slices.BinarySearch(p.at, t)
	if ok {
		return i
	}
	p.at = slices.Insert(p.at, i, t)
	p.free = slices.Insert(p.free, i, p.free[i-1])
	return i
}

// take holds size nodes over [start, end).
func (p *profile) take(start, end int64, size int) {
	i, k := p.split(start), p.split(end)
	for ; i < k; i++ {
		p.free[i] -= size
	}
}

// earliest is the first step start at which size nodes stay free for d
// seconds; the last step holds every node not reserved for ever, so one is
// found for a job that fits the machine.
func (p *profile) earliest(size int, d int64) int64 {
	for k := range p.at {
		if p.free[k] < size {
			continue
		}
		ok := true
		for m := k + 1; m < len(p.at) && p.at[m] < p.at[k]+d; m++ {
			if p.free[m] < size {
				ok = false
				break
			}
		}
		if ok {
			return p.at[k]
		}
	}
	return p.at[len(p.at)-1]
}

// planned is the plan as the pool takes it: the head ("head") and the jobs
// beyond it ("queued N", N their rank in the plan), with node names.
func (tp *TracePlan) planned(nodes []string) []pool.Planned {
	names := func(idx []int32) []string {
		out := make([]string, len(idx))
		for i, n := range idx {
			out[i] = nodes[n]
		}
		return out
	}
	var out []pool.Planned
	if len(tp.Nodes) > 0 {
		out = append(out, pool.Planned{Job: "head", Nodes: names(tp.Nodes), Start: tp.Start})
	}
	for i, b := range tp.Beyond {
		out = append(out, pool.Planned{Job: fmt.Sprintf("queued %d", i+1), Nodes: names(b.Nodes), Start: b.Start})
	}
	return out
}
