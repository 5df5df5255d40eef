package trainer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bftrainer/bftrainer/internal/atomicfile"
	"github.com/bftrainer/bftrainer/trainer/wire"
)

// Runner makes real processes match the desired state (it is the
// reconciler's sidecar.Runner and sidecar.Checker). Trainer processes run
// on their nodes as their owners, started through node agents (Nodes:
// ssh, or local in tests); the processes a Trainer needs on the controller
// — torchrun's rendezvous store, the horovodrun driver — run here through
// the local agent (Controller), under wire.ControllerNode, as the owner
// too. How each kind of Trainer is started is its Launcher's.
//
// What it started is kept in a state file (StateDir/runner.json, written
// atomically), so that it works across the short-lived reconciler
// processes: starts are want − actual, stops actual − want; applying the
// same desired state twice does nothing the second time. A start is
// recorded as pending before it is asked for, so a reconciler killed
// mid-start leaves the next one a launch to look up (adopted if it runs)
// rather than a process nobody knows; what a node agent runs that the
// state does not know is stopped.
type Runner struct {
	Nodes      Transport
	Controller Transport
	Launchers  map[string]Launcher // by name; Kinds.Build makes them
	// Kinds are the launchers' kinds, whose spec check a Trainer's launch
	// spec passes before its launcher sees it; nil: Builtin.
	Kinds      Kinds
	StateDir   string
	Address    string   // how agents on the nodes reach this machine (rendezvous stores)
	Self       []string // how to run bftrainer here (its path, --config FILE)
	NodeBin    string   // BFTRAINER_BIN in Trainer processes (bftrainer's path on the nodes)
	NodeConfig string   // BFTRAINER_CONFIG in Trainer processes; "" leaves it out
	Parallel   int      // node operations at once; 0 means 16
	// ReadEvery is how often a Trainer's progress log is read at most
	// (ReadProgress); 0 means 5 s, negative never.
	ReadEvery time.Duration
	// ReadTimeout bounds the reads of one ReadProgress; 0 means 5 s.
	ReadTimeout time.Duration
	Log         *log.Logger

	// later: a round follows within the reconciler's poll whenever Apply
	// says so (Pace); pending: the last Apply left work for it (Pending).
	later, pending atomic.Bool
}

// Pace tells the launchers whether a round follows soon when an Apply
// leaves work for it (Pending): the reconciler's rounds, which come back
// within their poll, do; a CLI command's single round does not. When one
// does, a launcher need not wait in this round for what the next can take
// in — an elastic group's new workers while they import torch — and the
// round goes on to the other Trainers, the pool's joins and leaves; when
// none does, it waits, as far as its timeouts say.
func (r *Runner) Pace(later bool) { r.later.Store(later) }

// Pending reports that the last Apply left work a round soon should take
// in (Run.Later).
func (r *Runner) Pending() bool { return r.pending.Load() }

// runState is the state file.
type runState struct {
	Trainers map[string]*Record `json:"trainers"`
	// Shared is launcher-wide state, by launcher (torch's version).
	Shared map[string]json.RawMessage `json:"shared,omitempty"`
}

// Record is what runs for one Trainer, as every launcher shares it.
type Record struct {
	Launcher string    `json:"launcher"`
	Owner    string    `json:"owner"`
	Run      string    `json:"run"` // fresh per submission: a reused name is a new record
	Since    time.Time `json:"since,omitempty"`
	Exited   bool      `json:"exited,omitempty"` // its end was reported; it is stopped when the pool lets it go
	// Nodes are its launches by node (torchrun agents, the exec program,
	// Horovod's hosts); Roles those on the controller, by role.
	Nodes map[string]*Launched `json:"nodes,omitempty"`
	Roles map[string]*Launched `json:"roles,omitempty"`
	State json.RawMessage      `json:"state,omitempty"` // the launcher's own
	// Progress is where its progress log is read, and the last reading
	// (readprogress.go); nil when its spec declares none.
	Progress *progressWatch `json:"progress,omitempty"`
}

// Launched is one launch asked for.
type Launched struct {
	Token   string    `json:"token"`
	Started time.Time `json:"started"`
	Exit    *int      `json:"exit,omitempty"`    // exited by itself with this code
	Hosted  bool      `json:"hosted,omitempty"`  // a host given (Horovod): nothing started
	Pending bool      `json:"pending,omitempty"` // asked for, answer not yet recorded
}

