package sidecar

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/store"
	"github.com/bftrainer/bftrainer/trainer"
)

// CostDetail is a cost event's detail: the rescale a launcher measured.
type CostDetail struct {
	Direction string `json:"direction"` // up, down, reclaim, failure
	From      int    `json:"from"`      // workers before
	To        int    `json:"to"`        // workers after
	Note      string `json:"note,omitempty"`
}

// costEvent is the input event of an action that measured a rescale's
// cost (nil for any other action): recorded in the history and folded
// into the Trainer's R_up / R_down by the next round.
func costEvent(at time.Time, a trainer.Action) *store.Event {
	m := a.Measured
	if m == nil {
		return nil
	}
	d, _ := json.Marshal(CostDetail{Direction: m.Direction, From: m.From, To: m.To, Note: a.Note})
	return &store.Event{At: at, Kind: store.KindCost, Source: "trainer", Context: m.Direction, Trainer: a.Trainer,
		Value: m.Seconds, HasVal: true, Detail: d}
}

// foldCost folds a measured cost into the pool. Only the runner writes
// them (the spool takes no such kind). A failure (a worker crashed) is
// history only: R_down prices planned shrinks and reclaims. A Trainer
// that ended meanwhile needs none.
func foldCost(p *pool.Pool, ev store.Event) error {
	if ev.Source != "trainer" {
		return fmt.Errorf("cost from %q: only the runner measures costs", ev.Source)
	}
	var d CostDetail
	if err := json.Unmarshal(ev.Detail, &d); err != nil {
		return fmt.Errorf("bad cost detail %q: %w", ev.Detail, err)
	}
	if d.Direction == trainer.Failure {
		return nil
	}
	err := p.MeasuredCost(ev.Trainer, d.Direction, ev.Value)
	if errors.Is(err, pool.ErrUnknownTrainer) {
		return nil
	}
	return err
}

// takenNodes are the nodes the scheduler holds now, for the runner
// (trainer.Want.Taken): a node a Trainer lost among them was reclaimed.
func takenNodes(st pool.State) []string {
	var out []string
	for _, n := range st.Nodes {
		if n.State == pool.Busy {
			out = append(out, n.Name)
		}
	}
	return out
}
