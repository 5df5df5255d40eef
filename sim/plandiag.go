package sim

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/bftrainer/bftrainer/pool"
)

// StartKind is how a re-simulated job started, which decides what plan
// could have shown it before it landed.
type StartKind uint8

// How a job of the EASY re-simulation started.
const (
	// StartAtSubmit: in the scheduling pass of its own submit (a head that
	// fit at once, or a backfill): no plan read before showed it.
	StartAtSubmit StartKind = iota + 1
	// StartBackfill: by backfill, ahead of the head, after waiting in the
	// queue: only a plan for the jobs beyond the head shows it.
	StartBackfill
	// StartBehindHead: in queue order after waiting, but it was not the
	// head after the pass before (those ahead of it started in this pass):
	// only a plan beyond the head shows it.
	StartBehindHead
	// StartAsHead: the head after the pass before, whose reservation the
	// plan showed.
	StartAsHead
)

// TraceStart is one job start of a re-simulated schedule: when, on which
// nodes (indices into Trace.Nodes), how, and, for StartAsHead, the start
// the last plan before gave it (zero if none did).
type TraceStart struct {
	At      time.Time
	Nodes   []int32
	How     StartKind
	Planned time.Time
}

// SurpriseCauses splits a replay's surprise reclaims (Trainer-events that
// lost nodes to a kill) by why the plan did not move the Trainer first,
// judged on the first node the Trainer lost (a reclaim charges the
// Trainer once, however many nodes went).
type SurpriseCauses struct {
	AtSubmit   int // (a) the job started in the pass of its submit
	Backfill   int // (a) the job backfilled ahead of the head after waiting
	BehindHead int // (a) the job was behind the head at the pass before
	HeadEarly  int // (b) the head started before its planned start (jobs ended before their requests)
	HeadOther  int // (c) the head started on time or later, on a node its plan did not name
	Other      int // (d) none of these (the plan named the node, on time: a move came too late)
	Unknown    int // no start of the trace explains the reclaim
}

// Total is the number of surprises explained or not.
func (c SurpriseCauses) Total() int {
	return c.AtSubmit + c.Backfill + c.BehindHead + c.HeadEarly + c.HeadOther + c.Other + c.Unknown
}

// String is the causes as key=value pairs.
func (c SurpriseCauses) String() string {
	return fmt.Sprintf("at_submit=%d backfill=%d behind_head=%d head_early=%d head_other_nodes=%d other=%d unknown=%d",
		c.AtSubmit, c.Backfill, c.BehindHead, c.HeadEarly, c.HeadOther, c.Other, c.Unknown)
}

// SurpriseExplainer classifies the surprise reclaims of a replay of a
// re-simulated trace (one with Starts): pass Observe as Options.OnChange.
type SurpriseExplainer struct {
	tr     *Trace
	index  map[string]int32
	byNode map[int32][]int // indices into tr.Starts, in time order
	Causes SurpriseCauses
}

// NewSurpriseExplainer indexes tr's starts by node.
func NewSurpriseExplainer(tr *Trace) *SurpriseExplainer {
	e := &SurpriseExplainer{tr: tr, index: make(map[string]int32, len(tr.Nodes)), byNode: map[int32][]int{}}
	for i, n := range tr.Nodes {
		e.index[n] = int32(i)
	}
	for i, s := range tr.Starts {
		for _, n := range s.Nodes {
			e.byNode[n] = append(e.byNode[n], i)
		}
	}
	return e
}

// Observe classifies a Preempted change; it ignores every other kind.
func (e *SurpriseExplainer) Observe(c pool.Change) {
	if c.Kind != pool.Preempted || len(c.Nodes) == 0 {
		return
	}
	n, ok := e.index[c.Nodes[0]]
	if !ok {
		e.Causes.Unknown++
		return
	}
	list := e.byNode[n]
	k := sort.Search(len(list), func(i int) bool { return !e.tr.Starts[list[i]].At.Before(c.At) })
	if k == len(list) || !e.tr.Starts[list[k]].At.Equal(c.At) {
		e.Causes.Unknown++
		return
	}
	s := &e.tr.Starts[list[k]]
	switch s.How {
	case StartAtSubmit:
		e.Causes.AtSubmit++
	case StartBackfill:
		e.Causes.Backfill++
	case StartBehindHead:
		e.Causes.BehindHead++
	case StartAsHead:
		switch {
		case !s.Planned.IsZero() && s.At.Before(s.Planned):
			e.Causes.HeadEarly++
		case !e.named(n, c.At):
			e.Causes.HeadOther++
		default:
			e.Causes.Other++
		}
	default:
		e.Causes.Unknown++
	}
}

// named reports whether the plan in effect just before at names node n
// for the head (or, with a plan beyond it, for any job).
func (e *SurpriseExplainer) named(n int32, at time.Time) bool {
	i := sort.Search(len(e.tr.Plans), func(i int) bool { return !e.tr.Plans[i].At.Before(at) }) - 1
	if i < 0 {
		return false
	}
	tp := &e.tr.Plans[i]
	if slices.Contains(tp.Nodes, n) {
		return true
	}
	for _, b := range tp.Beyond {
		if slices.Contains(b.Nodes, n) {
			return true
		}
	}
	return false
}
