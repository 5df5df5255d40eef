package alloc

import (
	"context"
	"math"
	"slices"
	"time"
)

// Adaptive is bftrainer's default allocator: the paper's constraints and an
// exact dynamic programme, but each count priced over what the pool knows
// at decision time (AdaptiveHorizon) instead of a fixed T_fwd.
type Adaptive struct{}

// Name returns "adaptive".
func (Adaptive) Name() string { return "adaptive" }

// Solve returns the plan optimal for AdaptiveHorizon, or an Infeasible plan
// that keeps the current allocation when no allocation is feasible (only
// possible under Reference semantics).
func (Adaptive) Solve(_ context.Context, p *Problem) (*Plan, error) {
	// The nodes sorted once, for the pricing and for Place: on a large
	// pool, on one core while the Problem is checked on the other (a
	// millisecond each at 10,624 nodes). The sort reads any Problem.
	o := ordersKept.take()
	defer ordersKept.give(o, orderSize)
	if p.Size() < parallelSort {
		if err := p.Validate(); err != nil {
			return nil, err
		}
		o.sort(p)
	} else {
		checked := make(chan error, 1)
		go func() { checked <- p.Validate() }()
		o.sort(p)
		if err := <-checked; err != nil {
			return nil, err
		}
	}
	pr := AdaptiveHorizon{}
	val, rows, done := p.priceRows(pr, o)
	defer done()
	counts, ok := optimalCounts(p, val, rows, false)
	if !ok {
		return keepPriced(p, pr, val, "adaptive", Infeasible, "no feasible allocation under the step limit; kept the current one"), nil
	}
	return newPricedPlan(p, pr, val, "adaptive", counts, o), nil
}

// parallelSort is the pool's size (Problem.Size) from which Adaptive sorts
// its nodes beside the Problem's check.
const parallelSort = 2048

