package trainer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/trainer/agent"
	"github.com/bftrainer/bftrainer/trainer/trainertest"
	"github.com/bftrainer/bftrainer/trainer/wire"
)

// longTrainer is a train.py Trainer (1–2 nodes) that trains until it is
// stopped, and its progress log; the cleanup stops it (after undo) and
// checks nothing of it is left. With a gate (a FIFO's path), each worker
// waits, before it starts train.py, for a line written to the gate
// (openGate): a round then cannot find it ready before the test says so.
func longTrainer(t *testing.T, r *Runner, prefix string, undo func(), gate string) (Want, string) {
	t.Helper()
	dir := t.TempDir()
	log := filepath.Join(dir, "progress.log")
	argv := []string{"/usr/bin/python3",
		filepath.Join(trainertest.RepoRoot(t), "contrib/trainer/train.py"), "--steps", "100000", "--batch", "8", "--sleep", "0.2",
		"--ckpt-dir", filepath.Join(dir, "ckpt"), "--log", log, "--print-every", "0"}
	if gate != "" {
		argv = append([]string{"/bin/sh", "-c", `read go < "$0" && exec "$@"`, gate}, argv...)
	}
	spec, _ := json.Marshal(Spec{Workdir: dir, Env: map[string]string{"PYTHONDONTWRITEBYTECODE": "1"}, Argv: argv})
	id := prefix + "-" + wire.NewRun()[:6]
	t.Cleanup(func() {
		undo()
		r.Apply(context.Background(), nil)
		for _, p := range tokenProcs(t, func(tk wire.Token, _ agent.Proc) bool { return tk.Trainer == id }) {
			t.Errorf("left running: %+v", p)
		}
	})
	return Want{ID: id, Owner: currentUserName(t), Launcher: Elastic, Spec: spec, Min: 1, Max: 2}, log
}

// newGate makes a FIFO for longTrainer's workers to wait on.
func newGate(t *testing.T) string {
	t.Helper()
	gate := filepath.Join(t.TempDir(), "gate")
	if err := syscall.Mkfifo(gate, 0o600); err != nil {
		t.Fatal(err)
	}
	return gate
}

// openGate lets the one worker waiting on the gate start train.py: it
// waits for the worker to open the FIFO (an open for writing without a
// reader fails with ENXIO) and writes it its line.
func openGate(t *testing.T, gate string) {
	t.Helper()
	var f *os.File
	trainertest.WaitFor(t, 60*time.Second, "a worker waiting on the gate", func() bool {
		var err error
		f, err = os.OpenFile(gate, os.O_WRONLY|syscall.O_NONBLOCK, 0)
		if err != nil && !errors.Is(err, syscall.ENXIO) {
			t.Fatal(err)
		}
		return err == nil
	})
	defer f.Close()
	if _, err := f.WriteString("go\n"); err != nil {
		t.Fatal(err)
	}
}

// twoSteps waits for two steps trained by world workers after now.
func twoSteps(t *testing.T, log string, world int) {
	t.Helper()
	at := time.Now()
	trainertest.WaitFor(t, 60*time.Second, fmt.Sprintf("two steps of %d workers", world), func() bool {
		seen, full := map[int]int{}, 0
		ss, _ := trainertest.ReadSteps(log)
		for _, s := range ss {
			if s.At.After(at) && s.World == world {
				if seen[s.Step]++; seen[s.Step] == world {
					full++
				}
			}
		}
		return full >= 2
	})
}

