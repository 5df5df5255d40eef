package trainer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bftrainer/bftrainer/trainer/wire"
)

// elasticKind runs a Trainer under bftrainer's own elastic runtime
// (python/bftrainer_elastic; docs/elastic.md is its protocol): one store
// process on the controller, one worker per node, workers that stay alive
// across membership changes. The launcher is the runtime's runner: it
// tells the workers each new membership through the store process's
// control port, and they re-form their process group at a step boundary
// — a rescale costs a fraction of a second instead of a restart.
var elasticKind = Kind{
	Name:      Elastic,
	CheckSpec: checkElasticSpec,
	New: func(decode func(any) error) (Launcher, error) {
		s := ElasticSettings{
			Python:            "/usr/bin/python3",
			PythonPath:        "/usr/local/lib/bftrainer/python",
			StorePorts:        "29600-29699",
			ReadyTimeout:      "60s",
			FormTimeout:       "40s",
			LeaveGrace:        "10s",
			CollectiveTimeout: "10s",
			JoinTimeout:       "30s",
		}
		if err := decode(&s); err != nil {
			return nil, err
		}
		return s.launcher()
	},
}

// ElasticSettings are [trainer.launcher.elastic].
type ElasticSettings struct {
	Python     string `toml:"python"`      // interpreter with torch on the controller: runs the store process
	PythonPath string `toml:"pythonpath"`  // directory holding bftrainer_elastic, on the controller and every node
	StorePorts string `toml:"store_ports"` // LO-HI: each Trainer's store and control ports on the controller
	// ReadyTimeout is how long new workers may take to be ready (torch
	// imported, model built): a reconciler's rounds come back for them
	// within their poll until then (Runner.Pace), a CLI command's round
	// waits for them at most this; later, a worker is listed by
	// whichever round finds it ready.
	ReadyTimeout string `toml:"ready_timeout"`
	// FormTimeout bounds how long a round waits for a published
	// membership to form; more than JoinTimeout, so that a member that
	// never arrives is found (and stopped) within it.
	FormTimeout string `toml:"form_timeout"`
	// LeaveGrace bounds how long a worker the plan took away may take to
	// leave at its next step boundary before it is killed.
	LeaveGrace string `toml:"leave_grace"`
	// CollectiveTimeout is the workers' collective timeout
	// (BFTRAINER_ELASTIC_TIMEOUT): how long a hung peer can stall them.
	CollectiveTimeout string `toml:"collective_timeout"`
	// JoinTimeout is how long the members of a new membership wait for
	// each other (BFTRAINER_ELASTIC_JOIN_TIMEOUT) before giving it up.
	JoinTimeout string `toml:"join_timeout"`
}