// AdaptiveHorizon prices a Trainer's count by what its nodes are expected to
// yield before the pool can do better with them, from what the pool has
// observed (Problem.Idle: how long idle periods last, how often nodes
// become free) and the ages of its nodes (Problem.Now − Node.Since).
// Nothing of the future enters.
//
// The horizon. The pool re-decides whenever nodes become free — nodes join,
// or a Trainer ends and frees its own — so a placement pays until the next
// such moment, τ = Idle.FreeGap() seconds away on average (the observed
// mean gap), unless its node is reclaimed before: a node idle for a seconds
// yields h(a, τ), its expected idle time within τ (see survival). That is
// the paper's T_fwd, measured: long on a machine where nodes seldom come
// free (one growth must last), short where they come free often (a growth
// by one node now would be followed by another at the next moment, each
// paying its rescale).
//
// The model. Trainer j on a set of k nodes finishes its remaining work
// (Trainer.Remaining samples) in T = Remaining / P(k) seconds at its
// throughput P(k) (T = ∞ when the work is not known). Its nodes are ranked
// by idle age, oldest first; with heavy-tailed idle periods the oldest are
// the likeliest to stay, so the i-th ranked node is taken to carry the i-th
// step of the curve, O'(i) − O'(i−1) (O' is the metric, 0 below Min). A
// node it holds carries its step for h(a, τ), whether or not the Trainer
// finishes before: a Trainer that finishes frees its nodes for the next,
// and the pool loses nothing by it. A node it would grow onto carries its
// step only for h(a, min(τ, T)): after the Trainer finishes that node
// would have been free anyway, so a growth must win back its rescale cost
// before the Trainer is done. Nodes that became idle at the same instant (a
// cohort: one job's nodes, released together) are taken to be reclaimed
// together, by one event; a reclaim within min(τ, T) costs the Trainer
// R_down seconds of its rate then, O'(r) with r the nodes ranked up to the
// cohort's last, as the pool charges a reclaim. So, with π(a, T) the
// probability that a node of age a is reclaimed within T, the gain of the
// set is
//
//	Σ_c [ Σ_runs (O'(end) − O'(start−1))·h(a_c, horizon) − R_down·O'(e_c)·π(a_c, min(τ, T)) ]
//
// over its cohorts c (of age a_c, last rank e_c) and, within a cohort, the
// run of its held nodes and the run of those it would grow onto, each over
// its horizon. The rescale cost is the paper's (Problem.Value), so the term
// of the count is w·(gain − [k>C]·R_up·r − [k<C]·R_down·r).
//
// Which nodes. The gain depends on the set, and the optimum must not depend
// on which physical nodes a count stands for, or the count-level DP would
// not be exact. So the set a count is priced on is fixed by the count:
//
//   - keeping k ≤ C nodes: the k that Place keeps (under Default semantics
//     the oldest, since a shrink releases the youngest);
//   - growing by δ: the Trainer's nodes plus the free nodes at positions
//     B_j … B_j+δ−1 of the free pool, oldest first, where B_j = Σ_{i<j}
//     (MaxNodes_i − C_i)⁺ is the most that the Trainers before it in
//     Problem order can take; positions past the free pool are priced as
//     the youngest node of the decision.
//
// The scheduler's plan. A node the scheduler plans a main job on
// (Node.Until) has its horizon end there: h(a, min(T, u)) and π = 1 when
// the planned start u is within T. A wrong plan (an early or late job)
// costs what a wrong guess costs; it never makes a node unusable. Such
// nodes come last in the node order (CompareNodes), so growth prices and
// takes unplanned nodes first.
//
// This makes every term a function of the Trainer's own count, so Σ_j is
// separable and the DP over counts (optimalCounts) is exact for it. It is
// also a bound on what Place gives: growers take, in Problem order, the
// oldest nodes of the free pool merged with the nodes released in the same
// decision, so the Trainers before j take G ≤ B_j of them and j's nodes are
// positions G … G+δ−1 of a pool that contains the free one. The m-th oldest
// node of a superset is at least as old as the m-th oldest of the set, and
// ages fall along the order, so j's i-th oldest added node is at least as
// old as the free node at position B_j+i, or than the youngest node when
// that position is past the free pool (TestAdaptivePricedSetBoundsPlacement
// checks it). The first Trainer that can grow is priced on exactly the
// nodes it gets; later ones on nodes no older than theirs.
type AdaptiveHorizon struct{}

// Name returns "adaptive".
func (AdaptiveHorizon) Name() string { return "adaptive" }

// Gains returns the adaptive gain of every Trainer and count; it computes
// the life table and each Trainer's gains once.
func (AdaptiveHorizon) Gains(p *Problem) func(j, k int) float64 {
	gain, _, _ := adaptiveGains(p, nil)
	return gain
}

// adaptiveGains is Gains, and into: Trainer j's gains for k = 0..hi
// (hi its largest count), every array taken from sc (reset), the table
// too, and not kept (gain keeps its own, built on first use; a Trainer's
// by one goroutine at a time). release keeps the model's arrays for the
// next solve: neither gain nor into may be called after it. free is
// p.Free's keys sorted (sortKeys), or nil.
func adaptiveGains(p *Problem, o *nodeOrder) (gain func(j, k int) float64, into func(j int, sc *scratch) []float64, release func()) {
	m := newAdaptiveModel(p, o)
	tables := make([][]float64, len(p.Trainers))
	gain = func(j, k int) float64 {
		if k <= 0 {
			return 0
		}
		if tables[j] == nil {
			tables[j] = m.gains(j)
		}
		if t := tables[j]; k < len(t) {
			return t[k]
		}
		return m.gain(j, k)
	}
	return gain, func(j int, sc *scratch) []float64 { return m.gainsIn(j, sc, true) }, m.release
}

