package main

import (
	"strings"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/trainer/agent"
	"github.com/bftrainer/bftrainer/trainer/wire"
)

// TestSamplesTargetStops: a Trainer whose progress report reaches its
// samples target ends in the pool, and the next round stops its
// processes (local transport; the program is a plain sleep).
func TestSamplesTargetStops(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	if !isRoot() {
		t.Skip("needs root: the runner starts programs as their owner")
	}
	e := newTrainerEnv(t, "local", 0, "allow_root_owner = true\n")
	ts := uniq("ts")
	killLeftovers(t, ts)
	e.run(t, "node", "join", "n1")
	e.run(t, "trainer", "submit", "--name", ts, "--launcher", "exec", "--samples", "1000", "--curve", "1:1",
		"--workdir", e.work, "--", "/bin/sleep", "600")
	running := func() int {
		return len(tokenProcs(t, func(tk wire.Token, _ agent.Proc) bool { return tk.Trainer == ts }))
	}
	deadline := time.Now().Add(10 * time.Second)
	for running() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the program did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.run(t, "progress", ts, "--samples", "999")
	e.run(t, "reconcile", "--no-scheduler")
	if running() == 0 {
		t.Fatal("stopped before its target")
	}
	e.run(t, "progress", ts, "--samples", "1000")
	e.run(t, "reconcile", "--no-scheduler")
	if got := e.run(t, "trainer", "list", "--all", "--format", "csv"); !strings.Contains(got, ts+",root,finished,exec,0,") {
		t.Fatalf("not finished:\n%s", got)
	}
	if n := running(); n != 0 {
		t.Fatalf("%d processes of the finished Trainer still run", n)
	}
	if h := e.run(t, "history", "--trainer", ts, "--kind", "action", "--format", "csv"); !strings.Contains(h, ",action,trainer,stop,,"+ts+",,n1,") {
		t.Fatalf("the stop is not in the history:\n%s", h)
	}
}
