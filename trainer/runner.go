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
	"strings"
	"sync"
	"time"

	"github.com/bftrainer/bftrainer/names"
)

// Runner makes real processes match the desired state (it is the
// reconciler's sidecar.Runner). Trainer processes run on their nodes as
// their owners, started through node agents (Nodes: ssh, or local in
// tests); the processes a Trainer needs on the controller — torchrun's
// rendezvous store, the horovodrun driver — run here through the local
// agent (Controller), under the ControllerNode key, as the owner too.
//
// What it started is kept in a state file (StateDir/runner.json, written
// atomically), so that it works across the short-lived reconciler
// processes: starts are want − actual, stops actual − want; applying the
// same desired state twice does nothing the second time. A node that did
// not answer a start stays out of actual, one that did not answer a stop
// stays in it: both are retried on the next round.
type Runner struct {
	Nodes       Transport
	Controller  Transport
	StateDir    string
	Address     string   // how agents on the nodes reach this machine (rendezvous stores)
	StorePorts  [2]int   // ports for rendezvous stores, inclusive
	Torchrun    []string // e.g. /usr/bin/python3 -m torch.distributed.run
	Python      string   // interpreter with torch: the store, the version check
	MaxRestarts int
	JoinTimeout time.Duration
	Horovodrun  []string
	Hosts       []string // command that prints a Trainer's host:slots lines, without the Trainer's name
	Cooldown    [2]int   // Horovod's --blacklist-cooldown-range, seconds
	NodeBin     string   // BFTRAINER_BIN in Trainer processes (bftrainer's path on the nodes)
	NodeConfig  string   // BFTRAINER_CONFIG in Trainer processes; "" leaves it out
	Parallel    int      // node operations at once; 0 means 16
	Log         *log.Logger
	Now         func() time.Time
}

// Exit is a Trainer whose processes all ended by themselves.
type Exit struct {
	Trainer string
	Status  string // Finished or Failed
	Note    string
}

// End states an Exit reports.
const (
	Finished = "finished"
	Failed   = "failed"
)

// runState is the state file.
type runState struct {
	Torch    string                 `json:"torch,omitempty"` // torch.__version__ on the controller, detected once
	Trainers map[string]*trainerRun `json:"trainers"`
}

// trainerRun is what runs for one Trainer.
type trainerRun struct {
	Launcher string               `json:"launcher"`
	Owner    string               `json:"owner"`
	RunID    string               `json:"run_id,omitempty"` // torchrun's rendezvous id, fresh per store
	Store    *launched            `json:"store,omitempty"`  // torchrun: the c10d store on the controller
	Driver   *launched            `json:"driver,omitempty"` // horovod: horovodrun on the controller
	Nodes    map[string]*launched `json:"nodes,omitempty"`  // per node: torchrun agents, the exec program, Horovod hosts given
	List     []string             `json:"list,omitempty"`   // exec: the node list the program was started with
	Exited   bool                 `json:"exited,omitempty"` // its end was reported; it is stopped when the pool lets it go
}

// launched is one process (group) started, or one Horovod host listed.
type launched struct {
	Token   string    `json:"token,omitempty"`
	Port    int       `json:"port,omitempty"`
	Started time.Time `json:"started"`
	Exit    *int      `json:"exit,omitempty"` // exited by itself with this code (-1: a signal, or vanished)
}

func (r *Runner) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *Runner) logf(format string, args ...any) {
	if r.Log != nil {
		r.Log.Printf(format, args...)
	}
}

func (r *Runner) statePath() string { return filepath.Join(r.StateDir, "runner.json") }

// HostFile is where the runner keeps a Horovod Trainer's current hosts,
// "node:slots" per line, replaced atomically each round; `bftrainer hosts`
// prints it.
func HostFile(stateDir, trainer string) string { return filepath.Join(stateDir, "hosts", trainer) }

func (r *Runner) load() (*runState, error) {
	st := &runState{Trainers: map[string]*trainerRun{}}
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
		st.Trainers = map[string]*trainerRun{}
	}
	return st, nil
}