// adaptiveModel is what AdaptiveHorizon needs of one Problem.
type adaptiveModel struct {
	p        *Problem
	now      time.Time // decision time (Problem.Now, or the youngest node's Since)
	gap      float64   // τ: Problem.Idle.FreeGap()
	sv       *survival
	youngest nodeOutlook // the youngest node of the decision
	// freeAdded are the free nodes' outlooks, oldest first, and
	// youngestAdded the youngest's, marked added: what the blocks of a
	// Trainer's growth point to.
	freeAdded     []nodeOutlook
	youngestAdded nodeOutlook
	before        []int // B_j
	// freeBlocks are the free pool's blocks (runs of equal age), the
	// i-th starting at position freeStart[i].
	freeBlocks []block
	freeStart  []int
	// heldAll[heldAt[j]:heldAt[j+1]]: Trainer j's nodes' outlooks, in
	// Place's order.
	heldAll []nodeOutlook
	heldAt  []int
	buf     *modelBuf // where ages, freeAdded and heldAll came from
	size    int       // p.Size()
}

// newAdaptiveModel returns p's model; o is p's node order, or nil to sort
// it here.
func newAdaptiveModel(p *Problem, o *nodeOrder) *adaptiveModel {
	m := &adaptiveModel{p: p, now: p.Now, gap: p.Idle.FreeGap(), before: make([]int, len(p.Trainers)), size: p.Size()}
	if m.now.IsZero() {
		// Without a clock, the youngest node has just become idle.
		for i := range p.Free {
			m.now = later(m.now, p.Free[i].Since)
		}
		for j := range p.Trainers {
			for _, n := range p.Trainers[j].Held {
				m.now = later(m.now, n.Since)
			}
		}
	}
	m.buf = modelsKept.take()
	ages := sized(m.buf.ages, p.Size())[:0]
	// The nodes by index in Place's order, not copied (80 bytes a node).
	o, sorted := orderOf(p, o)
	defer sorted()
	for _, k := range o.free {
		ages = append(ages, ageSeconds(m.now, p.Free[k.i].Since))
	}
	held := 0
	for j := range p.Trainers {
		for _, n := range p.Trainers[j].Held {
			ages = append(ages, ageSeconds(m.now, n.Since))
		}
		held += len(p.Trainers[j].Held)
	}
	m.sv = newSurvival(p.Idle, ages)
	m.freeAdded = sized(m.buf.free, len(p.Free))
	for i, k := range o.free {
		m.freeAdded[i] = m.outlookUntil(ages[i], p.Free[k.i].Until)
		m.freeAdded[i].added = true
	}
	// Every Trainer's held outlooks, once: the gains and each gain off
	// the table read them.
	m.heldAt = make([]int, len(p.Trainers)+1)
	m.heldAll = sized(m.buf.held, held)[:0]
	for j := range p.Trainers {
		ns := p.Trainers[j].Held
		for _, k := range o.heldOf(j) {
			m.heldAll = append(m.heldAll, m.outlookUntil(ageSeconds(m.now, ns[k.i].Since), ns[k.i].Until))
		}
		m.heldAt[j+1] = len(m.heldAll)
	}
	m.buf.ages = ages
	m.freeBlocks = blocksOf(m.freeAdded)
	m.freeStart = make([]int, len(m.freeBlocks))
	for i, at := 1, 0; i < len(m.freeBlocks); i++ {
		at += m.freeBlocks[i-1].n
		m.freeStart[i] = at
	}
	young := 0.0
	if len(ages) > 0 {
		young = slices.Min(ages)
	}
	m.youngest = m.outlook(young)
	m.youngestAdded = m.youngest
	m.youngestAdded.added = true
	b := 0
	for j := range p.Trainers {
		m.before[j] = b
		t := &p.Trainers[j]
		b += max(0, t.MaxNodes()-len(t.Held))
	}
	return m
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// outlook is a node's outlook, with its h and π over τ.
func (m *adaptiveModel) outlook(age float64) nodeOutlook {
	return m.outlookUntil(age, time.Time{})
}

// outlookUntil is outlook for a node the scheduler plans a main job on at
// until (zero: no plan): its idle time ends there at the latest.
func (m *adaptiveModel) outlookUntil(age float64, until time.Time) nodeOutlook {
	o := m.sv.outlook(age)
	o.until = math.Inf(1)
	if !until.IsZero() {
		o.until = ageSeconds(until, m.now) // seconds from now, 0 if past
	}
	o.hTau, o.piTau = m.capped(&o, m.gap)
	return o
}

// over is the survival's over, from the outlook's cache at τ.
func (m *adaptiveModel) over(o *nodeOutlook, horizon float64) (h, pi float64) {
	if horizon == m.gap {
		return o.hTau, o.piTau
	}
	return m.capped(o, horizon)
}

// capped is the survival's over for a horizon that a planned start cuts
// short: a node planned within the horizon is idle until then at most (as
// the history says it may be reclaimed before) and is then surely
// reclaimed. The plan shortens the horizon; it never makes a node
// unusable.
func (m *adaptiveModel) capped(o *nodeOutlook, horizon float64) (h, pi float64) {
	if o.until >= horizon {
		return m.sv.over(o, horizon)
	}
	h, _ = m.sv.over(o, o.until)
	return h, 1
}

// trainerSets is the ordered node outlooks a Trainer's counts are priced on:
// the first k kept for k ≤ C, held plus added[:k−C] for k > C.
type trainerSets struct {
	held  []nodeOutlook // oldest first
	added []nodeOutlook // oldest first
	// youngFirst: Place keeps the youngest held nodes (Reference
	// semantics), so keeping k is held[C−k:].
	youngFirst bool
}

func (m *adaptiveModel) sets(j, hi int) trainerSets {
	t := &m.p.Trainers[j]
	ts := trainerSets{held: m.heldOutlooks(j), youngFirst: m.p.Semantics == Reference}
	for i := 0; len(t.Held)+i < hi; i++ {
		o := m.youngest
		if pos := m.before[j] + i; pos < len(m.freeAdded) {
			o = m.freeAdded[pos]
		}
		o.added = true
		ts.added = append(ts.added, o)
	}
	return ts
}

// gains returns Trainer j's gain for k = 0..hi (its largest count).
//
// A count's set is walked as blocks, not nodes: a block is a run of
// consecutive nodes of equal age, held or added, priced on its first
// node's outlook, which is what the node-by-node walk did (it took a
// run's h and a cohort's π from their first node). The held nodes' blocks
// are found once; the added nodes' blocks once, their prefix for each
// count. A count costs O(blocks in its set), not O(k): on a pool whose
// nodes became idle in cohorts, and for every Trainer whose growth is
// priced past the free pool (all on the youngest node: one block), that
// is a few blocks where k is thousands of nodes.
func (m *adaptiveModel) gains(j int) []float64 {
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)
	sc.reset()
	return m.gainsIn(j, sc, false)
}

