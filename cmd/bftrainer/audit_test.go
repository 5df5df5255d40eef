package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/accounting"
	"github.com/bftrainer/bftrainer/store"
)

// TestAudit runs `bftrainer audit` on a real history written by real hook
// calls: nodes joined, a main job's controller prolog took two of them and
// its epilog gave them back. Against an accounting that agrees (the job
// started just after its leave), it finds nothing and exits 0; against
// one whose job started before the leave, or a job the hooks never saw, it
// prints each violation and exits 1.
func TestAudit(t *testing.T) {
	bin := MustBuild(t)
	e := newTestEnv(t, "")
	// The hooks start no reconciler of their own: the one round below
	// records what they wrote (a spawned one could still hold the lock
	// when it runs).
	conf, err := os.ReadFile(e.config)
	if err != nil {
		t.Fatal(err)
	}
	conf = []byte(strings.Replace(string(conf), "[hooks]\n", "[hooks]\nspawn_reconciler = \"never\"\n", 1))
	if err := os.WriteFile(e.config, conf, 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(env []string, args ...string) (string, error) {
		out, err := e.cmd(bin, env, args...).CombinedOutput()
		return string(out), err
	}
	mustRun := func(env []string, args ...string) string {
		t.Helper()
		out, err := run(env, args...)
		if err != nil {
			t.Fatalf("bftrainer %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	mustRun(nil, "node", "join", "a[1-3]")
	slurm := []string{"SLURM_JOB_ID=7", "SLURM_JOBID=7", "SLURM_JOB_NODELIST=a[1-2]", "SLURM_JOB_USER=root", "SLURM_JOB_UID=0"}
	mustRun(append(slurm, "SLURM_SCRIPT_CONTEXT=prolog_slurmctld"))
	mustRun(append(slurm, "SLURM_SCRIPT_CONTEXT=epilog_slurmctld"))
	mustRun(nil, "reconcile", "--no-scheduler")

	db, err := store.Open(context.Background(), e.db, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	leaves, err := db.Events(context.Background(), store.Filter{Kinds: []store.Kind{store.KindLeave, store.KindRelease}, Job: "7"})
	if err != nil || len(leaves) != 2 {
		t.Fatalf("the hooks' leave and release: %v %+v", err, leaves)
	}
	left, released := leaves[0].At.UTC(), leaves[1].At.UTC()
	// The nodes had been in the pool for half an hour (the join above
	// came a moment before the hooks): an earlier join, as a day's
	// history has.
	if _, err := db.Append(context.Background(), store.Event{At: left.Add(-30 * time.Minute), Kind: store.KindJoin, Source: "cli", Nodes: []string{"a1", "a2", "a3"}}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	sacct := func(name string, start, end time.Time, extra ...string) string {
		p := filepath.Join(e.dir, name)
		lines := []string{"JobID|Start|End|NodeList|State",
			fmt.Sprintf("7|%s|%s|a[1-2]|COMPLETED", start.Format("2006-01-02T15:04:05"), end.Format("2006-01-02T15:04:05"))}
		if err := os.WriteFile(p, []byte(strings.Join(append(lines, extra...), "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	since := left.Add(-time.Hour).Format(time.RFC3339)
	until := released.Add(time.Hour).Format(time.RFC3339)

	// Agreeing: the job started with its leave, ended with its release,
	// in sacct's whole seconds.
	good := sacct("good.sacct", left.Truncate(time.Second), released.Truncate(time.Second))
	out := mustRun(nil, "audit", "--accounting", good, "--since", since, "--until", until)
	if !strings.Contains(out, "bftrainer: audit ") || !strings.Contains(out, "1 main job(s), 1 on 2 pool node(s), 1 leave(s) checked; 0 violation(s)") {
		t.Errorf("a clean audit printed:\n%s", out)
	}
	if strings.Contains(out, "KIND") {
		t.Errorf("a clean audit printed a table:\n%s", out)
	}

	// The job started 10 s before the leave was recorded, and the
	// accounting lists a job on a3, a pool node no hook took.
	bad := sacct("bad.sacct", left.Add(-10*time.Second), released,
		fmt.Sprintf("8|%s|%s|a3|COMPLETED", left.Format("2006-01-02T15:04:05"), left.Add(time.Minute).Format("2006-01-02T15:04:05")))
	out, err = run(nil, "audit", "--accounting", bad, "--since", since, "--until", until, "--format", "csv")
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("an audit with violations: %v, want exit status 1\n%s", err, out)
	}
	for _, want := range []string{",late-leave,7,a1,", ",late-leave,7,a2,", ",late-leave,8,a3,", "3 violation(s)",
		"bftrainer: the history and the scheduler's accounting disagree"} {
		if !strings.Contains(out, want) {
			t.Errorf("the audit's output lacks %q:\n%s", want, out)
		}
	}

	// A saved qacct -j listing (Grid Engine) is read as well, told apart
	// by its first line: job 7's master task on a1 and a task on a2.
	qacct := func(name string, start, end time.Time) string {
		p := filepath.Join(e.dir, name)
		var b strings.Builder
		for _, host := range []string{"a2", "a1"} {
			fmt.Fprintf(&b, "==============================================================\nqname        all.q\nhostname     %s\njobnumber    7\ntaskid       undefined\nstart_time   %s\nend_time     %s\n",
				host, start.Format(accounting.QacctTimeLayout), end.Format(accounting.QacctTimeLayout))
		}
		if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	out = mustRun(nil, "audit", "--accounting", qacct("good.qacct", left.Truncate(time.Second), released.Truncate(time.Second)), "--since", since, "--until", until)
	if !strings.Contains(out, "1 main job(s), 1 on 2 pool node(s), 1 leave(s) checked; 0 violation(s)") {
		t.Errorf("a clean audit of a qacct listing printed:\n%s", out)
	}
	out, err = run(nil, "audit", "--accounting", qacct("bad.qacct", left.Add(-10*time.Second), released), "--since", since, "--until", until, "--format", "csv")
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(out, ",late-leave,7,a1,") || !strings.Contains(out, ",late-leave,7,a2,") {
		t.Errorf("a qacct listing whose job started before the leave: %v, want exit 1 and two late leaves:\n%s", err, out)
	}

	// JSON for scripts; bad usage is exit 2.
	out = mustRun(nil, "audit", "--accounting", good, "--since", since, "--until", until, "--format", "json")
	if !strings.Contains(out, `"violations": []`) || !strings.Contains(out, `"tolerance_s": 2`) {
		t.Errorf("json:\n%s", out)
	}
	if _, err := run(nil, "audit", "--tolerance", "-1s"); err == nil || err.(*exec.ExitError).ExitCode() != 2 {
		t.Errorf("a negative tolerance: %v, want exit 2", err)
	}
}
