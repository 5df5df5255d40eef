package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/trainer/agent"
	"github.com/bftrainer/bftrainer/trainer/trainertest"
	"github.com/bftrainer/bftrainer/trainer/wire"
)

// TestReconcilerKilledDuringStart: a reconciler is killed -9 while an
// ssh start is on its way (the node already runs the Trainer; the answer
// never arrives), and the Trainer's cancel is spooled meanwhile. The next
// round finds the launch, stops it, and no Trainer runs untracked.
func TestReconcilerKilledDuringStart(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a Trainer over ssh and kills a reconciler")
	}
	a := mustUser(t, "bftka")
	// The ssh the runner uses: the real one, then — while the flag file
	// exists — a long pause after a start, as a slow network would make.
	dir := t.TempDir()
	openUp(t, dir)
	flag, started := filepath.Join(dir, "slow"), filepath.Join(dir, "started")
	wrapper := filepath.Join(dir, "ssh")
	script := fmt.Sprintf(`#!/bin/sh
/usr/bin/ssh "$@"
rc=$?
case "$*" in *"node-agent start"*) if [ -e %[1]s ]; then touch %[2]s; sleep 60; fi ;; esac
exit $rc
`, flag, started)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	e := newTrainerEnv(t, "ssh", 1, fmt.Sprintf("ssh = %q\n", wrapper))
	id := uniq("crash")
	killLeftovers(t, id)
	ours := func() []agent.Proc {
		return tokenProcs(t, func(tk wire.Token, _ agent.Proc) bool { return tk.Trainer == id })
	}
	e.run(t, "node", "join", "n1")
	if out, err := e.as(a, "trainer", "submit", "--name", id, "--launcher", "exec", "--min", "1", "--max", "1",
		"--curve", "1:10", "--workdir", "/", "--", "/bin/sleep", "600"); err != nil {
		t.Fatalf("submit: %v\n%s", err, out)
	}
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	rec := e.cmd(e.bin, nil, "reconcile", "--no-scheduler")
	rec.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := rec.Start(); err != nil {
		t.Fatal(err)
	}
	trainertest.WaitFor(t, 30*time.Second, "the start to reach the node", func() bool {
		_, err := os.Stat(started)
		return err == nil
	})
	if len(ours()) == 0 {
		t.Fatal("the node does not run the Trainer, yet its start returned")
	}
	syscall.Kill(-rec.Process.Pid, syscall.SIGKILL) // the reconciler and its ssh
	rec.Wait()
	os.Remove(flag)

	if out, err := e.as(a, "trainer", "cancel", id); err != nil {
		t.Fatalf("cancel: %v\n%s", err, out)
	}
	e.run(t, "reconcile", "--no-scheduler")
	if left := ours(); len(left) > 0 {
		t.Fatalf("the cancelled Trainer runs untracked after the next round: %+v", left)
	}
	if got := e.run(t, "trainer", "list", "--all", "--format", "csv"); !strings.Contains(got, id+","+a.name+",cancelled") {
		t.Fatalf("not cancelled:\n%s", got)
	}
	h := e.run(t, "history", "--trainer", id, "--kind", "action", "--format", "csv")
	for _, want := range []string{",adopt,", ",stop,"} {
		if !strings.Contains(h, want) {
			t.Errorf("the history lacks %q:\n%s", want, h)
		}
	}
}

// TestNameReuseAcrossUsers: A's Trainer ends; B submits the same name. B
// gets a new record and a new log directory: A's record keeps its owner,
// A's log is never B's to read.
func TestNameReuseAcrossUsers(t *testing.T) {
	if testing.Short() {
		t.Skip("creates users and runs Trainers")
	}
	a, b := mustUser(t, "bftna"), mustUser(t, "bftnb")
	e := newTrainerEnv(t, "local", 0, "")
	id := uniq("same")
	killLeftovers(t, id)
	e.run(t, "node", "join", "n1")
	submit := func(u unixUser, prog string) {
		t.Helper()
		if out, err := e.as(u, "trainer", "submit", "--name", id, "--launcher", "exec", "--min", "1", "--max", "1",
			"--curve", "1:10", "--workdir", "/", "--", "/bin/sh", "-c", prog); err != nil {
			t.Fatalf("submit as %s: %v\n%s", u.name, err, out)
		}
		e.run(t, "reconcile", "--no-scheduler")
	}
	logs := func() []string {
		l, _ := filepath.Glob(filepath.Join(e.dir, "logs", id, "*", "n1.log"))
		return l
	}
	submit(a, "echo API_KEY=secret-of-a; exec sleep 600")
	trainertest.WaitFor(t, 10*time.Second, "A's log", func() bool { return len(logs()) == 1 && strings.Contains(readString(logs()[0]), "secret-of-a") })
	aLog := logs()[0]
	if out, err := e.as(a, "trainer", "cancel", id); err != nil {
		t.Fatalf("cancel: %v\n%s", err, out)
	}
	e.run(t, "reconcile", "--no-scheduler")

	submit(b, "cat "+aLog+" 2>&1; exec sleep 600")
	var bLog string
	trainertest.WaitFor(t, 10*time.Second, "B's log", func() bool {
		for _, l := range logs() {
			if l != aLog && strings.Contains(readString(l), "Permission denied") {
				bLog = l
				return true
			}
		}
		return false
	})
	if strings.Contains(readString(bLog), "secret-of-a") {
		t.Fatalf("B read A's log:\n%s", readString(bLog))
	}
	fi, err := os.Stat(aLog)
	if err != nil {
		t.Fatal(err)
	}
	if uid := fi.Sys().(*syscall.Stat_t).Uid; uid != a.uid {
		t.Fatalf("A's log now belongs to uid %d", uid)
	}
	list := e.run(t, "trainer", "list", "--all", "--format", "csv")
	if !strings.Contains(list, id+","+b.name+",running") || !strings.Contains(list, id+"~") || !strings.Contains(list, ","+a.name+",cancelled") {
		t.Fatalf("want B's new record and A's old one, A's:\n%s", list)
	}
	if out, err := e.as(b, "trainer", "cancel", id); err != nil {
		t.Fatalf("cancel: %v\n%s", err, out)
	}
	e.run(t, "reconcile", "--no-scheduler")
}
