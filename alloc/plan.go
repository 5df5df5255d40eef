package alloc

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
)

// Status says whether a Plan is the solver's answer or the current
// allocation kept for a stated reason.
type Status int

const (
	// Optimal: the solver's answer (for Exact and the MILP backends a
	// proven optimum; for the heuristics, their answer).
	Optimal Status = iota
	// KeptCurrent: the solver gave no proven optimum (time limit, solver
	// error); the plan keeps every Trainer's nodes, as the reference does.
	KeptCurrent
	// Infeasible: no allocation satisfies the constraints (possible only
	// under Reference semantics); the current allocation is kept.
	Infeasible
)

func (s Status) String() string {
	switch s {
	case Optimal:
		return "optimal"
	case KeptCurrent:
		return "kept-current"
	case Infeasible:
		return "infeasible"
	}
	return fmt.Sprintf("status(%d)", int(s))
}

// Plan is a solver's decision. Trainers are in Problem order.
type Plan struct {
	Solver    string
	Status    Status
	Objective float64 // objective of the chosen counts (Problem.ObjectiveOf)
	Trainers  []Assignment
	// Note explains a non-optimal status, e.g. the time limit reached.
	Note string
	// NoStepLimit is set by solvers that do not honour the Reference step
	// limit (the equal-share heuristic, as in the reference code).
	NoStepLimit bool
	// Pricing is the objective Objective and the Values are in; nil is
	// FixedHorizon, the paper's (Problem.Value).
	Pricing Pricing
}

// Assignment is one Trainer's part of a Plan.
type Assignment struct {
	ID       string
	From, To int      // node counts before and after
	Nodes    []string // nodes held after the decision
	Add      []string // nodes it starts on (in the order taken)
	Release  []string // nodes it stops on (in the order released)
	Value    float64  // its objective term at To
}

// Counts returns the node count of every Trainer, in Problem order.
func (pl *Plan) Counts() []int {
	out := make([]int, len(pl.Trainers))
	for i, a := range pl.Trainers {
		out[i] = a.To
	}
	return out
}

// Solver turns a Problem into a Plan. Implementations never modify the
// Problem.
type Solver interface {
	Name() string
	Solve(ctx context.Context, p *Problem) (*Plan, error)
}

// CompareNodes orders nodes by how long they have been idle: earliest
// Since first, then Order, then Name. This is the reference's column
// order, and the order of the pool's free nodes. Nodes the scheduler
// plans a main job on (Until set) come after all others, the latest
// planned start first: growth takes them last and a shrink gives them up
// first.
func CompareNodes(a, b Node) int { return nodeCmp(&a, &b) }

// nodeCmp is CompareNodes without copying the nodes.
func nodeCmp(a, b *Node) int {
	if az, bz := a.Until.IsZero(), b.Until.IsZero(); az != bz {
		if az {
			return -1
		}
		return 1
	}
	if c := b.Until.Compare(a.Until); c != 0 {
		return c
	}
	if c := a.Since.Compare(b.Since); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Order, b.Order); c != 0 {
		return c
	}
	return cmp.Compare(a.Name, b.Name)
}

// refsOf returns pointers to ns's nodes in keys' order (keys index ns):
// no node copied. They go to *buf's array (grown, and kept there, if it
// is short).
func refsOf(ns []Node, keys []nodeKey, buf *[]*Node) []*Node {
	*buf = sized(*buf, len(keys))
	out := *buf
	for i, k := range keys {
		out[i] = &ns[k.i]
	}
	return out
}

// nodeOrder is a Problem's nodes in nodeCmp's order (sortKeys), sorted
// once for a solve's pricing and Place: free's keys index p.Free, and
// heldOf(j)'s Trainer j's Held.
type nodeOrder struct {
	free, held []nodeKey
	heldAt     []int
}

// sort fills o with p's order, in o's arrays where they hold it.
func (o *nodeOrder) sort(p *Problem) {
	o.free = sortKeys(p.Free, o.free)
	o.heldAt = sized(o.heldAt, len(p.Trainers)+1)
	o.heldAt[0] = 0
	for j := range p.Trainers {
		o.heldAt[j+1] = o.heldAt[j] + len(p.Trainers[j].Held)
	}
	o.held = sized(o.held, o.heldAt[len(p.Trainers)])
	for j := range p.Trainers {
		lo, hi := o.heldAt[j], o.heldAt[j+1]
		sortKeys(p.Trainers[j].Held, o.held[lo:hi:hi]) // in place: it holds them
	}
}

// heldOf returns Trainer j's held keys in order.
func (o *nodeOrder) heldOf(j int) []nodeKey { return o.held[o.heldAt[j]:o.heldAt[j+1]] }

// ordersKept keeps a solve's node order (32 bytes a node) for the next.
var ordersKept kept[nodeOrder]

func orderSize(o *nodeOrder) int { return cap(o.free) + cap(o.held) }

