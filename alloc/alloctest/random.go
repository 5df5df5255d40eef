// Package alloctest generates random allocation problems for tests and
// benchmarks of package alloc and its solvers.
package alloctest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/bftrainer/bftrainer/alloc"
)

// Options bounds a random Problem.
type Options struct {
	Trainers  int // number of Trainers (exactly)
	Nodes     int // pool size N (free + held), exactly
	MaxNodes  int // largest N_max drawn; 0 means Nodes
	Breaks    int // curve breakpoints beyond 0; 0 means 4
	Semantics alloc.Semantics
	// Nice rounds every number to a few significant digits, so that a
	// fixed-format MPS file (12 characters per number) holds it exactly.
	Nice bool
	// Objective; empty picks throughput.
	Objective alloc.Objective
	// Adaptive also fills in what alloc.AdaptiveHorizon reads: the
	// decision time, an idle-period history, each Trainer's remaining
	// work, and nodes idle since a few shared instants (cohorts).
	Adaptive bool
}

var epoch = time.Date(2021, 2, 10, 20, 21, 15, 0, time.UTC)

// Problem draws a random valid Problem: random bounds, concave-ish or
// arbitrary curves, random current allocations (some Trainers below their
// minimum, as after a reclaim), random costs, weights and T_fwd.
func Problem(r *rand.Rand, o Options) *alloc.Problem {
	maxN := o.MaxNodes
	if maxN <= 0 {
		maxN = o.Nodes
	}
	breaks := o.Breaks
	if breaks <= 0 {
		breaks = 4
	}
	round := func(x float64) float64 {
		if !o.Nice {
			return x
		}
		return float64(int64(x*100)) / 100
	}
	p := &alloc.Problem{
		TFwd:      round(1 + r.Float64()*60),
		Semantics: o.Semantics,
		Objective: o.Objective,
	}
	if r.IntN(4) == 0 {
		p.TFwd = float64(r.IntN(3) * 10)
	}
	nodes := make([]alloc.Node, o.Nodes)
	for i := range nodes {
		nodes[i] = alloc.Node{
			Name:  fmt.Sprintf("n%04d", i),
			Since: epoch.Add(time.Duration(r.IntN(3600)) * time.Second),
			Order: r.IntN(3),
		}
	}
	r.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
	next := 0
	for j := 0; j < o.Trainers; j++ {
		hi := 1 + r.IntN(max(1, maxN))
		lo := 1 + r.IntN(hi)
		if r.IntN(3) == 0 {
			lo = 1
		}
		t := alloc.Trainer{
			ID:     fmt.Sprintf("t%02d", j),
			Min:    lo,
			Max:    hi,
			RUp:    round(r.Float64() * 30),
			RDown:  round(r.Float64() * 20),
			Weight: 1,
		}
		if r.IntN(4) == 0 {
			t.Weight = round(0.5 + r.Float64()*2)
		}
		// Curve: 0 and breakpoints up to hi (sometimes beyond).
		top := hi
		if r.IntN(3) == 0 {
			top = hi + r.IntN(hi+1)
		}
		xs := []int{0}
		for k := 1; k <= breaks && xs[len(xs)-1] < top; k++ {
			x := xs[len(xs)-1] + 1 + r.IntN(max(1, top/breaks+1))
			if k == breaks {
				x = max(x, top)
			}
			xs = append(xs, x)
		}
		ys := []float64{0}
		ms := []float64{0}
		y := 0.0
		for i := 1; i < len(xs); i++ {
			slope := 100 * r.Float64()
			if r.IntN(5) == 0 {
				slope = 0
			}
			y += slope * float64(xs[i]-xs[i-1])
			ys = append(ys, round(y))
			ms = append(ms, round(r.Float64()*1000-200))
		}
		if ys[len(ys)-1] == 0 {
			ys[len(ys)-1] = 1
		}
		t.Curve = alloc.Curve{Nodes: xs, Throughput: ys}
		if o.Objective == alloc.Metric {
			t.Curve.Metric = ms
		}
		if o.Objective == alloc.Speedup && alloc.Interp(xs, ys, 1) <= 0 {
			t.Curve.Throughput[1] = 1 + t.Curve.Throughput[1]
			for i := 2; i < len(ys); i++ {
				t.Curve.Throughput[i] = max(t.Curve.Throughput[i], t.Curve.Throughput[i-1])
			}
		}
		// Current allocation: usually 0 or a feasible size, sometimes
		// below Min (after a reclaim).
		c := 0
		switch r.IntN(4) {
		case 1, 2:
			c = lo + r.IntN(hi-lo+1)
		case 3:
			c = r.IntN(lo + 1)
		}
		c = min(c, o.Nodes-next, t.MaxNodes())
		t.Held = append(t.Held, nodes[next:next+c]...)
		next += c
		p.Trainers = append(p.Trainers, t)
	}
	p.Free = append(p.Free, nodes[next:]...)
	if o.Adaptive {
		adapt(rand.New(rand.NewPCG(r.Uint64(), 12)), p, o.Nice)
	}
	return p
}

// adapt adds the adaptive inputs to p from its own random stream: the
// problem's other numbers stay those of the same seed without Adaptive.
func adapt(r *rand.Rand, p *alloc.Problem, nice bool) {
	p.Now = epoch.Add(2 * time.Hour)
	// Nodes idle since one of a few instants, as nodes join in groups.
	instants := make([]time.Time, 1+r.IntN(4))
	for i := range instants {
		instants[i] = p.Now.Add(-time.Duration(r.IntN(7200)) * time.Second)
	}
	if r.IntN(3) == 0 {
		instants[0] = p.Now // some have just joined
	}
	since := func(ns []alloc.Node) {
		for i := range ns {
			ns[i].Since = instants[r.IntN(len(instants))]
		}
	}
	since(p.Free)
	for j := range p.Trainers {
		t := &p.Trainers[j]
		since(t.Held)
		if r.IntN(4) != 0 {
			top := t.Curve.Throughput[len(t.Curve.Throughput)-1]
			t.Remaining = top * float64(60+r.IntN(7200))
			if nice {
				t.Remaining = float64(int64(t.Remaining))
			}
		}
	}
	p.Idle = IdleHistory(r, 50+r.IntN(2000))
}

// IdleHistory returns n idle periods drawn from a heavy-tailed
// distribution (log-normal, median 8 min): test input, fitted to nothing.
func IdleHistory(r *rand.Rand, n int) *alloc.IdleHistory {
	h := &alloc.IdleHistory{}
	for range n {
		h.Add(math.Exp(math.Log(480) + 1.3*r.NormFloat64()))
	}
	// Nodes came free every 30 s to 30 min on average.
	h.Frees = 1 + n/4
	h.Seconds = float64(h.Frees) * (30 + 1770*r.Float64())
	return h
}
