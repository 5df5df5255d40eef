package pool

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/bftrainer/bftrainer/alloc"
)

// ErrUnknownTrainer is returned for a Trainer the pool does not have; a
// caller may branch on it.
var ErrUnknownTrainer = errors.New("unknown trainer")

var (
	errDuplicate = errors.New("trainer already exists")
	errStalePlan = errors.New("plan does not match the running trainers")
)

// Kind names a Change. It is also the history's event kind (store.Kind is
// this type): one vocabulary, the history adding kinds of its own (hooks,
// kills, solves, actions) that the pool never reports.
type Kind string

// Change kinds.
const (
	Joined    Kind = "join"     // a node joined the pool
	Left      Kind = "leave"    // a node left the pool (the scheduler took it)
	Released  Kind = "release"  // a job ended on a node; waiting for it to be exactly idle
	Stale     Kind = "stale"    // an event about a node another job holds; ignored
	Preempted Kind = "preempt"  // a reclaim took nodes from a Trainer
	Submitted Kind = "submit"   // a Trainer was queued
	Admitted  Kind = "admit"    // a Trainer got a slot
	Rescaled  Kind = "rescale"  // a Trainer's node set changed by a decision
	Ended     Kind = "end"      // a Trainer finished, failed or was cancelled
	Reported  Kind = "progress" // a Trainer reported its progress
	// CurveUpdated: the curve learner took an observation (Change.Obs).
	CurveUpdated Kind = "curve"
	Undecided    Kind = "kept" // a decision kept the allocation (solver not optimal)
	Moved        Kind = "move" // a Trainer shrunk gracefully off nodes planned for a main job (SetPlan)
)

// Change is one thing that happened in the pool, for the history.
type Change struct {
	Kind    Kind
	At      time.Time
	Trainer string
	Job     string   // scheduler job, for node changes
	Nodes   []string // nodes concerned
	Add     []string // rescale: nodes the Trainer starts on
	Release []string // rescale: nodes the Trainer stops on
	From    int      // rescale: node counts
	To      int
	Cost    float64  // samples lost (rescale, preempt)
	Status  Status   // end: how it ended
	Final   *Trainer // end: the Trainer's final state
	Note    string
	Obs     *alloc.CurveObs // curve: the observation
	Source  string          // curve, progress: where the samples came from (SourceReport, SourceLog)
	Probe   *Probe          // rescale: the learner's probe it carried out
}

// Pool is the idle pool. It is not safe for concurrent use.
type Pool struct {
	cfg   Config
	now   time.Time
	nodes map[string]*Node
	// byName is every node of nodes sorted by name, but for the last
	// unsorted ones (added since State last sorted them): State lists the
	// nodes by name, and nodes are never forgotten, so it sorts only the
	// newcomers and merges them in (a sort of 10,624 nodes a decision was
	// 8–19 ms, the largest stage after the solver; issue 23).
	byName   []*Node
	unsorted int
	free     []alloc.Node // idle, held by no Trainer, sorted oldest idle first
	running  []*Trainer   // admission order
	queue    []*Trainer   // submission order
	byID     map[string]*Trainer
	totals   Totals
	log      []Change
	plan     map[string]plannedNode // the scheduler's plan (SetPlan); not State
	planSet  []Planned              // the plan last set, to tell a new one apart
	learner  alloc.CurveLearner     // cfg.Learner with its defaults
	est      map[string]estCache    // learned estimates, by Trainer
}