// gainsIn is gains with its arrays taken from sc, the table too if
// scratchOut (then it is valid until sc is reset).
func (m *adaptiveModel) gainsIn(j int, sc *scratch, scratchOut bool) []float64 {
	_, hi := m.p.boundsIn(j, m.size)
	hi = max(hi, len(m.p.Trainers[j].Held))
	var out []float64
	if scratchOut {
		out = sc.take(hi + 1)
	} else {
		out = make([]float64, hi+1)
	}
	rates, speed := m.rates(j, hi, sc)
	ts := trainerSets{held: m.heldOutlooks(j), youngFirst: m.p.Semantics == Reference}
	held, added := blocksOf(ts.held), m.addedBlocks(j, hi-len(ts.held))
	buf := make([]block, 0, len(held)+len(added))
	C := len(ts.held)
	from := hi + 1 // the first count left to the count-by-count walk
	if C < hi {
		if ok, _ := m.growthGains(j, ts.blocks(hi, held, added, buf), rates, speed, out, sc); ok {
			from = C + 1 // the growth counts are done
		}
	}
	for k := 1; k <= hi; k++ {
		if k == from {
			break
		}
		buf = ts.blocks(k, held, added, buf)
		out[k] = m.gainOf(j, k, buf, rates, speed[k])
	}
	return out
}