func (r *Runner) save(st *runState) error {
	// 0755: `bftrainer hosts`, run by Horovod as the Trainer's owner,
	// reads the host files below it. The state itself is root's (0600):
	// it holds run tokens and rendezvous ids.
	if err := os.MkdirAll(r.StateDir, 0o755); err != nil {
		return fmt.Errorf("runner state: %w", err)
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	if err := writeAtomic(r.statePath(), b, 0o600); err != nil {
		return fmt.Errorf("runner state: %w", err)
	}
	return nil
}

// Apply makes the processes match want and reports every action.
func (r *Runner) Apply(ctx context.Context, want []Want) []Action {
	st, err := r.load()
	if err != nil {
		return []Action{{Op: "state", Err: err}}
	}
	var acts []Action
	save := func() {
		if err := r.save(st); err != nil {
			acts = append(acts, Action{Op: "state", Err: err})
		}
	}
	wanted := map[string]bool{}
	for _, w := range want {
		wanted[w.ID] = true
	}
	for _, id := range slices.Sorted(maps.Keys(st.Trainers)) {
		if wanted[id] {
			continue
		}
		a, done := r.teardown(ctx, id, st.Trainers[id])
		acts = append(acts, a...)
		if done {
			delete(st.Trainers, id)
		}
		save()
	}
	for _, w := range want {
		tr := st.Trainers[w.ID]
		if tr == nil {
			if len(w.Nodes) == 0 {
				continue
			}
			tr = &trainerRun{Launcher: w.Launcher, Owner: w.Owner, Nodes: map[string]*launched{}}
			st.Trainers[w.ID] = tr
		}
		if tr.Nodes == nil {
			tr.Nodes = map[string]*launched{}
		}
		if tr.Exited {
			continue // ended by itself: stopped once the pool lets it go
		}
		var spec Spec
		err := json.Unmarshal(w.Spec, &spec)
		if err == nil {
			err = ValidateSpec(spec)
		}
		if err != nil {
			acts = append(acts, Action{Trainer: w.ID, Op: "start", Err: fmt.Errorf("launch spec: %w", err)})
			continue
		}
		switch w.Launcher {
		case Torchrun:
			acts = append(acts, r.torchrun(ctx, st, w, tr, spec, save)...)
		case Horovod:
			acts = append(acts, r.horovod(ctx, w, tr, spec)...)
		case Exec:
			acts = append(acts, r.exec(ctx, w, tr, spec)...)
		default:
			acts = append(acts, Action{Trainer: w.ID, Op: "start", Err: fmt.Errorf("unknown launcher %q", w.Launcher)})
		}
		save()
	}
	return acts
}

// nodeResult is one node operation's outcome.
type nodeResult struct {
	node string
	act  Action
	ok   bool
	l    *launched
	list map[string]Status // a node's list, by Trainer
}

// each runs op on every node, Parallel at a time, and returns the
// results in the nodes' order.
func (r *Runner) each(nodes []string, op func(node string) nodeResult) []nodeResult {
	out := make([]nodeResult, len(nodes))
	n := r.Parallel
	if n <= 0 {
		n = 16
	}
	sem := make(chan struct{}, n)
	var wg sync.WaitGroup
	for i, node := range nodes {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			out[i] = op(node)
			out[i].node = node
		}()
	}
	wg.Wait()
	return out
}

