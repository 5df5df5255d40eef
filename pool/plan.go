package pool

import (
	"math"
	"slices"
	"time"

	"github.com/bftrainer/bftrainer/alloc"
)

// Planned is a main job the scheduler plans to start later on nodes some
// of which may be idle now (Slurm's backfill plan, Grid Engine's
// reservations, a replay's EASY reservation for the head of its queue).
// It is a hint, often wrong: it never keeps a node from the scheduler, and
// the prolog's kill stays the backstop for every job no plan showed.
type Planned struct {
	Job   string
	Nodes []string
	Start time.Time
}

// plannedNode is the earliest planned start on one node.
type plannedNode struct {
	start time.Time
	job   string
	// stable: the plan before this one (the last that differed) named the
	// node with the same start (PlanStable).
	stable bool
}

// PlanHorizon is which planned nodes the allocator prices with a horizon
// that ends at their planned start (Config.PlanHorizon).
type PlanHorizon string

// The choices of Config.PlanHorizon.
const (
	// PlanUnpriced (the default): none; the plan only moves Trainers. In
	// every replay measured (docs/replay.md, "The scheduler's plan") the
	// short horizons added more rescale loss than they saved.
	PlanUnpriced PlanHorizon = ""
	// PlanStable: a node whose planned start the scheduler kept across a
	// new plan (the last plan that differed named it with the same
	// start); a node the plan names anew at each pass is not priced until
	// the plan settles.
	PlanStable PlanHorizon = "stable"
	// PlanPriced: every node the plan names.
	PlanPriced PlanHorizon = "priced"
)

// SetPlan replaces the scheduler's plan the pool knows: each node's
// earliest planned start. The plan is an input of the next decisions only
// (Decide moves Trainers off nodes planned within their lead and prices
// the others with a horizon that ends at their planned start, see
// Problem); it is not part of State, since every scheduling pass plans
// anew and the caller sets it before each decision. nil clears it.
func (p *Pool) SetPlan(plan []Planned) {
	if samePlan(plan, p.planSet) {
		return
	}
	p.planSet = clonePlan(plan)
	old := p.plan
	p.plan = nil
	for _, pl := range plan {
		if pl.Start.IsZero() {
			continue
		}
		for _, n := range pl.Nodes {
			if p.plan == nil {
				p.plan = map[string]plannedNode{}
			}
			if cur, ok := p.plan[n]; !ok || pl.Start.Before(cur.start) {
				p.plan[n] = plannedNode{start: pl.Start, job: pl.Job}
			}
		}
	}
	for n, pn := range p.plan {
		if o, ok := old[n]; ok && o.start.Equal(pn.start) {
			pn.stable = true
			p.plan[n] = pn
		}
	}
}

// samePlan reports whether two plans are the same, job by job.
func samePlan(a, b []Planned) bool {
	return slices.EqualFunc(a, b, func(x, y Planned) bool {
		return x.Job == y.Job && x.Start.Equal(y.Start) && slices.Equal(x.Nodes, y.Nodes)
	})
}

func clonePlan(plan []Planned) []Planned {
	out := slices.Clone(plan)
	for i := range out {
		out[i].Nodes = slices.Clone(out[i].Nodes)
	}
	return out
}

// priced returns the planned start the allocator sees on a node
// (Config.PlanHorizon), if any.
func (p *Pool) priced(node string, lead time.Duration) (time.Time, bool) {
	pn, ok := p.planned(node, lead)
	switch {
	case !ok || p.cfg.PlanHorizon == PlanUnpriced:
		return time.Time{}, false
	case p.cfg.PlanHorizon == PlanStable && !pn.stable:
		return time.Time{}, false
	}
	return pn.start, true
}

// Lead is how long before a main job's planned start Decide moves a
// Trainer off the job's nodes: Config.PlanLead when set, else the
// Trainer's R_down (the time its graceful shrink takes, as measured on its
// own processes) plus Config.PlanSlack.
func (p *Pool) Lead(t *Trainer) time.Duration {
	if p.cfg.PlanLead > 0 {
		return p.cfg.PlanLead
	}
	return time.Duration(math.Ceil(max(0, t.RescaleDown())*1e9)) + p.cfg.PlanSlack
}

// maxLead is the longest lead of the running Trainers.
func (p *Pool) maxLead() time.Duration {
	var m time.Duration
	for _, t := range p.running {
		m = max(m, p.Lead(t))
	}
	if len(p.running) == 0 && p.cfg.PlanLead > 0 {
		m = p.cfg.PlanLead
	}
	return m
}

