// Package hookburst runs a burst of concurrent scheduler hook processes
// of the real bftrainer binary, with every core kept busy by bounded
// burners, then one reconciler, and counts what the history got: every
// call recorded exactly once, every hook exited 0. It is the proof the
// tests assert and the figure `bftrainer-bench hook` prints, measured the
// same way.
package hookburst

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/bftrainer/bftrainer/store"
)

// Options say what to run.
type Options struct {
	Bin    string // the bftrainer binary
	Config string // its configuration (spawn_reconciler = "never": the burst is about the hooks)
	DB     string // the configuration's database, read afterwards
	Log    string // the configuration's hooks.log
	// Callers is the number of hook processes, all started at once.
	Callers int
	// Load is the number of CPU burners running meanwhile (bounded: they
	// stop with the burst, and after MaxBurn at the latest).
	Load    int
	MaxBurn time.Duration // 0: 5 minutes
	// Job numbers the calls' jobs from JobBase+1: one node each, cNNNNN.
	JobBase int
}

// Result is what one burst did.
type Result struct {
	Callers, Load int
	Failed        []string        // hooks that exited non-zero or printed something, and why
	Wall          []time.Duration // each hook process, exec to exit
	CPU           []time.Duration // each hook process's CPU time, user and system
	HookMs        []float64       // each recorded hook event's own time (from main to its events, before the write)
	Lost, Dup     int             // calls with no hook or leave event; recorded more than once
	Logged        string          // what the hooks wrote to their log, but Late's lines
	// Late are the log's lines of calls starved past their deadline whose
	// record their own write still took within the grace (sidecar's
	// rescue): late, nothing lost, nothing to restore by hand.
	Late      []string
	Reconcile time.Duration // the one reconciler run afterwards
}

// Line is the bench line: hook context=prolog_slurmctld callers=… load=…
// lost=… dup=… late=… median_ms=… p99_ms=… — each hook process from exec to
// exit, as the scheduler waits for it (with every process started at
// once on busy cores, mostly the wait for a core) — then its CPU time and
// the time inside bftrainer its event records.
func (r Result) Line() string {
	return fmt.Sprintf("hook context=prolog_slurmctld callers=%d load=%d lost=%d dup=%d late=%d median_ms=%.1f p99_ms=%.1f cpu_median_ms=%.1f cpu_p99_ms=%.1f in_hook_median_ms=%.2f in_hook_p99_ms=%.2f reconcile_ms=%.0f",
		r.Callers, r.Load, r.Lost, r.Dup, len(r.Late), quantile(ms(r.Wall), 0.5), quantile(ms(r.Wall), 0.99),
		quantile(ms(r.CPU), 0.5), quantile(ms(r.CPU), 0.99), quantile(r.HookMs, 0.5), quantile(r.HookMs, 0.99),
		float64(r.Reconcile.Microseconds())/1000)
}

func ms(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = float64(d.Microseconds()) / 1000
	}
	return out
}

// Job is the job id of call i (0-based) of a burst with this base.
func Job(base, i int) string { return strconv.Itoa(base + i + 1) }