// New returns a Pool with the given configuration and state (the zero
// State for an empty pool).
func New(cfg Config, st State) (*Pool, error) {
	if cfg.MaxTrainers <= 0 {
		cfg.MaxTrainers = 10
	}
	if cfg.Objective == "" {
		cfg.Objective = alloc.Throughput
	}
	mode, err := ParseCurveMode(string(cfg.Curves))
	if err != nil {
		return nil, fmt.Errorf("load pool: %w", err)
	}
	cfg.Curves = mode
	p := &Pool{
		learner: cfg.Learner.Settings(),
		est:     map[string]estCache{},
		cfg:     cfg,
		now:     st.Now,
		nodes:   make(map[string]*Node, len(st.Nodes)),
		byID:    make(map[string]*Trainer, len(st.Trainers)),
		totals:  st.Totals,
	}
	for i := range st.Nodes {
		n := st.Nodes[i]
		if _, dup := p.nodes[n.Name]; dup {
			return nil, fmt.Errorf("load pool: node %q listed twice", n.Name)
		}
		n.Trainer = "" // rebuilt from the Trainers' node lists
		p.addNode(&n)
	}
	for i := range st.Trainers {
		t := st.Trainers[i]
		t.Nodes = slices.Clone(t.Nodes)
		if _, dup := p.byID[t.ID]; dup {
			return nil, fmt.Errorf("load pool: trainer %q listed twice", t.ID)
		}
		switch t.Status {
		case Running:
			p.running = append(p.running, &t)
		case Queued:
			if len(t.Nodes) > 0 {
				return nil, fmt.Errorf("load pool: queued trainer %q holds nodes", t.ID)
			}
			p.queue = append(p.queue, &t)
		default:
			continue // ended Trainers are history, not state
		}
		p.byID[t.ID] = &t
		if t.Learn.Curve == nil {
			// A state saved before learning, or built by a replay: the
			// Trainer learns from now on.
			if err := p.startLearning(&t); err != nil {
				return nil, fmt.Errorf("load pool: trainer %q: %w", t.ID, err)
			}
		}
		if t.Status == Running && t.Learn.Steady.IsZero() {
			t.Learn.Steady = t.Admitted
			if t.Admitted.IsZero() {
				t.Learn.Steady = st.Now
			}
		}
		for j, hn := range t.Nodes {
			n, ok := p.nodes[hn.Name]
			if !ok || n.State != Idle {
				return nil, fmt.Errorf("load pool: trainer %q holds %q, which is not idle", t.ID, hn.Name)
			}
			if n.Trainer != "" {
				return nil, fmt.Errorf("load pool: node %q held by %q and %q", hn.Name, n.Trainer, t.ID)
			}
			n.Trainer = t.ID
			t.Nodes[j] = alloc.Node{Name: n.Name, Since: n.Since, Order: n.Order}
		}
	}
	for _, n := range p.nodes {
		if n.State == Idle && n.Trainer == "" {
			p.free = append(p.free, alloc.Node{Name: n.Name, Since: n.Since, Order: n.Order})
		}
	}
	slices.SortFunc(p.free, alloc.CompareNodes)
	return p, nil
}

// addNode adds a node the pool did not know.
func (p *Pool) addNode(n *Node) {
	p.nodes[n.Name] = n
	p.byName = append(p.byName, n)
	p.unsorted++
}

// sortedNodes returns every node sorted by name: the newcomers since the
// last call are sorted and merged into the sorted prefix, O(a log a + N)
// for a newcomers instead of a sort of every node.
func (p *Pool) sortedNodes() []*Node {
	if p.unsorted == 0 {
		return p.byName
	}
	byName := func(a, b *Node) int { return cmp.Compare(a.Name, b.Name) }
	k := len(p.byName) - p.unsorted
	fresh := p.byName[k:]
	slices.SortFunc(fresh, byName)
	if k > 0 && p.unsorted > 0 && p.byName[k-1].Name > fresh[0].Name {
		merged := make([]*Node, 0, len(p.byName))
		old := p.byName[:k]
		for len(old) > 0 && len(fresh) > 0 {
			if fresh[0].Name < old[0].Name {
				merged, fresh = append(merged, fresh[0]), fresh[1:]
			} else {
				merged, old = append(merged, old[0]), old[1:]
			}
		}
		merged = append(append(merged, old...), fresh...)
		p.byName = merged
	}
	p.unsorted = 0
	return p.byName
}

// State returns a copy of the whole state, its nodes sorted by name.
func (p *Pool) State() State {
	st := State{Now: p.now, Totals: p.totals}
	st.Nodes = make([]Node, len(p.nodes))
	for i, n := range p.sortedNodes() {
		st.Nodes[i] = *n
	}
	for _, t := range p.running {
		c := *t
		c.Nodes = slices.Clone(t.Nodes)
		st.Trainers = append(st.Trainers, c)
	}
	for _, t := range p.queue {
		st.Trainers = append(st.Trainers, *t)
	}
	return st
}

// Config returns the pool's configuration.
func (p *Pool) Config() Config { return p.cfg }

// Now returns the time of the last event applied.
func (p *Pool) Now() time.Time { return p.now }

// Totals returns the pool-wide counters.
func (p *Pool) Totals() Totals { return p.totals }

// Changes returns what happened since the last call, and forgets it.
func (p *Pool) Changes() []Change {
	out := p.log
	p.log = nil
	return out
}

