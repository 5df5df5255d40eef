package sim

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/bftrainer/bftrainer/accounting"
	"github.com/bftrainer/bftrainer/names"
)

// SacctTrace is the idle-node trace of a Slurm site's own accounting
// (accounting.ReadSacct): any Slurm site can then ask what its last month
// would have yielded, on its real node names and the nodes its jobs really
// held (an SWF log knows only how many).
//
// It is the idle-node trace of the listing: a node is busy while any job
// holds it (jobs sharing a node count once), idle otherwise. The nodes are
// nodeNames when given (every node of the cluster, so that nodes no job used
// count as idle throughout; a job's node missing from it is an error), else
// every node some job held, in hostname order. The trace starts at the
// earliest start with every node idle but those starting then, and ends at
// the listing's last start or end (an event with no change marks it when
// nothing changed then).
//
// What sacct does not know, the trace does not either: a node down, drained
// or reserved without a job counts as idle.
func SacctTrace(l *accounting.Listing, nodeNames []string) (*Trace, error) {
	if len(l.Jobs) == 0 {
		return nil, errors.New("sacct trace: no job that ran")
	}
	if nodeNames == nil {
		seen := map[string]bool{}
		for _, j := range l.Jobs {
			for _, n := range j.Nodes {
				if !seen[n] {
					seen[n] = true
					nodeNames = append(nodeNames, n)
				}
			}
		}
		nodeNames = names.SortHostnames(nodeNames)
	}
	if len(nodeNames) > maxTraceNodes {
		return nil, fmt.Errorf("sacct trace: %d nodes, more than %d", len(nodeNames), maxTraceNodes)
	}
	index := make(map[string]int32, len(nodeNames))
	for i, n := range nodeNames {
		index[n] = int32(i)
	}
	// Each job's nodes as indices, and its start and end as changes.
	type change struct {
		at    time.Time
		delta int32 // +1 a job starts holding the nodes, -1 it stops
		job   int
	}
	held := make([][]int32, len(l.Jobs))
	var changes []change
	for k, j := range l.Jobs {
		for _, n := range j.Nodes {
			i, ok := index[n]
			if !ok {
				return nil, fmt.Errorf("sacct trace: job %s (line %d) ran on %s, which is not among the nodes given", j.ID, j.Line, n)
			}
			held[k] = append(held[k], i)
		}
		if !j.End.After(j.Start) && !j.Running {
			continue // held for no time: no change
		}
		changes = append(changes, change{j.Start, +1, k})
		if !j.Running {
			// A running job's nodes never come back within the trace.
			changes = append(changes, change{j.End, -1, k})
		}
	}
	// At one instant, ends before starts, so that a node passed from one
	// job to the next at the same second is never idle.
	slices.SortFunc(changes, func(a, b change) int {
		return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.delta, b.delta), cmp.Compare(a.job, b.job))
	})
	n := len(nodeNames)
	holders := make([]int32, n)
	idle := make([]bool, n)
	for i := range idle {
		idle[i] = true
	}
	t := &Trace{Nodes: nodeNames}
	d := newDeltaTracker(n)
	first := true
	for c := 0; c < len(changes); {
		now := changes[c].at
		for ; c < len(changes) && changes[c].at.Equal(now); c++ {
			ch := changes[c]
			for _, i := range held[ch.job] {
				d.touch(i, idle[i])
				holders[i] += ch.delta
				idle[i] = holders[i] == 0
			}
		}
		e := Event{Time: now}
		if first {
			// Relative to all-busy: every node idle now joins.
			for i, ok := range idle {
				if ok {
					e.Joined = append(e.Joined, int32(i))
				}
			}
			d.reset()
			first = false
		} else if e.Joined, e.Left = d.flush(idle); len(e.Joined) == 0 && len(e.Left) == 0 {
			continue
		}
		t.Events = append(t.Events, e)
	}
	if len(t.Events) == 0 {
		return nil, errors.New("sacct trace: no job held a node for any time")
	}
	if end := l.End; end.After(t.Events[len(t.Events)-1].Time) {
		// The window goes on after the last change (a job still running,
		// one ending on a node another still holds): an event with no
		// change marks where the listing ends.
		t.Events = append(t.Events, Event{Time: end})
	}
	t.Skipped = l.SkippedTotal()
	t.Source = fmt.Sprintf("sacct (%d jobs, %d nodes, %d events)", len(l.Jobs), n, len(t.Events))
	return t, nil
}
