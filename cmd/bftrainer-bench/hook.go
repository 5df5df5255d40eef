package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bftrainer/bftrainer/internal/lab/hookburst"
	"github.com/bftrainer/bftrainer/store"
)

// hookCommand times the real binary as a scheduler runs it: exec with the
// hook's environment and no PATH, to exit.
type hookCommand struct {
	stdout, stderr io.Writer
}

func (c *hookCommand) Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("hook", flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	bin := fs.String("bftrainer", "", "bftrainer binary (default: beside bftrainer-bench, else bin/bftrainer, else build ./cmd/bftrainer)")
	runs := fs.Int("runs", 200, "hook calls per measurement")
	callers := fs.Int("callers", 50, "concurrent callers for the loaded measurement")
	sizes := fs.String("nodes", "1,4608", "comma-separated node counts")
	spawn := fs.Bool("spawn", false, "let hooks start the reconciler, as on a root controller")
	burst := fs.Int("burst", 1000, "controller prologs started at once for the burst measurement (0: none)")
	load := fs.Int("load", runtime.NumCPU(), "CPU burners running during the burst")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var counts []int
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return fmt.Errorf("%w: -nodes %q", errUsage, *sizes)
		}
		counts = append(counts, n)
	}
	dir, err := os.MkdirTemp("", "bftrainer-bench-hook")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	b, err := c.setup(ctx, dir, *bin, *spawn, slices.Max(counts))
	if err != nil {
		return err
	}
	for _, n := range counts {
		for _, context := range []string{"prolog_slurmctld", "epilog_slurmctld"} {
			seq, err := b.sequential(context, n, *runs)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.stdout, "hook context=%s nodes=%d median_ms=%.2f p99_ms=%.2f\n", context, n, quantileMs(seq, 0.5), quantileMs(seq, 0.99))
			loaded, err := b.loaded(context, n, *runs, *callers)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.stdout, "hook context=%s nodes=%d callers=%d median_ms=%.2f p99_ms=%.2f\n", context, n, *callers, quantileMs(loaded, 0.5), quantileMs(loaded, 0.99))
		}
	}
	if logged, _ := os.ReadFile(b.log); len(logged) > 0 {
		return fmt.Errorf("hooks logged errors (see above timings with caution):\n%s", logged)
	}
	if *burst > 0 {
		return c.burst(ctx, dir, b.bin, *burst, *load)
	}
	return nil
}

// burst starts callers controller prologs at once, distinct jobs, with
// load burners busy, then one reconciler; it prints the line and fails if
// a call was lost or recorded twice, or a hook failed.
func (c *hookCommand) burst(ctx context.Context, parent, bin string, callers, load int) error {
	dir := filepath.Join(parent, "burst")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	o := hookburst.Options{Bin: bin, Config: filepath.Join(dir, "bftrainer.toml"), DB: filepath.Join(dir, "db", "bftrainer.db"),
		Log: filepath.Join(dir, "hooks.log"), Callers: callers, Load: load}
	if err := os.WriteFile(o.Config, []byte(fmt.Sprintf("database = %q\n[hooks]\nlog = %q\nspawn_reconciler = \"never\"\n[scheduler]\nsinfo = \"\"\nsqueue = \"\"\n", o.DB, o.Log)), 0o644); err != nil {
		return err
	}
	// The journal, as the reconciler service makes it.
	if out, err := exec.CommandContext(ctx, bin, "--config", o.Config, "reconcile", "--no-scheduler").CombinedOutput(); err != nil {
		return fmt.Errorf("reconcile: %v\n%s", err, out)
	}
	res, err := hookburst.Run(ctx, o)
	if err != nil {
		return err
	}
	fmt.Fprintln(c.stdout, res.Line())
	if len(res.Failed) > 0 || res.Lost > 0 || res.Dup > 0 || res.Logged != "" {
		return fmt.Errorf("burst: %d hooks failed (%s), %d calls lost, %d recorded twice; hooks logged: %s",
			len(res.Failed), strings.Join(res.Failed[:min(3, len(res.Failed))], "; "), res.Lost, res.Dup, res.Logged)
	}
	return nil
}

// hookBench is one hook measurement's installation: the binary, its
// configuration and database in a temporary directory.
type hookBench struct {
	ctx            context.Context
	bin, conf, log string
	spawn          bool
	jobs           atomic.Int64 // unique job ids, as the scheduler gives
}