func (r *Runner) kinds() Kinds {
	if r.Kinds == nil {
		return Builtin()
	}
	return r.Kinds
}

func (r *Runner) logf(format string, args ...any) {
	if r.Log != nil {
		r.Log.Printf(format, args...)
	}
}

func (r *Runner) statePath() string { return filepath.Join(r.StateDir, "runner.json") }

func (r *Runner) load() (*runState, error) {
	st := &runState{Trainers: map[string]*Record{}}
	b, err := os.ReadFile(r.statePath())
	if errors.Is(err, os.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return nil, fmt.Errorf("runner state: %w", err)
	}
	if err := json.Unmarshal(b, st); err != nil {
		return nil, fmt.Errorf("runner state %s: %w", r.statePath(), err)
	}
	if st.Trainers == nil {
		st.Trainers = map[string]*Record{}
	}
	return st, nil
}

func (r *Runner) save(st *runState) error {
	// 0755: `bftrainer hosts`, run by Horovod as the Trainer's owner,
	// reads the host files below it. The state itself is root's (0600):
	// it holds run tokens.
	if err := os.MkdirAll(r.StateDir, 0o755); err != nil {
		return fmt.Errorf("runner state: %w", err)
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(r.statePath(), b, 0o600, true); err != nil {
		return fmt.Errorf("runner state: %w", err)
	}
	return nil
}

// session is one Apply or Check: the state and its saving.
type session struct {
	r       *Runner
	st      *runState
	acts    []Action
	pending bool // a launcher left work for a round soon (Run.Later)
}

func (s *session) save() {
	if err := s.r.save(s.st); err != nil {
		s.acts = append(s.acts, Action{Op: "state", Err: err})
	}
}

func (r *Runner) open() (*session, error) {
	st, err := r.load()
	if err != nil {
		return nil, err
	}
	return &session{r: r, st: st}, nil
}

// run is the handle a launcher gets for one Trainer.
func (s *session) run(id string, rec *Record, w Want) *Run {
	return &Run{ID: id, Want: w, Rec: rec, s: s}
}

// Apply makes the processes match want and reports every action.
func (r *Runner) Apply(ctx context.Context, want []Want) []Action {
	r.pending.Store(false)
	s, err := r.open()
	if err != nil {
		return []Action{{Op: "state", Err: err}}
	}
	defer func() { r.pending.Store(s.pending) }()
	s.resolvePending(ctx)
	byID := map[string]Want{}
	for _, w := range want {
		byID[w.ID] = w
	}
	for _, id := range slices.Sorted(maps.Keys(s.st.Trainers)) {
		rec := s.st.Trainers[id]
		if w, ok := byID[id]; ok && !superseded(rec, w) {
			continue
		}
		if s.teardown(ctx, id, rec) {
			delete(s.st.Trainers, id)
		}
		s.save()
	}
	for _, w := range want {
		rec := s.st.Trainers[w.ID]
		if rec != nil && superseded(rec, w) {
			continue // the old record is still being stopped
		}
		if rec == nil {
			if len(w.Nodes) == 0 {
				continue
			}
			rec = &Record{Launcher: w.Launcher, Owner: w.Owner, Run: wire.NewRun(), Since: w.Since}
			s.st.Trainers[w.ID] = rec
		}
		if rec.Exited {
			continue // ended by itself: stopped once the pool lets it go
		}
		l, ok := r.Launchers[w.Launcher]
		if !ok {
			s.acts = append(s.acts, Action{Trainer: w.ID, Op: "start", Err: fmt.Errorf("launcher %q is not configured here", w.Launcher)})
			continue
		}
		spec, err := OpenEnv(r.StateDir, w.Spec)
		if err != nil {
			s.acts = append(s.acts, Action{Trainer: w.ID, Op: "start", Err: fmt.Errorf("launch spec: %w", err)})
			continue
		}
		w.Spec = spec
		if err := r.kinds().CheckLaunch(w.Launcher, w.Spec); err != nil {
			s.acts = append(s.acts, Action{Trainer: w.ID, Op: "start", Err: fmt.Errorf("launch spec: %w", err)})
			continue
		}
		rec.watchProgress(w)
		t := s.run(w.ID, rec, w)
		s.acts = append(s.acts, l.Apply(ctx, t)...)
		s.save()
		s.stopOrphans(ctx, t.orphans)
	}
	if len(s.st.Trainers) == 0 {
		s.save()
	}
	return s.acts
}

// superseded reports a record that is not the wanted Trainer's: its name
// was reused by another submission.
func superseded(rec *Record, w Want) bool {
	return rec.Owner != w.Owner || rec.Launcher != w.Launcher || (!w.Since.IsZero() && !rec.Since.IsZero() && !rec.Since.Equal(w.Since))
}

// teardown stops everything of a Trainer no longer wanted; true once
// nothing is left.
func (s *session) teardown(ctx context.Context, id string, rec *Record) bool {
	t := s.run(id, rec, Want{ID: id, Owner: rec.Owner, Launcher: rec.Launcher})
	l, ok := s.r.Launchers[rec.Launcher]
	var acts []Action
	var done bool
	if ok {
		acts, done = l.Stop(ctx, t)
	} else {
		acts, done = t.StopAll(ctx) // its launcher is not configured any more
	}
	s.acts = append(s.acts, acts...)
	return done
}

// resolvePending looks up every launch asked for but not recorded (a
// reconciler died before the answer): adopted when its node runs it,
// forgotten otherwise.
func (s *session) resolvePending(ctx context.Context) {
	type key struct{ id, node, role string }
	look := map[string][]key{}
	for id, rec := range s.st.Trainers {
		for n, l := range rec.Nodes {
			if l.Pending {
				look[n] = append(look[n], key{id: id, node: n})
			}
		}
		for role, l := range rec.Roles {
			if l.Pending {
				look[wire.ControllerNode] = append(look[wire.ControllerNode], key{id: id, role: role})
			}
		}
	}
	if len(look) == 0 {
		return
	}
	lists, _ := s.r.lists(ctx, slices.Sorted(maps.Keys(look)))
	changed := false
	for n, keys := range look {
		list, ok := lists[n]
		if !ok {
			continue // not answering: looked up again next round
		}
		for _, k := range keys {
			rec := s.st.Trainers[k.id]
			m, l := rec.Nodes, rec.Nodes[k.node]
			where := k.node
			if k.role != "" {
				m, l, where = rec.Roles, rec.Roles[k.role], k.role
			}
			if e, ok := list[k.id]; ok && e.Token == l.Token && e.State != wire.StateGone {
				l.Pending, l.Started = false, e.Started
				s.acts = append(s.acts, Action{Trainer: k.id, Node: k.node, Op: "adopt", Note: fmt.Sprintf("%s was started by a reconciler that stopped before recording it", where)})
			} else {
				delete(m, where)
			}
			changed = true
		}
	}
	if changed {
		s.save()
	}
}

// orphan is a launch a node agent runs that the state does not know.
type orphan struct{ node, trainer string }

// stopOrphans stops launches no record owns: started by a reconciler that
// died before recording them, or left by an earlier record of the name.
func (s *session) stopOrphans(ctx context.Context, orphans []orphan) {
	for _, o := range orphans {
		t := s.r.Nodes
		if o.node == wire.ControllerNode {
			t = s.r.Controller
		}
		res := s.r.stop(ctx, t, o.trainer, o.node, "orphan-stop")
		s.acts = append(s.acts, res.act)
	}
}

// known reports whether a launch an agent reports belongs to a record.
func (s *session) known(node string, o wire.Other) bool {
	rec, ok := s.st.Trainers[o.Trainer]
	if !ok || rec.Run != o.Run {
		return false
	}
	m := rec.Nodes
	if node == wire.ControllerNode {
		m = rec.Roles
	}
	for _, l := range m {
		if l.Token == o.Token {
			return true
		}
	}
	return node != wire.ControllerNode && rec.Nodes[node] != nil
}

// Unfence lifts the reclaim fence of nodes the scheduler confirmed idle
// whose epilog did not run (it lifts the fence itself otherwise).
func (r *Runner) Unfence(ctx context.Context, nodes []string) []Action {
	var acts []Action
	for _, res := range r.each(nodes, func(n string) nodeResult {
		begin := time.Now()
		err := AgentClient{r.Nodes}.Unfence(ctx, n)
		return nodeResult{act: Action{Node: n, Op: "unfence", Took: time.Since(begin), Err: err}, ok: err == nil}
	}) {
		acts = append(acts, res.act)
	}
	return acts
}

// nodeResult is one node operation's outcome.
type nodeResult struct {
	node    string
	act     Action
	ok      bool
	l       *Launched
	started wire.Started
	list    map[string]wire.Status // a node's list, by Trainer
}

// each runs op on every node, Parallel at a time, and returns the
// results in the nodes' order.
func (r *Runner) each(nodes []string, op func(node string) nodeResult) []nodeResult {
	out := make([]nodeResult, len(nodes))
	r.parallel(len(nodes), func(i int) {
		out[i] = op(nodes[i])
		out[i].node = nodes[i]
	})
	return out
}

// parallel runs op(0) … op(n-1), Parallel at a time, and waits for all.
func (r *Runner) parallel(n int, op func(i int)) {
	par := r.Parallel
	if par <= 0 {
		par = 16
	}
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			op(i)
		}()
	}
	wg.Wait()
}