// orderOf returns o, or, when it is nil, p's order sorted in a kept one;
// done gives that back.
func orderOf(p *Problem, o *nodeOrder) (_ *nodeOrder, done func()) {
	if o != nil {
		return o, func() {}
	}
	o = ordersKept.take()
	o.sort(p)
	return o, func() { ordersKept.give(o, orderSize) }
}

// nodeKey is a node's place in nodeCmp's order as integers (sorting them
// is several times faster than sorting time.Time values on a Summit-sized
// pool), and its index.
type nodeKey struct {
	u, t  int64 // u: unplanned first, then the latest planned start
	order int
	i     int32
}

// sortKeys returns ns's keys in nodeCmp's order, in keys' array when it
// holds them: k.i is the index of the node at k's place.
func sortKeys(ns []Node, keys []nodeKey) []nodeKey {
	return sortKeysOf(len(ns), func(i int) *Node { return &ns[i] }, keys)
}

// sortKeysOf is sortKeys for the n nodes node(0), …, node(n−1).
func sortKeysOf(n int, node func(i int) *Node, keys []nodeKey) []nodeKey {
	keys = sized(keys, n)
	sorted := true
	for i := range n {
		nd := node(i)
		u := int64(math.MinInt64)
		if !nd.Until.IsZero() {
			u = -nd.Until.UnixNano()
		}
		keys[i] = nodeKey{u, nd.Since.UnixNano(), nd.Order, int32(i)}
		if i > 0 && sorted && keyCmp(node, keys[i-1], keys[i]) > 0 {
			sorted = false
		}
	}
	if !sorted {
		// By the integers (no call per comparison), then each run of
		// equal integers by name: nodeCmp's order.
		slices.SortFunc(keys, intsCmp)
		for lo := 0; lo < n; {
			hi := lo + 1
			for hi < n && intsCmp(keys[lo], keys[hi]) == 0 {
				hi++
			}
			if hi-lo > 1 {
				slices.SortFunc(keys[lo:hi], func(a, b nodeKey) int { return cmp.Compare(node(int(a.i)).Name, node(int(b.i)).Name) })
			}
			lo = hi
		}
	}
	return keys
}

// intsCmp is nodeCmp on keys but for the names.
func intsCmp(a, b nodeKey) int {
	if a.u != b.u {
		return cmp.Compare(a.u, b.u)
	}
	if a.t != b.t {
		return cmp.Compare(a.t, b.t)
	}
	return cmp.Compare(a.order, b.order)
}

// keyCmp is nodeCmp on keys (node reads the names).
func keyCmp(node func(i int) *Node, a, b nodeKey) int {
	if c := intsCmp(a, b); c != 0 {
		return c
	}
	return cmp.Compare(node(int(a.i)).Name, node(int(b.i)).Name)
}

// Place turns node counts into a Plan, choosing physical nodes by a fixed
// rule that never migrates a Trainer:
//
//   - a Trainer that shrinks keeps a subset of its nodes. Under Default
//     semantics it releases the nodes that became idle most recently
//     (they are the likeliest to be reclaimed soon, and the nodes it keeps
//     are the likeliest to stay); under Reference semantics it releases in
//     column order, oldest idle first, as the reference's heuristic does.
//   - released nodes join the free nodes; Trainers that grow take, in
//     Problem order, the nodes idle longest (column order).
//
// counts must be feasible; Place does not check the objective.
func Place(p *Problem, counts []int) []Assignment {
	return place(p, counts, p.Value, nil)
}

// place is Place with each Assignment's Value from val; o is p's node
// order, or nil to sort it here.
//
// Nodes go by pointer, not copied (a Node is 80 bytes); the pointer lists
// are kept across solves (refsKept), and every name list of the Plan is a
// stretch of one array. At 10,624 nodes and 1,000 Trainers, made a list
// at a time, they were three quarters of what a solve allocated, and a
// process's next solves paid for their fresh pages.
func place(p *Problem, counts []int, val valueFunc, o *nodeOrder) []Assignment {
	o, sorted := orderOf(p, o)
	defer sorted()
	out := make([]Assignment, len(p.Trainers))
	drops, names := 0, 0
	for j := range p.Trainers {
		held := len(p.Trainers[j].Held)
		drops += max(0, held-counts[j])
		names += counts[j] + max(0, counts[j]-held) + max(0, held-counts[j])
	}
	slab := make([]string, names)
	// cut returns the next n names of the slab, with no room to grow
	// into the next list (nil for none).
	cut := func(n int) []string {
		if n == 0 {
			return nil
		}
		s := slab[:n:n]
		slab = slab[n:]
		return s
	}
	refs := refsKept.take()
	defer refs.release()
	refs.released = sized(refs.released, drops)[:0]
	keys := keysKept.take()
	defer keysKept.give(keys, func(k *[]nodeKey) int { return cap(*k) })
	for j := range p.Trainers {
		t := &p.Trainers[j]
		a := &out[j]
		a.ID, a.From, a.To = t.ID, len(t.Held), counts[j]
		held := refsOf(t.Held, o.heldOf(j), &refs.held)
		keep := held
		if counts[j] < len(held) {
			drop := len(held) - counts[j]
			from := len(refs.released)
			if p.Semantics == Reference {
				keep = held[drop:]
				refs.released = append(refs.released, held[:drop]...)
			} else {
				keep = held[:counts[j]]
				for i := len(held) - 1; i >= counts[j]; i-- {
					refs.released = append(refs.released, held[i]) // youngest first
				}
			}
			a.Release = copyNames(cut(drop), refs.released[from:])
		}
		// Nodes has room for the nodes it takes below.
		a.Nodes = copyNames(cut(counts[j]), keep)[:len(keep)]
		a.Value = val(j, counts[j])
	}
	pool := refsOf(p.Free, o.free, &refs.pool)
	if released := refs.released; len(released) > 0 {
		*keys = sortKeysOf(len(released), func(i int) *Node { return released[i] }, *keys)
		back := sized(refs.back, len(released))
		for i, k := range *keys {
			back[i] = released[k.i]
		}
		refs.back = back
		refs.merged = mergeRefs(refs.merged, pool, back)
		pool = refs.merged
	}
	next := 0
	for j := range p.Trainers {
		a := &out[j]
		if grow := a.To - a.From; grow > 0 {
			take := pool[next : next+grow]
			next += grow
			a.Add = copyNames(cut(grow), take)
			a.Nodes = append(a.Nodes, a.Add...) // within its cap: no copy
		}
	}
	return out
}

