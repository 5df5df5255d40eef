// Package alloc decides how many idle nodes each Trainer gets, and which ones.
//
// It is the model of BFTrainer (arXiv 2106.12091, §2 of the project's notes):
// a Problem holds the idle pool (free nodes, and the nodes Trainers hold now),
// the Trainers with their node bounds, scaling curves and rescale costs, and
// the horizon T_fwd. A Solver turns it into a Plan. The package is pure: no
// files, no clock, no processes; the same Problem always gives the same Plan.
//
// The paper's objective (FixedHorizon, solved by Exact) values a count over a
// fixed T_fwd; nodes are then interchangeable, the optimum depends only on the
// node count of each Trainer, and Exact is a dynamic programme over counts.
// The default solver, Adaptive, keeps the constraints and the exact
// programme but prices each count over what the pool has observed
// (AdaptiveHorizon: how long idle periods last, how often nodes come free,
// the ages of the nodes, each Trainer's remaining work); a stated placement
// rule makes its value a function of the count, so the same programme is
// exact for it. Physical nodes are chosen by that rule (see Place). The
// node-level MILP of the paper lives in the subpackage milp, for either
// objective, and is solved by real MILP solvers to check both.
package alloc

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
)

// Objective names the metric the allocator maximises.
type Objective string

const (
	// Throughput maximises samples per second (the curve's Throughput).
	Throughput Objective = "throughput"
	// Speedup maximises throughput relative to one node, P(n)/P(1): it
	// favours Trainers that scale well.
	Speedup Objective = "speedup"
	// Metric maximises the curve's Metric column, any admin- or
	// user-defined value per node count.
	Metric Objective = "metric"
)

// ParseObjective returns the Objective named s, or an error listing the
// valid names.
func ParseObjective(s string) (Objective, error) {
	switch o := Objective(strings.ToLower(strings.TrimSpace(s))); o {
	case Throughput, Speedup, Metric:
		return o, nil
	case "":
		return Throughput, nil
	}
	return "", fmt.Errorf("unknown objective %q (want throughput, speedup or metric)", s)
}

// Semantics selects where the model follows the reference code exactly.
type Semantics int

const (
	// Default is bftrainer's model: any change of size in one decision,
	// growth takes the free nodes idle longest, a shrink releases the
	// nodes that became idle most recently.
	Default Semantics = iota
	// Reference reproduces the reference code where it differs: its big-M
	// of N+1 limits a change of size to ⌊(N+1)/2⌋ nodes per decision, and
	// nodes are taken and released in column order (oldest idle first).
	Reference
)

func (s Semantics) String() string {
	if s == Reference {
		return "reference"
	}
	return "default"
}

// ParseSemantics parses "default" or "reference".
func ParseSemantics(s string) (Semantics, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "default":
		return Default, nil
	case "reference":
		return Reference, nil
	}
	return Default, fmt.Errorf("unknown semantics %q (want default or reference)", s)
}

// Curve is a Trainer's measured scaling: at Nodes[i] nodes it processes
// Throughput[i] samples per second and scores Metric[i] (optional). Values
// between breakpoints are linearly interpolated; the value at 0 nodes is 0.
// A Trainer never gets more nodes than its last breakpoint.
type Curve struct {
	Nodes      []int     `json:"nodes"`
	Throughput []float64 `json:"throughput"`
	Metric     []float64 `json:"metric,omitempty"` // nil unless the Metric objective is used
}

// Node is an idle node: free, or held by a Trainer.
type Node struct {
	Name string
	// Since is when the node became idle (joined the pool). Growth takes
	// the nodes idle longest; idle periods are heavy-tailed, so an old idle
	// node is likely to stay idle.
	Since time.Time
	// Order breaks ties between nodes idle since the same instant (a
	// trace's column order); lower first, then Name.
	Order int
	// Until is when the scheduler plans to start a main job on the node
	// (zero: no plan). A hint, often wrong: AdaptiveHorizon ends the
	// node's horizon there, and placement takes unplanned nodes first;
	// no solver refuses a node for it.
	Until time.Time
}

