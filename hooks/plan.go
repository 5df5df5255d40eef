package hooks

import "time"

// PlannedStart is a main job the scheduler plans to start later, on nodes
// that may be idle now: what the reconciler may move Trainers off before
// the job lands. A plan is a hint, often wrong (run times are requested
// generously, and every scheduling pass plans again): it never keeps a node
// from the scheduler and never replaces the prolog's kill.
type PlannedStart struct {
	Job      string        // the scheduler's job ID
	Nodes    []string      // the nodes it reserves, in the plan's order
	Start    time.Time     // when the scheduler plans to start it
	Duration time.Duration // how long it reserves them
}
