package alloc

import "math"

// The adaptive pricing as it was before the block evaluation (commit
// bc90ab6): every count's node set built and walked node by node, O(k) per
// count. Kept here, and only here, as the oracle the property tests hold
// the block evaluation to (TestAdaptiveGainsMatchOracle).

// oracleGains returns Trainer j's gain for k = 0..hi, the old way.
func (m *adaptiveModel) oracleGains(j int) []float64 {
	_, hi := m.p.bounds(j)
	hi = max(hi, len(m.p.Trainers[j].Held))
	ts := m.sets(j, hi)
	rates := m.rates(j, hi)
	out := make([]float64, hi+1)
	buf := make([]nodeOutlook, 0, hi)
	for k := 1; k <= hi; k++ {
		out[k] = m.oracleGainOf(j, k, ts.oracleSet(k, buf), rates)
	}
	return out
}

// oracleSet returns the outlooks count k is priced on, oldest first.
func (ts *trainerSets) oracleSet(k int, buf []nodeOutlook) []nodeOutlook {
	C := len(ts.held)
	if k <= C {
		if ts.youngFirst {
			return append(buf[:0], ts.held[C-k:]...)
		}
		return append(buf[:0], ts.held[:k]...)
	}
	buf = buf[:0]
	add := ts.added[:k-C]
	i, a := 0, 0
	for i < C || a < len(add) {
		if a == len(add) || (i < C && ts.held[i].age >= add[a].age) {
			buf = append(buf, ts.held[i])
			i++
		} else {
			buf = append(buf, add[a])
			a++
		}
	}
	return buf
}

// oracleGainOf prices Trainer j on the node set, node by node.
func (m *adaptiveModel) oracleGainOf(j, k int, set []nodeOutlook, rates []float64) float64 {
	t := &m.p.Trainers[j]
	finish := math.Inf(1)
	if P := t.Curve.SamplesPerSecond(k, t.Min); t.Remaining > 0 && P > 0 {
		finish = t.Remaining / P
	}
	grown := min(finish, m.gap)
	g := 0.0
	for s := 0; s < len(set); {
		e := s + 1
		for e < len(set) && set[e].age == set[s].age {
			e++
		}
		_, pi := m.over(set[s], grown)
		g -= t.RDown * rates[e] * pi
		for a := s; a < e; {
			b := a + 1
			for b < e && set[b].added == set[a].added {
				b++
			}
			horizon := m.gap
			if set[a].added {
				horizon = grown
			}
			h, _ := m.over(set[a], horizon)
			g += (rates[b] - rates[a]) * h
			a = b
		}
		s = e
	}
	return g
}

// oraclePricing is AdaptiveHorizon priced the old way.
type oraclePricing struct{}

func (oraclePricing) Name() string { return "adaptive" }

func (oraclePricing) Gains(p *Problem) func(j, k int) float64 {
	m := newAdaptiveModel(p)
	tables := make([][]float64, len(p.Trainers))
	return func(j, k int) float64 {
		if k <= 0 {
			return 0
		}
		if tables[j] == nil {
			tables[j] = m.oracleGains(j)
		}
		if k >= len(tables[j]) {
			ts := m.sets(j, k)
			return m.oracleGainOf(j, k, ts.oracleSet(k, nil), m.rates(j, k))
		}
		return tables[j][k]
	}
}

// OracleAdaptive is the adaptive pricing evaluated the old way, for the
// property tests in package alloc_test.
var OracleAdaptive Pricing = oraclePricing{}

// OracleAdaptiveCounts is Adaptive as it was: the old pricing, every count
// tabled, the old DP. It returns the counts and false when infeasible.
func OracleAdaptiveCounts(p *Problem) ([]int, bool) {
	return oracleOptimalCounts(p, p.Prices(oraclePricing{}), false)
}
