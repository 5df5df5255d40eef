package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/bftrainer/bftrainer/trainer/trainertest"
)

// benchRescale measures what a rescale of a real torchrun Trainer costs,
// and how long the node-local reclaim takes, through the real bftrainer
// binary: node join/leave, trainer submit, the reconciler, the runner
// (local transport: every "node" is this machine) and the Slurm prolog
// hook. Debian's torch 1.13 on CPU with gloo runs
// contrib/trainer/train.py. It prints:
//
//	rescale launcher=torchrun direction=<up|down|reclaim> seconds_lost=<x>
//	reclaim nodes=<n> ms=<x>
//
// seconds_lost is the time from the action (the command that records the
// change, or the prolog) until training steps resume at the new size, read
// from train.py's progress log; up is a node joining, down the plan taking
// a node away (the runner kills its agent's process group), reclaim the
// node's own prolog killing it. ms is the wall time of the prolog hooks
// of one job, run at once on n nodes, from their start until the last
// returns with the Trainer's processes confirmed gone. Needs root.
func benchRescale(args []string) error {
	fs := flag.NewFlagSet("rescale", flag.ContinueOnError)
	bin := fs.String("bftrainer", "", "the bftrainer binary (default: beside bftrainer-bench, else bin/bftrainer)")
	contrib := fs.String("contrib", "contrib/trainer", "directory with train.py and fast_torchrun.py")
	shim := fs.Bool("shim", false, "use fast_torchrun.py (1 s × 5 rendezvous keep-alive) instead of stock torchrun")
	rounds := fs.Int("n", 1, "repeat the scenario this many times")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	// make bench runs every command: a machine without root or torch
	// skips this one and says why, as the slurm command does.
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "bftrainer-bench: rescale: skipped: needs root (the runner starts Trainer processes as their owner)")
		return nil
	}
	if err := trainertest.HaveTorch(); err != nil {
		fmt.Fprintf(os.Stderr, "bftrainer-bench: rescale: skipped: %v\n", err)
		return nil
	}
	b, err := rescaleBinary(*bin)
	if err != nil {
		return err
	}
	dir, err := filepath.Abs(*contrib)
	if err != nil {
		return err
	}
	for i := 0; i < *rounds; i++ {
		if err := rescaleOnce(b, dir, *shim); err != nil {
			return err
		}
	}
	return nil
}

func rescaleBinary(flagged string) (string, error) {
	cands := []string{flagged}
	if flagged == "" {
		if self, err := os.Executable(); err == nil {
			cands = []string{filepath.Join(filepath.Dir(self), "bftrainer")}
		}
		cands = append(cands, "bin/bftrainer")
	}
	for _, c := range cands {
		if fi, err := os.Stat(c); err == nil && fi.Mode().IsRegular() {
			return filepath.Abs(c)
		}
	}
	return "", fmt.Errorf("rescale: no bftrainer binary (%s); run make build or give -bftrainer", strings.Join(cands, ", "))
}

// rescaleRun is one scenario's directory and configuration.
type rescaleRun struct {
	bin, dir, config, log string
}

