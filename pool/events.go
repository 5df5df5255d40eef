package pool

import (
	"fmt"
	"slices"
	"time"

	"github.com/bftrainer/bftrainer/alloc"
)

// JoinNode is a node joining the pool; Order breaks ties among nodes that
// join at the same instant (a trace's column order; 0 for live events).
type JoinNode struct {
	Name  string
	Order int
}

// Event is a change of the scheduler's nodes at one instant. Job is the
// scheduler job responsible ("" when unknown, as in traces): a join for
// job A is ignored on a node that job B holds now, so a late epilog of A
// cannot free B's node.
type Event struct {
	At    time.Time
	Join  []JoinNode
	Leave []string
	Job   string
}

// Step applies an Event in the reference replayer's order: progress up to
// the event, then reclaims (each Trainer that loses nodes is charged
// R_down·rate once), then Trainers that reached their samples finish, then
// nodes join, then queued Trainers are admitted. The caller then decides
// (Problem, a Solver) and commits the plan.
func (p *Pool) Step(ev Event) {
	p.accrue(ev.At)
	p.leave(ev.Leave, ev.Job)
	p.finishReached()
	p.join(ev.Join, ev.Job)
	p.Admit()
}

// Leave records that the scheduler took nodes (a main job starts on them).
func (p *Pool) Leave(at time.Time, nodes []string, job string) {
	p.Step(Event{At: at, Leave: nodes, Job: job})
}

// Join records that nodes are exactly idle and may be used.
func (p *Pool) Join(at time.Time, nodes []string, job string) {
	js := make([]JoinNode, len(nodes))
	for i, n := range nodes {
		js[i] = JoinNode{Name: n}
	}
	p.Step(Event{At: at, Join: js, Job: job})
}

// Release records that a job ended on nodes that are not yet exactly idle
// (Slurm's EpilogSlurmctld runs while they are COMPLETING). They join
// later, through Join, once they are.
func (p *Pool) Release(at time.Time, nodes []string, job string) {
	p.accrue(at)
	p.finishReached()
	var moved, stale []string
	for _, name := range nodes {
		n := p.nodes[name]
		switch {
		case n == nil:
			p.addNode(&Node{Name: name, State: Pending, Since: p.now, Job: job})
			moved = append(moved, name)
		case n.State == Busy && (job == "" || n.Job == "" || n.Job == job):
			n.State, n.Since, n.Job = Pending, p.now, job
			moved = append(moved, name)
		case n.State == Busy:
			stale = append(stale, name)
		}
	}
	if len(moved) > 0 {
		p.record(Change{Kind: Released, Job: job, Nodes: moved})
	}
	if len(stale) > 0 {
		p.record(Change{Kind: Stale, Job: job, Nodes: stale, Note: "held by another job"})
	}
}