// heldOutlooks returns the outlooks of Trainer j's nodes, in Place's
// order (the model's: not to be changed).
func (m *adaptiveModel) heldOutlooks(j int) []nodeOutlook {
	return m.heldAll[m.heldAt[j]:m.heldAt[j+1]:m.heldAt[j+1]]
}

// addedBlocks returns the blocks of the n nodes Trainer j's growth is
// priced on (see sets), from the free pool's blocks: the block holding
// position B_j cut there (priced on the node at B_j), the next ones, and
// the positions past the pool as one block of the youngest node (joined
// to the last if of the same age, as a run of the node list would be).
func (m *adaptiveModel) addedBlocks(j, n int) []block {
	var out []block
	pos, end := m.before[j], m.before[j]+max(n, 0)
	if stop := min(end, len(m.freeAdded)); pos < stop {
		b, _ := slices.BinarySearch(m.freeStart, pos+1)
		b-- // the last block starting at or before pos
		for ; pos < stop; b++ {
			take := min(m.freeStart[b]+m.freeBlocks[b].n, stop) - pos
			out = append(out, block{o: &m.freeAdded[pos], n: take})
			pos += take
		}
	}
	if pos < end {
		if l := len(out) - 1; l >= 0 && out[l].o.age == m.youngest.age {
			out[l].n += end - pos
		} else {
			out = append(out, block{o: &m.youngestAdded, n: end - pos})
		}
	}
	return out
}

// rates returns Trainer j's metric O'(i) (0 below Min) and its
// throughput P(i) (0 below Min) for i = 0..hi, walking the curve once
// (interpAll: Interp's arithmetic, without a search per count), in s.
// Where the metric is the throughput (the default objective, and
// speedup's over P(1)), the curve is walked once for both: rate is speed
// itself at scale 1, else speed over the scale, the same numbers.
func (m *adaptiveModel) rates(j, hi int, s *scratch) (rate, speed []float64) {
	t := &m.p.Trainers[j]
	ys, scale := m.p.Goal().Column(&t.Curve)
	// interpAll writes 1..hi; the loop below, 0 (runs(0, ·) is false).
	speed = interpAll(t.Curve.Nodes, t.Curve.Throughput, s.takeDirty(hi+1))
	switch {
	case !sameArray(ys, t.Curve.Throughput):
		rate = interpAll(t.Curve.Nodes, ys, s.takeDirty(hi+1))
	case scale == 1:
		rate = speed
	default:
		rate = s.takeDirty(hi + 1)
		copy(rate, speed)
	}
	for i := range rate {
		if !runs(i, t.Min) {
			rate[i], speed[i] = 0, 0
			continue
		}
		if scale != 1 { // x/1 is x
			rate[i] /= scale
		}
	}
	return rate, speed
}

// sameArray reports whether a and b are one slice of one array.
func sameArray(a, b []float64) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// gain returns Trainer j's gain on k nodes on its own (the same arithmetic
// as gains).
func (m *adaptiveModel) gain(j, k int) float64 {
	if k <= 0 {
		return 0
	}
	ts := trainerSets{held: m.heldOutlooks(j), youngFirst: m.p.Semantics == Reference}
	rates, speed := m.rates(j, k, nil)
	return m.gainOf(j, k, ts.blocks(k, blocksOf(ts.held), m.addedBlocks(j, k-len(ts.held)), nil), rates, speed[k])
}

