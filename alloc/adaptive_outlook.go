package alloc

// ReclaimChances returns, for idle nodes of the given ages in seconds (all
// the nodes idle at one moment, free or held), each one's probability of
// being reclaimed within the pool's horizon τ as AdaptiveHorizon prices it:
// π(a, τ) from the life table of h (the ended periods, with the prior) and
// these ages (censored). For measurement: bftrainer-bench order compares it
// with the nodes a scheduler actually takes.
func ReclaimChances(h *IdleHistory, ages []float64) []float64 {
	sv := newSurvival(h, ages)
	gap := h.FreeGap()
	out := make([]float64, len(ages))
	for i, a := range ages {
		o := sv.outlook(a)
		_, out[i] = sv.over(&o, gap)
	}
	return out
}
