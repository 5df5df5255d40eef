package alloc

// Priced exploration: when a Trainer's curve is uncertain at a count, a
// decision may move it there to measure — a probe — but only when the
// expected gain of knowing outweighs what the move costs, and never more
// often than the learner's bound.
//
// The rule, for a running Trainer at C nodes and each count n of its
// estimate with C < n ≤ min(Max, Avail) and relative SD σ ≥ ProbeMinSD:
//
//	gain(n) = EI(n) · H,  EI(n) = μ·(e^(s²/2)·Φ(s) − ½),  s² = σ⁴/(σ² + noise²)
//	H       = min(Horizon, Remaining/μ)
//	cost(n) = R_up·r_C + R_down·μ + max(0, r_C − μ)·(Settle + MinSample)
//
// EI is the expected excess of the true rate over the estimate μ, under
// the log-normal belief, for the part of the uncertainty one sample
// removes (s); it is what not knowing may be losing per second while the
// allocator under-uses n, and H is how long the knowledge would be used —
// an upper bound on the value of the information, since it assumes the
// knowledge is used all that time. The cost is the rescale there (at the
// current rate r_C), the rescale back (at μ), and the throughput given up
// while measuring. The probe is the n with the largest gain − cost > 0
// (ties: fewer nodes). Probes only grow a Trainer: a smaller count is
// learnt for free when reclaims or other Trainers shrink it, and what it
// would teach matters only then; a larger one is learnt only if a decision
// chooses to pay for it.
//
// The bound, all three at once: at most one probe in any ProbeEvery
// consecutive decisions of the Trainer (and none before its ProbeEvery-th),
// none within ProbeInterval seconds of its last, and none that would make
// its probes more than ProbeShare of its rescales (probes included). Only
// the move to the probed count counts as a probe; the move back is an
// ordinary decision.
//
// How it plugs into a decision: the caller runs Explore per Trainer before
// solving. A returned probe is offered to the allocator as an optimistic
// curve (CurveEstimate.Optimistic): the Trainer's curve with Bonus/T_fwd
// added at n alone. The allocator then weighs, in its own currency, the
// probe's value against what the nodes would earn elsewhere and the rescale
// it prices itself; Bonus = gain − R_down·μ (the way back) is what it does
// not see. A
// solver that does not use T_fwd may instead add n as a forced candidate
// and take it when its objective falls by less than Bonus. After the
// decision the caller records it with Decided — probed when the plan gave
// the Trainer exactly n — so the bound holds whatever the allocator chose.

import (
	"fmt"
	"math"
	"slices"
)

// ProbeSituation is what Explore needs to know about one decision.
type ProbeSituation struct {
	Now   float64 // the caller's clock, seconds (replay time or wall time)
	Held  int     // nodes the Trainer holds now
	Avail int     // most nodes it could hold after this decision: held plus free
	RUp   float64 // seconds of progress lost growing
	RDown float64 // seconds of progress lost shrinking
	// Remaining is the samples it has left; 0 means until it exits.
	Remaining float64
	// Horizon is how long, in seconds, what a probe learns would be used:
	// for example the expected remaining idle time of the pool's nodes.
	// 0 means no exploration.
	Horizon float64
	// Objective is the allocator's; exploration is off under Metric, whose
	// values the user gives.
	Objective Objective
}

// CurveProbe is Explore's answer.
type CurveProbe struct {
	Nodes  int     // count to try; 0: none
	Gain   float64 // expected samples gained by knowing its rate
	Cost   float64 // samples the probe costs: both rescales and the shortfall while measuring
	Bonus  float64 // Gain less the rescale back: the value the allocator does not price
	Reason string  // why this count, or why none
}