// Running returns the admitted Trainers in admission order. The pointers
// are the pool's own: read, do not modify.
func (p *Pool) Running() []*Trainer { return p.running }

// Queued returns the waiting Trainers in submission order.
func (p *Pool) Queued() []*Trainer { return p.queue }

// Trainer returns an active Trainer by ID.
func (p *Pool) Trainer(id string) (*Trainer, bool) {
	t, ok := p.byID[id]
	return t, ok
}

// Node returns what the pool knows of a node.
func (p *Pool) Node(name string) (Node, bool) {
	n, ok := p.nodes[name]
	if !ok {
		return Node{}, false
	}
	return *n, true
}

// Free returns the idle nodes no Trainer holds, oldest idle first.
func (p *Pool) Free() []alloc.Node { return p.free }

// IdleCount returns the number of idle nodes (free or held).
func (p *Pool) IdleCount() int {
	n := len(p.free)
	for _, t := range p.running {
		n += len(t.Nodes)
	}
	return n
}

func (p *Pool) addFree(n alloc.Node) {
	i, _ := slices.BinarySearchFunc(p.free, n, alloc.CompareNodes)
	p.free = slices.Insert(p.free, i, n)
}

// addFreeAll is addFree for many nodes: one merge of the sorted list.
func (p *Pool) addFreeAll(ns []alloc.Node) {
	if len(ns) < 4 {
		for _, n := range ns {
			p.addFree(n)
		}
		return
	}
	add := slices.SortedFunc(slices.Values(ns), alloc.CompareNodes)
	out := make([]alloc.Node, 0, len(p.free)+len(add))
	i := 0
	for _, n := range add {
		for i < len(p.free) && alloc.CompareNodes(p.free[i], n) < 0 {
			out = append(out, p.free[i])
			i++
		}
		out = append(out, n)
	}
	p.free = append(out, p.free[i:]...)
}

// removeFreeAll is removeFree for many nodes: one pass over the list,
// dropping each entry removeFree would have found (equal under
// CompareNodes).
func (p *Pool) removeFreeAll(ns []alloc.Node) {
	if len(ns) < 4 {
		for _, n := range ns {
			p.removeFree(n)
		}
		return
	}
	drop := make(map[string]alloc.Node, len(ns))
	for _, n := range ns {
		drop[n.Name] = n
	}
	p.free = slices.DeleteFunc(p.free, func(x alloc.Node) bool {
		n, ok := drop[x.Name]
		return ok && alloc.CompareNodes(x, n) == 0
	})
}

func (p *Pool) removeFree(n alloc.Node) bool {
	i, ok := slices.BinarySearchFunc(p.free, n, alloc.CompareNodes)
	if !ok {
		return false
	}
	p.free = slices.Delete(p.free, i, i+1)
	return true
}

func (p *Pool) record(c Change) {
	if c.At.IsZero() {
		c.At = p.now
	}
	p.log = append(p.log, c)
}

// accrue moves time to at: every running Trainer progresses at its rate,
// less the rescale cost booked at the last decision. Time never goes
// back: an event older than the last one is applied at the last one's
// time.
func (p *Pool) accrue(at time.Time) {
	if !at.After(p.now) {
		if p.now.IsZero() {
			p.now = at
		}
		for _, t := range p.running {
			p.charge(t, t.PendingCost)
			t.PendingCost = 0
		}
		return
	}
	dt := at.Sub(p.now).Seconds()
	if p.now.IsZero() {
		dt = 0
	}
	p.now = at
	p.totals.Idle.Seconds += dt
	p.totals.IdleNodeSeconds += dt * float64(p.IdleCount())
	for _, t := range p.running {
		gain := dt * t.Rate
		t.Done += gain
		p.totals.Samples += gain
		held := dt * float64(len(t.Nodes))
		t.NodeSeconds += held
		p.totals.UsedNodeSeconds += held
		p.charge(t, t.PendingCost)
		t.PendingCost = 0
	}
}

// charge takes a booked cost off a Trainer's progress.
func (p *Pool) charge(t *Trainer, cost float64) {
	if cost == 0 {
		return
	}
	t.Done -= cost
	p.totals.Samples -= cost
}