// Trainer is an elastic training job as the allocator sees it.
type Trainer struct {
	ID       string
	Min, Max int     // node bounds: 0 nodes, or Min..Max
	Curve    Curve   // scaling curve
	Weight   float64 // priority weight on its objective; 0 means 1
	RUp      float64 // seconds of progress lost when it grows
	RDown    float64 // seconds of progress lost when it shrinks
	Held     []Node  // nodes it runs on now
	// Remaining is the samples it has left to process; 0 means unknown
	// (it runs until it exits). AdaptiveHorizon values no node past the
	// time the Trainer needs to finish.
	Remaining float64
}

// Problem is one allocation decision.
type Problem struct {
	Trainers  []Trainer
	Free      []Node  // idle nodes no Trainer holds
	TFwd      float64 // horizon in seconds the decision is worth over
	Objective Objective
	Semantics Semantics
	// Now is the decision time: a node's idle age is Now − Since. Zero
	// means the youngest node has just become idle.
	Now time.Time
	// Idle is what the pool has observed of idle periods that ended; nil
	// means none yet (AdaptiveHorizon then relies on its prior).
	Idle *IdleHistory
}

// ErrInvalid wraps every validation error.
var ErrInvalid = errors.New("invalid problem")

// FieldError names the Trainer and field a validation error is about.
type FieldError struct {
	Trainer string // empty for problem-level fields
	Field   string
	Reason  string
}

func (e *FieldError) Error() string {
	if e.Trainer == "" {
		return fmt.Sprintf("%s: %s", e.Field, e.Reason)
	}
	return fmt.Sprintf("trainer %q: %s: %s", e.Trainer, e.Field, e.Reason)
}

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *FieldError) Unwrap() error { return ErrInvalid }