// setup finds or builds the binary, writes its configuration in dir and
// lets nodes c0001… join, up to most.
func (c *hookCommand) setup(ctx context.Context, dir, bin string, spawn bool, most int) (*hookBench, error) {
	if bin == "" {
		if b, err := rescaleBinary(""); err == nil {
			bin = b // make build's binary, as installed
		}
	}
	if bin == "" {
		bin = filepath.Join(dir, "bftrainer")
		fmt.Fprintln(c.stderr, "bftrainer-bench: building ./cmd/bftrainer")
		if out, err := exec.CommandContext(ctx, "go", "build", "-tags", "urfave_cli_no_docs", "-o", bin, "./cmd/bftrainer").CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go build: %v\n%s", err, out)
		}
	}
	b := &hookBench{ctx: ctx, bin: bin, conf: filepath.Join(dir, "bftrainer.toml"), log: filepath.Join(dir, "hooks.log"), spawn: spawn}
	mode := "never"
	if spawn {
		mode = "always"
	}
	if err := os.WriteFile(b.conf, []byte(fmt.Sprintf("database = %q\n[hooks]\nlog = %q\nspawn_reconciler = %q\n[scheduler]\nsinfo = \"\"\nsqueue = \"\"\n",
		filepath.Join(dir, "db", "bftrainer.db"), b.log, mode)), 0o644); err != nil {
		return nil, err
	}
	all := fmt.Sprintf("c[%04d-%04d]", 1, most)
	if out, err := exec.CommandContext(ctx, bin, "--config", b.conf, "node", "join", "--no-reconcile", all).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("node join: %v\n%s", err, out)
	}
	return b, nil
}

// call runs the binary once as Slurm runs the hook, with the hook's
// environment and no PATH, and times it from exec to exit.
func (b *hookBench) call(context string, n int) (time.Duration, error) {
	job := b.jobs.Add(1)
	nodes := "c0001"
	if n > 1 {
		nodes = fmt.Sprintf("c[%04d-%04d]", 1, n)
	}
	cmd := exec.CommandContext(b.ctx, b.bin)
	cmd.Env = []string{"BFTRAINER_CONFIG=" + b.conf, "SLURM_SCRIPT_CONTEXT=" + context,
		"SLURM_JOB_ID=" + strconv.FormatInt(job, 10), "SLURM_JOB_NODELIST=" + nodes, "SLURM_JOB_USER=root"}
	start := time.Now()
	err := cmd.Run()
	return time.Since(start), err
}

// reconcile records the hooks' journal in the history and folds it
// between measured calls, as the reconciler service would. Untimed.
func (b *hookBench) reconcile() error {
	if b.spawn {
		return nil // the hooks start it themselves
	}
	if out, err := exec.CommandContext(b.ctx, b.bin, "--config", b.conf, "reconcile", "--no-scheduler").CombinedOutput(); err != nil {
		return fmt.Errorf("reconcile: %v\n%s", err, out)
	}
	return nil
}

// sequential times runs calls one after the other.
func (b *hookBench) sequential(context string, n, runs int) ([]time.Duration, error) {
	var seq []time.Duration
	for i := 0; i < runs; i++ {
		if i%10 == 0 {
			if err := b.reconcile(); err != nil {
				return nil, err
			}
		}
		d, err := b.call(context, n)
		if err != nil {
			return nil, fmt.Errorf("%s with %d nodes: %w", context, n, err)
		}
		seq = append(seq, d)
	}
	return seq, b.reconcile()
}

// loaded times runs calls made by callers concurrent callers.
func (b *hookBench) loaded(context string, n, runs, callers int) ([]time.Duration, error) {
	var mu sync.Mutex
	var out []time.Duration
	var firstErr error
	var wg sync.WaitGroup
	work := make(chan struct{}, runs)
	for i := 0; i < runs; i++ {
		work <- struct{}{}
	}
	close(work)
	for w := 0; w < callers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range work {
				d, err := b.call(context, n)
				mu.Lock()
				out = append(out, d)
				if err != nil && firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, fmt.Errorf("%s with %d nodes, %d callers: %w", context, n, callers, firstErr)
	}
	return out, nil
}

// quantileMs returns the nearest-rank quantile in milliseconds.
func quantileMs(ds []time.Duration, q float64) float64 {
	ms := make([]float64, len(ds))
	for i, d := range ds {
		ms[i] = float64(d.Microseconds()) / 1000
	}
	slices.Sort(ms)
	return store.Quantile(ms, q)
}