// start runs a launch on a node through t.
func (r *Runner) start(ctx context.Context, t Transport, l Launch, op string) nodeResult {
	begin := time.Now()
	act := Action{Trainer: l.Trainer, Node: l.Node, Op: op}
	if l.Node == ControllerNode {
		act.Node = ""
	}
	// Checked here too, before anything reaches ssh; the agent checks again.
	if err := l.Validate(); err != nil {
		act.Err = err
		return nodeResult{act: act}
	}
	body, err := json.Marshal(l)
	if err != nil {
		act.Err = err
		return nodeResult{act: act}
	}
	out, err := t.Agent(ctx, l.Node, []string{"start"}, body)
	act.Took = time.Since(begin)
	if err != nil {
		act.Err = err
		return nodeResult{act: act}
	}
	var s Started
	if err := json.Unmarshal(out, &s); err != nil || s.Token == "" {
		act.Err = fmt.Errorf("start on %s: unreadable answer %q", l.Node, out)
		return nodeResult{act: act}
	}
	act.Note = fmt.Sprintf("pid %d, group %d, as %s", s.PID, s.PGID, s.Owner)
	if s.Existing {
		act.Note = "already running: " + act.Note
	}
	r.logf("%s %s on %s: %s", op, l.Trainer, l.Node, act.Note)
	return nodeResult{act: act, ok: true, l: &launched{Token: s.Token, Started: s.Started}}
}

// stop stops a Trainer's processes on a node through t.
func (r *Runner) stop(ctx context.Context, t Transport, trainer, node, op string) nodeResult {
	begin := time.Now()
	act := Action{Trainer: trainer, Node: node, Op: op}
	if node == ControllerNode {
		act.Node = ""
	}
	if err := names.ValidateTrainer(trainer); err != nil {
		act.Err = err
		return nodeResult{act: act}
	}
	out, err := t.Agent(ctx, node, []string{"stop", node, trainer}, nil)
	act.Took = time.Since(begin)
	var rep KillReport
	json.Unmarshal(out, &rep)
	if err != nil {
		act.Err = err
		return nodeResult{act: act}
	}
	act.Note = rep.String()
	r.logf("%s %s: %s", op, trainer, act.Note)
	return nodeResult{act: act, ok: true}
}

// env is a launch's environment: defaults, the user's, then ours.
func (r *Runner) env(spec Spec, trainer string, defaults map[string]string) map[string]string {
	env := maps.Clone(defaults)
	if env == nil {
		env = map[string]string{}
	}
	maps.Copy(env, spec.Env)
	env["BFTRAINER_TRAINER"] = trainer
	if r.NodeBin != "" {
		env["BFTRAINER_BIN"] = r.NodeBin
	}
	if r.NodeConfig != "" {
		env["BFTRAINER_CONFIG"] = r.NodeConfig
	}
	return env
}

// teardown stops everything of a Trainer that is no longer wanted; done
// once nothing is left.
func (r *Runner) teardown(ctx context.Context, id string, tr *trainerRun) (acts []Action, done bool) {
	done = true
	if tr.Driver != nil {
		// The driver first, or it would start workers on the hosts we
		// are about to clear.
		res := r.stop(ctx, r.Controller, id, ControllerNode, "driver-stop")
		acts = append(acts, res.act)
		if !res.ok {
			return acts, false
		}
		tr.Driver = nil
	}
	if tr.Launcher == Horovod {
		if err := os.Remove(HostFile(r.StateDir, id)); err != nil && !errors.Is(err, os.ErrNotExist) {
			acts = append(acts, Action{Trainer: id, Op: "hosts", Err: err})
		}
	}
	for _, res := range r.each(slices.Sorted(maps.Keys(tr.Nodes)), func(n string) nodeResult {
		return r.stop(ctx, r.Nodes, id, n, "stop")
	}) {
		acts = append(acts, res.act)
		if res.ok {
			delete(tr.Nodes, res.node)
		} else {
			done = false
		}
	}
	if tr.Store != nil && len(tr.Nodes) == 0 {
		// The store outlives the agents: it is the last to go.
		res := r.stop(ctx, r.Controller, id, ControllerNode, "store-stop")
		acts = append(acts, res.act)
		if res.ok {
			tr.Store = nil
		} else {
			done = false
		}
	}
	return acts, done && tr.Store == nil
}

// stopNodes stops the Trainer on the given nodes and forgets those that
// answered.
func (r *Runner) stopNodes(ctx context.Context, id string, tr *trainerRun, nodes []string) []Action {
	var acts []Action
	for _, res := range r.each(nodes, func(n string) nodeResult { return r.stop(ctx, r.Nodes, id, n, "stop") }) {
		acts = append(acts, res.act)
		if res.ok {
			delete(tr.Nodes, res.node)
		}
	}
	return acts
}

