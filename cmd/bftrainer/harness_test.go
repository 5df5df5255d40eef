package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/sidecar"
	"github.com/bftrainer/bftrainer/store"
	"github.com/bftrainer/bftrainer/trainer/agent"
	"github.com/bftrainer/bftrainer/trainer/trainertest"
	"github.com/bftrainer/bftrainer/trainer/wire"
)

// trainerEnv is a configuration whose runner starts real processes:
// over a real sshd to loopback "nodes" (ssh) or locally.
type trainerEnv struct {
	testEnv
	bin  string
	sshd *trainertest.SSHD
	work string // world-readable scratch space (checkpoints, logs)
}

// newTrainerEnv writes the configuration, extra appended to its
// [trainer] section (@SSH_CONFIG@ there is the test sshd's client
// configuration; a [trainer.launcher.torchrun] table in it sets
// store_ports = "@STORE_PORTS@" itself). Its cgroups live below a subtree
// of the test's own. The directories are opened to
// all (0755): throwaway users run the CLI in the security tests, and
// Trainer processes run as their owners.
func newTrainerEnv(tb testing.TB, transport string, nodes int, extra string) trainerEnv {
	tb.Helper()
	if transport == "ssh" {
		trainertest.NeedSSHD(tb)
	}
	bin := MustBuild(tb)
	if err := os.Chmod(filepath.Dir(bin), 0o755); err != nil {
		tb.Fatal(err)
	}
	var sshd *trainertest.SSHD
	sshConf := ""
	if transport == "ssh" {
		sshd = trainertest.StartSSHD(tb, trainertest.Loopback(nodes))
		sshConf = fmt.Sprintf("ssh_config = %q\nconnect_timeout = \"3s\"\n", sshd.Config)
	}
	dir := tb.TempDir()
	openUp(tb, dir)
	e := testEnv{dir: dir, config: filepath.Join(dir, "bftrainer.toml"), db: filepath.Join(dir, "db", "bftrainer.db")}
	work := filepath.Join(dir, "work")
	if err := os.MkdirAll(work, 0o777); err != nil {
		tb.Fatal(err)
	}
	os.Chmod(work, os.ModeSticky|0o777)
	spool := filepath.Join(dir, "spool")
	if err := os.Mkdir(spool, 0o755); err != nil {
		tb.Fatal(err)
	}
	os.Chmod(spool, sidecar.SpoolMode) // as `make install` sets it: sticky, nobody lists it
	ports := 29400 + rand.IntN(25)*20
	if sshd != nil {
		extra = strings.ReplaceAll(extra, "@SSH_CONFIG@", sshd.Config)
	}
	storePorts := fmt.Sprintf("%d-%d", ports, ports+20)
	if strings.Contains(extra, "[trainer.launcher.torchrun]") {
		extra = strings.ReplaceAll(extra, "@STORE_PORTS@", storePorts)
	} else {
		extra += fmt.Sprintf("\n[trainer.launcher.torchrun]\nstore_ports = %q\n", storePorts)
	}
	conf := fmt.Sprintf(`database = %q
spool = %q
[hooks]
log = %q
spawn_reconciler = "never"
[scheduler]
sinfo = ""
squeue = ""
[trainer]
transport = %q
%sremote_bftrainer = %q
remote_config = %q
registry = %q
log_dir = %q
state_dir = %q
controller = "127.0.0.1"
command_timeout = "30s"
cgroup_root = %q
%s
`, e.db, spool, filepath.Join(dir, "hooks.log"), transport, sshConf, bin, e.config,
		filepath.Join(dir, "registry"), filepath.Join(dir, "logs"), filepath.Join(dir, "runner"), trainertest.TestCgroupRoot(tb), extra)
	if err := os.WriteFile(e.config, []byte(conf), 0o644); err != nil {
		tb.Fatal(err)
	}
	te := trainerEnv{testEnv: e, bin: bin, sshd: sshd, work: work}
	tb.Cleanup(func() {
		if tb.Failed() {
			te.dump(tb)
		}
	})
	return te
}

