package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/store"
	"github.com/bftrainer/bftrainer/trainer/agent"
	"github.com/bftrainer/bftrainer/trainer/registry"
	"github.com/bftrainer/bftrainer/trainer/trainertest"
	"github.com/bftrainer/bftrainer/trainer/wire"
)

// ckptEvery is train.py's default checkpoint interval, in steps.
const ckptEvery = 5

// totalSteps is the job's length. The scenario's actions are done near
// step 30 (3 steps/s at most while waiting for the rescales, which do not
// count) on a quiet machine; the rest runs at the final size. At 90 the
// job ended at world 1 before its last grow, in CI beside the other
// packages (node starts of 7–9 s): twice that leaves room.
const totalSteps = 180

// phase is a stretch of the scenario with a planned set of nodes.
type phase struct {
	name    string
	nodes   []string
	action  time.Time // when the action that leads to it started
	resumed time.Time // first step at the new size
}

// waitPhase waits until train.py steps at the phase's world size on
// exactly the phase's nodes, k steps in a row, and returns the time of the
// first of them.
func waitPhase(tb testing.TB, log string, ph *phase, k int, timeout time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	want := slices.Sorted(slices.Values(ph.nodes))
	for {
		var first time.Time
		steps := map[int]map[string]bool{}
		for _, s := range readSteps(tb, log) {
			if s.At.Before(ph.action) || s.Done || s.World != len(want) {
				continue
			}
			if first.IsZero() {
				first = s.At
			}
			if steps[s.Step] == nil {
				steps[s.Step] = map[string]bool{}
			}
			steps[s.Step][s.Node] = true
		}
		full := 0
		for _, nodes := range steps {
			if got := slices.Sorted(func(yield func(string) bool) {
				for n := range nodes {
					if !yield(n) {
						return
					}
				}
			}); slices.Equal(got, want) {
				full++
			}
		}
		if full >= k {
			ph.resumed = first
			return
		}
		if time.Now().After(deadline) {
			tail := readSteps(tb, log)
			if len(tail) > 12 {
				tail = tail[len(tail)-12:]
			}
			tb.Fatalf("%s: no %d steps at world %d on %v within %v; last lines: %+v", ph.name, k, len(want), want, timeout, tail)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestTorchrunTrainer drives a real elastic torchrun Trainer (Debian's torch
// 1.13, CPU, gloo; contrib/trainer/train.py) through the product's real
// path — node join/leave, trainer submit, the reconciler and the runner
// over a real sshd, the node-local reclaim through the Slurm prolog hook —
// from 1 node to 3, then two reclaims, a regrowth and the end. It checks
// that the step counter never goes back beyond the last checkpoint, that
// the world size and the nodes follow the plan, that nothing of the Trainer
// survives on a reclaimed node once the hook returns, and that every
// action is in the history.
func TestTorchrunTrainer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real elastic torchrun job (about a minute)")
	}
	trainertest.NeedTorch(t)
	root := trainertest.RepoRoot(t)
	// The keep-alive shim (contrib/trainer/fast_torchrun.py): stock 1.13
	// takes 12-19 s to notice a dead node; every agent uses it.
	e := newTrainerEnv(t, "ssh", 4, fmt.Sprintf("allow_root_owner = true\n[trainer.launcher.torchrun]\ncommand = [\"/usr/bin/python3\", %q]\nstore_ports = \"@STORE_PORTS@\"\n",
		filepath.Join(root, "contrib/trainer/fast_torchrun.py")))
	tr := uniq("tr")
	killLeftovers(t, tr)
	log := filepath.Join(e.work, "progress.log")
	begin := time.Now()

	var phases []*phase
	next := func(name string, nodes ...string) *phase {
		ph := &phase{name: name, nodes: nodes, action: time.Now()}
		phases = append(phases, ph)
		return ph
	}
	ph := next("start on 1", "n1")
	e.run(t, "node", "join", "n1")
	e.run(t, "trainer", "submit", "--name", tr, "--min", "1", "--max", "3", "--curve", "1:100,2:195,3:290",
		"--rescale-up", "3", "--rescale-down", "8", "--workdir", e.work,
		"--env", "PYTHONDONTWRITEBYTECODE=1", "--",
		"/usr/bin/python3", filepath.Join(root, "contrib/trainer/train.py"), "--steps", fmt.Sprint(totalSteps),
		"--ckpt-dir", filepath.Join(e.work, "ckpt"), "--log", log, "--sleep", "0.3", "--pg-timeout", "10")
	waitPhase(t, log, ph, 2, 60*time.Second)

	ph = next("grow to 3", "n1", "n2", "n3")
	e.run(t, "node", "join", "n2", "n3")
	waitPhase(t, log, ph, 2, 60*time.Second)

	// Reclaims: the node's own prolog kills (local registry, no database,
	// no network), then the controller side records the leave.
	var reclaimMs []float64
	for i, node := range []string{"n3", "n2"} {
		left := []string{"n1", "n2", "n3"}[:2-i]
		ph = next("reclaim "+node, left...)
		took := e.hook(t, "prolog_slurmd", node, fmt.Sprint(101+i))
		if procs := tokenProcs(t, func(tk wire.Token, p agent.Proc) bool {
			return tk.Trainer == tr && (tk.Node == node || p.Host == node)
		}); len(procs) > 0 {
			t.Fatalf("after the prolog on %s returned, Trainer processes survive there: %+v", node, procs)
		}
		reclaimMs = append(reclaimMs, float64(took.Microseconds())/1000)
		e.run(t, "node", "leave", "--job", fmt.Sprint(101+i), node)
		waitPhase(t, log, ph, 2, 60*time.Second)
	}

	// The first job ends (its epilog lifts the fence on n3) and n3 joins
	// again with a new node: back to 3.
	ph = next("grow again", "n1", "n3", "n4")
	e.hook(t, "epilog_slurmd", "n3", "101")
	e.run(t, "node", "join", "--job", "101", "n3", "n4")
	waitPhase(t, log, ph, 2, 60*time.Second)

	// The end: every agent exits 0; a reconciler round notices it.
	e.waitFinished(t, tr, 120*time.Second)
	total := time.Since(begin)

	steps := readSteps(t, log)
	checkSteps(t, steps, phases)
	checkHistory(t, e, tr)
	// Nothing of it is left anywhere: no process, no registry entry, no
	// store.
	if procs := tokenProcs(t, func(tk wire.Token, _ agent.Proc) bool { return tk.Trainer == tr }); len(procs) > 0 {
		t.Fatalf("processes of the finished Trainer survive: %+v", procs)
	}
	for _, n := range []string{"n1", "n2", "n3", "n4", wire.ControllerNode} {
		if ents, _ := (registry.Registry{Dir: filepath.Join(e.dir, "registry")}).Entries(n); len(ents) > 0 {
			t.Fatalf("registry entries left on %s: %+v", n, ents)
		}
	}
	for _, ph := range phases {
		at := 0
		for _, s := range steps {
			if !s.At.After(ph.resumed) {
				at = s.Step
			}
		}
		t.Logf("%-12s world %d on %v: resumed %.1f s after the action, at step %d", ph.name, len(ph.nodes), ph.nodes, ph.resumed.Sub(ph.action).Seconds(), at)
	}
	t.Logf("reclaim hook (kill, confirmed gone, recorded): %v ms; whole scenario %.1f s", reclaimMs, total.Seconds())
}

// checkSteps: the step counter never goes back further than the last
// checkpoint, and between two actions every step runs at the planned size
// on the planned nodes.
func checkSteps(tb testing.TB, steps []trainertest.Step, phases []*phase) {
	tb.Helper()
	maxStep := 0
	for _, s := range steps {
		if s.Step < maxStep-(ckptEvery-1) {
			tb.Errorf("step went back from %d to %d (node %s, world %d): more than the last checkpoint", maxStep, s.Step, s.Node, s.World)
		}
		maxStep = max(maxStep, s.Step)
	}
	for i, ph := range phases {
		end := time.Now()
		if i+1 < len(phases) {
			end = phases[i+1].action
		}
		for _, s := range steps {
			if s.Done || s.At.Before(ph.resumed) || !s.At.Before(end) {
				continue
			}
			if s.World != len(ph.nodes) || !slices.Contains(ph.nodes, s.Node) {
				tb.Errorf("%s: a step at world %d on %s, the plan is %v", ph.name, s.World, s.Node, ph.nodes)
			}
		}
	}
	if last := steps[len(steps)-1]; !last.Done || last.Step != totalSteps {
		tb.Errorf("the last line is %+v, want done at step %d", last, totalSteps)
	}
}

// checkHistory: every start and stop the runner did, and every reclaim,
// is in the history, without an error.
func checkHistory(tb testing.TB, e trainerEnv, tr string) {
	tb.Helper()
	db := e.openDB(tb)
	evs, err := db.Events(context.Background(), store.Filter{Trainer: tr, Kinds: []store.Kind{store.KindAction, store.KindEnd}})
	if err != nil {
		tb.Fatal(err)
	}
	var got []string
	for _, ev := range evs {
		if ev.Error != "" {
			tb.Errorf("action %s on %v failed: %s", ev.Context, ev.Nodes, ev.Error)
		}
		if ev.Kind == store.KindEnd {
			var d struct{ Status string }
			json.Unmarshal(ev.Detail, &d)
			got = append(got, "end "+d.Status)
			continue
		}
		got = append(got, strings.TrimSpace(ev.Context+" "+strings.Join(ev.Nodes, " ")))
	}
	tb.Logf("history: %v", got)
	for _, want := range []string{"store-start", "start n1", "start n2", "start n3", "start n4", "gone n3", "gone n2",
		"exited n1", "exited n3", "exited n4", "end finished", "stop n1", "stop n3", "stop n4", "store-stop"} {
		if !slices.Contains(got, want) {
			tb.Errorf("history lacks %q", want)
		}
	}
	// train.py's rank 0 reported its samples through bftrainer_progress.py
	// (BFTRAINER_BIN progress BFTRAINER_TRAINER --samples N).
	reports, err := db.Events(context.Background(), store.Filter{Trainer: tr, Kinds: []store.Kind{store.KindProgress}})
	if err != nil {
		tb.Fatal(err)
	}
	if len(reports) < 3 || reports[len(reports)-1].Value <= 0 {
		tb.Errorf("progress reports: %d, last %+v", len(reports), reports)
	}
	kills, err := db.Events(context.Background(), store.Filter{Kinds: []store.Kind{store.KindKill}})
	if err != nil {
		tb.Fatal(err)
	}
	killed := map[string]float64{}
	for _, k := range kills {
		killed[strings.Join(k.Nodes, " ")] += k.Value
	}
	if killed["n3"] < 1 || killed["n2"] < 1 {
		tb.Errorf("the reclaims' kills are not in the history: %v", killed)
	}
}
