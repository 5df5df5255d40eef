package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bftrainer/bftrainer/internal/lab/slurm"
	"github.com/bftrainer/bftrainer/trainer/trainertest"
	"github.com/bftrainer/bftrainer/trainer/wire"
	"golang.org/x/sys/unix"
)

// gpuCommand reclaims a node from a Trainer that holds a GPU: an exec
// Trainer, started by the real node agent, allocates -gib GiB on the GPU
// (a CUDA context and its memory, through torch); the node's real Slurm
// prolog kills it; the command measures what a main job starting there
// would see. Once per containment mode:
//
//	gpu-reclaim containment=<cgroup|degraded> owner=<user|root> gib=8 idle_mib=… held_mib=… hook_ms=… kill_ms=… gone_ms=… mem_idle_ms=… smi_ms=… holders=<pid:file,…> survived=0
//
// idle_mib is the GPU's memory in use before the Trainer started, held_mib
// what the Trainer added; hook_ms the prolog's exec to exit; kill_ms the
// agent's kill as its report says; gone_ms from the prolog's exec until
// the Trainer's process had exited (a pidfd, not a poll of /proc);
// mem_idle_ms from the prolog's exec until the GPU's memory in use was
// back within -tolerance-mib of idle_mib (read with -smi, each reading
// taking about smi_ms: the resolution); holders the processes and device
// files the kill report names (trainer.device_glob, /dev/nvidia* by
// default). A cgroup mode on a node without cgroup v2 prints
// "gpu-reclaim containment=cgroup skipped=…". The command fails, after
// its line, when the Trainer survived, its process was not among the
// holders, its memory did not show or did not come back.
//
// -holder and -smi replace the CUDA program and nvidia-smi with stand-ins
// (a program holding a file, a command reading something): the tests
// rehearse the command so on a machine without a GPU.
type gpuCommand struct {
	stdout, stderr io.Writer
}

// gpuHolder is the Trainer: it takes the memory, writes its pid and
// "ready" to its directory, and sleeps until killed.
const gpuHolder = `import os, sys, time
d, gib = sys.argv[1], float(sys.argv[2])
import torch
x = torch.empty(int(gib * (1 << 30)), dtype=torch.uint8, device="cuda")
x.fill_(7)  # touched: the memory is really the process's
torch.cuda.synchronize()
with open(os.path.join(d, "pids"), "w") as f:
    f.write(f"{os.getpid()}\n")
open(os.path.join(d, "ready"), "w").close()
while True:
    time.sleep(3600)
`

func (c *gpuCommand) Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("gpu", flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	bin := fs.String("bftrainer", "", "bftrainer binary (default: beside bftrainer-bench, else bin/bftrainer)")
	exe := fs.String("python-exe", "/usr/bin/python3", "the interpreter with torch (CUDA) that runs the Trainer")
	gib := fs.Float64("gib", 8, "GiB the Trainer allocates on the GPU")
	modes := fs.String("modes", "cgroup,degraded", "containment modes to measure")
	smi := fs.String("smi", "nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits", "command printing the GPU memory in use, MiB (the first GPU's on the first line)")
	holder := fs.String("holder", "", "stand-in Trainer, a /bin/sh script (ESC_DIR: where it writes pids and ready); default: the CUDA program")
	glob := fs.String("device-glob", "", "trainer.device_glob (default: the configuration's, /dev/nvidia*)")
	wait := fs.Duration("idle-wait", 30*time.Second, "how long to wait for the memory to be back to idle")
	tol := fs.Float64("tolerance-mib", 64, "memory within this of idle counts as idle, MiB")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(c.stderr, "bftrainer-bench: gpu: skipped: needs root (the node agent starts Trainers as their owner)")
		return nil
	}
	b, err := rescaleBinary(*bin)
	if err != nil {
		return err
	}
	g := gpuRun{exe: *exe, gib: *gib, smi: strings.Fields(*smi), holder: *holder, glob: *glob, wait: *wait, tol: *tol}
	if len(g.smi) == 0 {
		return fmt.Errorf("gpu: -smi is empty")
	}
	var failed []error
	for _, mode := range strings.Split(*modes, ",") {
		line, err := g.mode(ctx, b, mode)
		if line != "" {
			fmt.Fprintln(c.stdout, line)
		}
		if err != nil {
			failed = append(failed, fmt.Errorf("gpu %s: %w", mode, err))
		}
	}
	return errors.Join(failed...)
}

// gpuRun is what every mode shares.
type gpuRun struct {
	exe    string
	gib    float64
	smi    []string
	holder string
	glob   string
	wait   time.Duration
	tol    float64
}

