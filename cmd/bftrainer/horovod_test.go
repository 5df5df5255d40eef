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
	"github.com/bftrainer/bftrainer/trainer/trainertest"
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
	p, err := trainer.ProcStatus(pid)
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
	e := newTrainerEnv(t, "ssh", 3, fmt.Sprintf("horovodrun = [\"/usr/bin/python3\", %q, \"--ssh-config\", \"@SSH_CONFIG@\"]\nallow_root_owner = true\n",
		filepath.Join(root, "contrib/horovod/horovodrun-standin")))
	killLeftovers(t, "hv")
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
	e.run(t, "trainer", "submit", "--name", "hv", "--launcher", "horovod", "--min", "1", "--max", "3",
		"--curve", "1:10,2:20,3:30", "--rescale-up", "1", "--rescale-down", "1", "--workdir", e.work, "--",
		"/bin/sh", "-c", `echo "$HOROVOD_HOSTNAME $$ $BFTRAINER_RUN" >> `+workers+`; exec sleep 600`)
	w1, w2 := waitWorkers("n1", 1), waitWorkers("n2", 1)
	if got := e.run(t, "hosts", "hv"); got != "n1:1\nn2:1\n" {
		t.Fatalf("bftrainer hosts: %q", got)
	}
	// The workers carry the driver's run token, and Horovod's host name.
	for _, p := range tokenProcs(t, func(tk trainer.Token, p trainer.Proc) bool { return tk.Trainer == "hv" && p.Host != "" }) {
		if tk, _ := p.Token(); tk.Node != trainer.ControllerNode {
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
	// not run): the host file drops it, the stand-in logs that it keeps
	// the worker, and the runner kills it.
	e.run(t, "node", "leave", "--job", "202", "n3")
	if alive(w3) {
		t.Fatalf("the worker on n3 (pid %d) survived the removal", w3)
	}
	if !alive(w1) {
		t.Fatalf("the worker on n1 (pid %d) died", w1)
	}
	if got := e.run(t, "hosts", "hv"); got != "n1:1\n" {
		t.Fatalf("bftrainer hosts after the removals: %q", got)
	}
	driverLog := filepath.Join(e.dir, "logs", "hv", trainer.ControllerNode+".log")
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(readString(driverLog), "host n3 removed: its 1 worker(s) keep running") {
		if time.Now().After(deadline) {
			t.Fatalf("the stand-in did not see n3 removed with its worker running:\n%s", readString(driverLog))
		}
		time.Sleep(100 * time.Millisecond)
	}

	// The end: cancel stops the driver and every worker.
	e.run(t, "trainer", "cancel", "hv")
	if procs := tokenProcs(t, func(tk trainer.Token, _ trainer.Proc) bool { return tk.Trainer == "hv" }); len(procs) > 0 {
		t.Fatalf("processes of the cancelled Trainer survive: %+v", procs)
	}
	if _, err := os.Stat(trainer.HostFile(filepath.Join(e.dir, "runner"), "hv")); !os.IsNotExist(err) {
		t.Fatalf("host file left: %v", err)
	}
	db := e.openDB(t)
	evs, err := db.Events(context.Background(), store.Filter{Trainer: "hv", Kinds: []string{store.KindAction}})
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
	t.Logf("stand-in log:\n%s", readString(driverLog))
}

func readString(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}