// Pending returns the nodes released by ended jobs and not yet idle, by
// name.
func (p *Pool) Pending() []Node {
	var out []Node
	for _, n := range p.nodes {
		if n.State == Pending {
			out = append(out, *n)
		}
	}
	slices.SortFunc(out, func(a, b Node) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	return out
}

func (p *Pool) leave(nodes []string, job string) {
	if len(nodes) == 0 {
		return
	}
	lost := map[*Trainer][]string{}
	var order []*Trainer
	var left []string
	for _, name := range nodes {
		n := p.nodes[name]
		if n == nil {
			p.addNode(&Node{Name: name, State: Busy, Since: p.now, Job: job})
			continue
		}
		if n.State == Idle {
			p.totals.Idle.Add(p.now.Sub(n.Since).Seconds())
			left = append(left, name)
			an := alloc.Node{Name: n.Name, Since: n.Since, Order: n.Order}
			if n.Trainer == "" {
				p.removeFree(an)
			} else if t := p.byID[n.Trainer]; t != nil {
				i := slices.IndexFunc(t.Nodes, func(x alloc.Node) bool { return x.Name == name })
				t.Nodes = slices.Delete(t.Nodes, i, i+1)
				if _, seen := lost[t]; !seen {
					order = append(order, t)
				}
				lost[t] = append(lost[t], name)
			}
		}
		n.State, n.Since, n.Job, n.Trainer = Busy, p.now, job, ""
	}
	if len(left) > 0 {
		p.record(Change{Kind: Left, Job: job, Nodes: left})
	}
	for _, t := range order {
		p.setCount(t)
		cost := (t.ReclaimDown() + p.cfg.KillLoss.Seconds()) * t.Rate
		p.charge(t, cost)
		t.PreemptLoss += cost
		t.Preemptions++
		p.totals.PreemptLoss += cost
		p.totals.Preemptions++
		p.record(Change{Kind: Preempted, Trainer: t.ID, Job: job, Nodes: lost[t], From: len(t.Nodes) + len(lost[t]), To: len(t.Nodes), Cost: cost})
	}
}

func (p *Pool) join(nodes []JoinNode, job string) {
	if len(nodes) == 0 {
		return
	}
	var joined, stale []string
	for _, jn := range nodes {
		n := p.nodes[jn.Name]
		switch {
		case n == nil:
			n = &Node{Name: jn.Name}
			p.addNode(n)
		case n.State == Idle:
			continue // already in the pool
		case job != "" && n.Job != "" && n.Job != job:
			stale = append(stale, jn.Name)
			continue
		}
		n.State, n.Since, n.Order, n.Job, n.Trainer = Idle, p.now, jn.Order, "", ""
		p.addFree(alloc.Node{Name: n.Name, Since: n.Since, Order: n.Order})
		joined = append(joined, jn.Name)
	}
	if len(joined) > 0 {
		p.totals.Idle.Frees++
		p.record(Change{Kind: Joined, Job: job, Nodes: joined})
	}
	if len(stale) > 0 {
		p.record(Change{Kind: Stale, Job: job, Nodes: stale, Note: "held by another job"})
	}
}

// CheckSpec checks a submission as a pool with this configuration would
// take it: bounds, curve (against the objective), weight, rescale costs,
// samples. Submit checks the same; front doors call it to refuse a bad
// submission before recording it.
func (c Config) CheckSpec(s Spec) error {
	curve := s.Curve
	if len(curve.Nodes) == 0 || len(curve.Nodes) == 1 && curve.Nodes[0] == 0 {
		// No curve: the pool learns it (learn.go), except under an
		// objective only the user's values define.
		if c.Objective == alloc.Metric {
			return fmt.Errorf("submit %q: the metric objective needs a curve with the Trainer's metric (--curve, --metric)", s.ID)
		}
		curve = provisional(max(s.Max, 1))
	}
	probe := alloc.Problem{Objective: c.Objective, Trainers: []alloc.Trainer{{
		ID: s.ID, Min: s.Min, Max: s.Max, Curve: curve, Weight: s.Weight, RUp: s.RUp, RDown: s.RDown,
	}}}
	if err := probe.Validate(); err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	if s.Samples < 0 || s.Samples != s.Samples {
		return fmt.Errorf("submit %q: samples must be ≥ 0", s.ID)
	}
	return nil
}

// Submit queues a Trainer. Its Submit time is when it becomes eligible.
func (p *Pool) Submit(at time.Time, s Spec) error {
	if _, dup := p.byID[s.ID]; dup {
		return fmt.Errorf("submit %q: %w", s.ID, errDuplicate)
	}
	if err := p.cfg.CheckSpec(s); err != nil {
		return err
	}
	p.accrue(at)
	if s.Submit.IsZero() {
		s.Submit = p.now
	}
	t := &Trainer{Spec: s, Status: Queued}
	if err := p.startLearning(t); err != nil {
		return fmt.Errorf("submit %q: %w", s.ID, err)
	}
	p.queue = append(p.queue, t)
	p.byID[s.ID] = t
	p.record(Change{Kind: Submitted, Trainer: s.ID})
	return nil
}

// Admit moves queued Trainers whose submit time has come to running,
// first come first served, up to MaxTrainers. With AutoAdmit it admits
// nothing: Decide admits by value.
func (p *Pool) Admit() {
	if p.cfg.AutoAdmit {
		return
	}
	for i := 0; i < len(p.queue) && len(p.running) < p.cfg.MaxTrainers; {
		if p.queue[i].Submit.After(p.now) {
			i++
			continue
		}
		p.admit(i)
	}
}

// admit moves queue[i] to running.
func (p *Pool) admit(i int) {
	t := p.queue[i]
	p.queue = slices.Delete(p.queue, i, i+1)
	t.Status, t.Admitted = Running, p.now
	p.setCount(t)
	p.running = append(p.running, t)
	p.record(Change{Kind: Admitted, Trainer: t.ID})
}

// eligible returns the index in the queue of the first Trainer whose submit
// time has come, or -1.
func (p *Pool) eligible() int {
	for i, t := range p.queue {
		if !t.Submit.After(p.now) {
			return i
		}
	}
	return -1
}

// Cancel ends an active Trainer: its nodes become free.
func (p *Pool) Cancel(at time.Time, id string) error {
	return p.End(at, id, Cancelled, "cancelled")
}

// End records that an active Trainer ended (finished, failed or
// cancelled) and frees its nodes; then queued Trainers are admitted.
func (p *Pool) End(at time.Time, id string, st Status, note string) error {
	t, ok := p.byID[id]
	if !ok {
		return fmt.Errorf("end %q: %w", id, ErrUnknownTrainer)
	}
	if st.Active() {
		return fmt.Errorf("end %q: %q is not an end state", id, st)
	}
	p.accrue(at)
	p.end(t, st, note)
	p.Admit()
	return nil
}

// Progress records a Trainer's own report of the samples it has
// processed: it replaces the estimate, and the samples since its previous
// report are an observation of its curve (learn.go). A Trainer that
// reports its target is finished; one that has reported is never finished
// on the pool's estimate (it ends by a report or by its workers' exit).
func (p *Pool) Progress(at time.Time, id string, samples float64) error {
	return p.ProgressOn(at, id, samples, 0)
}

// ProgressOn is Progress of a report that says on how many nodes the
// Trainer trained since its previous report (0: it does not say). A
// report on another count than the Trainer holds — the workers still at
// the old size, or re-forming at the new one (torchrun keeps training at
// the old size until its next rendezvous) — is no observation of the
// held count, and its settle window starts only at the first report on
// it (Learning.Resumed).
func (p *Pool) ProgressOn(at time.Time, id string, samples float64, nodes int) error {
	t, ok := p.byID[id]
	if !ok {
		return fmt.Errorf("progress %q: %w", id, ErrUnknownTrainer)
	}
	if samples < 0 || samples != samples {
		return fmt.Errorf("progress %q: samples must be ≥ 0", id)
	}
	p.accrue(at)
	p.totals.Samples += samples - t.Done
	t.Done = samples
	p.record(Change{Kind: Reported, Trainer: id, Cost: 0, Note: fmt.Sprintf("%.0f samples", samples)})
	if t.Status == Running {
		p.reported(t, samples, nodes)
	}
	if t.Samples > 0 && samples >= t.Samples {
		p.end(t, Finished, "reported its samples")
	}
	p.finishReached()
	p.Admit()
	return nil
}

// Problem returns the allocation problem for the pool now: the running
// Trainers in admission order with their remaining samples, the free
// nodes, the pool's clock and the idle periods it has seen end. With a
// plan (SetPlan), a node planned for a main job carries its planned start
// (alloc.Node.Until: a short horizon, never a refusal), and a free node
// planned within the lead is left out while Trainers move off it. It
// shares the pool's slices and history; solvers do not modify them.
func (p *Pool) Problem() *alloc.Problem {
	free, held := p.planView(p.free, func(i int) []alloc.Node { return p.running[i].Nodes })
	pr := &alloc.Problem{
		Trainers:  make([]alloc.Trainer, len(p.running)),
		Free:      free,
		TFwd:      p.cfg.TFwd,
		Objective: p.cfg.Objective,
		Semantics: p.cfg.Semantics,
		Now:       p.now,
		Idle:      &p.totals.Idle,
	}
	for i, t := range p.running {
		pr.Trainers[i] = alloc.Trainer{
			ID: t.ID, Min: t.Min, Max: t.Max, Curve: p.planCurve(t), Weight: t.Weight,
			RUp: t.RescaleUp(), RDown: t.RescaleDown(), Held: held(i), Remaining: remaining(t),
		}
		if t.backingOff(p.now) {
			// Its last start failed: it takes no node before RetryAt
			// (starts.go), and keeps at most those it holds.
			a := &pr.Trainers[i]
			a.Max = len(a.Held)
			a.Min = min(a.Min, a.Max)
		}
	}
	return pr
}

// remaining is the samples a Trainer has left, the rescale cost it owes
// included (0: no target). A Trainer that reports has at least one left
// until a report says otherwise: the estimate between reports may pass its
// target, but 0 would mean no target at all.
func remaining(t *Trainer) float64 {
	if t.Samples <= 0 {
		return 0
	}
	left := max(0, t.Samples-t.Done+t.PendingCost)
	if reports(t) {
		left = max(left, 1)
	}
	return left
}

// Commit applies a plan for the current Problem. An Optimal plan moves
// nodes and books each rescale's cost, R·P(C) samples at the size held
// before the decision, charged at the next event; any other plan keeps
// the nodes and books nothing. Either way every rate is recomputed from
// the node count.
func (p *Pool) Commit(pl *alloc.Plan) error { return p.commit(pl, nil) }

// commit is Commit, recording in the learning Trainers' ledgers the
// decision and which of the probes offered it carried out.
func (p *Pool) commit(pl *alloc.Plan, probes []Probe) error {
	if len(pl.Trainers) != len(p.running) {
		return fmt.Errorf("commit: %w: %d trainers in the plan, %d running", errStalePlan, len(pl.Trainers), len(p.running))
	}
	for i, a := range pl.Trainers {
		if t := p.running[i]; a.ID != t.ID || a.From != len(t.Nodes) {
			return fmt.Errorf("commit: %w: trainer %d is %q with %d nodes, plan says %q from %d", errStalePlan, i, t.ID, len(t.Nodes), a.ID, a.From)
		}
	}
	if pl.Status != alloc.Optimal {
		for _, t := range p.running {
			t.PendingCost = 0
			t.Rate = p.TrueRate(t)
		}
		p.record(Change{Kind: Undecided, Note: fmt.Sprintf("%s: %s", pl.Solver, pl.Note)})
		return nil
	}
	if err := p.checkPlan(pl); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	p.decided(pl, probes)
	// Releases first, so that growing Trainers can take released nodes.
	// The free list changes once for all of them, and once for all the
	// nodes taken (a node at a time, each insert and delete moved the
	// whole list: O(N) a node on a 10,000-node pool).
	var freed []alloc.Node
	for i, a := range pl.Trainers {
		t := p.running[i]
		if len(a.Release) == 0 {
			continue
		}
		gone := make(map[string]bool, len(a.Release))
		for _, name := range a.Release {
			gone[name] = true
		}
		kept := t.Nodes[:0:0]
		for _, n := range t.Nodes {
			if gone[n.Name] {
				delete(gone, n.Name)
				p.nodes[n.Name].Trainer = ""
				freed = append(freed, n)
				continue
			}
			kept = append(kept, n)
		}
		for _, name := range a.Release {
			if gone[name] {
				return fmt.Errorf("commit: trainer %q releases %q, which it does not hold", t.ID, name)
			}
		}
		t.Nodes = kept
	}
	p.addFreeAll(freed)
	var taken []alloc.Node
	defer func() { p.removeFreeAll(taken) }()
	for i, a := range pl.Trainers {
		t := p.running[i]
		for _, name := range a.Add {
			n := p.nodes[name]
			if n == nil || n.State != Idle || n.Trainer != "" {
				return fmt.Errorf("commit: trainer %q takes %q, which is not free", t.ID, name)
			}
			an := alloc.Node{Name: n.Name, Since: n.Since, Order: n.Order}
			taken = append(taken, an)
			n.Trainer = t.ID
			t.Nodes = append(t.Nodes, an)
		}
		from, to := a.From, len(t.Nodes)
		cost := 0.0
		truth := p.trueCurve(t)
		switch {
		case to > from:
			cost = t.RescaleUp() * alloc.Interp(truth.Nodes, truth.Throughput, from)
		case to < from:
			cost = t.RescaleDown() * alloc.Interp(truth.Nodes, truth.Throughput, from)
		}
		t.PendingCost = cost
		if to != from {
			p.setCount(t)
		}
		t.Rate = p.TrueRate(t)
		if to != from {
			t.Rescales++
			t.RescaleLoss += cost
			p.totals.Rescales++
			p.totals.RescaleLoss += cost
			ch := Change{Kind: Rescaled, Trainer: t.ID, From: from, To: to, Add: a.Add, Release: a.Release, Cost: cost}
			for k := range probes {
				if probes[k].Trainer == t.ID && probes[k].Nodes == to {
					ch.Probe = &probes[k]
				}
			}
			p.record(ch)
		}
	}
	return nil
}

// checkPlan verifies, before anything moves, that every released node is
// held by its Trainer and every added node is free or released in the
// same plan, so that a commit is all or nothing.
func (p *Pool) checkPlan(pl *alloc.Plan) error {
	released := map[string]bool{}
	for i, a := range pl.Trainers {
		t := p.running[i]
		for _, name := range a.Release {
			n := p.nodes[name]
			if n == nil || n.State != Idle || n.Trainer != t.ID {
				return fmt.Errorf("%w: trainer %q releases %q, which it does not hold", errStalePlan, t.ID, name)
			}
			released[name] = true
		}
	}
	taken := map[string]bool{}
	for i, a := range pl.Trainers {
		t := p.running[i]
		if len(a.Add) > 0 && len(a.Release) > 0 {
			return fmt.Errorf("%w: trainer %q both grows and shrinks", errStalePlan, t.ID)
		}
		if len(t.Nodes)+len(a.Add)-len(a.Release) != a.To {
			return fmt.Errorf("%w: trainer %q: %d + %d − %d ≠ %d", errStalePlan, t.ID, len(t.Nodes), len(a.Add), len(a.Release), a.To)
		}
		for _, name := range a.Add {
			n := p.nodes[name]
			free := n != nil && n.State == Idle && (n.Trainer == "" || released[name])
			if !free || taken[name] {
				return fmt.Errorf("%w: trainer %q takes %q, which is not free", errStalePlan, t.ID, name)
			}
			taken[name] = true
		}
	}
	return nil
}
