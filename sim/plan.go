package sim

import (
	"bufio"
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// TracePlan is the scheduler's plan at one moment of a re-simulated
// schedule: the reservation EASY makes for the head of its queue, from
// requested wall times only (never the jobs' real ends) — when it expects
// the head to start and which of the nodes idle then it expects the head
// to take. It holds from At until the next TracePlan; one with no Nodes
// says nothing is planned on idle nodes.
//
// With a plan depth beyond the head (EASYTracePlan), Beyond holds the
// planned starts of the queued jobs after it that take nodes idle now,
// as a backfill pass plans them (planBeyond).
type TracePlan struct {
	At, Start time.Time
	Nodes     []int32 // indices into Trace.Nodes
	Beyond    []PlannedStart
}

// PlannedStart is one queued job's planned start and the nodes idle now
// it is expected to take.
type PlannedStart struct {
	Start time.Time
	Nodes []int32 // indices into Trace.Nodes
}

// easyPlan is a reservation in the re-simulation's own terms: at now, the
// head is expected at shadow and takes count of the nodes free now; more
// are the jobs beyond it that take nodes free now, in queue order.
type easyPlan struct {
	now, shadow int64
	count       int
	more        []easyPlanned
}

// easyPlanned is one job's planned start and how many nodes free now it takes.
type easyPlanned struct {
	shadow int64
	count  int
}

// recordPlan notes the head's reservation after the pass at now, with the
// running jobs' requests scaled by s.planScale (1: as requested; 2: a plan
// from requests twice as long, a wrong plan that leaves the schedule
// itself unchanged). The head takes the nodes free now less those left
// over at its shadow time beyond its need.
func (s *easySim) recordPlan(now int64) {
	p := easyPlan{now: now}
	if len(s.queue) > 0 && s.free > 0 {
		need := s.jobs[s.queue[0]].size
		type end struct {
			at   int64
			size int
		}
		ends := make([]end, 0, len(s.running))
		for _, k := range s.running {
			j := &s.jobs[k]
			ends = append(ends, end{j.start + int64(float64(j.req)*s.planScale), j.size})
		}
		slices.SortFunc(ends, func(a, b end) int { return cmp.Compare(a.at, b.at) })
		avail := s.free
		for _, e := range ends {
			avail += e.size
			if avail >= need {
				p.shadow = max(e.at, now)
				p.count = max(0, s.free-(avail-need))
				s.jobs[s.queue[0]].planned = p.shadow
				break
			}
		}
		if s.planDepth > 1 && len(s.queue) > 1 {
			pe := make([]planEnd, len(ends))
			for i, e := range ends {
				pe[i] = planEnd{max(e.at, now), e.size}
			}
			p.more = s.planBeyond(now, pe, p)
		}
	}
	if n := len(s.plans); n > 0 && s.plans[n-1].shadow == p.shadow && s.plans[n-1].count == p.count && slices.Equal(s.plans[n-1].more, p.more) {
		return
	}
	s.plans = append(s.plans, p)
}

// EASYTracePlanned is EASYTrace with the scheduler's plan: Trace.Plans
// holds, from each scheduling pass on, the reservation EASY makes for the
// head of the queue (recordPlan), with requests scaled by planScale (> 0)
// for the plan only. Which idle nodes the head will take follows the
// trace's own rule (a start takes the nodes freed most recently), so that
// a right plan names the right nodes.
func (l *SWFLog) EASYTracePlanned(nodes int, planScale float64) (*Trace, EASYStats, error) {
	if !(planScale > 0) {
		return nil, EASYStats{}, fmt.Errorf("easy trace: plan scale %v, want > 0", planScale)
	}
	return l.easyTrace(nodes, planScale, 1)
}

// resolvePlans turns the reservations due at now into TracePlans, naming
// the top count of the free stack (the nodes a start at now would take).
func resolvePlans(t *Trace, l *SWFLog, plans []easyPlan, pi int, now int64, free []int32) int {
	for ; pi < len(plans) && plans[pi].now <= now; pi++ {
		p := plans[pi]
		tp := TracePlan{At: l.Time(now)}
		// The nodes free now go to the planned starts in time order (the
		// head first among equals), each from the top of the free stack:
		// the one to start first takes the most recently freed, as the
		// trace's own starts do.
		type claim struct {
			shadow int64
			count  int
			beyond int // index into p.more, -1 for the head
		}
		cs := []claim{{p.shadow, p.count, -1}}
		for i, m := range p.more {
			cs = append(cs, claim{m.shadow, m.count, i})
		}
		slices.SortStableFunc(cs, func(a, b claim) int { return cmp.Compare(a.shadow, b.shadow) })
		named := make([][]int32, len(cs))
		top := len(free)
		for i, c := range cs {
			n := min(c.count, top)
			named[i] = slices.Clone(free[top-n : top])
			top -= n
		}
		if len(p.more) > 0 {
			tp.Beyond = make([]PlannedStart, len(p.more))
		}
		for i, c := range cs {
			switch {
			case c.beyond >= 0:
				tp.Beyond[c.beyond] = PlannedStart{Start: l.Time(c.shadow), Nodes: named[i]}
			case len(named[i]) > 0:
				tp.Start, tp.Nodes = l.Time(c.shadow), named[i]
			}
		}
		tp.Beyond = slices.DeleteFunc(tp.Beyond, func(b PlannedStart) bool { return len(b.Nodes) == 0 })
		t.Plans = append(t.Plans, tp)
	}
	return pi
}

// planAt returns the plan in effect at: the last with At ≤ at, from index
// i on (plans are sorted by At); it returns the index for the next call.
func planAt(plans []TracePlan, i int, at time.Time) (*TracePlan, int) {
	for i+1 < len(plans) && !plans[i+1].At.After(at) {
		i++
	}
	if i < len(plans) && !plans[i].At.After(at) {
		return &plans[i], i
	}
	return nil, i
}

// OpenEASYTrace reads an SWF job log (gzip or not) and re-simulates it
// with FCFS + EASY backfill on the header's machine size
// (SWFLog.MachineNodes), with the scheduler's plan for the head
// (EASYTracePlanned).
func OpenEASYTrace(path string, planScale float64) (*Trace, EASYStats, error) {
	return OpenEASYTracePlan(path, planScale, 1)
}

// OpenEASYTracePlan is OpenEASYTrace with the plan covering up to depth
// queued jobs (EASYTracePlan).
func OpenEASYTracePlan(path string, planScale float64, depth int) (*Trace, EASYStats, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, EASYStats{}, fmt.Errorf("open trace: %w", err)
	}
	defer f.Close()
	r, err := maybeGunzip(f)
	if err != nil {
		return nil, EASYStats{}, fmt.Errorf("open trace %s: %w", path, err)
	}
	swf, err := readSWF(bufio.NewReaderSize(r, 1<<16))
	if err != nil {
		return nil, EASYStats{}, fmt.Errorf("read swf %s: %w", path, err)
	}
	t, st, err := swf.EASYTracePlan(swf.MachineNodes(), planScale, depth)
	if err != nil {
		return nil, st, fmt.Errorf("swf %s: %w", path, err)
	}
	t.Skipped = swf.SkippedTotal()
	t.Source = filepath.Base(path) + ": " + t.Source
	return t, st, nil
}
