package alloc

import (
	"fmt"
	"math"
)

// Check verifies that a Plan satisfies every constraint of the model for
// the Problem: node bounds, one Trainer per node, only pool nodes, no
// migration (grow by adding, or shrink to a subset, never both), Add and
// Release consistent with the node sets, the Reference step limit, and
// the reported objective (under the plan's Pricing). Every solver's plans
// go through this one checker in the tests.
func Check(p *Problem, pl *Plan) error {
	if len(pl.Trainers) != len(p.Trainers) {
		return fmt.Errorf("plan has %d trainers, problem %d", len(pl.Trainers), len(p.Trainers))
	}
	if pl.Status != Optimal {
		return checkKept(p, pl)
	}
	owner := make(map[string]string, p.Size())
	for _, n := range p.Free {
		owner[n.Name] = ""
	}
	for i := range p.Trainers {
		for _, n := range p.Trainers[i].Held {
			owner[n.Name] = p.Trainers[i].ID
		}
	}
	taken := make(map[string]string, p.Size())
	total := 0
	step := p.StepLimit()
	for j := range p.Trainers {
		t, a := &p.Trainers[j], &pl.Trainers[j]
		if a.ID != t.ID {
			return fmt.Errorf("plan trainer %d is %q, problem has %q", j, a.ID, t.ID)
		}
		if a.From != len(t.Held) {
			return fmt.Errorf("trainer %q: from %d, holds %d", t.ID, a.From, len(t.Held))
		}
		if a.To != len(a.Nodes) {
			return fmt.Errorf("trainer %q: to %d but %d nodes", t.ID, a.To, len(a.Nodes))
		}
		if a.To != 0 && (a.To < t.Min || a.To > t.MaxNodes()) {
			return fmt.Errorf("trainer %q: %d nodes, outside 0 or [%d, %d]", t.ID, a.To, t.Min, t.MaxNodes())
		}
		if !pl.NoStepLimit && (a.To-a.From > step || a.From-a.To > step) {
			return fmt.Errorf("trainer %q: %d → %d exceeds the step limit %d", t.ID, a.From, a.To, step)
		}
		held := make(map[string]bool, len(t.Held))
		for _, n := range t.Held {
			held[n.Name] = true
		}
		kept, added := 0, make(map[string]bool)
		for _, name := range a.Nodes {
			o, ok := owner[name]
			if !ok {
				return fmt.Errorf("trainer %q: node %q is not in the pool", t.ID, name)
			}
			if prev, dup := taken[name]; dup {
				return fmt.Errorf("node %q given to both %q and %q", name, prev, t.ID)
			}
			taken[name] = t.ID
			switch {
			case held[name]:
				kept++
			case o == "" || o != t.ID:
				added[name] = true
			}
		}
		removed := len(t.Held) - kept
		if len(added) > 0 && removed > 0 {
			return fmt.Errorf("trainer %q: adds %d nodes and drops %d (migration)", t.ID, len(added), removed)
		}
		if len(a.Add) != len(added) {
			return fmt.Errorf("trainer %q: Add lists %d nodes, %d were added", t.ID, len(a.Add), len(added))
		}
		for _, name := range a.Add {
			if !added[name] {
				return fmt.Errorf("trainer %q: Add lists %q, which it does not gain", t.ID, name)
			}
		}
		if len(a.Release) != removed {
			return fmt.Errorf("trainer %q: Release lists %d nodes, %d were dropped", t.ID, len(a.Release), removed)
		}
		for _, name := range a.Release {
			if !held[name] {
				return fmt.Errorf("trainer %q: releases %q, which it does not hold", t.ID, name)
			}
		}
		total += a.To
	}
	// A node added to one Trainer must be free or released by another.
	for j := range pl.Trainers {
		for _, name := range pl.Trainers[j].Add {
			if o := owner[name]; o != "" && taken[name] == pl.Trainers[j].ID {
				for k := range pl.Trainers {
					if pl.Trainers[k].ID == o && contains(pl.Trainers[k].Nodes, name) {
						return fmt.Errorf("node %q added to %q but still held by %q", name, pl.Trainers[j].ID, o)
					}
				}
			}
		}
	}
	if total > p.Size() {
		return fmt.Errorf("plan uses %d nodes, pool has %d", total, p.Size())
	}
	want := p.ObjectiveWith(pl.Pricing, pl.Counts())
	if pl.NoStepLimit {
		val := p.Prices(pl.Pricing)
		want = 0
		for j, a := range pl.Trainers {
			want += val(j, a.To)
		}
	}
	if !approxEqual(pl.Objective, want, 1e-9) {
		return fmt.Errorf("plan objective %v, recomputed %v", pl.Objective, want)
	}
	return nil
}

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

// approxEqual reports whether a and b agree to a relative tolerance.
func approxEqual(a, b, rel float64) bool {
	if a == b {
		return true
	}
	return math.Abs(a-b) <= rel*math.Max(1, math.Max(math.Abs(a), math.Abs(b)))
}

// checkKept verifies that a non-optimal plan changes nothing.
func checkKept(p *Problem, pl *Plan) error {
	for j := range p.Trainers {
		t, a := &p.Trainers[j], &pl.Trainers[j]
		if a.ID != t.ID || a.To != len(t.Held) || len(a.Nodes) != len(t.Held) || len(a.Add)+len(a.Release) != 0 {
			return fmt.Errorf("%s plan changes trainer %q", pl.Status, t.ID)
		}
	}
	return nil
}
