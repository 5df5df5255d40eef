package alloc

import "fmt"

// Explain says, for each Trainer of a Plan, why it gets what it gets: the
// binding bound, or the trade-off the solver made. Explanations are in
// Problem order.
func Explain(p *Problem, pl *Plan) []string {
	out := make([]string, len(p.Trainers))
	N := p.Size()
	used := 0
	for _, a := range pl.Trainers {
		used += a.To
	}
	spare := N - used
	step := p.StepLimit()
	for j := range p.Trainers {
		t, a := &p.Trainers[j], &pl.Trainers[j]
		out[j] = explainOne(p, j, t, a, pl, N, spare, step)
	}
	return out
}

func explainOne(p *Problem, j int, t *Trainer, a *Assignment, pl *Plan, N, spare, step int) string {
	if pl.Status != Optimal {
		return fmt.Sprintf("keeps %d nodes: %s", a.To, pl.Note)
	}
	move := ""
	switch {
	case a.To > a.From:
		move = fmt.Sprintf("grows %d → %d", a.From, a.To)
	case a.To < a.From:
		move = fmt.Sprintf("shrinks %d → %d", a.From, a.To)
	default:
		move = fmt.Sprintf("keeps %d", a.To)
	}
	lo, hi := p.bounds(j)
	switch {
	case a.To == 0 && lo > N:
		return fmt.Sprintf("%s: needs at least %d nodes, the pool has %d", move, t.Min, N)
	case a.To > 0 && a.To == t.MaxNodes():
		if t.MaxNodes() < t.Max {
			return fmt.Sprintf("%s: the end of its curve (%d nodes)", move, a.To)
		}
		return fmt.Sprintf("%s: its maximum", move)
	case a.To == hi && hi < t.MaxNodes():
		return fmt.Sprintf("%s: every node of the pool", move)
	case p.Semantics == Reference && (a.To-a.From == step || a.From-a.To == step):
		return fmt.Sprintf("%s: the reference step limit of %d nodes per decision", move, step)
	}
	// Next size up that is feasible, and what it would change.
	next := a.To + 1
	if a.To == 0 {
		next = max(lo, 1)
	}
	if !p.Feasible(j, next) {
		return fmt.Sprintf("%s: no larger size is feasible", move)
	}
	gain := p.Value(j, next) - p.Value(j, a.To)
	need := next - a.To
	if need <= spare {
		if a.To == a.From && a.To > 0 && t.RUp > 0 {
			return fmt.Sprintf("%s: %d more node(s) would gain %.4g over T_fwd=%gs, less than the rescale cost %.4g (R_up %gs × rate %.4g)",
				move, need, p.TFwd*(t.value(p.Goal(), next)-t.value(p.Goal(), a.To))*t.Priority(), p.TFwd,
				t.Priority()*t.RUp*t.Rate(p.Goal(), a.From), t.RUp, t.Rate(p.Goal(), a.From))
		}
		return fmt.Sprintf("%s: %d more node(s) would change its objective by %.4g (≤ 0)", move, need, gain)
	}
	return fmt.Sprintf("%s: %d more node(s) would add %.4g here, but every node is worth more where it is (%d of %d in use)",
		move, need, gain, N-spare, N)
}