// Explore says whether this decision may move the Trainer to a count to
// learn its rate, and which. It reads s (the ledger) and e (its estimate)
// and changes neither.
func (l CurveLearner) Explore(s *CurveState, e *CurveEstimate, x ProbeSituation) CurveProbe {
	l = l.settings()
	none := func(format string, args ...any) CurveProbe {
		return CurveProbe{Reason: "no probe: " + fmt.Sprintf(format, args...)}
	}
	switch {
	case x.Objective == Metric:
		return none("the metric objective is the user's, not learned")
	case x.Horizon <= 0 || !finite(x.Horizon):
		return none("no horizon to use what it learns")
	case x.Held < max(s.Min, 1):
		return none("not running (%d nodes)", x.Held)
	case !e.Known():
		return none("nothing measured yet")
	}
	if ok, why := l.mayProbe(s, x.Now); !ok {
		return none("%s", why)
	}
	top := min(s.Max, x.Avail)
	if top <= x.Held {
		return none("no room to grow (%d nodes, at most %d)", x.Held, top)
	}
	rC, _ := e.At(x.Held)
	if rC <= 0 {
		return none("no rate at its %d nodes", x.Held)
	}
	settleTime := l.Settle + l.MinSample
	best := CurveProbe{}
	for _, p := range e.Points {
		n := p.Nodes
		if n <= x.Held || n > top || p.Rate <= 0 || p.SD < l.ProbeMinSD {
			continue
		}
		mu := p.Rate
		s2 := p.SD * p.SD * p.SD * p.SD / (p.SD*p.SD + e.Noise*e.Noise)
		sd := math.Sqrt(s2)
		ei := mu * (math.Exp(s2/2)*normalCDF(sd) - 0.5)
		h := x.Horizon
		if x.Remaining > 0 {
			h = min(h, x.Remaining/mu)
		}
		gain := ei * h
		cost := x.RUp*rC + x.RDown*mu + max(0, rC-mu)*settleTime
		if gain > cost && (best.Nodes == 0 || gain-cost > best.Gain-best.Cost) {
			best = CurveProbe{
				Nodes: n, Gain: gain, Cost: cost, Bonus: gain - x.RDown*mu,
				Reason: fmt.Sprintf("probe %d nodes (±%.0f %%, %s): expected gain %.3g samples > cost %.3g", n, 100*p.SD, p.Source, gain, cost),
			}
		}
	}
	if best.Nodes == 0 {
		return none("no count's expected gain outweighs its cost")
	}
	return best
}

// mayProbe applies the bound.
func (l CurveLearner) mayProbe(s *CurveState, now float64) (bool, string) {
	switch {
	case s.SinceProbe+1 < l.ProbeEvery: // this decision is the (SinceProbe+1)-th
		return false, fmt.Sprintf("decision %d since the last probe, %d needed", s.SinceProbe+1, l.ProbeEvery)
	case s.Probes > 0 && now-s.LastProbe < l.ProbeInterval:
		return false, fmt.Sprintf("%.0f s since the last probe, %.0f s needed", now-s.LastProbe, l.ProbeInterval)
	case float64(s.Probes+1) > l.ProbeShare*float64(s.Rescales+1):
		return false, fmt.Sprintf("%d probes in %d rescales, at most %.3g %%", s.Probes, s.Rescales, 100*l.ProbeShare)
	}
	return true, ""
}

// Decided records one decision in the Trainer's exploration ledger: whether
// it changed the Trainer's count while it ran (rescaled), and whether that
// change was to the count Explore proposed (probed, which implies
// rescaled). Call it once per decision the Trainer was active in.
func (s *CurveState) Decided(now float64, rescaled, probed bool) {
	s.Decisions++
	s.SinceProbe++
	if rescaled || probed {
		s.Rescales++
	}
	if probed {
		s.Probes++
		s.SinceProbe = 0
		s.LastProbe = now
	}
}

// Optimistic returns the curve to give the allocator for a probe: the
// estimate's curve with p.Bonus/tfwd added to the rate at p.Nodes only
// (points at p.Nodes ± 1 keep the neighbours' values). Without a probe, or
// with tfwd ≤ 0, it is the estimate's curve.
func (e CurveEstimate) Optimistic(p CurveProbe, tfwd float64) Curve {
	c := e.Curve()
	if p.Nodes <= 0 || tfwd <= 0 || p.Bonus <= 0 || !e.Known() {
		return c
	}
	out := Curve{}
	if c.Metric != nil {
		out.Metric = []float64{}
	}
	add := func(n int, v, m float64) {
		out.Nodes = append(out.Nodes, n)
		out.Throughput = append(out.Throughput, v)
		if out.Metric != nil {
			out.Metric = append(out.Metric, m)
		}
	}
	last := c.Nodes[len(c.Nodes)-1]
	nodes := append(slices.Clone(c.Nodes), p.Nodes-1, p.Nodes, p.Nodes+1)
	slices.Sort(nodes)
	for _, n := range slices.Compact(nodes) {
		if n < 1 || n > max(last, p.Nodes) {
			continue
		}
		v, m := Interp(c.Nodes, c.Throughput, n), 0.0
		if c.Metric != nil {
			m = Interp(c.Nodes, c.Metric, n)
		}
		if n == p.Nodes {
			v += p.Bonus / tfwd
		}
		add(n, v, m)
	}
	return out
}

// normalCDF is Φ, the standard normal distribution function.
func normalCDF(x float64) float64 { return 0.5 * math.Erfc(-x/math.Sqrt2) }
