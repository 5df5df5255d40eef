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
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/trainer/agent"
	"github.com/bftrainer/bftrainer/trainer/trainertest"
	"github.com/bftrainer/bftrainer/trainer/wire"
)

// testRunner is a runner whose node agents run locally (the test binary),
// with every registered launcher at its defaults.
func testRunner(tb testing.TB, opts ...func(*trainertest.AgentConfig)) (*Runner, trainertest.Agent) {
	tb.Helper()
	a := trainertest.MustAgent(tb, opts...)
	local := Local{Argv: a.Argv}
	ls, err := Builtin().Build(nil)
	if err != nil {
		tb.Fatal(err)
	}
	return &Runner{Nodes: local, Controller: local, Launchers: ls, StateDir: tb.TempDir(), Address: "127.0.0.1", Parallel: 4}, a
}

func execWant(tb testing.TB, id string, argv []string, nodes ...string) Want {
	tb.Helper()
	spec, _ := json.Marshal(Spec{Argv: argv, Workdir: "/"})
	return Want{ID: id, Owner: currentUserName(tb), Launcher: Exec, Spec: spec, Min: 1, Max: 4, Nodes: nodes}
}

// ops summarises actions as "op node" strings, sorted, failing the test on
// an unexpected error.
func ops(tb testing.TB, acts []Action) []string {
	tb.Helper()
	var out []string
	for _, a := range acts {
		if a.Err != nil {
			tb.Fatalf("%s %s on %s: %v", a.Op, a.Trainer, a.Node, a.Err)
		}
		out = append(out, strings.TrimSpace(a.Op+" "+a.Node))
	}
	slices.Sort(out)
	return out
}

// TestRunnerIdempotent: applying the same desired state twice does
// nothing the second time; a change does exactly the difference; an empty
// desired state stops everything.
func TestRunnerIdempotent(t *testing.T) {
	r, a := testRunner(t)
	n1, n2 := a.N("n1"), a.N("n2")
	ctx := context.Background()
	out := filepath.Join(t.TempDir(), "nodes")
	argv := []string{"/bin/sh", "-c", `echo "$BFTRAINER_NODES $(cat "$BFTRAINER_NODEFILE" | tr '\n' ' ')" >> ` + out + `; exec sleep 300`}
	w := execWant(t, "t1", argv, n1, n2)
	if got, want := ops(t, r.Apply(ctx, []Want{w})), []string{"start " + n1}; !slices.Equal(got, want) {
		t.Fatalf("first apply: %v, want %v", got, want)
	}
	waitFor(t, 5*time.Second, "the program", func() bool { return readFile(out) != "" })
	if got, want := strings.TrimSpace(readFile(out)), n1+","+n2+" "+n1+" "+n2; got != want {
		t.Fatalf("the program was told %q, want %q", got, want)
	}
	if got := r.Apply(ctx, []Want{w}); len(got) != 0 {
		t.Fatalf("second apply of the same state did %v", ops(t, got))
	}
	if exits, acts := r.Check(ctx); len(exits) != 0 || len(acts) != 0 {
		t.Fatalf("check of a running program: %v %v", exits, acts)
	}
	// exec: a change of the node set restarts the program with the new set.
	w.Nodes = []string{n1}
	if got, want := ops(t, r.Apply(ctx, []Want{w})), []string{"start " + n1, "stop " + n1}; !slices.Equal(got, want) {
		t.Fatalf("shrink: %v, want %v", got, want)
	}
	waitFor(t, 5*time.Second, "the restart", func() bool { return len(lines(readFile(out))) == 2 })
	if got := r.Apply(ctx, []Want{w}); len(got) != 0 {
		t.Fatalf("again: %v", ops(t, got))
	}
	if got, want := ops(t, r.Apply(ctx, nil)), []string{"stop " + n1}; !slices.Equal(got, want) {
		t.Fatalf("teardown: %v, want %v", got, want)
	}
	if got := r.Apply(ctx, nil); len(got) != 0 {
		t.Fatalf("nothing left, yet: %v", ops(t, got))
	}
	if n := len(tokenProcs(t, func(tk wire.Token, _ agent.Proc) bool { return tk.Trainer == "t1" && tk.Node == n1 })); n != 0 {
		t.Fatalf("%d processes of t1 left", n)
	}
}