// dump logs what a failed test needs: the history's actions and errors,
// the runner's state, the Trainer processes' output.
func (e trainerEnv) dump(tb testing.TB) {
	if out, err := e.cmd(e.bin, nil, "history", "--kind", "action,error,kill,exit,end", "--format", "csv").CombinedOutput(); err == nil {
		tb.Logf("history:\n%s", out)
	}
	if b, err := os.ReadFile(filepath.Join(e.dir, "runner", "runner.json")); err == nil {
		tb.Logf("runner state:\n%s", b)
	}
	logs, _ := filepath.Glob(filepath.Join(e.dir, "logs", "*", "*.log"))
	deeper, _ := filepath.Glob(filepath.Join(e.dir, "logs", "*", "*", "*.log"))
	logs = append(logs, deeper...)
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		if len(b) > 3000 {
			b = b[len(b)-3000:]
		}
		tb.Logf("%s:\n%s", l, b)
	}
}

var openUp = trainertest.OpenUp

// run runs the CLI as root and fails the test on an error.
func (e trainerEnv) run(tb testing.TB, args ...string) string {
	tb.Helper()
	out, err := e.cmd(e.bin, nil, args...).CombinedOutput()
	if err != nil {
		tb.Fatalf("bftrainer %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// hook runs the binary the way slurmd runs a Prolog or Epilog: no
// arguments, the scheduler's environment, and returns how long it took.
func (e trainerEnv) hook(tb testing.TB, context_, node, job string) time.Duration {
	tb.Helper()
	c := e.cmd(e.bin, []string{"SLURM_SCRIPT_CONTEXT=" + context_, "SLURMD_NODENAME=" + node, "SLURM_JOB_ID=" + job,
		"SLURM_NODELIST=" + node})
	start := time.Now()
	out, err := c.CombinedOutput()
	took := time.Since(start)
	if err != nil || len(out) > 0 {
		tb.Fatalf("hook %s on %s: %v %s", context_, node, err, out)
	}
	if b, _ := os.ReadFile(filepath.Join(e.dir, "hooks.log")); len(b) > 0 {
		tb.Fatalf("the hook logged errors:\n%s", b)
	}
	return took
}

// waitFinished runs reconciler rounds, one a second, until the Trainer
// (root's) is finished, at most timeout.
func (e trainerEnv) waitFinished(tb testing.TB, id string, timeout time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(e.run(tb, "trainer", "list", "--all", "--format", "csv"), id+",root,finished,") {
		if time.Now().After(deadline) {
			tb.Fatalf("the Trainer did not finish; list:\n%s", e.run(tb, "trainer", "list", "--all"))
		}
		time.Sleep(time.Second)
		e.run(tb, "reconcile", "--no-scheduler")
	}
}

// openDB opens the test database, closed when the test ends.
func (e testEnv) openDB(tb testing.TB) *store.DB {
	tb.Helper()
	db, err := store.Open(context.Background(), e.db, store.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

var tokenProcs = trainertest.Procs

// killLeftovers kills whatever a failed test left behind, by token.
func killLeftovers(tb testing.TB, trainerID string) {
	tb.Helper()
	tb.Cleanup(func() {
		for _, p := range tokenProcs(tb, func(t wire.Token, _ agent.Proc) bool { return t.Trainer == trainerID }) {
			syscallKill(p.PID)
		}
	})
}

// uniq is a Trainer name no other test on this machine uses: kills find
// processes by their Trainer's name.
func uniq(prefix string) string { return prefix + "-" + wire.NewRun()[:8] }

// readSteps parses train.py's progress log.
func readSteps(tb testing.TB, path string) []trainertest.Step {
	tb.Helper()
	steps, err := trainertest.ReadSteps(path)
	if err != nil {
		tb.Fatal(err)
	}
	return steps
}