// Run runs the burst: Callers controller prologs (PrologSlurmctld, as
// Slurm runs it: no arguments, no PATH), distinct jobs, one node each,
// released at once while Load burners run; then `bftrainer reconcile
// --no-scheduler` once; then it counts each job's hook and leave events.
func Run(ctx context.Context, o Options) (Result, error) {
	res := Result{Callers: o.Callers, Load: o.Load}
	logBefore := logSize(o)
	stop, err := burn(ctx, o.Load, o.MaxBurn)
	if err != nil {
		return res, err
	}
	cmds := make([]*exec.Cmd, o.Callers)
	outs := make([]*bytes.Buffer, o.Callers)
	for i := range cmds {
		c := exec.CommandContext(ctx, o.Bin)
		c.Env = []string{"BFTRAINER_CONFIG=" + o.Config, "SLURM_SCRIPT_CONTEXT=prolog_slurmctld",
			"SLURM_JOB_ID=" + Job(o.JobBase, i), "SLURM_JOB_NODELIST=" + fmt.Sprintf("c%05d", o.JobBase+i+1), "SLURM_JOB_USER=root"}
		outs[i] = &bytes.Buffer{}
		c.Stdout, c.Stderr = outs[i], outs[i]
		cmds[i] = c
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	gate := make(chan struct{})
	res.Wall = make([]time.Duration, o.Callers)
	res.CPU = make([]time.Duration, o.Callers)
	for i, c := range cmds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			start := time.Now()
			err := c.Run()
			res.Wall[i] = time.Since(start)
			if c.ProcessState != nil {
				res.CPU[i] = c.ProcessState.UserTime() + c.ProcessState.SystemTime()
			}
			if err != nil || outs[i].Len() > 0 {
				mu.Lock()
				res.Failed = append(res.Failed, fmt.Sprintf("job %s: %v %s", Job(o.JobBase, i), err, strings.TrimSpace(outs[i].String())))
				mu.Unlock()
			}
		}()
	}
	close(gate)
	wg.Wait()
	stop()
	begin := time.Now()
	out, err := exec.CommandContext(ctx, o.Bin, "--config", o.Config, "reconcile", "--no-scheduler").CombinedOutput()
	res.Reconcile = time.Since(begin)
	if err != nil {
		return res, fmt.Errorf("reconcile: %v\n%s", err, out)
	}
	if err := count(ctx, o, &res); err != nil {
		return res, err
	}
	if b, err := os.ReadFile(o.Log); err == nil && int64(len(b)) > logBefore {
		res.Logged, res.Late = splitLate(string(b[logBefore:]))
	}
	return res, nil
}

// IsLate says whether line is the hook log's line of a call whose
// record its own write took after its deadline, within the grace.
func IsLate(line string) bool { return lateLine.MatchString(line) }

var lateLine = regexp.MustCompile(`hook: deadline \S+ exceeded; the record was written \S+ after it; exiting 0`)

// splitLate takes Late's lines out of a hook log.
func splitLate(log string) (rest string, late []string) {
	var b strings.Builder
	for line := range strings.Lines(log) {
		if IsLate(line) {
			late = append(late, strings.TrimSpace(line))
			continue
		}
		b.WriteString(line)
	}
	return b.String(), late
}

// count reads each job's hook and leave events.
func count(ctx context.Context, o Options, res *Result) error {
	db, err := store.Open(ctx, o.DB, store.Options{ReadOnly: true})
	if err != nil {
		return err
	}
	defer db.Close()
	first, last := o.JobBase+1, o.JobBase+o.Callers
	evs, err := db.Events(ctx, store.Filter{Kinds: []store.Kind{store.KindHook, store.KindLeave}, Source: "slurm"})
	if err != nil {
		return err
	}
	seen := map[string][2]int{}
	for _, e := range evs {
		if n, err := strconv.Atoi(e.Job); err != nil || n < first || n > last || e.Context != "prolog_slurmctld" {
			continue
		}
		c := seen[e.Job]
		if e.Kind == store.KindHook {
			c[0]++
			if e.HasMs {
				res.HookMs = append(res.HookMs, e.Ms)
			}
		} else {
			c[1]++
		}
		seen[e.Job] = c
	}
	for i := range o.Callers {
		switch c := seen[Job(o.JobBase, i)]; {
		case c[0] == 0 || c[1] == 0:
			res.Lost++
		case c != [2]int{1, 1}:
			res.Dup++
		}
	}
	return nil
}

func logSize(o Options) int64 {
	fi, err := os.Stat(o.Log)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// burn starts n busy loops (processes of their own, as other work on the
// machine is), each bounded by max; stop ends them.
func burn(ctx context.Context, n int, max time.Duration) (stop func(), err error) {
	if max <= 0 {
		max = 5 * time.Minute
	}
	var cmds []*exec.Cmd
	var timers []*time.Timer
	stop = func() {
		for _, t := range timers {
			t.Stop()
		}
		for _, c := range cmds {
			syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
			c.Wait()
		}
		cmds, timers = nil, nil
	}
	for range n {
		c := exec.Command("/bin/sh", "-c", "while :; do :; done")
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := c.Start(); err != nil {
			stop()
			return nil, fmt.Errorf("burner: %w", err)
		}
		cmds = append(cmds, c)
		pid := c.Process.Pid // its group's leader until reaped, by stop
		timers = append(timers, time.AfterFunc(max, func() { syscall.Kill(-pid, syscall.SIGKILL) }))
	}
	if err := ctx.Err(); err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}

func quantile(xs []float64, q float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return store.Quantile(s, q)
}
