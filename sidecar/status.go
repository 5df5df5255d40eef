package sidecar

import (
	"context"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/names"
	"github.com/bftrainer/bftrainer/pool"
)

// Status is the pool and its Trainers now: the saved state with the events
// no round has folded yet, brought to now (as Preview, without solving).
// Front doors render it field by field, by its JSON names, so a field
// added here shows in every format.
type Status struct {
	Database        string `json:"database"`
	Idle            int    `json:"idle"`             // nodes in the pool, free or lent
	IdleNodes       string `json:"idle_nodes"`       // as a hostlist
	Lent            int    `json:"lent"`             // idle nodes held by Trainers
	Free            int    `json:"free"`             // idle nodes held by none
	Completing      int    `json:"completing"`       // released, not yet exactly idle
	CompletingNodes string `json:"completing_nodes"` // as a hostlist
	Busy            int    `json:"busy"`             // the scheduler's
	// Containment is how this machine contains Trainer processes:
	// "cgroup", or "degraded (why)"; "" when the core has no local killer.
	Containment     string          `json:"containment,omitempty"`
	TrainersRunning int             `json:"trainers_running"`
	TrainersQueued  int             `json:"trainers_queued"`
	MaxTrainers     int             `json:"max_trainers"`
	Unfolded        int             `json:"unfolded_events"` // recorded events no reconciler has folded yet (shown as if it had)
	Trainers        []StatusTrainer `json:"trainers"`        // running, in admission order
}

// StatusTrainer is one running Trainer in a Status.
type StatusTrainer struct {
	Trainer string `json:"trainer"`
	Owner   string `json:"owner"`
	Nodes   int    `json:"nodes"`
	Names   string `json:"names"` // as a hostlist
}

// containment is a Killer that can say how it contains processes.
type containment interface{ Containment() string }

// Status returns the pool now. It needs no solver.
func (c *Core) Status(ctx context.Context) (*Status, error) {
	db, err := c.openRead(ctx)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	f, err := c.foldNow(ctx, db)
	if err != nil {
		return nil, err
	}
	p := f.pool
	st := &Status{Database: c.o.Database, MaxTrainers: c.o.Pool.MaxTrainers, Unfolded: f.events, Trainers: []StatusTrainer{}}
	if k, ok := c.o.Killer.(containment); ok {
		st.Containment = k.Containment()
	}
	var idle, completing []string
	for _, n := range p.State().Nodes {
		switch n.State {
		case pool.Idle:
			idle = append(idle, n.Name)
			if n.Trainer != "" {
				st.Lent++
			}
		case pool.Pending:
			completing = append(completing, n.Name)
		case pool.Busy:
			st.Busy++
		}
	}
	st.Idle, st.IdleNodes = len(idle), names.CompressHostlist(idle)
	st.Free = st.Idle - st.Lent
	st.Completing, st.CompletingNodes = len(completing), names.CompressHostlist(completing)
	st.TrainersRunning, st.TrainersQueued = len(p.Running()), len(p.Queued())
	for _, t := range p.Running() {
		st.Trainers = append(st.Trainers, StatusTrainer{Trainer: t.ID, Owner: t.Owner, Nodes: len(t.Nodes),
			Names: names.CompressHostlist(alloc.Names(t.Nodes))})
	}
	return st, nil
}