// memUsed reads the GPU memory in use, MiB.
func (g gpuRun) memUsed(ctx context.Context) (float64, error) {
	out, err := exec.CommandContext(ctx, g.smi[0], g.smi[1:]...).Output()
	if err != nil {
		return 0, fmt.Errorf("%s: %w", strings.Join(g.smi, " "), err)
	}
	first, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	v, err := strconv.ParseFloat(strings.TrimSpace(first), 64)
	if err != nil {
		return 0, fmt.Errorf("%s printed %q: %w", strings.Join(g.smi, " "), out, err)
	}
	return v, nil
}

// openToOthers reports whether every device file matching glob can be
// read and written by any user: else the Trainer runs as root, the
// throwaway user could not open the GPU.
func openToOthers(glob string) bool {
	files, _ := filepath.Glob(glob)
	for _, f := range files {
		fi, err := os.Stat(f)
		if err == nil && fi.IsDir() {
			continue // /dev/nvidia-caps: no device to open
		}
		if err != nil || fi.Mode().Perm()&0o006 != 0o006 {
			return false
		}
	}
	return true
}

// mode measures one reclaim with one containment mode; the line is what
// it measured, the error what failed.
func (g gpuRun) mode(ctx context.Context, bin, mode string) (string, error) {
	glob := g.glob
	extra := ""
	if glob != "" {
		extra += fmt.Sprintf("device_glob = %q\n", glob)
	} else {
		glob = "/dev/nvidia*"
	}
	// Root may own a Trainer here: the fallback below, where the
	// throwaway user cannot use the GPU.
	extra += "allow_root_owner = true\n"
	e, err := newReclaimEnv(bin, mode, extra)
	if err != nil {
		return "", err
	}
	defer e.remove()
	got := e.containment()
	if mode == "cgroup" && got != wire.Cgroup {
		return fmt.Sprintf("gpu-reclaim containment=cgroup skipped=%q", "this node is "+got), nil
	}
	label := strings.SplitN(got, " ", 2)[0]
	idle, err := g.memUsed(ctx)
	if err != nil {
		return "", err
	}
	owner, uid := "root", 0
	var dir string
	if openToOthers(glob) {
		u, err := slurm.NewUser("bftg")
		if err != nil {
			return "", err
		}
		defer u.Remove()
		dir, err = g.launch(ctx, e, "bench-gpu", u.Name, u.UID, u.GID)
		if err == nil {
			owner, uid = "user", u.UID
		} else if g.holder != "" || !strings.Contains(err.Error(), "the Trainer failed") {
			return "", err
		} else {
			fmt.Fprintf(os.Stderr, "bftrainer-bench: gpu %s: as the throwaway user %s: %v; again as root\n", mode, u.Name, err)
		}
	}
	if owner == "root" {
		if dir, err = g.launch(ctx, e, "bench-gpu-root", "root", 0, 0); err != nil {
			return "", err
		}
	}
	pids := trainertest.EscapePIDs(dir)
	if len(pids) == 0 {
		return "", errors.New("the Trainer wrote no pid")
	}
	held, err := g.memUsed(ctx)
	if err != nil {
		return "", err
	}

	// From the prolog's exec: when the Trainer's process exits, and when
	// the memory is back.
	pidfd, err := unix.PidfdOpen(pids[0], 0)
	if err != nil {
		return "", fmt.Errorf("pidfd of the Trainer %d: %w", pids[0], err)
	}
	defer unix.Close(pidfd)
	begin := time.Now()
	gone := make(chan time.Duration, 1)
	go func() {
		fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
		deadline := begin.Add(g.wait)
		for time.Now().Before(deadline) {
			if n, _ := unix.Poll(fds, int(time.Until(deadline).Milliseconds())+1); n > 0 {
				gone <- time.Since(begin)
				return
			}
		}
		gone <- -1
	}()
	type back struct {
		after, reading time.Duration
		last           float64
		err            error
	}
	idleAgain := make(chan back, 1)
	go func() {
		var readings []time.Duration
		last := held
		for time.Since(begin) < g.wait {
			t0 := time.Now()
			v, err := g.memUsed(ctx)
			if err != nil {
				idleAgain <- back{err: err}
				return
			}
			readings = append(readings, time.Since(t0))
			last = v
			if v <= idle+g.tol {
				idleAgain <- back{after: time.Since(begin), reading: medianDur(readings), last: v}
				return
			}
		}
		idleAgain <- back{after: -1, reading: medianDur(readings), last: last}
	}()
	hookMs, rep, hookErr := e.hook(ctx, "prolog_slurmd")
	goneAfter, mem := <-gone, <-idleAgain
	survived := len(trainertest.Alive(pids))
	if owner == "user" {
		survived += len(trainertest.UIDProcs(uid))
	}
	e.hook(ctx, "epilog_slurmd") // lifts the fence; the node is tidy for the next mode

	var hs []string
	holderFound := false
	for _, h := range rep.Holders {
		hs = append(hs, fmt.Sprintf("%d:%s", h.PID, strings.Join(h.Files, "+")))
		holderFound = holderFound || h.PID == pids[0]
	}
	line := fmt.Sprintf("gpu-reclaim containment=%s owner=%s gib=%g idle_mib=%.0f held_mib=%.0f hook_ms=%.1f kill_ms=%.1f gone_ms=%s mem_idle_ms=%s smi_ms=%.1f holders=%s survived=%d",
		label, owner, g.gib, idle, held-idle, hookMs, rep.Ms, msOrNever(goneAfter), msOrNever(mem.after), ms(mem.reading), orNone(strings.Join(hs, ",")), survived)
	var failed []error
	if hookErr != nil {
		failed = append(failed, hookErr)
	}
	if mem.err != nil {
		failed = append(failed, mem.err)
	}
	if survived > 0 {
		failed = append(failed, fmt.Errorf("%d processes of the Trainer survived the prolog", survived))
	}
	if !holderFound {
		failed = append(failed, fmt.Errorf("the kill report names no holder %d of %s (holders %v)", pids[0], glob, rep.Holders))
	}
	if want := g.gib * 1024 * 0.9; held-idle < want {
		failed = append(failed, fmt.Errorf("the Trainer's memory did not show: %.0f MiB in use against %.0f idle, want %.0f more", held, idle, want))
	}
	if goneAfter < 0 {
		failed = append(failed, fmt.Errorf("the Trainer's process had not exited %v after the prolog's exec", g.wait))
	}
	if mem.err == nil && mem.after < 0 {
		failed = append(failed, fmt.Errorf("the GPU's memory was not back to idle %v after the prolog's exec: %.0f MiB in use, %.0f idle", g.wait, mem.last, idle))
	}
	return line, errors.Join(failed...)
}