// TestRunnerExit: a program that ends by itself is reported once, not
// restarted, and cleaned up when the Trainer is no longer wanted.
func TestRunnerExit(t *testing.T) {
	r, a := testRunner(t)
	n1, n2 := a.N("n1"), a.N("n2")
	ctx := context.Background()
	ok := execWant(t, "ok", []string{"/bin/true"}, n1)
	bad := execWant(t, "bad", []string{"/bin/sh", "-c", "exit 7"}, n2)
	ops(t, r.Apply(ctx, []Want{ok, bad}))
	var exits []Exit
	waitFor(t, 10*time.Second, "both exits", func() bool {
		e, _ := r.Check(ctx)
		exits = append(exits, e...)
		return len(exits) == 2
	})
	slices.SortFunc(exits, func(a, b Exit) int { return strings.Compare(a.Trainer, b.Trainer) })
	if exits[0].Trainer != "bad" || exits[0].Status != Failed || exits[1].Trainer != "ok" || exits[1].Status != Finished {
		t.Fatalf("exits %+v", exits)
	}
	if e, _ := r.Check(ctx); len(e) != 0 {
		t.Fatalf("reported twice: %+v", e)
	}
	if got := r.Apply(ctx, []Want{ok, bad}); len(got) != 0 {
		t.Fatalf("an ended program was started again: %v", ops(t, got))
	}
	if got, want := ops(t, r.Apply(ctx, nil)), []string{"stop " + n1, "stop " + n2}; !slices.Equal(got, want) {
		t.Fatalf("cleanup: %v, want %v", got, want)
	}
}

// TestReclaimIsNotAFailure: a Trainer's processes killed by a node prolog
// that could not use this registry (a configuration that did not load:
// another registry, the same cgroups) leave an entry that reads as gone:
// the runner forgets the node — a reclaim — and never ends the Trainer
// failed; the next round starts it again.
func TestReclaimIsNotAFailure(t *testing.T) {
	r, a := testRunner(t)
	n1 := a.N("n1")
	ctx := context.Background()
	w := execWant(t, "t1", []string{"/bin/sleep", "300"}, n1)
	ops(t, r.Apply(ctx, []Want{w}))
	fallback := trainertest.MustAgent(t, func(c *trainertest.AgentConfig) {
		c.Containment, c.CgroupRoot = a.Config.Containment, a.Config.CgroupRoot
	})
	if _, err := fallback.KillAll(ctx, n1, true); err != nil {
		t.Fatal(err)
	}
	exits, acts := r.Check(ctx)
	if len(exits) != 0 {
		t.Fatalf("a reclaim ended the Trainer: %+v", exits)
	}
	// Forgotten, and its leftover entry cleared (no record owns it now).
	if got := ops(t, acts); !slices.Equal(got, []string{"gone " + n1, "orphan-stop " + n1}) {
		t.Fatalf("check: %v, want the node forgotten and its entry cleared", got)
	}
	if got := ops(t, r.Apply(ctx, []Want{w})); !slices.Equal(got, []string{"start " + n1}) {
		t.Fatalf("next round: %v, want a restart", got)
	}
	ops(t, r.Apply(ctx, nil))
}

// crashingTransport runs a node agent, and then plays a reconciler killed
// -9 right after a node answered a start: the state file is put back as
// it was on disk while the start was on its way.
type crashingTransport struct {
	Transport
	state string
	saved []byte
}

