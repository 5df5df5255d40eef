package hooks

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// Listing is a scheduler's own node listing, for the reconciler and sync,
// never for a hook's hot path.
type Listing struct {
	// Key is its program's key in the configuration's [scheduler] table
	// ("sinfo"), and Program the program by default ("/usr/bin/sinfo").
	Key, Program string
	// Args returns the program's arguments, for the given nodes (all nodes
	// when nodes is empty; the listing may print more, which Query drops).
	Args func(nodes []string) []string
	// Parse reads its output into each node's state, the scheduler's words
	// except that "idle" means exactly idle: usable now, no job, no epilog
	// still running, not drained, responding.
	Parse func(out []byte) (map[string]string, error)
	// Planned reports whether a state Parse returned means the scheduler
	// holds the node for a pending job's planned start (Slurm's backfill
	// reservation, "plnd"): not completing, and no job on it yet; nil:
	// the listing shows no such state.
	Planned func(state string) bool
}

// Query is a Listing with the program to run: the scheduler's view of node
// states as the reconciler asks for it.
type Query struct {
	Listing *Listing
	Program string // "": Listing.Program
}

// NodeStates runs the listing and returns the states of the given nodes
// (of all nodes when nodes is empty).
func (q Query) NodeStates(ctx context.Context, nodes []string) (map[string]string, error) {
	if q.Listing == nil {
		return nil, errors.New("node states: this scheduler has no node listing")
	}
	cmd := q.Program
	if cmd == "" {
		cmd = q.Listing.Program
	}
	c := exec.CommandContext(ctx, cmd, q.Listing.Args(nodes)...)
	// When ctx ends the program is killed, but a child of it (a wrapper
	// script's, a site's qhost that forks) may keep its output pipe open:
	// Output would wait for that child however long it runs, and the
	// reconciler's round with it. WaitDelay closes the pipe after it.
	c.WaitDelay = time.Second
	out, err := c.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok && len(ee.Stderr) > 0 {
			return nil, fmt.Errorf("%s: %w: %s", cmd, err, strings.TrimSpace(string(ee.Stderr)))
		}
		return nil, fmt.Errorf("%s: %w", cmd, err)
	}
	states, err := q.Listing.Parse(out)
	if err != nil {
		return nil, err
	}
	if len(nodes) > 0 {
		want := make(map[string]bool, len(nodes))
		for _, n := range nodes {
			want[n] = true
		}
		for n := range states {
			if !want[n] {
				delete(states, n)
			}
		}
	}
	return states, nil
}
