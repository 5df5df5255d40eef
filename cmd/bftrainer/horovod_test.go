package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/store"
	"github.com/bftrainer/bftrainer/trainer"
	"github.com/bftrainer/bftrainer/trainer/agent"
	"github.com/bftrainer/bftrainer/trainer/trainertest"
	"github.com/bftrainer/bftrainer/trainer/wire"
)

// workerLines reads the fake workers' log: "host pid run-token" per start.
func workerLines(path string) map[string][]int {
	b, _ := os.ReadFile(path)
	out := map[string][]int{}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) == 3 {
			pid, _ := strconv.Atoi(f[1])
			out[f[0]] = append(out[f[0]], pid)
		}
	}
	return out
}

func alive(pid int) bool {
	p, err := agent.ProcStatus(pid)
	return err == nil && !strings.HasPrefix(p["State"], "Z")
}

// TestHorovodTrainer drives an Elastic Horovod Trainer through the real
// binary, the reconciler and the runner over a real sshd, with a stand-in
// for horovodrun (contrib/horovod/horovodrun-standin: real Horovod is not
// packaged here) that polls `bftrainer hosts` once a second as Horovod
// does, validates its output with Horovod's parser, starts workers on new
// hosts over ssh with its environment — and, like Horovod, never kills the
// workers of a host that leaves. It checks that our reclaim (the node's
// prolog) and our removal (the controller's plan) kill them.
func TestHorovodTrainer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a Horovod stand-in over ssh")
	}
	root := trainertest.RepoRoot(t)
	e := newTrainerEnv(t, "ssh", 3, fmt.Sprintf("allow_root_owner = true\n[trainer.launcher.horovod]\ncommand = [\"/usr/bin/python3\", %q, \"--ssh-config\", \"@SSH_CONFIG@\"]\n"+
		// A bound on the handshake, not a pause: on a loaded machine two
		// rounds of the stand-in's discovery (a second apart, each a
		// python and a bftrainer process) may take longer than the default.
		"discovery_wait = \"60s\"\n",
		filepath.Join(root, "contrib/horovod/horovodrun-standin")))
	hv := uniq("hv")
	killLeftovers(t, hv)
	workers := filepath.Join(e.work, "workers.log")
	waitWorkers := func(host string, n int) int {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			if pids := workerLines(workers)[host]; len(pids) >= n {
				return pids[n-1]
			}
			if time.Now().After(deadline) {
				t.Fatalf("no worker %d on %s within 30 s; workers: %v", n, host, workerLines(workers))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	e.run(t, "node", "join", "n1", "n2")
	e.run(t, "trainer", "submit", "--name", hv, "--launcher", "horovod", "--min", "1", "--max", "3",
		"--curve", "1:10,2:20,3:30", "--rescale-up", "1", "--rescale-down", "1", "--workdir", e.work, "--",
		"/bin/sh", "-c", `echo "$HOROVOD_HOSTNAME $$ $BFTRAINER_RUN" >> `+workers+`; exec sleep 600`)
	w1, w2 := waitWorkers("n1", 1), waitWorkers("n2", 1)
	if got := e.run(t, "hosts", hv); got != "n1:1\nn2:1\n" {
		t.Fatalf("bftrainer hosts: %q", got)
	}
	// The workers carry the driver's run token, and Horovod's host name.
	for _, p := range tokenProcs(t, func(tk wire.Token, p agent.Proc) bool { return tk.Trainer == hv && p.Host != "" }) {
		if tk, _ := p.Token(); tk.Node != wire.ControllerNode {
			t.Fatalf("worker %d carries token %s", p.PID, p.Run)
		}
	}

	// Grow: the runner only rewrites the host file; Horovod starts the
	// worker by itself.
	e.run(t, "node", "join", "n3")
	w3 := waitWorkers("n3", 1)

	// Reclaim n2 on the node: its worker is gone when the prolog returns.
	e.hook(t, "prolog_slurmd", "n2", "201")
	if alive(w2) {
		t.Fatalf("the worker on n2 (pid %d) survived the reclaim", w2)
	}
	e.run(t, "node", "leave", "--job", "201", "n2")

	// Remove n3 by the plan alone (the scheduler takes it; its prolog has
	// not run): the host file drops it, the runner waits until the
	// stand-in's discovery has acted on the file without n3 — it printed
	// it twice: the second run of the discovery loop comes after the
	// first one's result was applied (the handshake: Horovod takes the
	// host for removed, not failed) — and kills the worker, which Horovod
	// never does.
	e.run(t, "node", "leave", "--job", "202", "n3")
	if alive(w3) {
		t.Fatalf("the worker on n3 (pid %d) survived the removal", w3)
	}
	driverLog := filepath.Join(e.dir, "logs", hv, "*", wire.ControllerNode+".log")
	if got := readGlob(driverLog); !strings.Contains(got, "host n3 removed") {
		t.Fatalf("the runner killed n3's worker before horovodrun's discovery saw n3 leave:\n%s", got)
	}
	if !alive(w1) {
		t.Fatalf("the worker on n1 (pid %d) died", w1)
	}
	if got := e.run(t, "hosts", hv); got != "n1:1\n" {
		t.Fatalf("bftrainer hosts after the removals: %q", got)
	}

	// The end: cancel stops the driver and every worker.
	e.run(t, "trainer", "cancel", hv)
	if procs := tokenProcs(t, func(tk wire.Token, _ agent.Proc) bool { return tk.Trainer == hv }); len(procs) > 0 {
		t.Fatalf("processes of the cancelled Trainer survive: %+v", procs)
	}
	if _, err := os.Stat(trainer.HostFile(filepath.Join(e.dir, "runner"), hv)); !os.IsNotExist(err) {
		t.Fatalf("host file left: %v", err)
	}
	db := e.openDB(t)
	evs, err := db.Events(context.Background(), store.Filter{Trainer: hv, Kinds: []store.Kind{store.KindAction}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ev := range evs {
		if ev.Error != "" {
			t.Errorf("action %s %v: %s", ev.Context, ev.Nodes, ev.Error)
		}
		got = append(got, strings.TrimSpace(ev.Context+" "+strings.Join(ev.Nodes, " ")))
	}
	t.Logf("history: %v", got)
	for _, want := range []string{"hosts", "add n1", "add n2", "driver-start", "add n3", "stop n3", "driver-stop", "stop n1"} {
		if !slices.Contains(got, want) {
			t.Errorf("history lacks %q", want)
		}
	}
	// The worker on n3 was ours to kill, and we did: the stop's report
	// names its pid.
	killedW3 := false
	for _, ev := range evs {
		killedW3 = killedW3 || (ev.Context == "stop" && slices.Equal(ev.Nodes, []string{"n3"}) && strings.Contains(string(ev.Detail), fmt.Sprintf("pid %d ", w3)))
	}
	if !killedW3 {
		t.Errorf("no stop of n3 reports killing its worker %d", w3)
	}
	t.Logf("stand-in log:\n%s", readGlob(driverLog))
}

// readGlob returns the content of the files matching pattern.
func readGlob(pattern string) string {
	files, _ := filepath.Glob(pattern)
	var b strings.Builder
	for _, f := range files {
		b.WriteString(readString(f))
	}
	return b.String()
}

func readString(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}