func (c *crashingTransport) Agent(ctx context.Context, node string, args []string, stdin []byte) ([]byte, error) {
	if len(args) > 0 && args[0] == "start" && c.saved == nil {
		c.saved, _ = os.ReadFile(c.state)
	}
	return c.Transport.Agent(ctx, node, args, stdin)
}

// TestCrashDuringStart: a reconciler dies during a start; its Trainer is
// cancelled meanwhile. The next round finds the launch (recorded as
// pending before the start was asked for), adopts it and stops it: no
// Trainer runs untracked.
func TestCrashDuringStart(t *testing.T) {
	r, a := testRunner(t)
	n1, n2 := a.N("n1"), a.N("n2")
	ctx := context.Background()
	ct := &crashingTransport{Transport: r.Nodes, state: r.statePath()}
	r.Nodes = ct
	ops(t, r.Apply(ctx, []Want{execWant(t, "t1", []string{"/bin/sleep", "300"}, n1)}))
	if err := os.WriteFile(r.statePath(), ct.saved, 0o600); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(ct.saved), `"pending": true`) {
		t.Fatalf("the start was not recorded before it was asked for:\n%s", ct.saved)
	}
	// The cancel: t1 is no longer wanted; t2 takes the node.
	got := ops(t, r.Apply(ctx, []Want{execWant(t, "t2", []string{"/bin/sleep", "301"}, n1, n2)}))
	if want := []string{"adopt " + n1, "start " + n1, "stop " + n1}; !slices.Equal(got, want) {
		t.Fatalf("next round: %v, want %v", got, want)
	}
	if n := len(tokenProcs(t, func(tk wire.Token, _ agent.Proc) bool { return tk.Trainer == "t1" && tk.Node == n1 })); n != 0 {
		t.Fatalf("%d processes of the cancelled t1 run untracked", n)
	}
	ops(t, r.Apply(ctx, nil))
}

// TestOrphanStopped: a launch a node runs that the runner's state does
// not know (its record lost) is stopped as soon as the runner learns of
// it: from a start's answer, or from a check's list.
func TestOrphanStopped(t *testing.T) {
	r, a := testRunner(t)
	n1 := a.N("n1")
	ctx := context.Background()
	l := wire.Launch{Trainer: "lost", Node: n1, Owner: currentUserName(t), Run: "ab", Argv: []string{"/bin/sleep", "300"},
		Workdir: "/", Token: wire.NewToken("lost", n1).String()}
	if _, err := a.Start(ctx, l); err != nil {
		t.Fatal(err)
	}
	got := ops(t, r.Apply(ctx, []Want{execWant(t, "t1", []string{"/bin/sleep", "301"}, n1)}))
	if want := []string{"orphan-stop " + n1, "start " + n1}; !slices.Equal(got, want) {
		t.Fatalf("apply: %v, want %v", got, want)
	}
	if n := len(tokenProcs(t, func(tk wire.Token, _ agent.Proc) bool { return tk.Trainer == "lost" && tk.Node == n1 })); n != 0 {
		t.Fatalf("the orphan runs on: %d processes", n)
	}
	if _, err := a.Start(ctx, l); err != nil {
		t.Fatal(err)
	}
	_, acts := r.Check(ctx)
	if got := ops(t, acts); !slices.Equal(got, []string{"orphan-stop " + n1}) {
		t.Fatalf("check: %v, want the orphan stopped", got)
	}
	ops(t, r.Apply(ctx, nil))
}

// TestNameReusedByAnotherOwner: a Trainer name whose record belongs to
// another owner is a new Trainer: the old record is stopped first, the
// new one gets a run of its own.
func TestNameReusedByAnotherOwner(t *testing.T) {
	r, a := testRunner(t)
	n1 := a.N("n1")
	ctx := context.Background()
	w := execWant(t, "same", []string{"/bin/sleep", "300"}, n1)
	ops(t, r.Apply(ctx, []Want{w}))
	st, _ := r.load()
	first := st.Trainers["same"].Run
	w2 := w
	w2.Owner = "someone-else"
	acts := r.Apply(ctx, []Want{w2})
	if len(acts) < 2 || acts[0].Op != "stop" || acts[0].Err != nil {
		t.Fatalf("reuse: %+v, want the first record stopped first", acts)
	}
	st, _ = r.load()
	if rec := st.Trainers["same"]; rec != nil && rec.Run == first {
		t.Fatalf("the new owner's Trainer kept the first run %s", first)
	}
	r.Apply(ctx, nil)
}

