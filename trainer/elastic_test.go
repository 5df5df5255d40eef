package trainer

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/trainer/agent"
	"github.com/bftrainer/bftrainer/trainer/trainertest"
	"github.com/bftrainer/bftrainer/trainer/wire"
)

// TestElasticSettings: the defaults build; each bad value is refused with
// its key named.
func TestElasticSettings(t *testing.T) {
	ok := func(s *ElasticSettings) {}
	for _, tc := range []struct {
		name string
		edit func(*ElasticSettings)
		err  string
	}{
		{"defaults", ok, ""},
		{"no pythonpath", func(s *ElasticSettings) { s.PythonPath = "" }, ""},
		{"relative pythonpath", func(s *ElasticSettings) { s.PythonPath = "python" }, "pythonpath"},
		{"one port", func(s *ElasticSettings) { s.StorePorts = "29600-29600" }, "at least two ports"},
		{"ports garbage", func(s *ElasticSettings) { s.StorePorts = "any" }, "store_ports"},
		{"form within join", func(s *ElasticSettings) { s.FormTimeout, s.JoinTimeout = "30s", "30s" }, "form_timeout"},
		{"no grace is fine", func(s *ElasticSettings) { s.LeaveGrace = "0s" }, ""},
		{"negative grace", func(s *ElasticSettings) { s.LeaveGrace = "-1s" }, "leave_grace"},
		{"tiny collective timeout", func(s *ElasticSettings) { s.CollectiveTimeout = "10ms" }, "collective_timeout"},
		{"no python", func(s *ElasticSettings) { s.Python = "" }, "python"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := elasticKind.New(func(v any) error { tc.edit(v.(*ElasticSettings)); return nil })
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("error %v, want one naming %q", err, tc.err)
			}
		})
	}
	spec, _ := json.Marshal(Spec{Argv: []string{"/usr/bin/python3", "train.py"}, ProcsPerNode: 2})
	if err := Builtin().CheckLaunch(Elastic, spec); err == nil || !strings.Contains(err.Error(), "one worker per node") {
		t.Fatalf("two workers per node: %v", err)
	}
}

// TestElasticWorkerEnv: a worker is told the store, its id (unique per
// launch), the runtime's timeouts and where the package is; the user's
// PYTHONPATH stays, after ours.
func TestElasticWorkerEnv(t *testing.T) {
	r, _ := testRunner(t)
	l, err := elasticKind.New(func(v any) error { v.(*ElasticSettings).PythonPath = "/opt/bft/python"; return nil })
	if err != nil {
		t.Fatal(err)
	}
	s := &session{r: r, st: &runState{}}
	run := s.run("t1", &Record{}, Want{ID: "t1"})
	secret := newRunSecret()
	env := l.(*elastic).workerEnv(run, Spec{Env: map[string]string{"PYTHONPATH": "/home/u/lib", "X": "1"}}, "n1", "n1@abc", 29601, secret)
	for k, want := range map[string]string{
		"BFTRAINER_ELASTIC_SECRET": secret,
		"BFTRAINER_ELASTIC_STORE":  "127.0.0.1:29601", "BFTRAINER_ELASTIC_ID": "n1@abc", "BFTRAINER_ELASTIC_TIMEOUT": "10",
		"BFTRAINER_ELASTIC_JOIN_TIMEOUT": "30", "PYTHONPATH": "/opt/bft/python:/home/u/lib", "X": "1", "NODE_TAG": "n1",
		"LOCAL_RANK": "0", "BFTRAINER_TRAINER": "t1", "OMP_NUM_THREADS": "1",
	} {
		if env[k] != want {
			t.Errorf("%s=%q, want %q", k, env[k], want)
		}
	}
	if got := StoreArgs("/usr/bin/python3", "10.0.0.1", 29600, 29601); !slices.Equal(got, []string{"/usr/bin/python3", "-m", "bftrainer_elastic.server",
		"--host", "10.0.0.1", "--port", "29600", "--control-host", "127.0.0.1", "--control-port", "29601"}) {
		t.Errorf("store args %q", got)
	}
}