func (r rescaleRun) cli(args ...string) error {
	c := exec.Command(r.bin, args...)
	c.Env = []string{"BFTRAINER_CONFIG=" + r.config, "PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	out, err := c.CombinedOutput()
	if err != nil {
		return fmt.Errorf("bftrainer %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// hook runs the node's Slurm prolog as slurmd does: no arguments, the
// scheduler's environment.
func (r rescaleRun) hook(context_, node, job string) error {
	c := exec.Command(r.bin)
	c.Env = []string{"BFTRAINER_CONFIG=" + r.config, "SLURM_SCRIPT_CONTEXT=" + context_, "SLURMD_NODENAME=" + node,
		"SLURM_JOB_ID=" + job, "SLURM_NODELIST=" + node}
	out, err := c.CombinedOutput()
	if err != nil || len(out) > 0 {
		return fmt.Errorf("hook %s on %s: %v %s", context_, node, err, out)
	}
	if b, _ := os.ReadFile(filepath.Join(r.dir, "hooks.log")); len(b) > 0 {
		return fmt.Errorf("hook %s on %s logged: %s", context_, node, b)
	}
	return nil
}

// resumed waits for train.py to step at the given world size after t0,
// on n distinct steps, and returns when the first such step was logged.
func (r rescaleRun) resumed(t0 time.Time, world int) (time.Time, error) {
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		var first time.Time
		steps := map[int]int{}
		all, _ := trainertest.ReadSteps(r.log) // not there yet, or a line cut short: look again
		for _, s := range all {
			if s.Done || s.At.Before(t0) || s.World != world {
				continue
			}
			if first.IsZero() {
				first = s.At
			}
			steps[s.Step]++
		}
		full := 0
		for _, n := range steps {
			if n == world {
				full++
			}
		}
		if full >= 2 {
			return first, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Time{}, fmt.Errorf("no steps at world %d within 90 s (see %s)", world, r.log)
}

// rescaleOnce runs the scenario: 1 node, up to 2, up to 3, down to 2,
// reclaim to 1, up to 3 again, reclaim all 3 at once.
func rescaleOnce(bin, contrib string, shim bool) (err error) {
	dir, err := os.MkdirTemp("", "bftrainer-rescale")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	torchrun := `["/usr/bin/python3", "-m", "torch.distributed.run"]`
	if shim {
		torchrun = fmt.Sprintf(`["/usr/bin/python3", %q]`, filepath.Join(contrib, "fast_torchrun.py"))
	}
	r := rescaleRun{bin: bin, dir: dir, config: filepath.Join(dir, "bftrainer.toml"), log: filepath.Join(dir, "progress.log")}
	cgroups, removeCgroups := benchCgroups("rescale")
	defer removeCgroups()
	conf := fmt.Sprintf(`database = %q
spool = %q
[hooks]
log = %q
spawn_reconciler = "never"
[scheduler]
sinfo = ""
[trainer]
transport = "local"
registry = %q
log_dir = %q
state_dir = %q
controller = "127.0.0.1"
cgroup_root = %q
allow_root_owner = true
[trainer.launcher.torchrun]
store_ports = "29700-29799"
command = %s
`, filepath.Join(dir, "db", "bftrainer.db"), filepath.Join(dir, "spool"), filepath.Join(dir, "hooks.log"),
		filepath.Join(dir, "registry"), filepath.Join(dir, "logs"), filepath.Join(dir, "runner"), cgroups, torchrun)
	if err := os.WriteFile(r.config, []byte(conf), 0o644); err != nil {
		return err
	}
	defer func() {
		// Whatever happened, nothing of the Trainer outlives the bench.
		if cerr := r.cli("trainer", "cancel", "bench"); cerr != nil && err == nil {
			err = cerr
		}
	}()
	say := func(format string, a ...any) { fmt.Fprintf(os.Stderr, "bftrainer-bench: rescale: "+format+"\n", a...) }
	step := func(direction string, world int, action func() error) error {
		t0 := time.Now()
		if err := action(); err != nil {
			return err
		}
		at, err := r.resumed(t0, world)
		if err != nil {
			return err
		}
		if direction != "" {
			fmt.Printf("rescale launcher=torchrun direction=%s seconds_lost=%.1f\n", direction, at.Sub(t0).Seconds())
		}
		say("world %d %.1f s after the action", world, at.Sub(t0).Seconds())
		return nil
	}
	start := func() error {
		if err := r.cli("node", "join", "n1"); err != nil {
			return err
		}
		return r.cli("trainer", "submit", "--name", "bench", "--min", "1", "--max", "3", "--curve", "1:100,2:200,3:300",
			"--rescale-up", "1", "--rescale-down", "1", "--workdir", dir, "--env", "PYTHONDONTWRITEBYTECODE=1", "--",
			"/usr/bin/python3", filepath.Join(contrib, "train.py"), "--steps", "100000",
			"--ckpt-dir", filepath.Join(dir, "ckpt"), "--log", r.log, "--sleep", "0.2", "--pg-timeout", "10")
	}
	reclaim := func(job string, nodes ...string) func() error {
		return func() error {
			var wg sync.WaitGroup
			errs := make([]error, len(nodes))
			t0 := time.Now()
			for i, n := range nodes {
				wg.Add(1)
				go func() { defer wg.Done(); errs[i] = r.hook("prolog_slurmd", n, job) }()
			}
			wg.Wait()
			took := time.Since(t0)
			if err := errors.Join(errs...); err != nil {
				return err
			}
			fmt.Printf("reclaim nodes=%d ms=%.1f\n", len(nodes), float64(took.Microseconds())/1000)
			return r.cli(append([]string{"node", "leave", "--job", job}, nodes...)...)
		}
	}
	for _, s := range []struct {
		direction string
		world     int
		action    func() error
	}{
		{"", 1, start},
		{"up", 2, func() error { return r.cli("node", "join", "n2") }},
		{"up", 3, func() error { return r.cli("node", "join", "n3") }},
		{"down", 2, func() error { return r.cli("node", "leave", "--job", "1", "n3") }},
		{"reclaim", 1, reclaim("2", "n2")},
		{"up", 3, func() error { return r.cli("node", "join", "n4", "n5") }},
	} {
		if err := step(s.direction, s.world, s.action); err != nil {
			return err
		}
	}
	return reclaim("3", "n1", "n4", "n5")()
}
