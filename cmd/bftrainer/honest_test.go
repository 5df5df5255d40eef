package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/store"
)

// exitOf is a command's exit status (-1: it did not run).
func exitOf(err error) int {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	return -1
}

// TestSubmitThatCannotStart reproduces issue 27's root Trainer and its
// kin: a submission whose Trainer could never start is refused at once
// with exit 1 and a hint — its owner root without allow_root_owner, a
// working directory missing here (the nodes are this machine) or that
// its owner may not enter, a launcher whose controller program is not
// found — and nothing is recorded; a usable one is taken.
func TestSubmitThatCannotStart(t *testing.T) {
	if testing.Short() {
		t.Skip("creates a user")
	}
	e := newTrainerEnv(t, "local", 0, "[trainer.launcher.horovod]\ncommand = [\"/nonexistent/horovodrun\"]\n")
	a := mustUser(t, "bftcs")
	e.run(t, "node", "join", "n[1-4]")
	closed := filepath.Join(e.dir, "closed")
	if err := os.Mkdir(closed, 0o700); err != nil { // root's, 0700
		t.Fatal(err)
	}
	for _, c := range []struct {
		name     string
		root     bool
		args     []string
		err      string
		hint     string
		accepted bool
	}{
		{name: "root", root: true, args: []string{"--launcher", "exec", "--workdir", e.work, "--", "/bin/sleep", "1000"},
			err: `owner "root": the node agents refuse to run a Trainer as root`, hint: "submit as the ordinary user"},
		{name: "workdir missing", args: []string{"--launcher", "exec", "--workdir", "/nonexistent/dir", "--", "/bin/sleep", "1000"},
			err: "workdir /nonexistent/dir: ", hint: "--workdir must be a directory " + a.name + " can enter"},
		{name: "workdir closed", args: []string{"--launcher", "exec", "--workdir", closed, "--", "/bin/sleep", "1000"},
			err: "workdir " + closed + ": " + a.name + " may not enter " + closed, hint: "--workdir must be a directory"},
		{name: "launcher program missing", args: []string{"--launcher", "horovod", "--workdir", e.work, "--", "/bin/sleep", "1000"},
			err: `launcher "horovod": exec: "/nonexistent/horovodrun"`, hint: "[trainer.launcher.horovod]"},
		{name: "usable", args: []string{"--launcher", "exec", "--workdir", e.work, "--", "/bin/sleep", "1000"}, accepted: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			id := uniq("cs")
			killLeftovers(t, id)
			args := append([]string{"trainer", "submit", "--name", id, "--min", "1", "--max", "2", "--curve", "1:10,2:20"}, c.args...)
			var out string
			var err error
			if c.root {
				var b []byte
				b, err = e.cmd(e.bin, nil, args...).CombinedOutput()
				out = string(b)
			} else {
				out, err = e.as(a, args...)
			}
			if c.accepted {
				if err != nil {
					t.Fatalf("refused: %v\n%s", err, out)
				}
				e.run(t, "reconcile", "--no-scheduler") // takes it from the spool
				e.run(t, "trainer", "cancel", id)
				return
			}
			if got := exitOf(err); got != 1 {
				t.Fatalf("exit %d, want 1:\n%s", got, out)
			}
			if !strings.Contains(out, "bftrainer: trainer \""+id+"\" can never start: "+c.err) || !strings.Contains(out, "bftrainer: hint: ") || !strings.Contains(out, c.hint) {
				t.Fatalf("stderr:\n%s\nwant %q and a hint with %q", out, c.err, c.hint)
			}
			if list := e.run(t, "trainer", "list", "--all", "--format", "csv"); strings.Contains(list, id) {
				t.Fatalf("refused, yet listed:\n%s", list)
			}
			if _, err := os.Stat(filepath.Join(e.dir, "spool")); err == nil {
				if ents, _ := os.ReadDir(filepath.Join(e.dir, "spool")); len(ents) > 0 {
					t.Fatalf("refused, yet spooled: %v", ents)
				}
			}
		})
	}
}