// TestEnded decides a Trainer's end from its launches (NodesEnded, and
// the gone ones forgotten by the check).
func TestEnded(t *testing.T) {
	st := func(state string, c int) wire.Status {
		s := wire.Status{State: state, Entry: wire.Entry{Trainer: "t", Token: "tok"}}
		if state == wire.StateExited {
			s.Exit = &wire.ExitStatus{Code: c}
		}
		return s
	}
	code := func(c int) *int { return &c }
	type lists = map[string]map[string]wire.Status
	tests := []struct {
		name   string
		lists  lists
		before map[string]*int // exits known before
		want   string          // "", finished, failed
		nodes  int             // nodes left in actual
	}{
		{"all running", lists{"n1": {"t": st(wire.StateRunning, 0)}, "n2": {"t": st(wire.StateRunning, 0)}}, nil, "", 2},
		{"all exited 0", lists{"n1": {"t": st(wire.StateExited, 0)}, "n2": {"t": st(wire.StateExited, 0)}}, nil, Finished, 2},
		{"one 0, a surplus failed", lists{"n1": {"t": st(wire.StateExited, 0)}, "n2": {"t": st(wire.StateExited, 1)}}, nil, Finished, 2},
		{"all failed", lists{"n1": {"t": st(wire.StateExited, 1)}, "n2": {"t": st(wire.StateExited, 2)}}, nil, Failed, 2},
		{"gone is a reclaim, not a failure", lists{"n1": {"t": st(wire.StateExited, 1)}, "n2": {"t": st(wire.StateGone, 0)}}, nil, Failed, 1},
		{"one gone, one running", lists{"n1": {"t": st(wire.StateRunning, 0)}, "n2": {"t": st(wire.StateGone, 0)}}, nil, "", 1},
		{"one still running", lists{"n1": {"t": st(wire.StateExited, 0)}, "n2": {"t": st(wire.StateRunning, 0)}}, nil, "", 2},
		{"node unreachable", lists{"n1": {"t": st(wire.StateExited, 0)}}, nil, "", 2},
		{"killed by a reclaim: forgotten", lists{"n1": {"t": st(wire.StateRunning, 0)}, "n2": {}}, nil, "", 1},
		{"earlier exit counts", lists{"n1": {"t": st(wire.StateExited, 0)}}, map[string]*int{"n2": code(0)}, Finished, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &Record{Launcher: Torchrun, Nodes: map[string]*Launched{"n1": {Token: "tok"}, "n2": {Token: "tok", Exit: tt.before["n2"]}}}
			s := &session{r: &Runner{}, st: &runState{Trainers: map[string]*Record{"t": rec}}}
			run := s.run("t", rec, Want{ID: "t"})
			s.checkNodes(run, tt.lists)
			got := ""
			if ex := NodesEnded(run); ex != nil {
				got = ex.Status
			}
			if got != tt.want || len(rec.Nodes) != tt.nodes {
				t.Fatalf("end %q with %d nodes, want %q with %d", got, len(rec.Nodes), tt.want, tt.nodes)
			}
		})
	}
}

// sshRunner is a runner reaching its nodes through a real sshd; the node
// agent on the far side is this test binary.
func sshRunner(tb testing.TB, nodes int) (*Runner, trainertest.Agent, *trainertest.SSHD) {
	tb.Helper()
	r, a := testRunner(tb)
	addrs := map[string]string{}
	for n, addr := range trainertest.Loopback(nodes) {
		addrs[a.N(n)] = addr
	}
	s := trainertest.StartSSHD(tb, addrs)
	r.Nodes = SSH{Config: s.Config, ConnectTimeout: 3 * time.Second, Remote: a.Argv}
	return r, a, s
}

