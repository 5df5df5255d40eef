package agent

import (
	"context"

	"github.com/bftrainer/bftrainer/trainer/wire"
)

// List returns the node's entries and what became of them.
//
// It takes the node's lock, as the kills do: a reclaim in progress has
// killed processes whose entries it has not yet removed, and a look in
// between would report those launches as gone.
func (a *Agent) List(ctx context.Context, node string) ([]wire.Status, error) {
	lk, err := a.Registry.Lock(ctx, node)
	if err != nil {
		return nil, err
	}
	defer lk.Unlock()
	ents, err := a.Registry.Entries(node)
	if err != nil {
		return nil, err
	}
	states := a.states(ents)
	out := make([]wire.Status, len(ents))
	for i, e := range ents {
		out[i] = wire.Status{Entry: e, State: states[i]}
	}
	return out, nil
}

// states says whether each launch runs: exited when its supervisor
// recorded the program's end; running while its cgroup is populated (no
// look at /proc), or, for a launch without one, while its supervisor is
// the process we started or any process carries its token; gone
// otherwise. A hosted launch runs for as long as it is recorded.
func (a *Agent) states(ents []wire.Entry) []string {
	out := make([]string, len(ents))
	var look []int
	for i, e := range ents {
		switch {
		case e.Exit != nil:
			out[i] = wire.StateExited
		case e.Hosted:
			out[i] = wire.StateRunning
		case e.Cgroup != "":
			out[i] = wire.StateGone
			if pop, err := Populated(e.Cgroup); err == nil && pop {
				out[i] = wire.StateRunning
			}
		default:
			if p, ok := readProc(e.PGID); ok && !p.Dead() && e.Ticks != 0 && p.Ticks == e.Ticks {
				out[i] = wire.StateRunning
				continue
			}
			out[i] = wire.StateGone
			look = append(look, i)
		}
	}
	if len(look) == 0 {
		return out
	}
	// One pass over /proc for every launch left, reading only their
	// owners' environments.
	uids := map[int]bool{}
	want := map[string]int{}
	for _, i := range look {
		uids[ents[i].UID] = true
		want[ents[i].Token] = i
	}
	var s scanner
	s.each(func(p *Proc) bool {
		if p.Dead() || !uids[p.UID] {
			return true
		}
		s.environ(p)
		if i, ok := want[p.Run]; ok {
			out[i] = wire.StateRunning
			delete(want, p.Run)
		}
		return len(want) > 0
	})
	return out
}
