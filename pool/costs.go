package pool

import (
	"fmt"
	"slices"
)

// Costs are the rescale costs measured on a Trainer's own processes
// (seconds of training progress lost), most recent last, at most
// KeepCosts of each. A graceful shrink (a plan's decision or a planned
// move, at a step boundary after a checkpoint or a handover) and a
// reclaim (the prolog's kill: everything since the last checkpoint is
// lost) are kept apart. A State saved before they were held reclaims in
// Down, as one shrink cost; it reads back so.
type Costs struct {
	Up      []float64 `json:"up,omitempty"`
	Down    []float64 `json:"down,omitempty"`    // graceful scale-downs (and, in older States, reclaims)
	Reclaim []float64 `json:"reclaim,omitempty"` // reclaims: the scheduler took nodes back
}

// How measured costs become the R_up / R_down the allocator uses: the
// median of the last KeepCosts measurements of that direction together
// with the submitted value counted PriorWeight times. The submitted value
// is a prior: it decides alone until measurements exist, one outlier
// cannot move the estimate, and PriorWeight+1 consistent measurements
// replace it. A window, not the whole history, so that the estimate
// follows a Trainer whose cost changes (a larger model, another node
// type).
const (
	KeepCosts   = 15
	PriorWeight = 2
)

// Measured cost directions, as the launcher reports them.
const (
	CostUp      = "up"      // nodes added
	CostDown    = "down"    // nodes the plan took away
	CostReclaim = "reclaim" // nodes the scheduler took back (ReclaimDown)
)

// RescaleUp is the R_up the allocator and the accounting use for t.
func (t *Trainer) RescaleUp() float64 { return estimate(t.RUp, t.Measured.Up) }

// RescaleDown is the R_down the allocator and the accounting use for t's
// graceful shrinks (a plan's and a planned move's), and its lead before a
// planned start (Pool.Lead).
func (t *Trainer) RescaleDown() float64 { return estimate(t.RDown, t.Measured.Down) }

// ReclaimDown is what a reclaim (a kill) costs t, in seconds of progress:
// from its reclaim measurements with the submitted R_down as prior, as
// RescaleDown from its own; RescaleDown until a reclaim is measured (the
// paper's model: one shrink cost for both). The allocator still prices a
// reclaim it expects with RescaleDown.
func (t *Trainer) ReclaimDown() float64 {
	if len(t.Measured.Reclaim) == 0 {
		return t.RescaleDown()
	}
	return estimate(t.RDown, t.Measured.Reclaim)
}

func estimate(prior float64, measured []float64) float64 {
	if len(measured) == 0 {
		return prior
	}
	xs := make([]float64, 0, len(measured)+PriorWeight)
	for range PriorWeight {
		xs = append(xs, prior)
	}
	xs = append(xs, measured...)
	slices.Sort(xs)
	m := len(xs) / 2
	if len(xs)%2 == 1 {
		return xs[m]
	}
	return (xs[m-1] + xs[m]) / 2
}

// MeasuredCost records a rescale cost measured on a Trainer's processes:
// seconds of progress lost by a change in direction (CostUp, CostDown,
// CostReclaim). It changes the Trainer's R_up, R_down or reclaim cost
// from the next decision or reclaim on; nothing already charged is
// recomputed.
func (p *Pool) MeasuredCost(id, direction string, seconds float64) error {
	t, ok := p.byID[id]
	if !ok {
		return fmt.Errorf("measured cost %q: %w", id, ErrUnknownTrainer)
	}
	if seconds < 0 || seconds != seconds || seconds > 1e9 {
		return fmt.Errorf("measured cost %q: %v s, want a finite number ≥ 0", id, seconds)
	}
	switch direction {
	case CostUp:
		t.Measured.Up = keepLast(t.Measured.Up, seconds)
	case CostDown:
		t.Measured.Down = keepLast(t.Measured.Down, seconds)
	case CostReclaim:
		t.Measured.Reclaim = keepLast(t.Measured.Reclaim, seconds)
	default:
		return fmt.Errorf("measured cost %q: direction %q, want %s, %s or %s", id, direction, CostUp, CostDown, CostReclaim)
	}
	return nil
}

// keepLast appends x to a new slice holding at most KeepCosts values (a
// new one: the old may be shared with a saved State).
func keepLast(xs []float64, x float64) []float64 {
	out := append(slices.Clone(xs), x)
	if len(out) > KeepCosts {
		out = out[len(out)-KeepCosts:]
	}
	return out
}