// TestSSHHostileArgs sends hostile words through the real ssh client and
// sshd: as a remote command they come back word for word; as a Trainer's
// argv (JSON on stdin) they reach the program exactly; nothing runs.
func TestSSHHostileArgs(t *testing.T) {
	r, a, _ := sshRunner(t, 1)
	n1 := a.N("n1")
	ctx := context.Background()
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	canary := filepath.Join(dir, "CANARY")
	words := append(slices.Clone(trainertest.Hostile), "touch "+canary, "$(touch "+canary+")", "`touch "+canary+"`", "; touch "+canary)
	cmd, err := r.Nodes.(SSH).Command(ctx, n1, append([]string{"printf", `%s\0`}, words...))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ssh: %v\n%s", err, out)
	}
	if got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00"); !slices.Equal(got, words) {
		t.Fatalf("words came back as %q", got)
	}
	dump := filepath.Join(dir, "argv.json")
	argv := append([]string{"/usr/bin/python3", "-c", "import json, sys; open(sys.argv[1], 'w').write(json.dumps(sys.argv[2:]))", dump}, words...)
	w := execWant(t, "t1", argv, n1)
	ops(t, r.Apply(ctx, []Want{w}))
	waitFor(t, 10*time.Second, "the program's argv", func() bool { return readFile(dump) != "" })
	var got []string
	if err := json.Unmarshal([]byte(readFile(dump)), &got); err != nil || !slices.Equal(got, words) {
		t.Fatalf("the program got %q (%v)", got, err)
	}
	ops(t, r.Apply(ctx, nil))
	if _, err := os.Stat(canary); err == nil {
		t.Fatal("an injected command ran: the canary exists")
	}
	// Names that could break out never reach ssh.
	for _, bad := range []string{n1 + ";touch " + canary, "-oProxyCommand=touch " + canary, "$(touch " + canary + ")"} {
		if _, err := r.Nodes.Agent(ctx, bad, []string{"list", bad}, nil); err == nil {
			t.Fatalf("node %q was accepted", bad)
		}
	}
	if _, err := r.Nodes.Agent(ctx, n1, []string{"stop", n1, "t1;touch " + canary}, nil); err == nil {
		t.Fatal("a trainertest.Hostile Trainer name was accepted by the node agent")
	}
	if _, err := os.Stat(canary); err == nil {
		t.Fatal("an injected command ran: the canary exists")
	}
}

// TestSSHUnreachable: a node whose sshd is down is recorded as failed and
// left out of actual (a start) or kept in it (a stop); the next round
// retries, and succeeds once the node answers.
func TestSSHUnreachable(t *testing.T) {
	r, a, s := sshRunner(t, 2)
	n1, n2 := a.N("n1"), a.N("n2")
	ctx := context.Background()
	w := execWant(t, "t1", []string{"/bin/sleep", "300"}, n1, n2)
	s.Stop()
	acts := r.Apply(ctx, []Want{w})
	var ae *AgentError
	if len(acts) != 1 || !errors.As(acts[0].Err, &ae) || !ae.Unreachable {
		t.Fatalf("start on a dead node: %+v", acts)
	}
	t.Logf("recorded: %v", acts[0].Err)
	if acts := r.Apply(ctx, []Want{w}); len(acts) != 1 || acts[0].Err == nil {
		t.Fatalf("the retry did not happen: %+v", acts)
	}
	s.Start()
	if got, want := ops(t, r.Apply(ctx, []Want{w})), []string{"start " + n1}; !slices.Equal(got, want) {
		t.Fatalf("retry after the node came back: %v, want %v", got, want)
	}
	if got := r.Apply(ctx, []Want{w}); len(got) != 0 {
		t.Fatalf("again: %v", ops(t, got))
	}
	// A stop that cannot reach the node keeps it in actual.
	s.Stop()
	if acts := r.Apply(ctx, nil); len(acts) != 1 || acts[0].Err == nil {
		t.Fatalf("stop on a dead node: %+v", acts)
	}
	if n := len(tokenProcs(t, func(tk wire.Token, _ agent.Proc) bool { return tk.Trainer == "t1" && tk.Node == n1 })); n == 0 {
		t.Fatal("nothing runs any more, yet the stop failed")
	}
	s.Start()
	if got, want := ops(t, r.Apply(ctx, nil)), []string{"stop " + n1}; !slices.Equal(got, want) {
		t.Fatalf("retried stop: %v, want %v", got, want)
	}
	if n := len(tokenProcs(t, func(tk wire.Token, _ agent.Proc) bool { return tk.Trainer == "t1" && tk.Node == n1 })); n != 0 {
		t.Fatalf("%d processes left", n)
	}
}