// start runs a launch on a node through t.
func (r *Runner) start(ctx context.Context, t Transport, l wire.Launch, op string) nodeResult {
	begin := time.Now()
	act := Action{Trainer: l.Trainer, Node: l.Node, Op: op, At: begin}
	if l.Node == wire.ControllerNode {
		act.Node = ""
	}
	// Checked here too, before anything reaches ssh; the agent checks again.
	if err := l.Validate(); err != nil {
		act.Err = err
		return nodeResult{act: act}
	}
	s, err := AgentClient{t}.Start(ctx, l)
	act.Took = time.Since(begin)
	if err != nil {
		act.Err = err
		return nodeResult{act: act}
	}
	switch {
	case s.Hosted:
		act.Note = "host recorded"
	case s.Cgroup != "":
		act.Note = fmt.Sprintf("pid %d, group %d, cgroup %s, as %s", s.PID, s.PGID, s.Cgroup, s.Owner)
	default:
		act.Note = fmt.Sprintf("pid %d, group %d, as %s (containment degraded)", s.PID, s.PGID, s.Owner)
	}
	if s.Existing {
		act.Note = "already running: " + act.Note
	}
	r.logf("%s %s on %s: %s", op, l.Trainer, l.Node, act.Note)
	return nodeResult{act: act, ok: true, l: &Launched{Token: s.Token, Started: s.Started, Hosted: s.Hosted}, started: s}
}