func bad(trainer, field, format string, args ...any) error {
	return &FieldError{Trainer: trainer, Field: field, Reason: fmt.Sprintf(format, args...)}
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// Validate checks the Problem and returns the first error found, naming
// the Trainer and the field.
func (p *Problem) Validate() error {
	if !finite(p.TFwd) || p.TFwd < 0 {
		return bad("", "tfwd", "must be a finite number ≥ 0, got %v", p.TFwd)
	}
	switch p.Objective {
	case Throughput, Speedup, Metric, "":
	default:
		return bad("", "objective", "unknown objective %q (want throughput, speedup or metric)", p.Objective)
	}
	if p.Semantics != Default && p.Semantics != Reference {
		return bad("", "semantics", "unknown semantics %d", p.Semantics)
	}
	if p.Idle != nil {
		for b, n := range p.Idle.Ended {
			if !finite(n) || n < 0 {
				return bad("", "idle", "bin %d: count must be a finite number ≥ 0, got %v", b, n)
			}
		}
	}
	names := namesKept.take()
	defer names.release()
	seen := names.empty(p.Size())
	for _, n := range p.Free {
		if n.Name == "" {
			return bad("", "free", "node with an empty name")
		}
		if _, dup := seen[n.Name]; dup {
			return bad("", "free", "node %q listed twice", n.Name)
		}
		seen[n.Name] = ""
	}
	ids := make(map[string]bool, len(p.Trainers))
	for i := range p.Trainers {
		t := &p.Trainers[i]
		if t.ID == "" {
			return bad(fmt.Sprintf("#%d", i), "id", "empty")
		}
		if ids[t.ID] {
			return bad(t.ID, "id", "listed twice")
		}
		ids[t.ID] = true
		if err := t.validate(p.Objective); err != nil {
			return err
		}
		for _, n := range t.Held {
			if n.Name == "" {
				return bad(t.ID, "held", "node with an empty name")
			}
			if owner, dup := seen[n.Name]; dup {
				if owner == "" {
					return bad(t.ID, "held", "node %q is also listed as free", n.Name)
				}
				return bad(t.ID, "held", "node %q is also held by %q", n.Name, owner)
			}
			seen[n.Name] = t.ID
		}
	}
	return nil
}

func (t *Trainer) validate(obj Objective) error {
	if t.Min < 0 {
		return bad(t.ID, "min", "negative (%d)", t.Min)
	}
	if t.Max < 0 {
		return bad(t.ID, "max", "negative (%d)", t.Max)
	}
	if t.Min > t.Max {
		return bad(t.ID, "min", "%d is greater than max %d", t.Min, t.Max)
	}
	if !finite(t.Weight) || t.Weight < 0 {
		return bad(t.ID, "weight", "must be a finite number ≥ 0, got %v", t.Weight)
	}
	if !finite(t.RUp) || t.RUp < 0 {
		return bad(t.ID, "rescale_up", "must be a finite number of seconds ≥ 0, got %v", t.RUp)
	}
	if !finite(t.RDown) || t.RDown < 0 {
		return bad(t.ID, "rescale_down", "must be a finite number of seconds ≥ 0, got %v", t.RDown)
	}
	if !finite(t.Remaining) || t.Remaining < 0 {
		return bad(t.ID, "remaining", "must be a finite number of samples ≥ 0, got %v", t.Remaining)
	}
	c := &t.Curve
	if len(c.Nodes) == 0 {
		return bad(t.ID, "curve", "no points")
	}
	if len(c.Throughput) != len(c.Nodes) {
		return bad(t.ID, "curve", "%d node counts but %d throughputs", len(c.Nodes), len(c.Throughput))
	}
	if c.Metric != nil && len(c.Metric) != len(c.Nodes) {
		return bad(t.ID, "curve", "%d node counts but %d metric values", len(c.Nodes), len(c.Metric))
	}
	if obj == Metric && c.Metric == nil {
		return bad(t.ID, "curve", "objective is metric but the curve has no metric values")
	}
	for i, n := range c.Nodes {
		if n < 0 {
			return bad(t.ID, "curve", "negative node count %d", n)
		}
		if i > 0 && n <= c.Nodes[i-1] {
			return bad(t.ID, "curve", "node counts must increase: %d after %d", n, c.Nodes[i-1])
		}
		if v := c.Throughput[i]; !finite(v) || v < 0 {
			return bad(t.ID, "curve", "throughput at %d nodes must be a finite number ≥ 0, got %v", n, v)
		}
		if c.Metric != nil {
			if v := c.Metric[i]; !finite(v) {
				return bad(t.ID, "curve", "metric at %d nodes is not a finite number (%v)", n, v)
			}
		}
	}
	if c.Nodes[0] == 0 && c.Throughput[0] != 0 {
		return bad(t.ID, "curve", "throughput at 0 nodes must be 0, got %v", c.Throughput[0])
	}
	if obj == Speedup && Interp(c.Nodes, c.Throughput, 1) <= 0 {
		return bad(t.ID, "curve", "objective is speedup but throughput at 1 node is 0")
	}
	return nil
}

// Interp linearly interpolates the points (xs, ys) at x. Below the first
// point it interpolates towards (0, 0); above the last it extrapolates the
// last segment (the reference's interp1d with "extrapolate").
func Interp(xs []int, ys []float64, x int) float64 {
	if len(xs) == 0 || x <= 0 {
		return 0
	}
	i, found := slices.BinarySearch(xs, x)
	if found {
		return ys[i]
	}
	var x0, x1 int
	var y0, y1 float64
	switch {
	case i == 0:
		x1, y1 = xs[0], ys[0]
	case i == len(xs):
		if len(xs) == 1 {
			x1, y1 = xs[0], ys[0]
		} else {
			x0, y0, x1, y1 = xs[i-2], ys[i-2], xs[i-1], ys[i-1]
		}
	default:
		x0, y0, x1, y1 = xs[i-1], ys[i-1], xs[i], ys[i]
	}
	return y0 + (y1-y0)*float64(x-x0)/float64(x1-x0)
}

// interpAll sets out[x] = Interp(xs, ys, x) for x = 1..len(out)−1 (out[0]
// is left as it is: Interp is 0 there) and returns out, with the same
// arithmetic, walking the points once instead of searching for each x:
// each run of x between two points is one loop with the segment's ends
// at hand (adaptive's rates and speeds of every count, 10⁶ at
// N_max = 10,624, issue 23).
func interpAll(xs []int, ys []float64, out []float64) []float64 {
	n := len(out) - 1
	if len(xs) == 0 {
		clear(out[min(1, len(out)):])
		return out
	}
	i := 0 // the first point with xs[i] ≥ x
	for x := 1; x <= n; {
		for i < len(xs) && xs[i] < x {
			i++
		}
		if i < len(xs) && xs[i] == x {
			out[x] = ys[i]
			x++
			continue
		}
		// x up to the next point (or n) lies on one segment.
		end := n
		var x0, x1 int
		var y0, y1 float64
		switch {
		case i == 0:
			x1, y1 = xs[0], ys[0]
			end = min(n, xs[0]-1)
		case i == len(xs):
			if len(xs) == 1 {
				x1, y1 = xs[0], ys[0]
			} else {
				x0, y0, x1, y1 = xs[i-2], ys[i-2], xs[i-1], ys[i-1]
			}
		default:
			x0, y0, x1, y1 = xs[i-1], ys[i-1], xs[i], ys[i]
			end = min(n, xs[i]-1)
		}
		dy, dx := y1-y0, float64(x1-x0)
		for ; x <= end; x++ {
			out[x] = y0 + dy*float64(x-x0)/dx
		}
	}
	return out
}

// SamplesPerSecond is the curve's throughput on n nodes for a Trainer that
// needs at least min of them: 0 below min (and at 0 nodes), since below its
// minimum a Trainer does not run. This is the reference's accounting, and
// the one place the cutoff is written: the allocator's current rate, the
// pool's progress and the replay's initial map all read it here.
func (c Curve) SamplesPerSecond(n, min int) float64 {
	if !runs(n, min) {
		return 0
	}
	return Interp(c.Nodes, c.Throughput, n)
}

// runs reports whether a Trainer with minimum min runs on n nodes.
func runs(n, min int) bool { return n > 0 && n >= min }

// Column returns the curve values the objective o reads, and the divisor
// that turns them into o's metric: the metric at n nodes is
// Interp(c.Nodes, ys, n) / scale. Throughput reads Throughput (scale 1),
// Speedup reads Throughput over the throughput at one node, Metric reads
// Metric (scale 1); "" is Throughput. Every solver, exact or MILP, reads
// the objective through it.
func (o Objective) Column(c *Curve) (ys []float64, scale float64) {
	switch o {
	case Speedup:
		return c.Throughput, Interp(c.Nodes, c.Throughput, 1)
	case Metric:
		return c.Metric, 1
	}
	return c.Throughput, 1
}

// value returns the objective metric on n nodes (no Min check).
func (t *Trainer) value(obj Objective, n int) float64 {
	ys, scale := obj.Column(&t.Curve)
	return Interp(t.Curve.Nodes, ys, n) / scale
}

// Rate returns the Trainer's objective rate on n nodes: the metric at n,
// 0 below Min. It prices rescaling in the objective.
func (t *Trainer) Rate(obj Objective, n int) float64 {
	if !runs(n, t.Min) {
		return 0
	}
	return t.value(obj, n)
}

// Priority is the weight on the Trainer's objective term: Weight, with 0
// read as 1.
func (t *Trainer) Priority() float64 {
	if t.Weight == 0 {
		return 1
	}
	return t.Weight
}

// MaxNodes is the most nodes the Trainer can use: Max, capped by the last
// point of its curve (the MILP cannot interpolate past it).
func (t *Trainer) MaxNodes() int {
	return min(t.Max, t.Curve.Nodes[len(t.Curve.Nodes)-1])
}

// Size returns the number of nodes in the decision: free plus held.
func (p *Problem) Size() int {
	n := len(p.Free)
	for i := range p.Trainers {
		n += len(p.Trainers[i].Held)
	}
	return n
}

// StepLimit returns the most a Trainer's size may change in one decision:
// ⌊(N+1)/2⌋ under Reference semantics, N otherwise.
func (p *Problem) StepLimit() int {
	n := p.Size()
	if p.Semantics == Reference {
		return (n + 1) / 2
	}
	return n
}

// Value is the objective term of Trainer j at k nodes in the paper's
// fixed-horizon model (FixedHorizon):
//
//	w·(T_fwd·O(k) − [k>C]·R_up·r − [k<C]·R_down·r)
//
// with C its current count and r its current rate.
func (p *Problem) Value(j, k int) float64 {
	return p.price(j, k, p.TFwd*p.Trainers[j].value(p.Goal(), k))
}

// price is Trainer j's objective term at k nodes for a gain (what the
// Pricing says k nodes are worth): w·(gain − [k>C]·R_up·r − [k<C]·R_down·r).
func (p *Problem) price(j, k int, gain float64) float64 {
	t := &p.Trainers[j]
	c := len(t.Held)
	v := gain
	r := t.Rate(p.Goal(), c)
	switch {
	case k > c:
		v -= t.RUp * r
	case k < c:
		v -= t.RDown * r
	}
	return t.Priority() * v
}

// Pricing is an objective a solver maximises: Σ_j w_j·(gain_j(k_j) −
// rescale cost), the rescale cost priced as Value does. Pricings differ in
// what k nodes are worth to a Trainer before rescaling, its gain.
type Pricing interface {
	// Name names the objective ("fixed", "adaptive").
	Name() string
	// Gains returns, for p, Trainer j's gain on k nodes (before its weight
	// and rescale cost), for 0 ≤ k ≤ p.Size(). It may precompute; the
	// function is valid while p is not modified.
	Gains(p *Problem) func(j, k int) float64
}

// FixedHorizon is the paper's objective: a count is worth T_fwd seconds of
// its metric, gain = T_fwd·O(k). Problem.Value prices with it.
type FixedHorizon struct{}

// Name returns "fixed".
func (FixedHorizon) Name() string { return "fixed" }

// Gains returns T_fwd·O(k).
func (FixedHorizon) Gains(p *Problem) func(j, k int) float64 {
	obj := p.Goal()
	return func(j, k int) float64 { return p.TFwd * p.Trainers[j].value(obj, k) }
}

// Prices returns the objective term of every Trainer and count under pr
// (nil: FixedHorizon, that is Problem.Value).
func (p *Problem) Prices(pr Pricing) func(j, k int) float64 {
	if pr == nil {
		return p.Value
	}
	if _, ok := pr.(FixedHorizon); ok {
		return p.Value
	}
	val, _, _ := p.priceRows(pr, nil)
	return val
}

// priceRows is Prices, and for AdaptiveHorizon also a rowFunc: the same
// values a Trainer's counts at a time, without two calls per count (nil
// for other pricings). The rows it fills are what val then reads for
// those counts (the same numbers), so that a Trainer's gains are not kept
// twice: their table is scratch, given back once the row is filled. The
// rows come from a slab kept across solves (tableSlab): done gives it
// back, after which neither val nor the rows may be used.
//
// o is p's node order, or nil.
func (p *Problem) priceRows(pr Pricing, o *nodeOrder) (val valueFunc, fill rowFunc, done func()) {
	done = func() {}
	if pr == nil {
		return p.Value, nil, done
	}
	if _, ok := pr.(FixedHorizon); ok {
		return p.Value, nil, done
	}
	var gain func(j, k int) float64
	var into func(j int, sc *scratch) []float64
	release := func() {}
	if _, ok := pr.(AdaptiveHorizon); ok {
		gain, into, release = adaptiveGains(p, o)
	} else {
		gain = pr.Gains(p)
	}
	// Each Trainer's current rate and weight, found once (price's
	// arithmetic, without an interpolation per count).
	rate, weight := make([]float64, len(p.Trainers)), make([]float64, len(p.Trainers))
	for j := range p.Trainers {
		t := &p.Trainers[j]
		rate[j], weight[j] = t.Rate(p.Goal(), len(t.Held)), t.Priority()
	}
	// The rescale costs rounded on their own (float64(…)), so that no
	// platform fuses them into the subtraction: fill and price must give
	// the same bits.
	price := func(j, k int, g float64) float64 {
		t := &p.Trainers[j]
		c := len(t.Held)
		v := g
		switch {
		case k > c:
			v -= float64(t.RUp * rate[j])
		case k < c:
			v -= float64(t.RDown * rate[j])
		}
		return weight[j] * v
	}
	if into == nil {
		return func(j, k int) float64 { return price(j, k, gain(j, k)) }, nil, done
	}
	// rows[j], from count lo[j]: the row filled for Trainer j.
	rows, lo := make([][]float64, len(p.Trainers)), make([]int, len(p.Trainers))
	val = func(j, k int) float64 {
		if r := rows[j]; k >= lo[j] && k-lo[j] < len(r) {
			return r[k-lo[j]]
		}
		return price(j, k, gain(j, k))
	}
	slab := new(tableSlab)
	var once sync.Once
	fill = func(j, from, n int) []float64 {
		once.Do(func() {
			// Room for every Trainer's counts 0..hi: no row is longer.
			size, n := 0, p.Size()
			for j := range p.Trainers {
				_, hi := p.boundsIn(j, n)
				size += max(hi, len(p.Trainers[j].Held)) + 1
			}
			slab = takeTableSlab(size)
		})
		dst := slab.take(n)
		sc := scratchPool.Get().(*scratch)
		defer scratchPool.Put(sc)
		sc.reset()
		g := into(j, sc)
		// price's arithmetic, its cases as ranges of counts: below the
		// current size c, c, above it (and what g does not hold).
		t := &p.Trainers[j]
		c, w := len(t.Held), weight[j]
		up, down := float64(t.RUp*rate[j]), float64(t.RDown*rate[j])
		for i := range dst {
			switch k := from + i; {
			case k <= 0 || k >= len(g):
				dst[i] = price(j, k, gain(j, k))
			case k < c:
				dst[i] = w * (g[k] - down)
			case k > c:
				dst[i] = w * (g[k] - up)
			default:
				dst[i] = w * g[k]
			}
		}
		rows[j], lo[j] = dst, from
		return dst
	}
	return val, fill, func() { once.Do(func() {}); slab.release(); release() }
}

// Goal is the objective the Problem maximises: Objective, with "" read as
// Throughput.
func (p *Problem) Goal() Objective {
	if p.Objective == "" {
		return Throughput
	}
	return p.Objective
}

// Feasible reports whether Trainer j may have k nodes: 0 or within its
// bounds, within the pool, and within the step limit.
func (p *Problem) Feasible(j, k int) bool {
	lo, hi := p.bounds(j)
	c := len(p.Trainers[j].Held)
	if k != 0 && (k < lo || k > hi) {
		return false
	}
	step := p.StepLimit()
	return k >= 0 && k-c <= step && c-k <= step
}

// bounds returns the count range [lo, hi] (besides 0) Trainer j may take,
// before the step limit. hi < lo when only 0 is possible.
func (p *Problem) bounds(j int) (lo, hi int) {
	return p.boundsIn(j, p.Size())
}

// boundsIn is bounds for a pool of n nodes (p.Size(), which costs O(J):
// callers that ask for every Trainer compute it once).
func (p *Problem) boundsIn(j, n int) (lo, hi int) {
	t := &p.Trainers[j]
	lo = max(t.Min, 1)
	hi = min(t.MaxNodes(), n)
	return lo, hi
}

// ObjectiveOf returns the fixed-horizon objective of the counts, or -Inf
// if they are infeasible.
func (p *Problem) ObjectiveOf(counts []int) float64 {
	return p.ObjectiveWith(nil, counts)
}

// ObjectiveWith returns the objective of the counts under pr (nil:
// FixedHorizon), or -Inf if they are infeasible.
func (p *Problem) ObjectiveWith(pr Pricing, counts []int) float64 {
	if len(counts) != len(p.Trainers) {
		return math.Inf(-1)
	}
	val := p.Prices(pr)
	total, sum := 0, 0.0
	for j, k := range counts {
		if !p.Feasible(j, k) {
			return math.Inf(-1)
		}
		total += k
		sum += val(j, k)
	}
	if total > p.Size() {
		return math.Inf(-1)
	}
	return sum
}