// TestSSHKillAll: the controller's reclaim over ssh (kill-all with a
// fence) kills everything on the node and refuses the next start.
func TestSSHKillAll(t *testing.T) {
	r, a, _ := sshRunner(t, 2)
	n1, n2 := a.N("n1"), a.N("n2")
	ctx := context.Background()
	ops(t, r.Apply(ctx, []Want{execWant(t, "t1", []string{"/bin/sleep", "300"}, n1), execWant(t, "t2", []string{"/bin/sleep", "301"}, n2)}))
	out, err := r.Nodes.Agent(ctx, n1, []string{"kill-all", "--fence", n1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var rep wire.KillReport
	if err := json.Unmarshal(out, &rep); err != nil || rep.Count() < 1 {
		t.Fatalf("report %s (%v)", out, err)
	}
	if n := len(tokenProcs(t, func(tk wire.Token, _ agent.Proc) bool { return tk.Node == n1 })); n != 0 {
		t.Fatalf("%d processes left on n1", n)
	}
	if n := len(tokenProcs(t, func(tk wire.Token, _ agent.Proc) bool { return tk.Node == n2 })); n == 0 {
		t.Fatal("n2 was killed too")
	}
	// The runner notices: the program on n1 is gone, and the restart is
	// refused while the node is fenced.
	_, acts := r.Check(ctx)
	if got := ops(t, acts); !slices.Equal(got, []string{"gone " + n1}) {
		t.Fatalf("check: %v", got)
	}
	acts = r.Apply(ctx, []Want{execWant(t, "t1", []string{"/bin/sleep", "300"}, n1), execWant(t, "t2", []string{"/bin/sleep", "301"}, n2)})
	if len(acts) != 1 || !strings.Contains(fmt.Sprint(acts[0].Err), agent.ErrFenced.Error()) {
		t.Fatalf("start on a fenced node: %+v", acts)
	}
	ops(t, r.Apply(ctx, nil))
}

// TestRunnerBadSpec: a launch spec that does not validate starts nothing
// and says why.
func TestRunnerBadSpec(t *testing.T) {
	r, _ := testRunner(t)
	tests := []struct {
		name string
		spec string
	}{
		{"no program", `{"argv":[]}`},
		{"NUL", `{"argv":["/bin/echo","a\u0000b"]}`},
		{"not JSON", `{`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := Want{ID: "t1", Owner: currentUserName(t), Launcher: Exec, Spec: json.RawMessage(tt.spec), Min: 1, Max: 1, Nodes: []string{"n1-bad"}}
			acts := r.Apply(context.Background(), []Want{w})
			if len(acts) != 1 || acts[0].Err == nil || !strings.Contains(acts[0].Err.Error(), "launch spec") {
				t.Fatalf("actions %+v", acts)
			}
		})
	}
}