// TestElasticPaced: when a round follows soon (Runner.Pace, as the
// reconciler's rounds), a grow does not wait in its round for the new
// workers to import torch: the round that starts them returns without
// publishing and asks for another (Pending); a later round lists them once
// they are ready, and the group trains at the new size. Real torch
// workers (train.py), 1 then 2 nodes; each new worker waits on a gate the
// test opens after that first round, so the round cannot find it ready
// however fast torch is imported.
func TestElasticPaced(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real torch workers")
	}
	trainertest.NeedTorch(t)
	r, a := elasticRunner(t)
	r.Pace(true)
	n1, n2 := a.N("n1"), a.N("n2")
	ctx := context.Background()
	gate := newGate(t)
	want, log := longTrainer(t, r, "ep", func() {}, gate)
	apply := func(nodes ...string) []Action {
		t.Helper()
		w := want
		w.Nodes = nodes
		acts := r.Apply(ctx, []Want{w})
		for _, a := range acts {
			if a.Err != nil {
				t.Fatalf("%s on %s: %v", a.Op, a.Node, a.Err)
			}
			t.Logf("%-11s %-14s %6.0f ms  %s", a.Op, a.Node, float64(a.Took.Microseconds())/1000, a.Note)
		}
		return acts
	}
	has := func(acts []Action, op, node string) bool {
		return slices.ContainsFunc(acts, func(a Action) bool { return a.Op == op && (node == "" || a.Node == node) })
	}
	// grow applies nodes until a round publishes them; the first round
	// must start the new node's worker and return without publishing.
	grow := func(nodes ...string) {
		t.Helper()
		added := nodes[len(nodes)-1]
		acts := apply(nodes...)
		if !has(acts, "start", added) || has(acts, "publish", "") || !r.Pending() {
			t.Fatalf("the round starting %s: pending %v, actions %v; want a start, no publication, pending", added, r.Pending(), ops(t, acts))
		}
		openGate(t, gate)
		rounds := 1
		trainertest.WaitFor(t, 60*time.Second, fmt.Sprintf("a round publishing %v", nodes), func() bool {
			rounds++
			acts := apply(nodes...)
			if has(acts, "start", "") {
				t.Fatalf("round %d started again: %v", rounds, ops(t, acts))
			}
			return has(acts, "publish", "")
		})
		if r.Pending() {
			t.Fatalf("still pending after the publication")
		}
		t.Logf("%v published after %d rounds", nodes, rounds)
		twoSteps(t, log, len(nodes))
	}
	grow(n1)
	grow(n1, n2)
}

// unreachableNode is the nodes' transport with one node that stops
// answering when down is set, as ssh to a node whose sshd is gone.
type unreachableNode struct {
	Transport
	node string
	down atomic.Bool
}

func (u *unreachableNode) Agent(ctx context.Context, node string, args []string, stdin []byte) ([]byte, error) {
	if u.down.Load() && node == u.node {
		op := ""
		if len(args) > 0 {
			op = args[0]
		}
		return nil, &AgentError{Node: node, Op: op, Unreachable: true, Err: errors.New("ssh: connect to host: Connection refused")}
	}
	return u.Transport.Agent(ctx, node, args, stdin)
}

// TestElasticUnreachableMember: a member's worker dies while its node
// cannot be asked (its sshd down: the kill was the node's own, a
// prolog's). The group breaks; the round publishes the membership again
// (every member looks alive), and the formation cannot complete. The
// round does not wait for the members to give it up (join_timeout): it
// stops waiting once the node cannot be asked and asks for a round soon;
// a later round finds the formation given up and publishes the
// membership without the missing member, and the group trains on at its
// smaller size.
func TestElasticUnreachableMember(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real torch workers")
	}
	trainertest.NeedTorch(t)
	r, a := elasticRunner(t, func(s *ElasticSettings) { s.JoinTimeout, s.FormTimeout = "6s", "12s" })
	n1, n2 := a.N("n1"), a.N("n2")
	un := &unreachableNode{Transport: r.Nodes, node: n2}
	r.Nodes = un
	ctx := context.Background()
	w, log := longTrainer(t, r, "eu", func() { un.down.Store(false) }, "")
	w.Nodes = []string{n1, n2}
	id := w.ID
	notes := func(acts []Action) string {
		var b strings.Builder
		for _, a := range acts {
			if a.Err != nil && !errors.As(a.Err, new(*AgentError)) {
				t.Fatalf("%s on %s: %v", a.Op, a.Node, a.Err)
			}
			fmt.Fprintf(&b, "%s %s: %s %v\n", a.Op, a.Node, a.Note, a.Err)
		}
		t.Log(b.String())
		return b.String()
	}
	notes(r.Apply(ctx, []Want{w}))
	twoSteps(t, log, 2)
	// n2 goes dark, and its worker dies there.
	un.down.Store(true)
	for _, p := range tokenProcs(t, func(tk wire.Token, _ agent.Proc) bool { return tk.Trainer == id && tk.Node == n2 }) {
		syscall.Kill(p.PID, syscall.SIGKILL)
	}
	// Rounds until one stops waiting on n2's member; none of them may
	// have waited for the members to give the formation up.
	var got string
	trainertest.WaitFor(t, 60*time.Second, "a round that stops waiting on the unreachable member", func() bool {
		got = notes(r.Apply(ctx, []Want{w}))
		if strings.Contains(got, "given up by its members") {
			t.Fatalf("a round waited for the members to give the formation up:\n%s", got)
		}
		return strings.Contains(got, "cannot be asked (unreachable)")
	})
	if !r.Pending() {
		t.Fatal("the round that stopped waiting asked for no round soon")
	}
	// A later round publishes without n2 once the members gave it up.
	trainertest.WaitFor(t, 60*time.Second, "a round publishing without the missing member", func() bool {
		return strings.Contains(notes(r.Apply(ctx, []Want{w})), "given up by its members; not arrived: "+n2)
	})
	twoSteps(t, log, 1)
}