// TestFailedStartGivesBack reproduces issue 27's Trainer that can never
// start (here its program is missing on the node; submit cannot see
// that): every round logged the failure while status said it ran, held
// its nodes and was credited with samples. Now the round that tries the
// start gives the nodes back, the Trainer shows waiting and is credited
// with nothing; it is tried again after its back-off (2 s, then 4 s here)
// and its 3rd failure in a row ends it failed with the reason, in trainer
// show, trainer list and the history.
func TestFailedStartGivesBack(t *testing.T) {
	e := newTrainerEnv(t, "local", 0, "allow_root_owner = true\n[reconciler]\nstart_retries = 3\nstart_backoff = \"2s\"\n")
	id := uniq("nostart")
	killLeftovers(t, id)
	e.run(t, "node", "join", "n[1-2]")
	e.run(t, "trainer", "submit", "--name", id, "--launcher", "exec", "--min", "1", "--max", "2", "--curve", "1:36,2:72",
		"--workdir", e.work, "--", "/nonexistent/trainer")
	e.run(t, "reconcile", "--no-scheduler")

	// Right after the round that tried it: nothing held, nothing lent.
	if list := e.run(t, "trainer", "list", "--format", "csv"); !regexp.MustCompile(`(?m)^` + id + `,root,waiting,exec,0,1,2,0,modelled,`).MatchString(list) {
		t.Fatalf("after its failed start, list:\n%s\nwant it waiting on 0 nodes, 0 done (modelled)", list)
	}
	st := e.run(t, "status", "--format", "csv")
	for _, want := range []string{"lent,0", "free,2", "trainers_running,0", "trainers_waiting,1", "trainers.0.state,waiting"} {
		if !strings.Contains(st, "\n"+want+"\n") {
			t.Fatalf("status lacks %q:\n%s", want, st)
		}
	}
	db := e.openDB(t)
	ctx := context.Background()
	unstarted := func() []store.Event {
		evs, err := db.Events(ctx, store.Filter{Kinds: []store.Kind{store.KindStartFailed}, Trainer: id})
		if err != nil {
			t.Fatal(err)
		}
		return evs
	}
	if evs := unstarted(); len(evs) != 1 || strings.Join(evs[0].Nodes, " ") != "n1 n2" || !strings.Contains(evs[0].Context, "/nonexistent/trainer") {
		t.Fatalf("unstarted rows: %+v, want one giving back n1 n2 with the reason", evs)
	}

	// Rounds go on until it ends; each failure gives the nodes back.
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(e.run(t, "trainer", "list", "--all", "--format", "csv"), id+",root,failed,") {
		if time.Now().After(deadline) {
			t.Fatalf("not failed after 60 s:\n%s", e.run(t, "trainer", "show", id))
		}
		time.Sleep(500 * time.Millisecond)
		e.run(t, "reconcile", "--no-scheduler")
		if st := e.run(t, "status", "--format", "csv"); !strings.Contains(st, "\nlent,0\n") {
			t.Fatalf("a round left nodes lent to it:\n%s", st)
		}
	}
	evs := unstarted()
	if len(evs) != 3 {
		t.Fatalf("%d unstarted rows, want 3", len(evs))
	}
	for i, min := range []time.Duration{2 * time.Second, 4 * time.Second} {
		if gap := evs[i+1].At.Sub(evs[i].At); gap < min {
			t.Fatalf("failure %d came %v after the one before, within its back-off of %v", i+2, gap, min)
		}
	}
	show := e.run(t, "trainer", "show", id)
	for _, want := range []string{"status:        failed; 3 failed start(s) in a row, last: ", "/nonexistent/trainer",
		"progress:      0 of 0 samples modelled", "node-hours:    0.000"} {
		if !strings.Contains(show, want) {
			t.Fatalf("trainer show lacks %q:\n%s", want, show)
		}
	}
	ends, err := db.Events(ctx, store.Filter{Kinds: []store.Kind{store.KindEnd}, Trainer: id})
	if err != nil {
		t.Fatal(err)
	}
	if len(ends) != 1 || !strings.Contains(string(ends[0].Detail), `"status":"failed"`) || !strings.Contains(string(ends[0].Detail), "its start failed 3 times in a row") ||
		!strings.Contains(string(ends[0].Detail), `"progress":"modelled"`) || ends[0].Value != 0 {
		t.Fatalf("end rows: %+v", ends)
	}
	rep := e.run(t, "report", "--format", "json")
	for _, want := range []string{`"used_node_hours": 0,`, `"utilisation": 0,`, `"samples": 0,`, `"trainers_failed": 1,`} {
		if !strings.Contains(rep, want) {
			t.Fatalf("report lacks %s:\n%s", want, rep)
		}
	}
}

// TestExecProgressModelled reproduces issue 27's exec Trainer (/bin/sleep,
// no progress reports) shown at its curve's rate with samples "done" and
// summed into report's samples processed: its samples are the pool's
// model, labelled modelled in trainer list, trainer show and the
// trainer_progress view, and report keeps them out of samples processed.
func TestExecProgressModelled(t *testing.T) {
	e := newTrainerEnv(t, "local", 0, "allow_root_owner = true\n")
	id := uniq("modelled")
	killLeftovers(t, id)
	e.run(t, "node", "join", "n1")
	e.run(t, "trainer", "submit", "--name", id, "--launcher", "exec", "--min", "1", "--max", "1", "--curve", "1:156",
		"--workdir", e.work, "--", "/bin/sleep", "1000")
	e.run(t, "reconcile", "--no-scheduler")
	re := regexp.MustCompile(`(?m)^` + id + `,root,running,exec,1,1,1,([0-9]+),modelled,`)
	deadline := time.Now().Add(30 * time.Second)
	for {
		m := re.FindStringSubmatch(e.run(t, "trainer", "list", "--format", "csv"))
		if m != nil && m[1] != "0" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no modelled progress shown:\n%s", e.run(t, "trainer", "list", "--format", "csv"))
		}
		time.Sleep(200 * time.Millisecond)
		e.run(t, "reconcile", "--no-scheduler")
	}
	if show := e.run(t, "trainer", "show", id); !strings.Contains(show, "samples modelled from its curve") || !strings.Contains(show, "nothing measured") {
		t.Fatalf("trainer show does not say modelled:\n%s", show)
	}
	rep := e.run(t, "report", "--format", "json")
	if !strings.Contains(rep, `"samples": 0,`) || !strings.Contains(rep, `"modelled_trainers": 1,`) {
		t.Fatalf("report counts modelled samples as processed:\n%s", rep)
	}
	var prog string
	if err := e.openDB(t).SQL().QueryRow(`SELECT progress FROM trainer_progress WHERE id = ?`, id).Scan(&prog); err != nil || prog != "modelled" {
		t.Fatalf("trainer_progress.progress = %q, %v; want modelled", prog, err)
	}
	e.run(t, "trainer", "cancel", id)
	e.run(t, "reconcile", "--no-scheduler")
}