// placeRefs holds Place's lists of node pointers for the next solve.
type placeRefs struct {
	held, released, pool, back, merged []*Node
}

// refsKeepMax caps each kept list (8 bytes a node).
const refsKeepMax = 1 << 20

var refsKept kept[placeRefs]

// release clears r's lists (they point into the Problem, which must not
// be kept alive by them) and keeps them.
func (r *placeRefs) release() {
	size := 0
	for _, l := range []*[]*Node{&r.held, &r.released, &r.pool, &r.back, &r.merged} {
		clear((*l)[:cap(*l)])
		*l = (*l)[:0]
		size = max(size, cap(*l))
	}
	if size <= refsKeepMax {
		refsKept.give(r, func(r *placeRefs) int { return cap(r.pool) + cap(r.merged) })
	}
}

// mergeRefs merges two node lists sorted by nodeCmp into buf's array (a
// new one if it is short).
func mergeRefs(buf, a, b []*Node) []*Node {
	out := sized(buf, len(a)+len(b))[:0]
	for len(a) > 0 && len(b) > 0 {
		if nodeCmp(b[0], a[0]) < 0 {
			out, b = append(out, b[0]), b[1:]
		} else {
			out, a = append(out, a[0]), a[1:]
		}
	}
	return append(append(out, a...), b...)
}

// copyNames writes the nodes' names to out, in order, and returns out.
func copyNames(out []string, ns []*Node) []string {
	for i, n := range ns {
		out[i] = n.Name
	}
	return out
}

// Names returns the nodes' names, in order (nil for none).
func Names(ns []Node) []string {
	if len(ns) == 0 {
		return nil
	}
	out := make([]string, len(ns))
	for i := range ns {
		out[i] = ns[i].Name
	}
	return out
}

// Keep returns the plan that changes nothing, with the given status and
// note. Trainers whose current size is infeasible keep it all the same:
// a kept allocation is never worse than a half-applied one.
func Keep(p *Problem, solver string, st Status, note string) *Plan {
	return keepPriced(p, nil, p.Value, solver, st, note)
}

// KeepWith is Keep with the objective under pr (nil: FixedHorizon).
func KeepWith(p *Problem, pr Pricing, solver string, st Status, note string) *Plan {
	return keepPriced(p, pr, p.Prices(pr), solver, st, note)
}

// keepPriced is Keep under the Pricing pr, whose terms val gives.
func keepPriced(p *Problem, pr Pricing, val valueFunc, solver string, st Status, note string) *Plan {
	counts := make([]int, len(p.Trainers))
	obj := 0.0
	for j := range p.Trainers {
		counts[j] = len(p.Trainers[j].Held)
		obj += val(j, counts[j])
	}
	return &Plan{Solver: solver, Status: st, Note: note, Objective: obj, Pricing: pr, Trainers: place(p, counts, val, nil)}
}

// newPlan places counts and fills in the fixed-horizon objective.
func newPlan(p *Problem, solver string, counts []int) *Plan {
	return newPricedPlan(p, nil, p.Value, solver, counts, nil)
}

// newPricedPlan places counts and fills in the objective under pr, whose
// terms val gives; o is p's node order, or nil.
func newPricedPlan(p *Problem, pr Pricing, val valueFunc, solver string, counts []int, o *nodeOrder) *Plan {
	pl := &Plan{Solver: solver, Status: Optimal, Pricing: pr, Trainers: place(p, counts, val, o)}
	for j := range pl.Trainers {
		pl.Objective += pl.Trainers[j].Value
	}
	return pl
}

// PlaceWith is Place with each Assignment's Value under pr (nil:
// FixedHorizon).
func PlaceWith(p *Problem, pr Pricing, counts []int) []Assignment {
	return place(p, counts, p.Prices(pr), nil)
}