// TestElasticLeaveGraceOnce: the plan takes a worker's node away while the
// node cannot be asked (its sshd down) and the worker cannot leave (it is
// stopped). The round waits for it to leave for the grace, then tries to
// stop it, which fails; the rounds after try the stop again without
// waiting again (the pilot's dark node held every round 10 s, three
// times, while no released node was lent). Once the node answers, it is
// stopped.
func TestElasticLeaveGraceOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real torch workers")
	}
	trainertest.NeedTorch(t)
	r, a := elasticRunner(t, func(s *ElasticSettings) { s.LeaveGrace = "2s" })
	n1, n2 := a.N("n1"), a.N("n2")
	un := &unreachableNode{Transport: r.Nodes, node: n2}
	r.Nodes = un
	ctx := context.Background()
	var stopped []int
	w, log := longTrainer(t, r, "eg", func() {
		un.down.Store(false)
		for _, pid := range stopped {
			syscall.Kill(pid, syscall.SIGCONT)
		}
	}, "")
	w.Nodes = []string{n1, n2}
	id := w.ID
	r.Apply(ctx, []Want{w})
	twoSteps(t, log, 2)
	// n2 goes dark and its worker cannot leave.
	un.down.Store(true)
	for _, p := range tokenProcs(t, func(tk wire.Token, _ agent.Proc) bool { return tk.Trainer == id && tk.Node == n2 }) {
		if syscall.Kill(p.PID, syscall.SIGSTOP) == nil {
			stopped = append(stopped, p.PID)
		}
	}
	if len(stopped) == 0 {
		t.Fatal("no worker process of n2 to stop")
	}
	w.Nodes = []string{n1}
	graces := func(acts []Action) (waited, stopFailed int) {
		for _, a := range acts {
			if a.Node != n2 {
				continue
			}
			if a.Op == "leave" && strings.Contains(a.Note, "did not leave within") {
				waited++
			}
			if a.Op == "stop" && a.Err != nil {
				stopFailed++
			}
		}
		return waited, stopFailed
	}
	for round := range 3 {
		waited, failed := graces(r.Apply(ctx, []Want{w}))
		if failed != 1 {
			t.Fatalf("round %d: %d failed stops of n2's worker, want 1 (its node is dark)", round, failed)
		}
		if want := map[bool]int{true: 1, false: 0}[round == 0]; waited != want {
			t.Fatalf("round %d waited %d times for n2's worker to leave, want %d (its grace is given once)", round, waited, want)
		}
	}
	twoSteps(t, log, 1)
	// The node answers again: the worker is stopped.
	un.down.Store(false)
	r.Apply(ctx, []Want{w})
	if left := tokenProcs(t, func(tk wire.Token, _ agent.Proc) bool { return tk.Trainer == id && tk.Node == n2 }); len(left) != 0 {
		t.Fatalf("n2's worker still there once its node answered: %v", left)
	}
}
