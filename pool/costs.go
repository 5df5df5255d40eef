package pool

import (
	"fmt"
	"slices"
)

// Costs are the rescale costs measured on a Trainer's own processes
// (seconds of training progress lost), most recent last, at most
// KeepCosts of each.
type Costs struct {
	Up   []float64 `json:"up,omitempty"`
	Down []float64 `json:"down,omitempty"` // scale-downs and reclaims
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
	CostReclaim = "reclaim" // nodes the scheduler took back; priced as R_down
)

// RescaleUp is the R_up the allocator and the accounting use for t.
func (t *Trainer) RescaleUp() float64 { return estimate(t.RUp, t.Measured.Up) }

// RescaleDown is the R_down the allocator and the accounting use for t
// (a planned shrink and a reclaim alike).
func (t *Trainer) RescaleDown() float64 { return estimate(t.RDown, t.Measured.Down) }

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
// CostReclaim). It changes the Trainer's R_up or R_down from the next
// decision on; nothing already charged is recomputed.
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
	case CostDown, CostReclaim:
		t.Measured.Down = keepLast(t.Measured.Down, seconds)
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
