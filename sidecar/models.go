package sidecar

import (
	"context"

	"github.com/bftrainer/bftrainer/names"
)

// OnModelCurve reports whether the active Trainer id is planned now on the
// curve the pool learned of the other Trainers of its model
// (pool.Pool.OnModelCurve), and how many Trainers that curve rests on (0
// once it is the Trainer's prior): the saved pool with the events no round
// has folded yet, brought to now.
func (c *Core) OnModelCurve(ctx context.Context, id string) (bool, int, error) {
	if err := names.ValidateTrainer(id); err != nil {
		return false, 0, invalid(err)
	}
	db, err := c.openRead(ctx)
	if err != nil {
		return false, 0, err
	}
	defer db.Close()
	f, err := c.foldNow(ctx, db)
	if err != nil {
		return false, 0, err
	}
	on, n := f.pool.OnModelCurve(id)
	return on, n, nil
}
