package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/sim"
)

// orderCommand measures whether the scheduler's choice of which idle nodes
// to take back is predictable from what the pool knows at the time (issue
// 12): at every event that takes idle nodes, each node taken is ranked
// among the nodes idle just before it under an order, and the rank is
// compared with a uniform choice. One line per trace, subset and order:
//
//	order trace=<t> subset=<all|scarce> order=<o> leaves=<n> mean_rank=… top_hit=… top_uniform=… top_lift=…
//
// mean_rank is the leaving nodes' mid-rank divided by the idle count (0.5
// at random; near 0 when the order names the node taken first); top_hit is
// the share of leaving nodes among the first L of the order (L the nodes
// the event takes; ties shared), top_uniform what a uniform choice gives
// (the mean of L/n), and top_lift their ratio (1 at random). scarce keeps
// the events with fewer than 640 nodes idle before them (the ten Trainers'
// most). Orders, the node taken first: young (idle shortest), old (idle
// longest), index (lowest trace index), history (taken most often before),
// rack (of the name prefix taken most often before, per node of it),
// cohort-small / cohort-large (of the fewest / most idle nodes that joined
// at its instant), rack-sparse / rack-full (of the prefix with the fewest /
// most idle nodes now). Then, per trace, the life table's calibration by
// rank (see calibration):
//
//	order trace=<t> vs_life_table_young_first=g_0,…,g_9
//
// Theta is the recorded schedule of its SWF log from its first busy week,
// whose physical nodes the reconstruction chose ("idle shortest first",
// lowest index among ties; sim.SWFLog.Recorded): an order there is that
// rule's, not Theta's scheduler's.
type orderCommand struct {
	stdout, stderr io.Writer
}