func (s ElasticSettings) launcher() (*elastic, error) {
	var errs []error
	if s.Python == "" {
		errs = append(errs, errors.New("python: empty"))
	}
	if s.PythonPath != "" && !strings.HasPrefix(s.PythonPath, "/") {
		errs = append(errs, fmt.Errorf("pythonpath: %q, want an absolute directory (or empty: bftrainer_elastic is installed for the interpreter)", s.PythonPath))
	}
	ports, err := ParsePorts(s.StorePorts)
	if err != nil {
		errs = append(errs, fmt.Errorf("store_ports: %w", err))
	} else if ports[1] == ports[0] {
		errs = append(errs, fmt.Errorf("store_ports: %q, want at least two ports (a store and a control port per Trainer)", s.StorePorts))
	}
	l := &elastic{s: s, ports: ports}
	for _, d := range []struct {
		key, val string
		min      time.Duration
		to       *time.Duration
	}{
		{"ready_timeout", s.ReadyTimeout, time.Second, &l.ready},
		{"form_timeout", s.FormTimeout, time.Second, &l.form},
		{"leave_grace", s.LeaveGrace, 0, &l.grace},
		{"collective_timeout", s.CollectiveTimeout, time.Second, &l.collective},
		{"join_timeout", s.JoinTimeout, time.Second, &l.join},
	} {
		v, err := time.ParseDuration(d.val)
		if err != nil || v < d.min {
			errs = append(errs, fmt.Errorf("%s: %q, want a duration of at least %v", d.key, d.val, d.min))
			continue
		}
		*d.to = v
	}
	if len(errs) == 0 && l.form <= l.join {
		errs = append(errs, fmt.Errorf("form_timeout: %v, want more than join_timeout (%v): a member that never arrives is then found within it", l.form, l.join))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return l, nil
}

type elastic struct {
	s                                    ElasticSettings
	ports                                [2]int
	ready, form, grace, collective, join time.Duration
	// mpi, for launcher mpi-elastic (mpielastic.go): start the workers
	// of a Trainer that has none with this MPI's mpirun.
	mpi *mpiLauncher
}

// checkElasticSpec: a Spec with one worker per node (the node agent keeps
// one launch per Trainer and node).
func checkElasticSpec(raw json.RawMessage) error {
	s, err := DecodeSpec(raw)
	if err != nil {
		return err
	}
	if s.ProcsPerNode > 1 {
		return fmt.Errorf("launch spec: procs per node %d: the elastic launcher runs one worker per node", s.ProcsPerNode)
	}
	return nil
}

// elasticState is an elastic Trainer's own state: its store process's
// ports, the latest membership it published, and which worker runs
// where.
type elasticState struct {
	Store   int `json:"store,omitempty"`   // the workers' TCPStore port
	Control int `json:"control,omitempty"` // the runner's control port, on 127.0.0.1
	// Secret is the run secret of the store process (secret.go): in the
	// runner's state only (root's), and the environments of the store
	// process and the workers (their owner's).
	Secret  string   `json:"secret,omitempty"`
	Epoch   int      `json:"epoch,omitempty"`   // latest published membership
	Members []string `json:"members,omitempty"` // its worker ids, in rank order
	// Workers is the worker id of each node's launch (unique per launch).
	Workers map[string]string `json:"workers,omitempty"`
	// Leaving are nodes whose worker the latest membership left out on
	// the plan's behalf: it leaves by itself and is stopped once it has.
	Leaving map[string]string `json:"leaving,omitempty"`
	// LeaveDue is when each leaving worker's grace ends: a round waits
	// for it to leave until then, once; a later round (its stop failed:
	// the node cannot be asked) stops it again without waiting.
	LeaveDue map[string]time.Time `json:"leave_due,omitempty"`
	// Change is the latest published change until its cost is measured.
	Change *elasticChange `json:"change,omitempty"`
	// Exited is when a worker was first seen to have exited 0 (the job
	// completed) while others still ran.
	Exited time.Time `json:"exited,omitempty"`
	// MPIGen counts the generations started with mpirun (mpi-elastic).
	MPIGen int `json:"mpi_gen,omitempty"`
}

// elasticChange is a published change of membership.
type elasticChange struct {
	Epoch     int    `json:"epoch"`
	Direction string `json:"direction"` // Up, Down, Reclaim, Failure, or start
	From      int    `json:"from"`
	To        int    `json:"to"`
}

// directionStart is a membership formed from nothing: the first one, or
// after every worker was gone. It is not a rescale.
const directionStart = "start"

// elasticRound is one Apply of an elastic Trainer.
type elasticRound struct {
	l    *elastic
	t    *Run
	ctx  context.Context
	st   *elasticState
	ctl  *elasticControl
	acts []Action
}

// act records an action of the round, and logs it as it happens (the
// history has it once the round ends): a round that waits on a group
// shows in the service's log what it did last.
func (r *elasticRound) act(a Action) {
	a.Trainer = r.t.ID
	r.acts = append(r.acts, a)
	what := a.Note
	if a.Err != nil {
		what = a.Err.Error()
	}
	r.t.Logf("%s %s%s: %s", a.Op, a.Trainer, onNode(a.Node), what)
}

// onNode is " on NODE", or nothing without a node.
func onNode(node string) string {
	if node == "" {
		return ""
	}
	return " on " + node
}

// save records the state now: after a publication or a start, what the
// runner state says must be what the store and the nodes have.
func (r *elasticRound) save() {
	r.t.SaveState(r.st)
	r.t.Save()
}

// Apply follows the runner rules of docs/elastic.md: a store process
// first; workers gone (reclaimed, crashed) or taken by the plan are left
// out of a new membership, taken ones stopped once they left; new
// workers are started and listed once ready; every round also settles a
// formation that failed.
func (l *elastic) Apply(ctx context.Context, t *Run) []Action {
	spec, err := DecodeSpec(t.Want.Spec)
	if err != nil {
		return []Action{{Trainer: t.ID, Op: "start", Err: err}}
	}
	var st elasticState
	t.LoadState(&st)
	r := &elasticRound{l: l, t: t, ctx: ctx, st: &st}
	defer t.SaveState(&st)
	if t.Role(storeRole) != nil && st.Secret == "" {
		// A store started before run secrets (an upgrade): nothing can
		// prove itself to it. Stopped, with its workers; a new one resumes
		// from the checkpoint.
		r.acts = append(r.acts, t.StopNodes(ctx, t.Launched())...)
		if len(t.Rec.Nodes) == 0 {
			if a, _ := t.StopRole(ctx, storeRole, "store-stop"); a.Op != "" {
				r.acts = append(r.acts, a)
			}
		}
		if t.Role(storeRole) != nil {
			return r.acts
		}
	}
	if t.Role(storeRole) == nil {
		if !r.newStore() {
			return r.acts
		}
	}
	if r.ctl, err = dialControl(ctx, st.Control, st.Secret); err != nil {
		r.act(Action{Op: "control", Err: err})
		return r.acts
	}
	defer r.ctl.close()
	s, err := r.ctl.status()
	if err != nil {
		r.act(Action{Op: "control", Err: err})
		return r.acts
	}
	st.Epoch = max(st.Epoch, s.Epoch)
	r.measure(s)
	if s.Finished != nil {
		return r.acts // training completed: the workers are exiting (Ended sees them)
	}
	added := t.Added() // before the reductions: a crashed node is started again next round, not now
	r.reduce()
	r.grow(spec, added)
	r.recover()
	return r.acts
}

// newStore starts the Trainer's store process (workers of a store that
// ended are stopped first: they cannot reach a new one); ok when it runs.
func (r *elasticRound) newStore() (ok bool) {
	t := r.t
	if len(t.Rec.Nodes) > 0 {
		r.acts = append(r.acts, t.StopNodes(r.ctx, t.Launched())...)
		if len(t.Rec.Nodes) > 0 {
			return false
		}
	}
	*r.st = elasticState{}
	if len(t.Want.Nodes) == 0 {
		return false // nothing to run: no store either
	}
	a := r.l.startStore(r.ctx, t, r.st)
	r.acts = append(r.acts, a)
	if a.Err != nil {
		return false
	}
	r.save() // a store we started and forgot would run forever
	return true
}

// reduce leaves out of the membership the workers that are gone (their
// node's launch vanished: a reclaim's kill; or it exited: a crash), those
// on nodes the scheduler took (stopped first), and those the plan took
// away (stopped once they left); then it publishes the smaller
// membership.
func (r *elasticRound) reduce() {
	t, st := r.t, r.st
	// Why each member leaves the membership, by worker id: lost (gone,
	// taken), crashed, or released (by the plan).
	const lost, crashed, released = "lost", "crashed", "released"
	why := map[string]string{}
	listed := func(id string) bool { return slices.Contains(st.Members, id) }
	var stopNow, removed []string // nodes
	for _, n := range sortedKeys(st.Workers) {
		id, launch := st.Workers[n], t.Rec.Nodes[n]
		_, leaving := st.Leaving[n]
		switch {
		case launch == nil: // the check saw it vanish: a reclaim's kill
			why[id] = lost
			delete(st.Workers, n)
		case launch.Exit != nil && *launch.Exit != 0 && !leaving:
			why[id] = crashed
			stopNow = append(stopNow, n)
		case leaving || slices.Contains(t.Want.Nodes, n):
		case slices.Contains(t.Want.Taken, n) || !listed(id):
			// Reclaimed (its prolog did not kill), or never listed (it
			// holds no state): stopped at once.
			why[id] = lost
			stopNow = append(stopNow, n)
		default:
			why[id] = released
			removed = append(removed, n)
		}
	}
	for _, id := range st.Members {
		if !slices.Contains(slices.Collect(maps.Values(st.Workers)), id) && why[id] == "" {
			why[id] = lost // its worker was forgotten with its record
		}
	}
	// A launch no worker id names (adopted after a reconciler crashed
	// between its start and its state): never a member, stopped.
	for _, n := range t.Launched() {
		if _, ok := st.Workers[n]; !ok {
			stopNow = append(stopNow, n)
		}
	}
	r.acts = append(r.acts, t.StopNodes(r.ctx, stopNow)...)
	for _, n := range stopNow {
		if _, still := t.Rec.Nodes[n]; !still {
			delete(st.Workers, n) // else its stop failed: stopped again next round
		}
	}
	if st.Leaving == nil {
		st.Leaving = map[string]string{}
	}
	for _, n := range removed {
		st.Leaving[n] = st.Workers[n]
	}
	keep := slices.DeleteFunc(slices.Clone(st.Members), func(id string) bool { return why[id] != "" })
	if len(keep) < len(st.Members) {
		dir := Down
		for _, id := range st.Members {
			switch {
			case why[id] == lost:
				dir = Reclaim
			case why[id] == crashed && dir == Down:
				dir = Failure
			}
		}
		if len(keep) > 0 {
			r.publish(keep, dir)
			r.settle()
		} else {
			// No membership can be empty: nobody is told; whoever is
			// left is stopped below, and the next start resumes from the
			// disk checkpoint.
			st.Members, st.Change = nil, nil
		}
	}
	r.stopLeaving(len(st.Members) == 0)
}

// stopLeaving stops the workers that were taken out of the membership
// once they left it (WORKERS shows them left), or after the leave grace;
// at once when now is set (nobody left to tell them).
func (r *elasticRound) stopLeaving(now bool) {
	t, st := r.t, r.st
	if len(st.Leaving) == 0 {
		return
	}
	nodes := sortedKeys(st.Leaving)
	ids := make([]string, len(nodes))
	for i, n := range nodes {
		ids[i] = st.Leaving[n]
	}
	begin := time.Now()
	if st.LeaveDue == nil {
		st.LeaveDue = map[string]time.Time{}
	}
	// Each worker is waited for until its own grace ends, given once:
	// a worker still recorded after it (its stop failed, the node
	// unreachable: sshd down) does not hold up every round after.
	deadline := begin
	waited := map[string]bool{}
	for i, n := range nodes {
		due, ok := st.LeaveDue[n]
		if !ok {
			due = begin.Add(r.l.grace)
			st.LeaveDue[n] = due
		}
		if due.After(begin) {
			waited[ids[i]] = true
			if due.After(deadline) {
				deadline = due
			}
		}
	}
	left := map[string]bool{}
	for !now && len(waited) > 0 {
		ws, err := r.ctl.workers(ids)
		if err != nil {
			r.act(Action{Op: "control", Err: err})
			break
		}
		all := true
		for id, w := range ws {
			if w.Left != nil {
				left[id] = true
			}
		}
		for id := range waited {
			all = all && left[id]
		}
		if all || time.Now().After(deadline) || !sleepCtx(r.ctx, 10*time.Millisecond) {
			break
		}
	}
	for i, n := range nodes {
		if launch := t.Rec.Nodes[n]; launch != nil && launch.Exit == nil && !left[ids[i]] && !now && waited[ids[i]] {
			r.act(Action{Node: n, Op: "leave", Note: fmt.Sprintf("worker %s did not leave within %v: killed", ids[i], r.l.grace)})
		} else if left[ids[i]] {
			r.act(Action{Node: n, Op: "leave", Took: time.Since(begin), Note: fmt.Sprintf("worker %s left the group", ids[i])})
		}
	}
	r.acts = append(r.acts, t.StopNodes(r.ctx, nodes)...)
	for _, n := range nodes {
		if _, still := t.Rec.Nodes[n]; !still {
			delete(st.Leaving, n)
			delete(st.LeaveDue, n)
			delete(st.Workers, n)
		}
	}
}

// grow starts a worker on each added node, waits for the unlisted ones
// to be ready (waitReady: not at all in a paced round), and publishes the
// membership with the ready ones appended.
func (r *elasticRound) grow(spec Spec, added []string) {
	t, st := r.t, r.st
	if st.Workers == nil {
		st.Workers = map[string]string{}
	}
	if r.mpiFresh() {
		r.mpiStart(spec, added)
	} else {
		r.acts = append(r.acts, t.StartNodes(r.ctx, "start", added, func(n string) wire.Launch {
			id := n + "@" + wire.NewRun()[:8]
			st.Workers[n] = id
			t.SaveState(st) // saved with the pending launch: a start is never unnamed
			return wire.Launch{Argv: spec.Argv, Workdir: spec.Workdir, Env: r.l.workerEnv(t, spec, n, id, st.Store, st.Secret)}
		})...)
	}
	for _, n := range added {
		if _, ok := t.Rec.Nodes[n]; !ok {
			delete(st.Workers, n) // the start failed (a fenced node): nothing runs there
		}
	}
	// Workers not yet listed: those just started, and those an earlier
	// round started that were not ready then.
	var waiting []string // nodes
	for _, n := range t.Want.Nodes {
		id, ok := st.Workers[n]
		if _, leaving := st.Leaving[n]; ok && !leaving && !slices.Contains(st.Members, id) {
			if l := t.Rec.Nodes[n]; l != nil && l.Exit == nil {
				waiting = append(waiting, n)
			}
		}
	}
	if len(waiting) == 0 {
		return
	}
	ready := r.waitReady(waiting)
	if len(ready) == 0 {
		return
	}
	newIDs := make([]string, len(ready))
	for i, n := range ready {
		newIDs[i] = st.Workers[n]
	}
	dir := Up
	if len(st.Members) == 0 {
		dir = directionStart
	}
	r.publish(append(slices.Clone(st.Members), newIDs...), dir)
	r.settle()
}

// waitReady waits, at most ready_timeout, until the workers on nodes have
// announced themselves ready, and returns the nodes of those that did, in
// the order given. A worker whose process ended meanwhile is not waited
// for.
//
// When a round follows soon (Run.Paced: the reconciler's), it does not
// wait: it looks once, and asks for that round (Run.Later) while a worker
// not ready is within ready_timeout of its start. The round goes on
// meanwhile — the other Trainers' starts and stops, the pool's joins —
// instead of standing still while torch is imported (2–3 s on the lab's
// nodes, longer with a GPU to set up); the next round lists the worker
// once it is ready, and the runner's check finds one that died first.
func (r *elasticRound) waitReady(nodes []string) []string {
	begin := time.Now()
	deadline := begin.Add(r.l.ready)
	paced := r.t.Paced()
	if paced {
		deadline = begin
	}
	ids := make([]string, len(nodes))
	for i, n := range nodes {
		ids[i] = r.st.Workers[n]
	}
	dead := map[string]bool{}
	looked := begin
	var ready []string
	for {
		ws, err := r.ctl.workers(ids)
		if err != nil {
			r.act(Action{Op: "control", Err: err})
			return nil
		}
		ready = ready[:0]
		for i, n := range nodes {
			if ws[ids[i]].Ready != nil {
				ready = append(ready, n)
			}
		}
		if len(ready)+len(dead) == len(nodes) || !time.Now().Before(deadline) {
			break
		}
		if time.Since(looked) > time.Second { // did one die importing torch?
			looked = time.Now()
			for i, n := range nodes {
				if ws[ids[i]].Ready == nil && !dead[n] && !r.running(n) {
					dead[n] = true
					r.act(Action{Node: n, Op: "ready", Note: fmt.Sprintf("worker %s ended before it was ready", ids[i])})
				}
			}
		}
		if !sleepCtx(r.ctx, 10*time.Millisecond) {
			break
		}
	}
	if len(ready) > 0 {
		r.act(Action{Op: "ready", Took: time.Since(begin), Note: fmt.Sprintf("%d worker(s) ready: %s", len(ready), strings.Join(ready, ","))})
	}
	late := 0 // not ready within ready_timeout of their start
	for _, n := range nodes {
		if slices.Contains(ready, n) || dead[n] {
			continue
		}
		if l := r.t.Rec.Nodes[n]; paced && l != nil && time.Since(l.Started) < r.l.ready {
			r.t.Later() // still starting: the next round looks again
			continue
		}
		late++
	}
	if late > 0 {
		r.act(Action{Op: "ready", Note: fmt.Sprintf("%d worker(s) not ready within %v: listed by a later round", late, r.l.ready)})
	}
	return ready
}

// running asks the node whether the Trainer's launch there still runs;
// one that cannot be asked is taken to run.
func (r *elasticRound) running(node string) bool {
	run, err := r.runs(node)
	return run || err != nil
}

// runs asks the node whether the Trainer's launch there still runs; err
// when the node cannot be asked (unreachable).
func (r *elasticRound) runs(node string) (bool, error) {
	l := r.t.Rec.Nodes[node]
	if l == nil {
		return false, nil
	}
	sts, err := r.t.List(r.ctx, node)
	if err != nil {
		return false, err
	}
	for _, s := range sts {
		if s.Trainer == r.t.ID && s.Token == l.Token {
			return s.State == wire.StateRunning, nil
		}
	}
	return false, nil
}

// publish publishes the next membership and records the change.
func (r *elasticRound) publish(ids []string, dir string) {
	st := r.st
	from := len(st.Members)
	e := st.Epoch + 1
	begin := time.Now()
	if err := r.ctl.members(e, ids); err != nil {
		r.act(Action{Op: "publish", Err: err})
		return
	}
	if c := st.Change; c != nil {
		// The previous change never formed: this one completes it, and
		// its cost runs from the same last step.
		dir, from = c.Direction, c.From
	}
	st.Epoch, st.Members = e, slices.Clone(ids)
	st.Change = &elasticChange{Epoch: e, Direction: dir, From: from, To: len(ids)}
	r.save()
	r.act(Action{Op: "publish", Took: time.Since(begin), Note: fmt.Sprintf("epoch %d (%s, %d → %d): %s", e, dir, from, len(ids), strings.Join(ids, " "))})
}

// settle waits, at most form_timeout, until the latest membership has
// formed, and measures its cost. A formation its members gave up (one of
// them never arrived: hung, or gone) is published again without the
// missing ones, who are stopped (rule 6). A member whose worker is gone
// meanwhile (a reclaim's kill, a crash: asked of its node once a second)
// ends the wait at once: its peers could only give the formation up
// after join_timeout, and the round — every Trainer's starts and stops,
// the pool's joins — would wait with them; the next round leaves it out.
// A member whose node cannot be asked (unreachable: its worker may run or
// not) ends the wait too: whether it arrives is the members' to find
// (join_timeout), and a later round sees what they found. Either asks
// for a round soon (Run.Later).
func (r *elasticRound) settle() {
	deadline := time.Now().Add(r.l.form)
	looked := time.Now()
	for {
		s, err := r.ctl.status()
		if err != nil {
			r.act(Action{Op: "control", Err: err})
			return
		}
		if s.Formed >= r.st.Epoch {
			r.measure(s)
			return
		}
		if s.Epoch == r.st.Epoch && s.Fate == "abort" {
			if !r.dropMissing(s) {
				return
			}
			continue
		}
		if time.Now().After(deadline) {
			r.act(Action{Op: "form", Note: fmt.Sprintf("epoch %d not formed within %v (joined: %s); looked at again next round", r.st.Epoch, r.l.form, strings.Join(s.Joined, " "))})
			return
		}
		if time.Since(looked) > time.Second {
			looked = time.Now()
			gone, unknown := r.goneMembers()
			if len(gone) > 0 {
				r.act(Action{Op: "form", Note: fmt.Sprintf("epoch %d cannot form: the worker on %s is gone; the next round leaves it out", r.st.Epoch, strings.Join(gone, ","))})
				r.t.Later()
				return
			}
			if len(unknown) > 0 {
				r.act(Action{Op: "form", Note: fmt.Sprintf("epoch %d not formed yet, and %s cannot be asked (unreachable); looked at again next round", r.st.Epoch, strings.Join(unknown, ","))})
				r.t.Later()
				return
			}
		}
		if !sleepCtx(r.ctx, 5*time.Millisecond) {
			return
		}
	}
}

// goneMembers returns the nodes of the latest membership's members whose
// worker no longer runs there, and those that cannot be asked, sorted.
func (r *elasticRound) goneMembers() (gone, unknown []string) {
	for _, n := range sortedKeys(r.st.Workers) {
		if !slices.Contains(r.st.Members, r.st.Workers[n]) {
			continue
		}
		switch run, err := r.runs(n); {
		case err != nil:
			unknown = append(unknown, n)
		case !run:
			gone = append(gone, n)
		}
	}
	return gone, unknown
}

// dropMissing stops the members of an abandoned formation that did not
// arrive and publishes the membership without them; false when there is
// nothing to publish.
func (r *elasticRound) dropMissing(s elasticStatus) bool {
	t, st := r.t, r.st
	var missing []string // nodes
	var keep []string
	for _, id := range st.Members {
		if slices.Contains(s.Joined, id) {
			keep = append(keep, id)
			continue
		}
		for n, w := range st.Workers {
			if w == id {
				missing = append(missing, n)
			}
		}
	}
	slices.Sort(missing)
	r.act(Action{Op: "form", Note: fmt.Sprintf("epoch %d given up by its members; not arrived: %s", st.Epoch, strings.Join(missing, ","))})
	r.acts = append(r.acts, t.StopNodes(r.ctx, missing)...)
	for _, n := range missing {
		if _, still := t.Rec.Nodes[n]; !still {
			delete(st.Workers, n)
		}
	}
	if len(keep) == 0 {
		st.Members, st.Change = nil, nil // nobody holds the state: the next start is from disk
		return false
	}
	if len(missing) == 0 {
		return false
	}
	dir := Reclaim
	if st.Change != nil {
		dir = st.Change.Direction
	}
	r.publish(keep, dir)
	return true
}

// recover publishes the same membership again when its group broke with
// every member alive (a hang, a transient failure): rule 7. A formation
// an earlier round stopped waiting for (settle: a member's node could not
// be asked) that its members have given up since is published again
// without the missing ones (rule 6), as settle would have.
func (r *elasticRound) recover() {
	s, err := r.ctl.status()
	if err == nil && s.Epoch == r.st.Epoch && s.Formed < s.Epoch && s.Fate == "abort" && len(r.st.Members) > 0 {
		if r.dropMissing(s) {
			r.settle()
		}
		return
	}
	if err != nil || len(s.Failed) == 0 || s.Formed != s.Epoch || s.Epoch != r.st.Epoch || len(r.st.Members) == 0 {
		return
	}
	for n, id := range r.st.Workers {
		if slices.Contains(r.st.Members, id) && !r.running(n) {
			return // a member is gone and the check has not seen it yet: the next round leaves it out
		}
	}
	r.act(Action{Op: "form", Note: fmt.Sprintf("group %d broke with every member alive (failed: %s): published again", s.Epoch, strings.Join(s.Failed, " "))})
	r.publish(slices.Clone(r.st.Members), Failure)
	r.settle()
}

// measure reports the cost of the latest change once its group formed:
// the runtime's own measure (formed_lost: from the completion of the last
// step the group continues from to the moment the new group can train).
func (r *elasticRound) measure(s elasticStatus) {
	c := r.st.Change
	if c == nil || s.Formed < c.Epoch {
		return
	}
	r.st.Change = nil
	a := Action{Op: "formed", Note: fmt.Sprintf("epoch %d formed (%s, %d → %d workers)", s.Formed, c.Direction, c.From, c.To)}
	if s.FormedStep != nil {
		a.Note += fmt.Sprintf(" at step %d", *s.FormedStep)
	}
	if c.Direction != directionStart && s.FormedLost != nil {
		a.Op = "rescale"
		a.Note += fmt.Sprintf(": %.3f s of training lost", *s.FormedLost)
		a.Measured = &Measured{Direction: c.Direction, From: c.From, To: c.To, Seconds: *s.FormedLost}
	}
	r.act(a)
}

// Stop stops the workers, then the store process: it outlives them.
func (l *elastic) Stop(ctx context.Context, t *Run) ([]Action, bool) {
	return t.StopNodesThenRole(ctx, storeRole, "store-stop")
}

// Ended: a store process that ended takes the run's state with it (the
// next round starts a new one, and new workers from the checkpoint). The
// Trainer finished once every worker it did not take away exited and one
// exited 0 — workers exit 0 only when training completed (or when taken
// away) — so that rank 0's last progress report is in; or, should one
// hang after the end, once leave_grace has passed since the first exit 0.
// It failed when they all exited non-zero.
func (l *elastic) Ended(t *Run, roles map[string]Seen) (*Exit, []Action) {
	acts := t.RoleEnded(roles, storeRole, "elastic store process ended; a new one is started, and new workers with it (from the checkpoint)")
	var st elasticState
	t.LoadState(&st)
	var ok0, failed []string
	running := 0
	for _, n := range t.Launched() {
		if _, leaving := st.Leaving[n]; leaving {
			continue
		}
		switch l := t.Rec.Nodes[n]; {
		case l.Exit == nil:
			running++
		case *l.Exit == 0:
			ok0 = append(ok0, n)
		default:
			failed = append(failed, n)
		}
	}
	switch {
	case len(ok0) > 0 && running > 0:
		if st.Exited.IsZero() {
			st.Exited = time.Now()
			t.SaveState(st)
		}
		if time.Since(st.Exited) < l.grace {
			return nil, acts
		}
	case running > 0 || len(ok0)+len(failed) == 0:
		return nil, acts
	}
	note := ""
	if len(ok0) > 0 {
		note = "exited 0 on " + strings.Join(ok0, ",")
	}
	if len(failed) > 0 {
		note = strings.TrimPrefix(note+"; non-zero on "+strings.Join(failed, ","), "; ")
	}
	if running > 0 {
		note += fmt.Sprintf("; %d still running %v after the first exit 0", running, l.grace)
	}
	if len(ok0) > 0 {
		return &Exit{Trainer: t.ID, Status: Finished, Note: note}, acts
	}
	return &Exit{Trainer: t.ID, Status: Failed, Note: note}, acts
}

// workerEnv is a worker's environment: the Trainer's, the runtime's
// (docs/elastic.md §1), and the package on PYTHONPATH.
func (l *elastic) workerEnv(t *Run, spec Spec, node, id string, port int, secret string) map[string]string {
	env := t.Env(spec, map[string]string{"OMP_NUM_THREADS": "1"})
	env["NODE_TAG"] = node
	env["LOCAL_RANK"] = "0"
	env["BFTRAINER_ELASTIC_STORE"] = net.JoinHostPort(t.Address(), strconv.Itoa(port))
	env["BFTRAINER_ELASTIC_ID"] = id
	env[secretEnv] = secret // the environment, never argv: its owner's and root's alone
	env["BFTRAINER_ELASTIC_TIMEOUT"] = strconv.FormatFloat(l.collective.Seconds(), 'g', -1, 64)
	env["BFTRAINER_ELASTIC_JOIN_TIMEOUT"] = strconv.FormatFloat(l.join.Seconds(), 'g', -1, 64)
	if l.s.PythonPath != "" {
		env["PYTHONPATH"] = strings.TrimSuffix(l.s.PythonPath+":"+spec.Env["PYTHONPATH"], ":")
	}
	return env
}

// StoreArgs is the command of an elastic Trainer's store process: the
// workers' TCPStore on port (on every address: the nodes reach it at the
// controller's address), the runner's control port on 127.0.0.1 only.
func StoreArgs(python, address string, port, control int) []string {
	return []string{python, "-m", "bftrainer_elastic.server", "--host", address, "--port", strconv.Itoa(port),
		"--control-host", "127.0.0.1", "--control-port", strconv.Itoa(control)}
}

// startStore starts the Trainer's store process on the controller, as
// the owner, on two free ports of store_ports, and waits until its control
// port answers.
func (l *elastic) startStore(ctx context.Context, t *Run, st *elasticState) Action {
	begin := time.Now()
	act := Action{Trainer: t.ID, Op: "store-start"}
	used := map[int]bool{}
	for _, p := range t.Peers() {
		var ps elasticState
		if len(p.State) > 0 && json.Unmarshal(p.State, &ps) == nil && p.Roles[storeRole] != nil {
			used[ps.Store], used[ps.Control] = true, true
		}
	}
	st.Secret = newRunSecret() // per store process: a new store, a new secret
	env := map[string]string{"OMP_NUM_THREADS": "1", secretEnv: st.Secret}
	if l.s.PythonPath != "" {
		env["PYTHONPATH"] = l.s.PythonPath
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := freePort(l.ports, used)
		if err == nil {
			used[port] = true
			var control int
			control, err = freePort(l.ports, used)
			if err == nil {
				used[control] = true
				st.Store, st.Control = port, control
			}
		}
		if err != nil {
			act.Err, act.Took = err, time.Since(begin)
			return act
		}
		launch, err := l.storeLaunch(t, st, env)
		if err != nil {
			act.Err, act.Took = err, time.Since(begin)
			return act
		}
		a, ok := t.StartRole(ctx, storeRole, "store-start", launch)
		if !ok {
			act.Err, act.Took = a.Err, time.Since(begin)
			return act
		}
		controlAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(st.Control))
		if err := waitStore(ctx, t, t.Role(storeRole).Token, controlAddr); err != nil {
			lastErr = err
			t.StopRole(ctx, storeRole, "store-stop")
			continue // most likely a port was taken meanwhile
		}
		c, err := dialControl(ctx, st.Control, st.Secret)
		if err == nil {
			_, err = c.request("PING")
			c.close()
		}
		if err != nil {
			lastErr = err
			t.StopRole(ctx, storeRole, "store-stop")
			continue
		}
		act.Took = time.Since(begin)
		act.Note = fmt.Sprintf("elastic store on %s, control on %s", net.JoinHostPort(t.Address(), strconv.Itoa(st.Store)), controlAddr)
		return act
	}
	*st = elasticState{}
	act.Err, act.Took = fmt.Errorf("elastic store: %w", lastErr), time.Since(begin)
	return act
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// sleepCtx sleeps d; false when ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}