// elasticRunner is a local runner whose elastic launcher finds the
// runtime in this repository, its settings edited by opts.
func elasticRunner(tb testing.TB, opts ...func(*ElasticSettings)) (*Runner, trainertest.Agent) {
	tb.Helper()
	r, a := testRunner(tb)
	root := trainertest.RepoRoot(tb)
	ls, err := Builtin().Build(func(name string, v any) error {
		if s, ok := v.(*ElasticSettings); ok {
			s.PythonPath = filepath.Join(root, "python")
			for _, o := range opts {
				o(s)
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	r.Launchers = ls
	return r, a
}

// measured returns the costs the actions measured, as "direction from→to".
func measured(acts []Action) []string {
	var out []string
	for _, a := range acts {
		if a.Measured != nil {
			out = append(out, fmt.Sprintf("%s %d→%d", a.Measured.Direction, a.Measured.From, a.Measured.To))
		}
	}
	return out
}

// TestElasticLauncher drives a real elastic Trainer (contrib/trainer/train.py
// on the runtime, torch on CPU, gloo) through the runner and the local node
// agent with cgroups: 1 → 3 nodes, a planned shrink to 2 (the removed
// worker leaves by itself and is stopped), a reclaim of the node hosting
// rank 0 by the node's own kill (the prolog's path) to 1, a regrowth to 3,
// a node the scheduler took while its worker ran (stopped at once, no
// grace) to 2, and the end. Every change's cost is measured (no timing is
// asserted); every step is trained exactly once, at the planned size, and
// the samples add up exactly; nothing is left at the end.
func TestElasticLauncher(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real torch workers (about a minute)")
	}
	trainertest.NeedTorch(t)
	r, a := elasticRunner(t)
	root := trainertest.RepoRoot(t)
	n1, n2, n3, n4 := a.N("n1"), a.N("n2"), a.N("n3"), a.N("n4")
	ctx := context.Background()
	dir := t.TempDir()
	log := filepath.Join(dir, "progress.log")
	const steps, batch = 150, 8
	spec, _ := json.Marshal(Spec{Workdir: dir, Env: map[string]string{"PYTHONDONTWRITEBYTECODE": "1"}, Argv: []string{"/usr/bin/python3",
		filepath.Join(root, "contrib/trainer/train.py"), "--steps", fmt.Sprint(steps), "--batch", fmt.Sprint(batch), "--sleep", "0.2",
		"--ckpt-dir", filepath.Join(dir, "ckpt"), "--log", log, "--print-every", "0"}})
	id := "el-" + wire.NewRun()[:6]
	t.Cleanup(func() {
		r.Apply(context.Background(), nil)
		for _, p := range tokenProcs(t, func(tk wire.Token, _ agent.Proc) bool { return tk.Trainer == id }) {
			t.Errorf("left running: %+v", p)
		}
	})
	want := func(nodes ...string) Want {
		return Want{ID: id, Owner: currentUserName(t), Launcher: Elastic, Spec: spec, Min: 1, Max: 4, Nodes: nodes}
	}
	var costs []string
	var phases []trainertest.Phase
	changing := func() { // the current phase ends: a change begins
		if len(phases) > 0 && phases[len(phases)-1].End.IsZero() {
			phases[len(phases)-1].End = time.Now()
		}
	}
	apply := func(w Want) []Action {
		t.Helper()
		changing()
		acts := r.Apply(ctx, []Want{w})
		for _, a := range acts {
			if a.Err != nil {
				t.Fatalf("%s on %s: %v", a.Op, a.Node, a.Err)
			}
			t.Logf("%-11s %-14s %6.0f ms  %s", a.Op, a.Node, float64(a.Took.Microseconds())/1000, a.Note)
		}
		costs = append(costs, measured(acts)...)
		return acts
	}
	// settled waits for two steps on exactly these nodes after now.
	settled := func(nodes ...string) {
		t.Helper()
		ph := trainertest.Phase{At: time.Now(), Nodes: nodes}
		phases = append(phases, ph)
		trainertest.WaitFor(t, 60*time.Second, fmt.Sprintf("two steps on %v", nodes), func() bool {
			seen := map[int][]string{}
			full := 0
			ss, _ := trainertest.ReadSteps(log)
			for _, s := range ss {
				if s.Done {
					t.Fatalf("the job finished before the scenario did (at step %d): a slow machine; raise steps", s.Step)
				}
				if s.At.After(ph.At) && s.World == len(nodes) {
					seen[s.Step] = append(seen[s.Step], s.Node)
					if len(seen[s.Step]) == len(nodes) {
						full++
					}
				}
			}
			return full >= 2
		})
	}
	has := func(acts []Action, op, node, note string) {
		t.Helper()
		for _, a := range acts {
			if a.Op == op && a.Node == node && strings.Contains(a.Note, note) {
				return
			}
		}
		t.Fatalf("no %s on %q saying %q", op, node, note)
	}

	apply(want(n1))
	settled(n1)
	apply(want(n1, n2, n3))
	settled(n1, n2, n3)
	acts := apply(want(n1, n2)) // the plan takes n3 away: its worker leaves by itself
	has(acts, "leave", n3, "left the group")
	settled(n1, n2)
	// A reclaim of n1, rank 0's node: the node's own kill (the prolog's),
	// with the fence; the check forgets the node; the next round leaves
	// its worker out.
	changing()
	if _, err := a.KillAll(ctx, n1, true); err != nil {
		t.Fatal(err)
	}
	if _, acts := r.Check(ctx); !slices.ContainsFunc(acts, func(a Action) bool { return a.Op == "gone" && a.Node == n1 }) {
		t.Fatalf("the check did not see the reclaim: %v", acts)
	}
	apply(want(n2))
	settled(n2)
	apply(want(n2, n3, n4))
	settled(n2, n3, n4)
	// The scheduler took n4 while its worker ran (no node prolog): it is
	// stopped at once, not given a grace to leave.
	w := want(n2, n3)
	w.Taken = []string{n1, n4}
	acts = apply(w)
	if slices.ContainsFunc(acts, func(a Action) bool { return a.Op == "leave" }) {
		t.Fatalf("a taken node was given a grace: %v", acts)
	}
	has(acts, "stop", n4, "")
	settled(n2, n3)

	if got, want := costs, []string{"up 1→3", "down 3→2", "reclaim 2→1", "up 1→3", "reclaim 3→2"}; !slices.Equal(got, want) {
		t.Fatalf("measured %v, want %v", got, want)
	}
	var exit *Exit
	trainertest.WaitFor(t, 120*time.Second, "the end", func() bool {
		exits, _ := r.Check(ctx)
		if len(exits) > 0 {
			exit = &exits[0]
		}
		return exit != nil
	})
	if exit.Status != Finished {
		t.Fatalf("ended %+v", exit)
	}
	all, err := trainertest.ReadSteps(log)
	if err != nil {
		t.Fatal(err)
	}
	if last, _ := trainertest.CheckSteps(t, all, batch, phases); last != steps {
		t.Fatalf("the job ended at step %d, want %d", last, steps)
	}
	if got := apply(Want{ID: id}); !slices.ContainsFunc(got, func(a Action) bool { return a.Op == "store-stop" }) {
		t.Fatalf("teardown did %v", got)
	}
}

// TestElasticHungWorker: a worker that hangs (SIGSTOP: a partitioned node
// looks the same) breaks its group with every member alive. The next
// round publishes the same membership again (rule 7); the hung worker
// never arrives, its peers give the formation up after the join timeout,
// and the round stops it and publishes the membership without it (rule
// 6): training goes on at the smaller size, and the following round starts
// a fresh worker on the node, which grows the group back.
func TestElasticHungWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real torch workers")
	}
	trainertest.NeedTorch(t)
	r, a := elasticRunner(t, func(s *ElasticSettings) {
		s.CollectiveTimeout, s.JoinTimeout, s.FormTimeout = "2s", "3s", "10s"
	})
	root := trainertest.RepoRoot(t)
	n1, n2 := a.N("n1"), a.N("n2")
	ctx := context.Background()
	dir := t.TempDir()
	log := filepath.Join(dir, "progress.log")
	spec, _ := json.Marshal(Spec{Workdir: dir, Argv: []string{"/usr/bin/python3", filepath.Join(root, "contrib/trainer/train.py"),
		"--steps", "100000", "--sleep", "0.1", "--ckpt-dir", filepath.Join(dir, "ckpt"), "--log", log, "--print-every", "0"}})
	id := "hung-" + wire.NewRun()[:6]
	t.Cleanup(func() {
		r.Apply(context.Background(), nil)
		for _, p := range tokenProcs(t, func(tk wire.Token, _ agent.Proc) bool { return tk.Trainer == id }) {
			syscall.Kill(p.PID, syscall.SIGKILL)
			t.Errorf("left running: %+v", p)
		}
	})
	w := Want{ID: id, Owner: currentUserName(t), Launcher: Elastic, Spec: spec, Min: 1, Max: 2, Nodes: []string{n1, n2}}
	var all []Action
	apply := func() []Action {
		t.Helper()
		acts := r.Apply(ctx, []Want{w})
		for _, a := range acts {
			if a.Err != nil {
				t.Fatalf("%s on %s: %v", a.Op, a.Node, a.Err)
			}
			t.Logf("%-11s %-14s %6.0f ms  %s", a.Op, a.Node, float64(a.Took.Microseconds())/1000, a.Note)
		}
		all = append(all, acts...)
		return acts
	}
	stepsAt := func(world int, after time.Time) int {
		ss, _ := trainertest.ReadSteps(log)
		n := 0
		for _, s := range ss {
			if s.World == world && s.At.After(after) {
				n++
			}
		}
		return n
	}
	apply()
	trainertest.WaitFor(t, 60*time.Second, "steps at world 2", func() bool { return stepsAt(2, time.Time{}) >= 4 })
	var hung []int
	for _, p := range tokenProcs(t, func(tk wire.Token, p agent.Proc) bool { return tk.Trainer == id && tk.Node == n2 }) {
		if strings.HasPrefix(p.Comm, "python") {
			hung = append(hung, p.PID)
			syscall.Kill(p.PID, syscall.SIGSTOP)
		}
	}
	if len(hung) != 1 {
		t.Fatalf("want one worker process on %s, found %v", n2, hung)
	}
	stopped := time.Now()
	// The survivor's collective times out (2 s); a round then finds the
	// group broken with both alive.
	trainertest.WaitFor(t, 30*time.Second, "a round that sees the broken group", func() bool {
		return slices.ContainsFunc(apply(), func(a Action) bool { return strings.Contains(a.Note, "broke with every member alive") })
	})
	if !slices.ContainsFunc(all, func(a Action) bool { return a.Op == "form" && strings.Contains(a.Note, "not arrived: "+n2) }) {
		t.Fatalf("the hung worker was not found missing")
	}
	if !slices.ContainsFunc(all, func(a Action) bool { return a.Op == "stop" && a.Node == n2 }) {
		t.Fatalf("the hung worker was not stopped")
	}
	trainertest.WaitFor(t, 30*time.Second, "steps at world 1", func() bool { return stepsAt(1, stopped) >= 2 })
	if got := measured(all); !slices.Contains(got, "failure 2→1") {
		t.Fatalf("measured %v, want the failure 2→1 among them", got)
	}
	// The node is still wanted: the next round starts a new worker there.
	regrow := time.Now()
	apply()
	trainertest.WaitFor(t, 60*time.Second, "steps at world 2 again", func() bool { return stepsAt(2, regrow) >= 4 })
}