// block is a run of n consecutive nodes of a count's set with the same
// age, all held or all added; o is its first node's outlook. A pointer,
// not a copy: a count's blocks are gathered again for every count, and
// an outlook is 64 bytes.
type block struct {
	o *nodeOutlook
	n int
}

// blocksOf splits nodes into maximal runs of equal age.
func blocksOf(ns []nodeOutlook) []block {
	n := 0
	for i := range ns {
		if i == 0 || ns[i].age != ns[i-1].age {
			n++
		}
	}
	out := make([]block, 0, n)
	for i := 0; i < len(ns); {
		e := i + 1
		for e < len(ns) && ns[e].age == ns[i].age {
			e++
		}
		out = append(out, block{o: &ns[i], n: e - i})
		i = e
	}
	return out
}

// blocks returns the blocks of the set count k is priced on, oldest first:
// the k kept held nodes, or the held nodes merged with the first k−C added
// ones (held first among equal ages), as a node-by-node merge orders them.
// held and added are ts.held's and ts.added's blocks.
func (ts *trainerSets) blocks(k int, held, added []block, buf []block) []block {
	buf = buf[:0]
	C := len(ts.held)
	if k <= C {
		if ts.youngFirst {
			// held[C−k:]: the suffix, its first block cut at node C−k.
			skip, i := C-k, 0
			for ; skip >= held[i].n; i++ {
				skip -= held[i].n
			}
			first := held[i]
			if skip > 0 {
				first = block{o: &ts.held[C-k], n: first.n - skip}
			}
			buf = append(buf, first)
			return append(buf, held[i+1:]...)
		}
		for _, b := range held {
			if k == 0 {
				break
			}
			b.n = min(b.n, k)
			k -= b.n
			buf = append(buf, b)
		}
		return buf
	}
	// Merge: a whole block of one side goes in at a time, since every node
	// of a block compares alike with the other side's next node.
	left := k - C
	i, a := 0, 0
	for i < len(held) || left > 0 {
		if left == 0 || (i < len(held) && held[i].o.age >= added[a].o.age) {
			buf = append(buf, held[i])
			i++
		} else {
			b := added[a]
			b.n = min(b.n, left)
			left -= b.n
			buf = append(buf, b)
			a++
		}
	}
	return buf
}

// gainOf prices Trainer j on the blocks of its set (oldest first, k nodes
// in all), with rates[i] = O'(i) and P = P(k) (see AdaptiveHorizon).
func (m *adaptiveModel) gainOf(j, k int, set []block, rates []float64, P float64) float64 {
	t := &m.p.Trainers[j]
	finish := math.Inf(1)
	if t.Remaining > 0 && P > 0 {
		finish = t.Remaining / P
	}
	grown := min(finish, m.gap) // what a node it grows onto is worth over
	g := 0.0
	pos := 0 // rank of the cohort's first node
	for s := 0; s < len(set); {
		e, end := s+1, pos+set[s].n
		for e < len(set) && set[e].o.age == set[s].o.age {
			end += set[e].n
			e++
		}
		// One cohort, one reclaim: R_down at the rate then, if it comes
		// before the Trainer finishes or the pool re-places.
		hs, pi := m.over(set[s].o, grown)
		g -= t.RDown * rates[end] * pi
		// Its nodes' steps of the curve, held ones first (the merge puts
		// them first among equal ages), each run over its horizon.
		for a, ra := s, pos; a < e; {
			b, rb := a+1, ra+set[a].n
			for b < e && set[b].o.added == set[a].o.added {
				rb += set[b].n
				b++
			}
			var h float64
			switch {
			case !set[a].o.added:
				h = set[a].o.hTau // m.over at τ
			case a == s:
				h = hs // the cohort's first block over grown: computed above
			default:
				h, _ = m.over(set[a].o, grown)
			}
			g += (rates[rb] - rates[ra]) * h
			a, ra = b, rb
		}
		s, pos = e, end
	}
	return g
}