// planned returns the planned start on a node, if a plan names it and
// the plan is not stale: a start more than lead in the past is a job that
// did not come (the scheduler changed its mind, or the plan was read long
// ago), and says nothing any more.
func (p *Pool) planned(node string, lead time.Duration) (plannedNode, bool) {
	pn, ok := p.plan[node]
	if !ok || p.now.Sub(pn.start) > lead {
		return plannedNode{}, false
	}
	return pn, true
}

// moving reports whether a node is planned for a main job within lead:
// Trainers are moved off it, and none is given it, until the plan changes
// or goes stale.
func (p *Pool) moving(node string, lead time.Duration) bool {
	pn, ok := p.planned(node, lead)
	return ok && pn.start.Sub(p.now) <= lead
}

// movePlanned shrinks every running Trainer off the nodes it holds that
// are planned for a main job within its lead: a graceful move at a step
// boundary, before the job lands, instead of the prolog's kill when it
// does. Each Trainer that moves is charged R_down·rate once, as a
// planned shrink (booked at this decision, charged next, like a rescale);
// its nodes stay idle and free.
func (p *Pool) movePlanned() {
	if len(p.plan) == 0 {
		return
	}
	for _, t := range p.running {
		lead := p.Lead(t)
		var gone []string
		job := ""
		for _, hn := range t.Nodes {
			if p.moving(hn.Name, lead) {
				gone = append(gone, hn.Name)
				if job == "" {
					job = p.plan[hn.Name].job
				}
			}
		}
		if len(gone) == 0 {
			continue
		}
		from := len(t.Nodes)
		t.Nodes = slices.DeleteFunc(t.Nodes, func(n alloc.Node) bool {
			if !slices.Contains(gone, n.Name) {
				return false
			}
			p.nodes[n.Name].Trainer = ""
			p.addFree(n)
			return true
		})
		cost := t.RescaleDown() * t.Rate
		t.PendingCost += cost
		t.Rate = t.Curve.SamplesPerSecond(len(t.Nodes), t.Min)
		t.Rescales++
		t.RescaleLoss += cost
		p.totals.Moves++
		p.totals.MoveLoss += cost
		p.record(Change{Kind: Moved, Trainer: t.ID, Job: job, Nodes: gone, From: from, To: len(t.Nodes), Cost: cost,
			Note: "planned start " + p.plan[gone[0]].start.UTC().Format(time.RFC3339)})
	}
}

// NextMove returns the next moment after now at which a Trainer's lead
// before a planned start on a node it holds begins, so that a replay can
// decide then, as the live reconciler's rounds do; false if none.
func (p *Pool) NextMove() (time.Time, bool) {
	var first time.Time
	found := false
	for _, t := range p.running {
		lead := p.Lead(t)
		for _, hn := range t.Nodes {
			pn, ok := p.planned(hn.Name, lead)
			if !ok {
				continue
			}
			at := pn.start.Add(-lead)
			if at.After(p.now) && (!found || at.Before(first)) {
				first, found = at, true
			}
		}
	}
	return first, found
}

// MoveDue reports whether a Trainer holds a node planned for a main job
// within its lead now: the next decision moves it (a replay that learns
// of a plan between events decides then).
func (p *Pool) MoveDue() bool {
	if len(p.plan) == 0 {
		return false
	}
	for _, t := range p.running {
		lead := p.Lead(t)
		for _, hn := range t.Nodes {
			if p.moving(hn.Name, lead) {
				return true
			}
		}
	}
	return false
}

// planView returns the problem's node lists with the plan in them: free
// nodes planned within the longest lead left out (they are being vacated
// for a main job), every other planned node carrying its planned start
// (alloc.Node.Until). Without a plan it returns the pool's own slices.
func (p *Pool) planView(free []alloc.Node, held func(i int) []alloc.Node) ([]alloc.Node, func(i int) []alloc.Node) {
	if len(p.plan) == 0 {
		return free, held
	}
	lead := p.maxLead()
	var out []alloc.Node
	for _, n := range free {
		if p.moving(n.Name, lead) {
			continue
		}
		if u, ok := p.priced(n.Name, lead); ok {
			n.Until = u
		}
		out = append(out, n)
	}
	return out, func(i int) []alloc.Node {
		ns := held(i)
		var c []alloc.Node
		for k, n := range ns {
			if u, ok := p.priced(n.Name, lead); ok {
				if c == nil {
					c = slices.Clone(ns)
				}
				c[k].Until = u
			}
		}
		if c == nil {
			return ns
		}
		return c
	}
}
