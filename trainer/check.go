package trainer

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/bftrainer/bftrainer/trainer/wire"
)

// Seen is what a check saw of one launch.
type Seen struct {
	Known   bool // its node answered
	Running bool
	Exited  bool
	Code    int // with Exited
	// Gone: nothing of it is left and no exit was recorded — killed by a
	// reclaim (or a node's prolog that had to fall back to another
	// registry): never a Trainer failure.
	Gone bool
}

// observe compares one launch with its node's list.
func observe(l *Launched, list map[string]wire.Status, listed bool, id string) Seen {
	if !listed {
		return Seen{}
	}
	s, ok := list[id]
	if !ok || s.Token != l.Token {
		return Seen{Known: true, Gone: true} // no entry: cleared by a kill
	}
	switch s.State {
	case wire.StateExited:
		return Seen{Known: true, Exited: true, Code: s.Exit.Code}
	case wire.StateGone:
		return Seen{Known: true, Gone: true}
	}
	return Seen{Known: true, Running: true}
}

// Check looks at what runs and reports Trainers whose processes all ended
// by themselves (each launcher's Ended decides). Launches that vanished
// without an exit (killed by a node's prolog) are forgotten, so the next
// round starts them again if the node is still wanted. Launches the nodes
// run that no record owns are stopped.
func (r *Runner) Check(ctx context.Context) ([]Exit, []Action) {
	s, err := r.open()
	if err != nil {
		return nil, []Action{{Op: "state", Err: err}}
	}
	s.resolvePending(ctx)
	look := map[string]bool{}
	for _, rec := range s.st.Trainers {
		if rec.Exited {
			continue
		}
		if len(rec.Roles) > 0 {
			look[wire.ControllerNode] = true
		}
		for n, l := range rec.Nodes {
			if l.Exit == nil && !l.Hosted && !l.Pending {
				look[n] = true
			}
		}
	}
	if len(look) == 0 {
		return nil, s.acts
	}
	lists, failed := r.lists(ctx, slices.Sorted(maps.Keys(look)))
	s.acts = append(s.acts, failed...)
	var exits []Exit
	changed := false
	for _, id := range slices.Sorted(maps.Keys(s.st.Trainers)) {
		rec := s.st.Trainers[id]
		if rec.Exited {
			continue
		}
		t := s.run(id, rec, Want{ID: id, Owner: rec.Owner, Launcher: rec.Launcher})
		changed = s.checkNodes(t, lists) || changed
		roles := map[string]Seen{}
		ctl, listed := lists[wire.ControllerNode]
		for role, l := range rec.Roles {
			if !l.Pending {
				roles[role] = observe(l, ctl, listed, id)
			}
		}
		l, ok := r.Launchers[rec.Launcher]
		if !ok {
			continue
		}
		before := fmt.Sprint(rec.Roles)
		ex, acts := l.Ended(t, roles)
		s.acts = append(s.acts, acts...)
		changed = changed || len(acts) > 0 || before != fmt.Sprint(rec.Roles)
		if ex != nil {
			rec.Exited, changed = true, true
			exits = append(exits, *ex)
		}
	}
	if changed {
		s.save()
	}
	s.orphansIn(ctx, lists)
	return exits, s.acts
}

// checkNodes records what became of the Trainer's node launches: exits,
// and those a reclaim took (forgotten). changed reports a change.
func (s *session) checkNodes(t *Run, lists map[string]map[string]wire.Status) (changed bool) {
	for _, n := range t.Launched() {
		l := t.Rec.Nodes[n]
		if l.Exit != nil || l.Hosted || l.Pending {
			continue
		}
		list, listed := lists[n]
		switch seen := observe(l, list, listed, t.ID); {
		case seen.Gone:
			delete(t.Rec.Nodes, n)
			changed = true
			s.acts = append(s.acts, Action{Trainer: t.ID, Node: n, Op: "gone", Note: "nothing of it left on the node and no exit recorded (killed by a reclaim)"})
		case seen.Exited:
			code := seen.Code
			l.Exit, changed = &code, true
			s.acts = append(s.acts, Action{Trainer: t.ID, Node: n, Op: "exited", Note: fmt.Sprintf("exited %d by itself", code)})
		}
	}
	return changed
}

// orphansIn stops what the listed nodes run that no record owns.
func (s *session) orphansIn(ctx context.Context, lists map[string]map[string]wire.Status) {
	var orphans []orphan
	for _, n := range slices.Sorted(maps.Keys(lists)) {
		for _, id := range slices.Sorted(maps.Keys(lists[n])) {
			st := lists[n][id]
			if !s.known(n, wire.Other{Trainer: st.Trainer, Run: st.Run, Token: st.Token}) {
				orphans = append(orphans, orphan{node: n, trainer: id})
			}
		}
	}
	s.stopOrphans(ctx, orphans)
}
