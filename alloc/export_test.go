package alloc

// PricedAdditionAges returns the idle ages AdaptiveHorizon prices Trainer
// j's growth by delta nodes on, oldest first (for tests of the bound).
func PricedAdditionAges(p *Problem, j, delta int) []float64 {
	m := newAdaptiveModel(p)
	ts := m.sets(j, len(p.Trainers[j].Held)+delta)
	out := make([]float64, len(ts.added))
	for i, o := range ts.added {
		out[i] = o.age
	}
	return out
}
