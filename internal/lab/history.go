package lab

import (
	"context"

	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/store"
)

// Events returns history rows of the database at path, opened read-only:
// the scenarios only look.
func Events(ctx context.Context, path string, f store.Filter) ([]store.Event, error) {
	db, err := store.Open(ctx, path, store.Options{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer db.Close()
	return db.Events(ctx, f)
}

// PoolNodes returns the pool's nodes by name, as the last round saved them
// in the database at path.
func PoolNodes(ctx context.Context, path string) (map[string]pool.Node, error) {
	db, err := store.Open(ctx, path, store.Options{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer db.Close()
	snap, err := db.Load(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]pool.Node{}
	for _, n := range snap.State.Nodes {
		out[n.Name] = n
	}
	return out, nil
}