// stop stops a Trainer's processes on a node through t.
func (r *Runner) stop(ctx context.Context, t Transport, trainer, node, op string) nodeResult {
	begin := time.Now()
	act := Action{Trainer: trainer, Node: node, Op: op, At: begin}
	if node == wire.ControllerNode {
		act.Node = ""
	}
	rep, err := AgentClient{t}.Stop(ctx, node, trainer)
	act.Took = time.Since(begin)
	if err != nil {
		act.Err = err
		return nodeResult{act: act}
	}
	act.Note = rep.String()
	r.logf("%s %s: %s", op, trainer, act.Note)
	return nodeResult{act: act, ok: true}
}

// lists lists what runs on each node (wire.ControllerNode: here), by
// Trainer; nodes that did not answer are left out, their failures
// returned as actions (looked at again next round).
func (r *Runner) lists(ctx context.Context, nodes []string) (map[string]map[string]wire.Status, []Action) {
	out := map[string]map[string]wire.Status{}
	var failed []Action
	for _, res := range r.each(nodes, func(n string) nodeResult {
		sts, err := r.list(ctx, n)
		if err != nil {
			return nodeResult{act: Action{Node: n, Op: "check", Err: err}}
		}
		m := map[string]wire.Status{}
		for _, s := range sts {
			m[s.Trainer] = s
		}
		return nodeResult{ok: true, list: m}
	}) {
		if res.ok {
			out[res.node] = res.list
		} else {
			failed = append(failed, res.act)
		}
	}
	return out, failed
}

// list is one node agent's list.
func (r *Runner) list(ctx context.Context, node string) ([]wire.Status, error) {
	t := r.Nodes
	if node == wire.ControllerNode {
		t = r.Controller
	}
	return AgentClient{t}.List(ctx, node)
}