// Run parses the flags, loads the traces and measures.
func (c *orderCommand) Run(_ context.Context, args []string) error {
	fs := flag.NewFlagSet("order", flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	data := fs.String("data", "../shared/data", "the shared data `directory` (summit/, theta/)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	summit, err := openSummit(*data)
	if err != nil {
		return fmt.Errorf("order: %w", err)
	}
	theta, err := sim.OpenTrace(filepath.Join(*data, "theta/theta_2022.swf"), "")
	if err != nil {
		return fmt.Errorf("order: %w", err)
	}
	week, ok := sim.BusyWeek(theta)
	if !ok {
		return errors.New("order: theta: no busy week")
	}
	c.measure("summit", summit)
	c.measure("theta", theta.WindowAt(week))
	return nil
}

// orderStat accumulates one order's ranks.
type orderStat struct {
	leaves          int
	rank            float64 // Σ mid-rank / n
	hit, uniformHit float64 // Σ share in the first L, Σ L/n
}

var orderNames = [...]string{"young", "old", "index", "history", "rack", "cohort-small", "cohort-large", "rack-sparse", "rack-full"}

// scarceIdle is the idle count below which an event counts as scarce: the
// ten Trainers of at most 64 nodes could use every idle node.
const scarceIdle = 640

// orderTally is a trace's idle set replayed, with what is known of every
// node at each leave.
type orderTally struct {
	since     []time.Time
	idle      []bool
	taken     []float64 // times each node was taken while idle
	rack      []int     // each node's rack (name prefix)
	rackTaken []float64 // times the rack's nodes were taken
	rackSize  []float64
	hist      alloc.IdleHistory // what a pool replaying the trace learns
	cal       calibration
	// stats[0]: every leave; stats[1]: scarce ones.
	stats [2][len(orderNames)]orderStat
}

func newOrderTally(names []string) *orderTally {
	n := len(names)
	t := &orderTally{since: make([]time.Time, n), idle: make([]bool, n), taken: make([]float64, n), rack: make([]int, n)}
	racks := map[string]int{}
	for i, nm := range names {
		p := nm
		if k := strings.IndexByte(nm[1:], 'n'); k >= 0 {
			p = nm[:k+1] // Summit: a02n02 → a02
		} else if len(nm) > 2 {
			p = nm[:len(nm)-2] // Theta: nid00123 → nid001 (100 nodes)
		}
		if _, ok := racks[p]; !ok {
			racks[p] = len(racks)
		}
		t.rack[i] = racks[p]
	}
	t.rackTaken = make([]float64, len(racks))
	t.rackSize = make([]float64, len(racks))
	for i := range n {
		t.rackSize[t.rack[i]]++
	}
	return t
}

// measure replays a trace's idle set, ranks every node taken and prints.
func (c *orderCommand) measure(name string, tr *sim.Trace) {
	tallyOrders(tr).print(c.stdout, name)
}

// tallyOrders replays a trace's idle set and ranks every node taken.
func tallyOrders(tr *sim.Trace) *orderTally {
	t := newOrderTally(tr.Nodes)
	for ei, e := range tr.Events {
		if ei > 0 {
			t.leave(e)
		}
		t.apply(e)
		if ei+1 < len(tr.Events) {
			t.hist.Seconds += tr.Events[ei+1].Time.Sub(e.Time).Seconds()
		}
	}
	return t
}

// leave ranks the idle nodes an event takes among those idle before it.
func (t *orderTally) leave(e sim.Event) {
	left := map[int]bool{}
	for _, x := range e.Left {
		if t.idle[x] {
			left[int(x)] = true
		}
	}
	if len(left) == 0 {
		return
	}
	var ids []int
	for i, ok := range t.idle {
		if ok {
			ids = append(ids, i)
		}
	}
	ages := make([]float64, len(ids))
	takenNow := make([]bool, len(ids))
	for p, i := range ids {
		ages[p] = e.Time.Sub(t.since[i]).Seconds()
		takenNow[p] = left[i]
	}
	t.cal.observe(&t.hist, ages, takenNow)
	cohort := map[int64]int{} // idle nodes per join instant
	rackIdle := make([]int, len(t.rackSize))
	for _, i := range ids {
		cohort[t.since[i].UnixNano()]++
		rackIdle[t.rack[i]]++
	}
	keys := make([]float64, len(ids))
	for o := range orderNames {
		for p, i := range ids {
			keys[p] = t.key(orderNames[o], i, cohort, rackIdle)
		}
		t.rank(o, keys, takenNow, len(left))
	}
	for i := range left {
		t.hist.Add(e.Time.Sub(t.since[i]).Seconds())
		t.taken[i]++
		t.rackTaken[t.rack[i]]++
	}
}

// key is node i's key under an order: a larger key is taken first.
func (t *orderTally) key(order string, i int, cohort map[int64]int, rackIdle []int) float64 {
	switch order {
	case "young":
		return float64(t.since[i].UnixNano())
	case "old":
		return -float64(t.since[i].UnixNano())
	case "index":
		return -float64(i)
	case "history":
		return t.taken[i]
	case "rack":
		return t.rackTaken[t.rack[i]] / t.rackSize[t.rack[i]]
	case "cohort-small":
		return -float64(cohort[t.since[i].UnixNano()])
	case "cohort-large":
		return float64(cohort[t.since[i].UnixNano()])
	case "rack-sparse":
		return -float64(rackIdle[t.rack[i]])
	case "rack-full":
		return float64(rackIdle[t.rack[i]])
	}
	panic("order: unknown order " + order)
}

// rank adds, for order o, the ranks of the L nodes taken (taken[p]) among
// the idle ones with these keys.
func (t *orderTally) rank(o int, keys []float64, taken []bool, L int) {
	m := len(keys)
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	for p := range keys {
		if !taken[p] {
			continue
		}
		// Mid-rank from the front (largest key first).
		lo, _ := slices.BinarySearch(sorted, keys[p])
		hi := lo
		for hi < m && sorted[hi] == keys[p] {
			hi++
		}
		above, ties := m-hi, hi-lo
		mid := float64(above) + float64(ties-1)/2
		// The node's share of the first L: ties share the slots left after
		// the strictly larger keys.
		share := 0.0
		if slots := L - above; slots > 0 {
			share = min(1, float64(slots)/float64(ties))
		}
		for s := range 2 {
			if s == 1 && m >= scarceIdle {
				break
			}
			st := &t.stats[s][o]
			st.leaves++
			st.rank += (mid + 0.5) / float64(m)
			st.hit += share
			st.uniformHit += float64(L) / float64(m)
		}
	}
}

// apply moves the event's nodes.
func (t *orderTally) apply(e sim.Event) {
	for _, x := range e.Left {
		t.idle[x] = false
	}
	for _, x := range e.Joined {
		t.idle[x] = true
		t.since[x] = e.Time
	}
	if len(e.Joined) > 0 {
		t.hist.Frees++
	}
}

// print writes the tally's lines.
func (t *orderTally) print(w io.Writer, name string) {
	var g []string
	for b := range rankBins {
		g = append(g, fmt.Sprintf("%.2f", t.cal.factor(b)))
	}
	fmt.Fprintf(w, "order trace=%s vs_life_table_young_first=%s\n", name, strings.Join(g, ","))
	for s, subset := range []string{"all", "scarce"} {
		for o, on := range orderNames {
			st := t.stats[s][o]
			if st.leaves == 0 {
				continue
			}
			fmt.Fprintf(w, "order trace=%s subset=%s order=%s leaves=%d mean_rank=%.3f top_hit=%.3f top_uniform=%.3f top_lift=%.2f\n",
				name, subset, on, st.leaves, st.rank/float64(st.leaves), st.hit/float64(st.leaves), st.uniformHit/float64(st.leaves), st.hit/st.uniformHit)
		}
	}
}

// The calibration of the life table by rank: at every leave, the idle nodes
// ranked by age, youngest first, in rankBins bins of their mid-rank's
// quantile; per bin the nodes taken and the nodes the life table expected
// to be taken (the leave's L nodes shared in proportion to each node's
// π(a, τ), alloc.ReclaimChances). Their ratio, each shrunk by rankPrior
// pseudo-nodes, is how much likelier than its age says a node at that rank
// is to be taken: 1 everywhere when the scheduler chooses by age alone.
const (
	rankBins  = 10
	rankPrior = 16.0
)

type calibration struct {
	taken, expected [rankBins]float64
}

// factor is bin b's nodes taken over those expected, each shrunk.
func (c *calibration) factor(b int) float64 {
	return (c.taken[b] + rankPrior) / (c.expected[b] + rankPrior)
}

// observe records one leave: ages of the idle nodes before it, and which
// it took.
func (c *calibration) observe(h *alloc.IdleHistory, ages []float64, taken []bool) {
	n := len(ages)
	idx := make([]int, n)
	L := 0
	for i := range idx {
		idx[i] = i
		if taken[i] {
			L++
		}
	}
	if L == 0 {
		return
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(ages[a], ages[b]) })
	sorted := make([]float64, n)
	for i, k := range idx {
		sorted[i] = ages[k]
	}
	pi := alloc.ReclaimChances(h, sorted)
	sum := 0.0
	for _, x := range pi {
		sum += x
	}
	for s := 0; s < n; {
		e := s + 1
		for e < n && sorted[e] == sorted[s] {
			e++
		}
		q := (float64(s+e-1)/2 + 0.5) / float64(n)
		b := min(rankBins-1, int(q*rankBins))
		for i := s; i < e; i++ {
			if taken[idx[i]] {
				c.taken[b]++
			}
			if sum > 0 {
				c.expected[b] += float64(L) * pi[i] / sum
			} else {
				c.expected[b] += float64(L) / float64(n)
			}
		}
		s = e
	}
}
