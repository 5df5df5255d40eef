package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/store"
	"github.com/bftrainer/bftrainer/trainer/agent"
	"github.com/bftrainer/bftrainer/trainer/trainertest"
	"github.com/bftrainer/bftrainer/trainer/wire"
)

// unixUser is a throwaway account.
type unixUser struct {
	name     string
	uid, gid uint32
}

// mustUser creates a system user for the test (trainertest.MustUser).
func mustUser(tb testing.TB, prefix string) unixUser {
	tb.Helper()
	u := trainertest.MustUser(tb, prefix)
	return unixUser{name: u.Name, uid: uint32(u.UID), gid: uint32(u.GID)}
}

// as runs the CLI as u (the kernel's uid, as a login would give).
func (e trainerEnv) as(u unixUser, args ...string) (string, error) {
	c := e.cmd(e.bin, []string{"HOME=/", "PATH=/usr/bin:/bin"}, args...)
	c.Dir = "/"
	c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.uid, Gid: u.gid}}
	out, err := c.CombinedOutput()
	return string(out), err
}

// runAs runs any program as u.
func runAs(u unixUser, name string, args ...string) error {
	c := exec.Command(name, args...)
	c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.uid, Gid: u.gid}}
	c.Dir = "/"
	return c.Run()
}

// TestSecurity: who may do what, proven with two real users, and shell
// injection tried through every door — the hook environment, the CLI, the
// spool and the ssh path — with a canary file any injected command would
// create.
func TestSecurity(t *testing.T) {
	if testing.Short() {
		t.Skip("creates users and runs a Trainer over ssh")
	}
	a, b := mustUser(t, "bfta"), mustUser(t, "bftb")
	e := newTrainerEnv(t, "ssh", 2, "") // allow_root_owner stays false
	killLeftovers(t, "ta")
	canary := filepath.Join(e.work, "CANARY")
	inject := []string{
		"; touch " + canary, "$(touch " + canary + ")", "`touch " + canary + "`", "a\ntouch " + canary,
		"'; touch " + canary + "; '", `"; touch ` + canary + `; "`, "-oProxyCommand=touch " + canary, "with space",
		"&& touch " + canary, "| touch " + canary, "${IFS}touch${IFS}" + canary,
	}
	e.run(t, "node", "join", "n1", "n2")

	// The database: root's, readable by all, writable by nobody else.
	fi, err := os.Stat(e.db)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 || fi.Mode().Perm() != 0o644 {
		t.Fatalf("database owned by %d with mode %v, want root's, 0644", st.Uid, fi.Mode().Perm())
	}

	// A submits through the spool; A's program reports its uid and argv.
	wa := filepath.Join(e.work, "a")
	if err := os.Mkdir(wa, 0o700); err != nil {
		t.Fatal(err)
	}
	os.Chown(wa, int(a.uid), int(a.gid))
	dump := filepath.Join(wa, "argv.json")
	// A's secret, passed with --env: its processes get it; nobody else
	// reads it (the database holds the name only, the value is sealed in
	// the runner's root-only state).
	secret := "s3cr3t-" + wire.NewRun()
	prog := `import json, os, sys
open(sys.argv[1], "w").write(json.dumps([os.getuid(), os.getgid(), os.environ.get("A_TOKEN")] + sys.argv[2:]))
os.execv("/bin/sleep", ["sleep", "600"])`
	out, err := e.as(a, append([]string{"trainer", "submit", "--name", "ta", "--launcher", "exec", "--min", "1", "--max", "1",
		"--curve", "1:10", "--workdir", wa, "--env", "HOSTILE=$(touch " + canary + ")", "--env", "A_TOKEN=" + secret, "--", "/usr/bin/python3", "-c", prog, dump}, inject...)...)
	if err != nil || !strings.Contains(out, "spooled") {
		t.Fatalf("A's submission: %v\n%s", err, out)
	}
	rec := e.run(t, "reconcile", "--no-scheduler")
	if got := e.run(t, "trainer", "list", "--format", "csv"); !strings.Contains(got, "ta,"+a.name+",running,exec,1,") {
		t.Fatalf("A's Trainer is not A's and running:\n%s\nreconcile: %s", got, rec)
	}
	deadline := time.Now().Add(15 * time.Second)
	for readString(dump) == "" {
		if time.Now().After(deadline) {
			e.dump(t)
			t.Fatal("A's program did not start")
		}
		time.Sleep(50 * time.Millisecond)
	}
	var got []any
	if err := json.Unmarshal([]byte(readString(dump)), &got); err != nil {
		t.Fatal(err)
	}
	want := []any{float64(a.uid), float64(a.gid), secret}
	for _, s := range inject {
		want = append(want, s)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("A's program got %q, want %q", got, want)
	}
	// Every process of the Trainer but the root supervisor runs as A.
	procs := tokenProcs(t, func(tk wire.Token, _ agent.Proc) bool { return tk.Trainer == "ta" })
	if len(procs) < 2 {
		t.Fatalf("Trainer processes: %+v", procs)
	}
	for _, p := range procs {
		st, err := agent.ProcStatus(p.PID)
		if err != nil {
			continue
		}
		uids := strings.Fields(st["Uid"])
		if p.PID == p.PGID && p.Comm == "bftrainer" {
			continue // the supervisor: root, runs nothing of A's
		}
		for _, u := range uids {
			if u != fmt.Sprint(a.uid) {
				t.Fatalf("process %d (%s) of A's Trainer runs with Uid %q", p.PID, p.Comm, st["Uid"])
			}
		}
	}

	// B lists all, but may not write the database.
	if out, err := e.as(b, "trainer", "list", "--format", "csv"); err != nil || !strings.Contains(out, "ta,"+a.name+",running") {
		t.Fatalf("B cannot list: %v\n%s", err, out)
	}
	if out, err := e.as(b, "node", "join", "n9"); err == nil || !strings.Contains(out, "permission denied") {
		t.Fatalf("B wrote the database: %v\n%s", err, out)
	}
	if err := runAs(b, "/usr/bin/test", "-w", e.db); err == nil {
		t.Fatal("B may open the database for writing")
	}
	for _, f := range []string{e.db + "-wal", e.db + "-shm"} {
		if err := runAs(b, "/usr/bin/test", "-w", f); err == nil {
			t.Fatalf("B may write %s", f)
		}
	}

	// A's --env value: in none of the database's files (nor its names'
	// value's place), not shown to B by any command, not readable by B
	// in the runner's state; A's program got it (above).
	for _, f := range []string{e.db, e.db + "-wal"} {
		if b, err := os.ReadFile(f); err != nil || strings.Contains(string(b), secret) {
			t.Fatalf("%s holds A's --env value (%v)", f, err)
		}
	}
	if out, err := e.as(b, "trainer", "show", "ta"); err != nil || strings.Contains(out, secret) || !strings.Contains(out, "A_TOKEN") {
		t.Fatalf("B's trainer show ta: %v (want A's env names, never a value)\n%s", err, out)
	}
	for _, args := range [][]string{{"history", "--format", "json"}, {"status"}, {"trainer", "list", "--all", "--format", "json"}} {
		if out, err := e.as(b, args...); err != nil || strings.Contains(out, secret) {
			t.Fatalf("B's %s: %v\n%s", args, err, out)
		}
	}
	for _, q := range []string{"SELECT spec FROM trainers", "SELECT coalesce(detail, '') FROM events"} {
		c := exec.Command("sqlite3", "-readonly", e.db, q)
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: b.uid, Gid: b.gid}}
		if out, err := c.CombinedOutput(); errors.Is(err, exec.ErrNotFound) {
			t.Logf("no sqlite3 to query the database as B")
		} else if err != nil || strings.Contains(string(out), secret) || !strings.Contains(string(out), `"A_TOKEN":""`) {
			t.Fatalf("B's %s: %v\n%s", q, err, out)
		}
	}
	envFiles, _ := filepath.Glob(filepath.Join(e.dir, "runner", "env", "*"))
	if len(envFiles) != 1 {
		t.Fatalf("sealed environments: %v, want A's one", envFiles)
	}
	for _, f := range []string{envFiles[0], filepath.Dir(envFiles[0])} {
		fi, err := os.Stat(f)
		if err != nil || fi.Sys().(*syscall.Stat_t).Uid != 0 || fi.Mode().Perm()&0o077 != 0 {
			t.Fatalf("%s: %v, %v: want root's alone", f, fi.Mode(), err)
		}
	}
	if err := runAs(b, "/bin/cat", envFiles[0]); err == nil {
		t.Fatal("B read A's sealed environment")
	}

	// B cannot cancel A's Trainer, end it, or finish it by a progress
	// report: the CLI refuses at once (exit 1), having read the owner in
	// the database, and requests B drops in the spool by hand are recorded
	// as rejected.
	for _, args := range [][]string{{"trainer", "cancel", "ta"}, {"progress", "ta", "--samples", "1e12"}} {
		out, err := e.as(b, args...)
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(out, "permission denied: "+b.name+" may not ") ||
			!strings.Contains(out, "ta, which belongs to "+a.name) || strings.Contains(out, "spooled") {
			t.Fatalf("B's %s: %v\n%s\nwant exit 1, refused at once", args[0], err, out)
		}
	}
	// A database B cannot read: the CLI says it could not check, spools
	// the request, and leaves the decision to the reconciler.
	if err := os.Chmod(e.db, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = e.as(b, "trainer", "cancel", "ta")
	os.Chmod(e.db, 0o644)
	if err != nil || !strings.Contains(out, "could not check that the Trainer is yours") || !strings.Contains(out, "spooled") {
		t.Fatalf("B's cancel with the database unreadable: %v\n%s\nwant it spooled, unchecked, and said so", err, out)
	}
	spool := &specSpool{dir: filepath.Join(e.dir, "spool"), as: b}
	spool.put(t, `{"kind":"exit","trainer":"ta","detail":{"status":"finished"},"at":"2026-01-01T00:00:00Z"}`)
	spool.put(t, `{"kind":"progress","trainer":"ta","value":1e12,"at":"2026-01-01T00:00:00Z"}`)
	// B cannot submit as A: the request's author is the file's owner; a
	// claim inside is an unknown field.
	spool.put(t, `{"kind":"submit","trainer":"tb","user":"`+a.name+`","detail":{}}`)
	spool.put(t, `{"kind":"cancel","trainer":"ta; touch `+canary+`"}`)
	// A symlink to a file A owns, and a hard link to it.
	aFile := filepath.Join(wa, "req.json")
	os.WriteFile(aFile, []byte(`{"kind":"cancel","trainer":"ta"}`), 0o644)
	os.Chown(aFile, int(a.uid), int(a.gid))
	os.Chmod(wa, 0o755)
	runAs(b, "/bin/ln", "-s", aFile, filepath.Join(e.dir, "spool", "zz-symlink.req"))
	runAs(b, "/bin/ln", aFile, filepath.Join(e.dir, "spool", "zz-hardlink.req")) // refused by fs.protected_hardlinks, or by us
	if out, err := e.as(b, "trainer", "submit", "--name", "tb", "--launcher", "exec", "--curve", "1:10", "--", "/bin/true"); err != nil {
		t.Fatalf("B's own submission: %v\n%s", err, out)
	}
	e.run(t, "reconcile", "--no-scheduler")
	list := e.run(t, "trainer", "list", "--all", "--format", "csv")
	if !strings.Contains(list, "ta,"+a.name+",running") {
		t.Fatalf("B's requests ended A's Trainer:\n%s", list)
	}
	if !strings.Contains(list, "tb,"+b.name+",") {
		t.Fatalf("B's own Trainer is not B's:\n%s", list)
	}
	db := e.openDB(t)
	errs, err := db.Events(context.Background(), store.Filter{Kinds: []store.Kind{store.KindError}})
	if err != nil {
		t.Fatal(err)
	}
	var msgs []string
	for _, ev := range errs {
		msgs = append(msgs, ev.Error)
	}
	all := strings.Join(msgs, "\n")
	t.Logf("rejections recorded:\n%s", all)
	for _, want := range []string{
		b.name + " may not cancel " + a.name + "'s trainer",
		b.name + " may not end " + a.name + "'s trainer",
		b.name + " may not report for " + a.name + "'s trainer",
		`unknown field "user"`,
		`trainer name "ta; touch`,
		"too many levels of symbolic links",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("no rejection recorded containing %q; errors:\n%s", want, all)
		}
	}

	// Injection through the CLI: refused, and nothing ran.
	for _, args := range [][]string{
		{"node", "join", "n1;touch " + canary},
		{"node", "join", "$(touch " + canary + ")"},
		{"node", "leave", "--job", "1;touch " + canary, "n1"},
		{"trainer", "submit", "--name", "$(touch " + canary + ")", "--curve", "1:1", "--", "/bin/true"},
		{"trainer", "submit", "--name", "-x", "--curve", "1:1", "--", "/bin/true"},
		{"trainer", "submit", "--name", "a b", "--curve", "1:1", "--", "/bin/true"},
		{"trainer", "submit", "--name", "ok", "--env", "A;touch " + canary + "=1", "--curve", "1:1", "--", "/bin/true"},
		{"trainer", "cancel", "ta;touch " + canary},
		{"hosts", "../../etc/passwd"},
		{"progress", "`touch " + canary + "`", "--samples", "1"},
	} {
		if out, err := e.cmd(e.bin, nil, args...).CombinedOutput(); err == nil {
			t.Errorf("bftrainer %q was accepted:\n%s", args, out)
		}
	}
	// Injection through the hook environment: the hook still exits 0
	// (fail open), logs the refusal, and runs nothing.
	for _, env := range [][]string{
		{"SLURM_SCRIPT_CONTEXT=prolog_slurmd", "SLURM_JOB_ID=7", "SLURMD_NODENAME=n1;touch " + canary},
		{"SLURM_SCRIPT_CONTEXT=prolog_slurmd", "SLURM_JOB_ID=7", "SLURMD_NODENAME=$(touch " + canary + ")"},
		{"SLURM_SCRIPT_CONTEXT=prolog_slurmctld", "SLURM_JOB_ID=7", "SLURM_JOB_NODELIST=n[1-2];touch " + canary},
		{"SLURM_SCRIPT_CONTEXT=prolog_slurmctld", "SLURM_JOB_ID=$(touch " + canary + ")", "SLURM_JOB_NODELIST=n1"},
		{"SLURM_SCRIPT_CONTEXT=epilog_slurmctld", "SLURM_JOB_ID=8", "SLURM_JOB_NODELIST=`touch " + canary + "`"},
	} {
		if out, err := e.cmd(e.bin, env).CombinedOutput(); err != nil || len(out) > 0 {
			t.Errorf("hook %q: %v %s", env, err, out)
		}
	}
	if log := readString(filepath.Join(e.dir, "hooks.log")); strings.Count(log, "invalid") < 3 {
		t.Errorf("the hooks did not log the refusals:\n%s", log)
	} else {
		t.Logf("hooks.log:\n%s", log)
	}
	if ents, _ := os.ReadDir(filepath.Join(e.dir, "registry")); slices.ContainsFunc(ents, func(d os.DirEntry) bool { return strings.ContainsAny(d.Name(), ";$`") }) {
		t.Error("a hostile node name reached the registry")
	}
	// A's Trainer survived all that; A (its owner) may cancel it.
	if got := e.run(t, "trainer", "list", "--format", "csv"); !strings.Contains(got, "ta,"+a.name+",running") {
		t.Fatalf("A's Trainer did not survive:\n%s", got)
	}
	if out, err := e.as(a, "trainer", "cancel", "ta"); err != nil {
		t.Fatalf("A's cancel: %v %s", err, out)
	}
	e.run(t, "reconcile", "--no-scheduler")
	if got := e.run(t, "trainer", "list", "--all", "--format", "csv"); !strings.Contains(got, "ta,"+a.name+",cancelled") {
		t.Fatalf("A could not cancel A's Trainer:\n%s", got)
	}
	if procs := tokenProcs(t, func(tk wire.Token, _ agent.Proc) bool { return tk.Trainer == "ta" }); len(procs) > 0 {
		t.Fatalf("A's cancelled Trainer still runs: %+v", procs)
	}
	if _, err := os.Stat(canary); err == nil {
		t.Fatal("an injected command ran: the canary exists")
	}
}

// specSpool writes hand-made request files into the spool as a user.
type specSpool struct {
	dir string
	as  unixUser
	n   int
}

func (s *specSpool) put(tb testing.TB, body string) {
	tb.Helper()
	s.n++
	f := filepath.Join(s.dir, fmt.Sprintf("%d-hand-%d.req", time.Now().UnixNano(), s.n))
	// Written by the user's own process: the kernel makes it the owner.
	c := exec.Command("/bin/sh", "-c", `cat > "$1"`, "sh", f)
	c.Stdin = strings.NewReader(body)
	c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: s.as.uid, Gid: s.as.gid}}
	if out, err := c.CombinedOutput(); err != nil {
		tb.Fatalf("write %s as %s: %v %s", f, s.as.name, err, out)
	}
}