// finishReached ends the Trainers that reached their samples, trimming
// the overshoot, in admission order.
func (p *Pool) finishReached() {
	for i := 0; i < len(p.running); {
		t := p.running[i]
		if t.Samples > 0 && t.Done >= t.Samples && !reports(t) {
			p.finish(t)
			continue
		}
		i++
	}
}

// finish ends a Trainer that reached its samples, trimming the overshoot.
func (p *Pool) finish(t *Trainer) {
	over := t.Done - t.Samples
	t.Done = t.Samples
	p.totals.Samples -= over
	p.totals.Overshoot += over
	p.end(t, Finished, "reached its samples")
}

// due reports whether a running Trainer's samples are reached now, to a
// relative 1e-9 (its completion time is rounded to the nanosecond).
func due(t *Trainer) bool {
	return t.Samples > 0 && !reports(t) && t.Done >= t.Samples*(1-1e-9)
}

// reports reports whether t has sent a progress report (or its progress
// log was read: readings.go): it then finishes
// only by a report reaching its target or by its workers' exit, never on
// the pool's estimate between reports.
func reports(t *Trainer) bool { return t.Learn.Reports > 0 || t.Learn.Readings > 0 }

// neverSeconds is a completion too far to foresee: 100 years.
const neverSeconds = 100 * 365 * 24 * 3600

// NextCompletion returns when the first running Trainer will reach its
// samples if nothing changes (the rescale cost it owes, charged at the next
// accrual, included), rounded up to the nanosecond; false if none will
// (no target, or no progress).
func (p *Pool) NextCompletion() (time.Time, bool) {
	var first time.Time
	found := false
	for _, t := range p.running {
		if t.Samples <= 0 || t.Rate <= 0 || reports(t) {
			continue
		}
		left := t.Samples - t.Done + t.PendingCost
		secs := max(0, left) / t.Rate
		if secs > neverSeconds {
			// Beyond what a Duration holds (292 years): the float's
			// conversion would wrap to a time before now, and a replay
			// would decide at that past moment for ever (the pilot's
			// replay of an exec Trainer at 10 samples/s with 1e12 to go).
			continue
		}
		d := time.Duration(math.Ceil(secs * 1e9))
		at := p.now.Add(d)
		if !found || at.Before(first) {
			first, found = at, true
		}
	}
	return first, found
}

// NextAdmission returns the earliest submit time after now of a queued
// Trainer, if a slot is free for it (always, with AutoAdmit: the decision
// then weighs it); false otherwise.
func (p *Pool) NextAdmission() (time.Time, bool) {
	if !p.cfg.AutoAdmit && len(p.running) >= p.cfg.MaxTrainers {
		return time.Time{}, false
	}
	var first time.Time
	found := false
	for _, t := range p.queue {
		if t.Submit.After(p.now) && (!found || t.Submit.Before(first)) {
			first, found = t.Submit, true
		}
	}
	return first, found
}

// Advance moves time to at, which must not pass the next node event, ends
// every Trainer whose samples are reached by then (see NextCompletion), its
// nodes free at once, and admits the queued Trainers whose submit time has
// come: what the sidecar does when a Trainer exits or is submitted, at that
// moment. The caller then decides.
func (p *Pool) Advance(at time.Time) {
	p.accrue(at)
	for i := 0; i < len(p.running); {
		if t := p.running[i]; due(t) {
			p.finish(t)
			continue
		}
		i++
	}
	p.Admit()
}

// end takes a Trainer out of the pool: its nodes become free (still idle
// since when they joined).
func (p *Pool) end(t *Trainer, st Status, note string) {
	nodes := alloc.Names(t.Nodes)
	if len(nodes) > 0 {
		p.totals.Idle.Frees++ // its nodes are free to take
	}
	for _, hn := range t.Nodes {
		if n := p.nodes[hn.Name]; n != nil {
			n.Trainer = ""
		}
		p.addFree(hn)
	}
	t.Nodes = nil
	t.Rate, t.PendingCost = 0, 0
	t.Status, t.Ended = st, p.now
	if i := slices.Index(p.running, t); i >= 0 {
		p.running = slices.Delete(p.running, i, i+1)
	}
	if i := slices.Index(p.queue, t); i >= 0 {
		p.queue = slices.Delete(p.queue, i, i+1)
	}
	p.foldModel(t)
	delete(p.byID, t.ID)
	delete(p.est, t.ID)
	final := *t
	p.record(Change{Kind: Ended, Trainer: t.ID, Nodes: nodes, Status: st, Final: &final, Note: note})
}
