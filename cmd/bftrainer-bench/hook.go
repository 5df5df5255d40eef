package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "bftrainer-bench-hook")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if *bin == "" {
		if b, err := rescaleBinary(""); err == nil {
			*bin = b // make build's binary, as installed
		}
	}
	if *bin == "" {
		*bin = filepath.Join(dir, "bftrainer")
		fmt.Fprintln(c.stderr, "bftrainer-bench: building ./cmd/bftrainer")
		if out, err := exec.CommandContext(ctx, "go", "build", "-o", *bin, "./cmd/bftrainer").CombinedOutput(); err != nil {
			return fmt.Errorf("go build: %v\n%s", err, out)
		}
	}
	mode := "never"
	if *spawn {
		mode = "always"
	}
	conf := filepath.Join(dir, "bftrainer.toml")
	logf := filepath.Join(dir, "hooks.log")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf("database = %q\n[hooks]\nlog = %q\nspawn_reconciler = %q\n[scheduler]\nsinfo = \"\"\n",
		filepath.Join(dir, "db", "bftrainer.db"), logf, mode)), 0o644); err != nil {
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
	all := fmt.Sprintf("c[%04d-%04d]", 1, slices.Max(counts))
	if out, err := exec.CommandContext(ctx, *bin, "--config", conf, "node", "join", "--no-reconcile", all).CombinedOutput(); err != nil {
		return fmt.Errorf("node join: %v\n%s", err, out)
	}
	var jobs atomic.Int64 // unique job ids, as the scheduler gives
	call := func(context string, n int) (time.Duration, error) {
		job := jobs.Add(1)
		nodes := "c0001"
		if n > 1 {
			nodes = fmt.Sprintf("c[%04d-%04d]", 1, n)
		}
		cmd := exec.CommandContext(ctx, *bin)
		cmd.Env = []string{"BFTRAINER_CONFIG=" + conf, "SLURM_SCRIPT_CONTEXT=" + context,
			"SLURM_JOB_ID=" + strconv.FormatInt(job, 10), "SLURM_JOB_NODELIST=" + nodes, "SLURM_JOB_USER=root"}
		start := time.Now()
		err := cmd.Run()
		return time.Since(start), err
	}
	// Between measured calls, as a root controller's hooks would have, a
	// reconciler folds the events and checkpoints the write-ahead log
	// (hooks never do: see store.Options.Ephemeral). Untimed.
	reconcile := func() error {
		if *spawn {
			return nil // the hooks start it themselves
		}
		if out, err := exec.CommandContext(ctx, *bin, "--config", conf, "reconcile", "--no-scheduler").CombinedOutput(); err != nil {
			return fmt.Errorf("reconcile: %v\n%s", err, out)
		}
		return nil
	}
	for _, n := range counts {
		for _, context := range []string{"prolog_slurmctld", "epilog_slurmctld"} {
			var seq []time.Duration
			for i := 0; i < *runs; i++ {
				if i%10 == 0 {
					if err := reconcile(); err != nil {
						return err
					}
				}
				d, err := call(context, n)
				if err != nil {
					return fmt.Errorf("%s with %d nodes: %w", context, n, err)
				}
				seq = append(seq, d)
			}
			if err := reconcile(); err != nil {
				return err
			}
			fmt.Fprintf(c.stdout, "hook context=%s nodes=%d median_ms=%.2f p99_ms=%.2f\n", context, n, quantileMs(seq, 0.5), quantileMs(seq, 0.99))
			var mu sync.Mutex
			var loaded []time.Duration
			var firstErr error
			var wg sync.WaitGroup
			work := make(chan struct{}, *runs)
			for i := 0; i < *runs; i++ {
				work <- struct{}{}
			}
			close(work)
			for w := 0; w < *callers; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range work {
						d, err := call(context, n)
						mu.Lock()
						loaded = append(loaded, d)
						if err != nil && firstErr == nil {
							firstErr = err
						}
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			if firstErr != nil {
				return fmt.Errorf("%s with %d nodes, %d callers: %w", context, n, *callers, firstErr)
			}
			fmt.Fprintf(c.stdout, "hook context=%s nodes=%d callers=%d median_ms=%.2f p99_ms=%.2f\n", context, n, *callers, quantileMs(loaded, 0.5), quantileMs(loaded, 0.99))
		}
	}
	if b, _ := os.ReadFile(logf); len(b) > 0 {
		return fmt.Errorf("hooks logged errors (see above timings with caution):\n%s", b)
	}
	return nil
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
