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
	summit, err := sim.OpenTrace(filepath.Join(*data, "summit/summit-trace-events.csv.gz"), filepath.Join(*data, "summit/summit-trace-nodes.csv"))
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

// measure replays a trace's idle set and ranks every node taken.
func (c *orderCommand) measure(name string, tr *sim.Trace) {
	n := len(tr.Nodes)
	since := make([]time.Time, n)
	idle := make([]bool, n)
	taken := make([]float64, n) // times each node was taken while idle
	rack := make([]int, n)
	racks := map[string]int{}
	for i, nm := range tr.Nodes {
		p := nm
		if k := strings.IndexByte(nm[1:], 'n'); k >= 0 {
			p = nm[:k+1] // Summit: a02n02 → a02
		} else if len(nm) > 2 {
			p = nm[:len(nm)-2] // Theta nid00123 → nid001 (100 nodes)
		}
		if _, ok := racks[p]; !ok {
			racks[p] = len(racks)
		}
		rack[i] = racks[p]
	}
	rackTaken := make([]float64, len(racks))
	rackSize := make([]float64, len(racks))
	for i := range n {
		rackSize[rack[i]]++
	}
	stats := map[string]*[len(orderNames)]orderStat{"all": {}, "scarce": {}}
	var hist alloc.IdleHistory // what a pool replaying the trace learns
	var cal calibration
	var ages []float64
	var takenNow []bool
	var ids []int
	keys := make([]float64, 0, n)
	for ei, e := range tr.Events {
		if ei > 0 && len(e.Left) > 0 {
			ids = ids[:0]
			for i := range n {
				if idle[i] {
					ids = append(ids, i)
				}
			}
			left := map[int]bool{}
			for _, x := range e.Left {
				if idle[x] {
					left[int(x)] = true
				}
			}
			ages, takenNow = ages[:0], takenNow[:0]
			for _, i := range ids {
				ages = append(ages, e.Time.Sub(since[i]).Seconds())
				takenNow = append(takenNow, left[i])
			}
			cal.observe(&hist, ages, takenNow)
			for i := range left {
				hist.Add(e.Time.Sub(since[i]).Seconds())
			}
			cohort := map[int64]int{} // idle nodes per join instant
			rackIdle := make([]int, len(racks))
			for _, i := range ids {
				cohort[since[i].UnixNano()]++
				rackIdle[rack[i]]++
			}
			m, L := len(ids), len(left)
			if m > 0 && L > 0 {
				subsets := []string{"all"}
				if m < 640 {
					subsets = append(subsets, "scarce")
				}
				for o := range orderNames {
					keys = keys[:0]
					for _, i := range ids {
						var k float64
						switch orderNames[o] {
						case "old":
							k = -float64(since[i].UnixNano())
						case "young":
							k = float64(since[i].UnixNano())
						case "index":
							k = -float64(i)
						case "history":
							k = taken[i]
						case "rack":
							k = rackTaken[rack[i]] / rackSize[rack[i]]
						case "cohort-small":
							k = -float64(cohort[since[i].UnixNano()])
						case "cohort-large":
							k = float64(cohort[since[i].UnixNano()])
						case "rack-sparse":
							k = -float64(rackIdle[rack[i]])
						case "rack-full":
							k = float64(rackIdle[rack[i]])
						}
						keys = append(keys, k) // larger key: taken first
					}
					sorted := slices.Clone(keys)
					slices.Sort(sorted)
					for p, i := range ids {
						if !left[i] {
							continue
						}
						// Mid-rank from the front (largest key first).
						lo, _ := slices.BinarySearch(sorted, keys[p])
						hi := lo
						for hi < m && sorted[hi] == keys[p] {
							hi++
						}
						above := m - hi // keys strictly larger
						ties := hi - lo
						mid := float64(above) + float64(ties-1)/2
						// Share of this node in the first L: ties share
						// the slots left after the strictly larger keys.
						share := 0.0
						if slots := L - above; slots > 0 {
							share = min(1, float64(slots)/float64(ties))
						}
						for _, s := range subsets {
							st := &stats[s][o]
							st.leaves++
							st.rank += (mid + 0.5) / float64(m)
							st.hit += share
							st.uniformHit += float64(L) / float64(m)
						}
					}
				}
			}
			for i := range left {
				taken[i]++
				rackTaken[rack[i]]++
			}
		}
		for _, x := range e.Left {
			idle[x] = false
		}
		for _, x := range e.Joined {
			idle[x] = true
			since[x] = e.Time
		}
		if len(e.Joined) > 0 {
			hist.Frees++
		}
		if ei+1 < len(tr.Events) {
			hist.Seconds += tr.Events[ei+1].Time.Sub(e.Time).Seconds()
		}
	}
	var g []string
	for b := range rankBins {
		g = append(g, fmt.Sprintf("%.2f", (cal.taken[b]+rankPrior)/(cal.expected[b]+rankPrior)))
	}
	fmt.Fprintf(c.stdout, "order trace=%s vs_life_table_young_first=%s\n", name, strings.Join(g, ","))
	for _, s := range []string{"all", "scarce"} {
		for o, on := range orderNames {
			st := stats[s][o]
			if st.leaves == 0 {
				continue
			}
			fmt.Fprintf(c.stdout, "order trace=%s subset=%s order=%s leaves=%d mean_rank=%.3f top_hit=%.3f top_uniform=%.3f top_lift=%.2f\n",
				name, s, on, st.leaves, st.rank/float64(st.leaves), st.hit/float64(st.leaves), st.uniformHit/float64(st.leaves), st.hit/st.uniformHit)
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