// launch starts the Trainer as owner and waits until it holds the GPU;
// it returns the Trainer's directory (its pid is there).
func (g gpuRun) launch(ctx context.Context, e *reclaimEnv, trainer, owner string, uid, gid int) (string, error) {
	dir, err := os.MkdirTemp(e.dir, "gpu")
	if err != nil {
		return "", err
	}
	os.Chmod(dir, 0o755)
	if err := os.Chown(dir, uid, gid); err != nil {
		return "", err
	}
	// A holder that fails (no CUDA for this user, no memory) says so at
	// once, instead of leaving the wait for ready to run out.
	argv := []string{"/bin/sh", "-c", `"$@" || echo "exit $?" > "$ESC_DIR/failed"`, "holder",
		g.exe, "-c", gpuHolder, dir, strconv.FormatFloat(g.gib, 'f', -1, 64)}
	if g.holder != "" {
		argv = []string{"/bin/sh", "-c", g.holder}
	}
	l := wire.Launch{Trainer: trainer, Node: e.node, Owner: owner, Run: wire.NewRun(), Argv: argv,
		Env: map[string]string{"ESC_DIR": dir}, Workdir: "/", Token: wire.NewToken(trainer, e.node).String()}
	if _, err := e.agent().Start(ctx, l); err != nil {
		return "", fmt.Errorf("start: %w", err)
	}
	if err := waitReady(ctx, dir, 60*time.Second); err != nil {
		return "", fmt.Errorf("%w; the Trainer's output: %s", err, e.trainerLog())
	}
	return dir, nil
}

// waitReady waits for the Trainer's ready file; a cancelled ctx (the
// device check's time limit) ends the wait, and the caller's cleanup runs.
func waitReady(ctx context.Context, dir string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if _, err := os.Stat(filepath.Join(dir, "ready")); err == nil {
			return nil
		}
		if b, err := os.ReadFile(filepath.Join(dir, "failed")); err == nil {
			return fmt.Errorf("the Trainer failed (%s)", strings.TrimSpace(string(b)))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the Trainer did not say ready within %v", timeout)
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("waiting for the Trainer: %w", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// trainerLog is the end of the Trainer's output, for an error.
func (e *reclaimEnv) trainerLog() string {
	logs, _ := filepath.Glob(filepath.Join(e.dir, "logs", "*", "*", "*.log"))
	var out []string
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		if len(b) > 2000 {
			b = b[len(b)-2000:]
		}
		out = append(out, l+": "+string(b))
	}
	if len(out) == 0 {
		return "(no log)"
	}
	return strings.Join(out, "\n")
}

func msOrNever(d time.Duration) string {
	if d < 0 {
		return "never"
	}
	return fmt.Sprintf("%.1f", ms(d))
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func medianDur(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
