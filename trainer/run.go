package trainer

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"

	"github.com/bftrainer/bftrainer/trainer/wire"
)

// Run is one Trainer as its launcher sees it during a round: what is
// wanted, what the runner recorded, and the operations a launcher needs.
// Every start and stop goes through it, so that the record always says
// what runs.
type Run struct {
	ID      string
	Want    Want // for a Stop, Want.Nodes is empty
	Rec     *Record
	s       *session
	orphans []orphan
}

// Paced reports that a round follows soon if this one asks (Later): the
// launcher need not wait now for what that round can take in.
func (t *Run) Paced() bool { return t.s.r.later.Load() }

// Later asks for a round soon (within the reconciler's poll) to take in
// what this one left: workers still starting.
func (t *Run) Later() { t.s.pending = true }

// Added returns the wanted nodes without a launch, in the order taken.
func (t *Run) Added() []string {
	var out []string
	for _, n := range t.Want.Nodes {
		if _, ok := t.Rec.Nodes[n]; !ok {
			out = append(out, n)
		}
	}
	return out
}

// Removed returns the nodes with a launch that are no longer wanted,
// sorted.
func (t *Run) Removed() []string {
	var out []string
	for n := range t.Rec.Nodes {
		if !slices.Contains(t.Want.Nodes, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// Launched returns the nodes with a launch, sorted.
func (t *Run) Launched() []string { return slices.Sorted(maps.Keys(t.Rec.Nodes)) }

// Env is a launch's environment: defaults, the user's, then ours.
func (t *Run) Env(spec Spec, defaults map[string]string) map[string]string {
	env := maps.Clone(defaults)
	if env == nil {
		env = map[string]string{}
	}
	maps.Copy(env, spec.Env)
	env["BFTRAINER_TRAINER"] = t.ID
	if t.s.r.NodeBin != "" {
		env["BFTRAINER_BIN"] = t.s.r.NodeBin
	}
	if t.s.r.NodeConfig != "" {
		env["BFTRAINER_CONFIG"] = t.s.r.NodeConfig
	}
	return env
}

// Address is how processes on the nodes reach the controller.
func (t *Run) Address() string { return t.s.r.Address }

// Self is how to run bftrainer on the controller (its path and
// configuration).
func (t *Run) Self() []string { return slices.Clone(t.s.r.Self) }

// StateDir is the runner's directory; a launcher may keep files below it.
func (t *Run) StateDir() string { return t.s.r.StateDir }

// Logf logs a line of the runner's.
func (t *Run) Logf(format string, args ...any) { t.s.r.logf(format, args...) }

// LoadState decodes the launcher's own state into v (left as is when
// there is none).
func (t *Run) LoadState(v any) error {
	if len(t.Rec.State) == 0 {
		return nil
	}
	return json.Unmarshal(t.Rec.State, v)
}

// SaveState records the launcher's own state.
func (t *Run) SaveState(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // a launcher's state is plain data
	}
	t.Rec.State = b
}

// Shared decodes the launcher-wide state (the same for every Trainer of
// the launcher) into v; SetShared records it.
func (t *Run) Shared(v any) error {
	b, ok := t.s.st.Shared[t.Rec.Launcher]
	if !ok {
		return nil
	}
	return json.Unmarshal(b, v)
}

// SetShared records the launcher-wide state.
func (t *Run) SetShared(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	if t.s.st.Shared == nil {
		t.s.st.Shared = map[string]json.RawMessage{}
	}
	t.s.st.Shared[t.Rec.Launcher] = b
}

// Save writes the state now: a launcher calls it after starting a
// process it must never forget (a rendezvous store).
func (t *Run) Save() { t.s.save() }

// launch fills what the runner decides in a launch.
func (t *Run) launch(node string, l wire.Launch) wire.Launch {
	l.Trainer, l.Node, l.Owner, l.Run = t.ID, node, t.Want.Owner, t.Rec.Run
	if l.Owner == "" {
		l.Owner = t.Rec.Owner
	}
	l.Token = wire.NewToken(t.ID, node).String()
	return l
}

// StartNodes starts a launch on each node, Parallel at once; mk gives a
// node's launch (program, environment, directory; the rest is filled in).
// Each is recorded as pending first, then as started once it answered.
func (t *Run) StartNodes(ctx context.Context, op string, nodes []string, mk func(node string) wire.Launch) []Action {
	if len(nodes) == 0 {
		return nil
	}
	if t.Rec.Nodes == nil {
		t.Rec.Nodes = map[string]*Launched{}
	}
	ls := map[string]wire.Launch{}
	for _, n := range nodes {
		l := t.launch(n, mk(n))
		ls[n] = l
		t.Rec.Nodes[n] = &Launched{Token: l.Token, Pending: true, Hosted: l.Hosted}
	}
	t.s.save()
	var acts []Action
	for _, res := range t.s.r.each(nodes, func(n string) nodeResult { return t.s.r.start(ctx, t.s.r.Nodes, ls[n], op) }) {
		acts = append(acts, res.act)
		if !res.ok {
			delete(t.Rec.Nodes, res.node)
			continue
		}
		t.Rec.Nodes[res.node] = res.l
		t.noteOthers(res.node, res.started.Others)
	}
	return acts
}

// noteOthers keeps the launches a node reported that no record owns.
func (t *Run) noteOthers(node string, others []wire.Other) {
	for _, o := range others {
		if !t.s.known(node, o) {
			t.orphans = append(t.orphans, orphan{node: node, trainer: o.Trainer})
		}
	}
}

// StopNodes stops the Trainer on the nodes and forgets those that
// answered; the others are stopped again next round.
func (t *Run) StopNodes(ctx context.Context, nodes []string) []Action {
	var acts []Action
	for _, res := range t.s.r.each(nodes, func(n string) nodeResult { return t.s.r.stop(ctx, t.s.r.Nodes, t.ID, n, "stop") }) {
		acts = append(acts, res.act)
		if res.ok {
			delete(t.Rec.Nodes, res.node)
		}
	}
	return acts
}

// StartRole starts a launch on the controller under a role ("store",
// "driver"); ok reports that it runs.
func (t *Run) StartRole(ctx context.Context, role, op string, l wire.Launch) (act Action, ok bool) {
	if t.Rec.Roles == nil {
		t.Rec.Roles = map[string]*Launched{}
	}
	l = t.launch(wire.ControllerNode, l)
	t.Rec.Roles[role] = &Launched{Token: l.Token, Pending: true}
	t.s.save()
	res := t.s.r.start(ctx, t.s.r.Controller, l, op)
	if !res.ok {
		delete(t.Rec.Roles, role)
		return res.act, false
	}
	t.Rec.Roles[role] = res.l
	t.noteOthers(wire.ControllerNode, res.started.Others)
	return res.act, true
}

// StopRole stops the role's launch on the controller; ok once it is gone.
func (t *Run) StopRole(ctx context.Context, role, op string) (act Action, ok bool) {
	if _, has := t.Rec.Roles[role]; !has {
		return Action{}, true
	}
	res := t.s.r.stop(ctx, t.s.r.Controller, t.ID, wire.ControllerNode, op)
	if res.ok {
		delete(t.Rec.Roles, role)
	}
	return res.act, res.ok
}

// Role returns the role's launch, nil when there is none.
func (t *Run) Role(role string) *Launched { return t.Rec.Roles[role] }

// List lists what runs on a node (wire.ControllerNode: the controller).
func (t *Run) List(ctx context.Context, node string) ([]wire.Status, error) {
	return t.s.r.list(ctx, node)
}

// StopAll stops every launch of the Trainer: its nodes, then its roles
// (all of them at once on the controller: one stop kills the Trainer's
// every launch there). It is the Stop of a launcher with nothing to order.
func (t *Run) StopAll(ctx context.Context) (acts []Action, done bool) {
	acts = t.StopNodes(ctx, t.Launched())
	done = len(t.Rec.Nodes) == 0
	if len(t.Rec.Roles) > 0 {
		res := t.s.r.stop(ctx, t.s.r.Controller, t.ID, wire.ControllerNode, "stop")
		acts = append(acts, res.act)
		if res.ok {
			t.Rec.Roles = nil
		} else {
			done = false
		}
	}
	return acts, done
}

// StopNodesThenRole stops the Trainer on its nodes, then — once none is
// left — its role on the controller: the Stop of a launcher whose
// controller process (a rendezvous store) must outlive the nodes' ones.
func (t *Run) StopNodesThenRole(ctx context.Context, role, op string) (acts []Action, done bool) {
	acts = t.StopNodes(ctx, t.Launched())
	if len(t.Rec.Nodes) > 0 {
		return acts, false
	}
	a, ok := t.StopRole(ctx, role, op)
	if a.Op != "" {
		acts = append(acts, a)
	}
	return acts, ok
}

// RoleEnded forgets the role's launch when the check saw it end by itself
// or vanish (a launcher's Ended; the next Apply starts a new one), and
// says so in a "gone" action.
func (t *Run) RoleEnded(roles map[string]Seen, role, note string) []Action {
	s, ok := roles[role]
	if !ok || !(s.Gone || s.Exited) {
		return nil
	}
	delete(t.Rec.Roles, role)
	return []Action{{Trainer: t.ID, Op: "gone", Note: note}}
}

// NodesEnded is the end of a Trainer whose launches on its nodes all
// ended by themselves: finished when one exited 0 (a surplus torchrun
// agent may fail its rendezvous meanwhile), failed otherwise; nil while
// one runs or before any exited. Launches killed by a reclaim are
// forgotten when the check sees them gone, so they never count.
func NodesEnded(t *Run) *Exit {
	var ok0, failed []string
	for _, n := range t.Launched() {
		l := t.Rec.Nodes[n]
		switch {
		case l.Hosted:
		case l.Exit == nil:
			return nil
		case *l.Exit == 0:
			ok0 = append(ok0, n)
		default:
			failed = append(failed, n)
		}
	}
	if len(ok0)+len(failed) == 0 {
		return nil
	}
	note := ""
	if len(ok0) > 0 {
		note = "exited 0 on " + strings.Join(ok0, ",")
	}
	if len(failed) > 0 {
		if note != "" {
			note += "; "
		}
		note += "non-zero on " + strings.Join(failed, ",")
	}
	st := Failed
	if len(ok0) > 0 {
		st = Finished
	}
	return &Exit{Trainer: t.ID, Status: st, Note: note}
}

// Peers returns the records of the other Trainers of the same launcher.
func (t *Run) Peers() []*Record {
	var out []*Record
	for id, rec := range t.s.st.Trainers {
		if id != t.ID && rec.Launcher == t.Rec.Launcher {
			out = append(out, rec)
		}
	}
	return out
}
