package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/bftrainer/bftrainer/journal"
	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/store"
)

// Events returns history rows of the database at path, once what the
// hooks left in the journal beside it (and in fallback, when given) is
// recorded — the first step of every reconciler round, which a scenario
// should not have to wait for; nothing else is changed. When the
// database cannot be written (a scenario's fault), the rows recorded so
// far.
func Events(ctx context.Context, path string, f store.Filter, fallback ...string) ([]store.Event, error) {
	Ingest(ctx, path, fallback...)
	db, err := store.Open(ctx, path, store.Options{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer db.Close()
	return db.Events(ctx, f)
}

// Ingest records the journal beside the database at path (and the
// fallback directories) in it, as a reconciler round does first.
func Ingest(ctx context.Context, path string, fallback ...string) error {
	if _, err := os.Stat(path); err != nil {
		return err
	}
	db, err := store.Open(ctx, path, store.Options{})
	if err != nil {
		return err
	}
	defer db.Close()
	j := &journal.Journal{Dir: filepath.Join(filepath.Dir(path), "journal")}
	if len(fallback) > 0 {
		j.Fallback = fallback[0]
	}
	_, err = j.Ingest(ctx, db, time.Now())
	return err
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

// Mismatch says how a scheduler's hosts, the pool and the Trainers'
// processes disagree, "" when they agree: a host the scheduler reports
// exactly idle (idle) is idle in the pool and the other way round; a host
// the pool lends to a Trainer runs that Trainer's processes and no
// other's; a host it does not lend runs none. procs is host → Trainer →
// pids; query names the scheduler's command in the message (qhost,
// pbsnodes).
func Mismatch(hosts []string, nodes map[string]pool.Node, idle []string, procs map[string]map[string][]int, query string) string {
	var diff []string
	for _, h := range hosts {
		n := nodes[h]
		if inPool := n.State == pool.Idle; inPool != slices.Contains(idle, h) {
			diff = append(diff, fmt.Sprintf("%s: pool %q, %s idle %v", h, n.State, query, !inPool))
		}
		want := ""
		if n.State == pool.Idle {
			want = n.Trainer
		}
		for tr := range procs[h] {
			if tr != want {
				diff = append(diff, fmt.Sprintf("%s runs %s, the pool says %q", h, tr, want))
			}
		}
		if want != "" && len(procs[h][want]) == 0 {
			diff = append(diff, fmt.Sprintf("%s should run %s", h, want))
		}
	}
	return strings.Join(diff, "; ")
}