// removed returns the nodes of tr not in want, sorted.
func removed(tr *trainerRun, want []string) []string {
	var out []string
	for n := range tr.Nodes {
		if !slices.Contains(want, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// exec runs any program on the first node of the Trainer's set, telling
// it the set (BFTRAINER_NODES, BFTRAINER_NODEFILE); a change of the set
// restarts it.
func (r *Runner) exec(ctx context.Context, w Want, tr *trainerRun, spec Spec) []Action {
	var acts []Action
	if len(tr.Nodes) > 0 && !slices.Equal(tr.List, w.Nodes) {
		acts = append(acts, r.stopNodes(ctx, w.ID, tr, slices.Sorted(maps.Keys(tr.Nodes)))...)
		if len(tr.Nodes) > 0 {
			return acts // retried next round
		}
		tr.List = nil
	}
	if len(w.Nodes) == 0 || len(tr.Nodes) > 0 {
		return acts
	}
	first := w.Nodes[0]
	l := Launch{Trainer: w.ID, Node: first, Owner: w.Owner, Argv: spec.Argv, Workdir: spec.Workdir,
		Env: r.env(spec, w.ID, nil), Token: NewToken(w.ID, first).String(), Nodes: w.Nodes}
	res := r.start(ctx, r.Nodes, l, "start")
	if res.ok {
		res.act.Note += fmt.Sprintf("; nodes %s", strings.Join(w.Nodes, ","))
		tr.Nodes[first] = res.l
		tr.List = slices.Clone(w.Nodes)
	}
	return append(acts, res.act)
}

// Check looks at what runs and reports Trainers whose processes all ended
// by themselves (torchrun: every agent exited, finished if one exited 0;
// Horovod: the driver exited; exec: the program exited). Processes that
// vanished without an exit (killed by a node's prolog) are forgotten, so
// the next round starts them again if the node is still wanted.
func (r *Runner) Check(ctx context.Context) ([]Exit, []Action) {
	st, err := r.load()
	if err != nil {
		return nil, []Action{{Op: "state", Err: err}}
	}
	// What to look at, by node: one list per node for every Trainer.
	look := map[string]bool{}
	for _, tr := range st.Trainers {
		if tr.Exited {
			continue
		}
		if tr.Store != nil || tr.Driver != nil {
			look[ControllerNode] = true
		}
		if tr.Launcher != Horovod {
			for n, l := range tr.Nodes {
				if l.Exit == nil {
					look[n] = true
				}
			}
		}
	}
	if len(look) == 0 {
		return nil, nil
	}
	lists := map[string]map[string]Status{}
	var acts []Action
	for _, res := range r.each(slices.Sorted(maps.Keys(look)), func(n string) nodeResult {
		t := r.Nodes
		if n == ControllerNode {
			t = r.Controller
		}
		out, err := t.Agent(ctx, n, []string{"list", n}, nil)
		if err != nil {
			return nodeResult{act: Action{Node: n, Op: "check", Err: err}}
		}
		var sts []Status
		if err := json.Unmarshal(out, &sts); err != nil {
			return nodeResult{act: Action{Node: n, Op: "check", Err: fmt.Errorf("unreadable list: %w", err)}}
		}
		m := map[string]Status{}
		for _, s := range sts {
			m[s.Trainer] = s
		}
		return nodeResult{ok: true, list: m}
	}) {
		if !res.ok {
			acts = append(acts, res.act) // unknown: looked at again next round
			continue
		}
		lists[res.node] = res.list
	}
	var exits []Exit
	changed := false
	for _, id := range slices.Sorted(maps.Keys(st.Trainers)) {
		tr := st.Trainers[id]
		if tr.Exited {
			continue
		}
		ex, a, ch := r.checkTrainer(id, tr, lists)
		acts = append(acts, a...)
		changed = changed || ch
		if ex != nil {
			tr.Exited, changed = true, true
			exits = append(exits, *ex)
		}
	}
	if changed {
		if err := r.save(st); err != nil {
			acts = append(acts, Action{Op: "state", Err: err})
		}
	}
	return exits, acts
}

// observe compares one launched process with its node's list: gone
// reports that nothing of it is left and no exit was recorded.
func observe(l *launched, list map[string]Status, listed bool, id string) (code *int, gone, known bool) {
	if !listed {
		return nil, false, false
	}
	s, ok := list[id]
	if !ok || s.Token != l.Token {
		return nil, true, true // no entry: cleared by a kill
	}
	switch s.State {
	case StateExited:
		c := s.Exit.Code
		return &c, false, true
	case StateGone:
		c := -1
		return &c, false, true
	}
	return nil, false, true
}

// checkTrainer evaluates one Trainer; changed reports a state change.
func (r *Runner) checkTrainer(id string, tr *trainerRun, lists map[string]map[string]Status) (ex *Exit, acts []Action, changed bool) {
	ctl, ctlListed := lists[ControllerNode]
	switch tr.Launcher {
	case Horovod:
		if tr.Driver == nil {
			return nil, nil, false
		}
		code, gone, known := observe(tr.Driver, ctl, ctlListed, id)
		switch {
		case !known:
		case gone:
			tr.Driver = nil
			return nil, []Action{{Trainer: id, Op: "gone", Note: "horovodrun vanished without an exit; it is started again"}}, true
		case code != nil:
			return endOf(id, *code == 0, fmt.Sprintf("horovodrun exited %d", *code)), nil, true
		}
		return nil, nil, false
	}
	if tr.Store != nil {
		code, gone, known := observe(tr.Store, ctl, ctlListed, id)
		if known && (gone || code != nil) {
			// The agents cannot rendezvous any more; the next round starts
			// a new store (and a fresh rendezvous id) and restarts them.
			tr.Store, changed = nil, true
			acts = append(acts, Action{Trainer: id, Op: "gone", Note: "rendezvous store ended; a new one is started"})
		}
	}
	var ok0, failed []string
	running := 0
	for _, n := range slices.Sorted(maps.Keys(tr.Nodes)) {
		l := tr.Nodes[n]
		if l.Exit != nil {
			if *l.Exit == 0 {
				ok0 = append(ok0, n)
			} else {
				failed = append(failed, n)
			}
			continue
		}
		list, listed := lists[n]
		code, gone, known := observe(l, list, listed, id)
		switch {
		case !known:
			running++ // unknown counts as running: nothing is decided on it
		case gone:
			delete(tr.Nodes, n)
			changed = true
			acts = append(acts, Action{Trainer: id, Node: n, Op: "gone", Note: "nothing of it left on the node and no exit recorded (killed by a reclaim)"})
		case code != nil:
			l.Exit, changed = code, true
			acts = append(acts, Action{Trainer: id, Node: n, Op: "exited", Note: fmt.Sprintf("exited %d by itself", *code)})
			if *code == 0 {
				ok0 = append(ok0, n)
			} else {
				failed = append(failed, n)
			}
		default:
			running++
		}
	}
	if running > 0 || len(ok0)+len(failed) == 0 {
		return nil, acts, changed
	}
	// Everything we started ended by itself (what we killed was
	// forgotten when we killed it). One agent that finished means the job
	// finished: a surplus agent may fail its rendezvous meanwhile.
	note := fmt.Sprintf("exited 0 on %s", strings.Join(ok0, ","))
	if len(failed) > 0 {
		note = strings.TrimPrefix(note+"; ", "exited 0 on ; ") + fmt.Sprintf("non-zero on %s", strings.Join(failed, ","))
	}
	return endOf(id, len(ok0) > 0, note), acts, true
}

func endOf(id string, ok bool, note string) *Exit {
	st := Failed
	if ok {
		st = Finished
	}
	return &Exit{Trainer: id, Status: st, Note: note}
}
