package hooks

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bftrainer/bftrainer/names"
)

// PlannedStart is a main job the scheduler plans to start later, on nodes
// that may be idle now: what the reconciler may move Trainers off before
// the job lands. A plan is a hint, often wrong (run times are requested
// generously, and every scheduling pass plans again): it never keeps a node
// from the scheduler and never replaces the prolog's kill.
type PlannedStart struct {
	Job      string        // the scheduler's job ID
	Nodes    []string      // the nodes it reserves, in the plan's order
	Start    time.Time     // when the scheduler plans to start it
	Duration time.Duration // how long it reserves them (0: not stated)
}

// Planner reads a scheduler's planned starts of pending jobs: for the
// reconciler only, never for a hook (it runs the scheduler's own command or
// reads its file, which may take seconds or hang; the caller bounds it with
// ctx and caches the answer).
type Planner struct {
	// Key is its program's (or file's) key in the configuration's
	// [scheduler] table ("squeue"), and Program its default.
	Key, Program string
	// Read returns the plan as program states it now.
	Read func(ctx context.Context, program string) ([]PlannedStart, error)
}

// slurmPlanFormat is what squeue prints of each pending job: its ID, the
// backfill scheduler's expected start (%S) and its planned nodes (%Y,
// SCHEDNODES), and its time limit (%l), separated by "|", which none of
// them contains.
const slurmPlanFormat = "%i|%S|%Y|%l"

// readSlurmPlan runs `squeue --start`: the pending jobs' planned starts.
// squeue prints times in the local zone and in SLURM_TIME_FORMAT; both are
// fixed for it (TZ=UTC, the standard ISO format) so that the output means
// the same whatever the reconciler's environment says.
func readSlurmPlan(ctx context.Context, program string) ([]PlannedStart, error) {
	cmd := exec.CommandContext(ctx, program, "--start", "-h", "-t", "PD", "-o", slurmPlanFormat)
	cmd.Env = append(os.Environ(), "TZ=UTC", "SLURM_TIME_FORMAT=standard")
	cmd.WaitDelay = time.Second // a child that keeps the pipe open does not hang us
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok && len(ee.Stderr) > 0 {
			return nil, fmt.Errorf("%s: %w: %s", program, err, strings.TrimSpace(string(ee.Stderr)))
		}
		return nil, fmt.Errorf("%s: %w", program, err)
	}
	return SlurmPlan(out, time.UTC)
}

// SlurmPlan reads `squeue --start -h -t PD -o '%i|%S|%Y|%l'` (times in
// loc): one PlannedStart per pending job that has both a planned start and
// planned nodes. Slurm's backfill pass sets both for the jobs it plans
// ("2026-12-01T14:05:00" and a hostlist like "n[1-3,7]"); a job it has
// not planned shows "N/A" and "(null)", and is
// left out, as is a job whose start has no meaning ("Unknown")
// (squeue(1), 22.05: %S is the expected start of a pending job, %Y its
// expected nodes). The time
// limit ("1:00:00", "2-00:00:00", "UNLIMITED", "INVALID") becomes the
// Duration, 0 when it is not a duration. Other lines that do not parse are
// an error: a changed format should be noticed, not read as "no plan".
func SlurmPlan(out []byte, loc *time.Location) ([]PlannedStart, error) {
	var plan []PlannedStart
	for i, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		f := strings.Split(line, "|")
		if len(f) != 4 {
			return nil, fmt.Errorf("squeue line %d: want \"JOBID|START|SCHEDNODES|TIMELIMIT\", got %q", i+1, line)
		}
		job, start, nodes, limit := strings.TrimSpace(f[0]), strings.TrimSpace(f[1]), strings.TrimSpace(f[2]), strings.TrimSpace(f[3])
		if job == "" {
			return nil, fmt.Errorf("squeue line %d: empty job ID", i+1)
		}
		if unplanned(start) || unplanned(nodes) {
			continue
		}
		at, err := time.ParseInLocation("2006-01-02T15:04:05", start, loc)
		if err != nil {
			return nil, fmt.Errorf("squeue line %d: start %q: %w", i+1, start, err)
		}
		hosts, err := names.ExpandHostlist(nodes)
		if err != nil {
			return nil, fmt.Errorf("squeue line %d: nodes: %w", i+1, err)
		}
		for _, h := range hosts {
			if err := names.ValidateNode(h); err != nil {
				return nil, fmt.Errorf("squeue line %d: %w", i+1, err)
			}
		}
		plan = append(plan, PlannedStart{Job: job, Nodes: slices.Compact(hosts), Start: at, Duration: slurmDuration(limit)})
	}
	return plan, nil
}

// unplanned reports a squeue field that states nothing.
func unplanned(s string) bool {
	switch strings.ToLower(s) {
	case "", "n/a", "(null)", "none", "unknown":
		return true
	}
	return false
}

// slurmDuration parses Slurm's time-limit forms: "M", "M:S", "H:M:S",
// "D-H", "D-H:M", "D-H:M:S"; 0 for anything else (UNLIMITED, INVALID).
func slurmDuration(s string) time.Duration {
	days := 0
	if d, rest, ok := strings.Cut(s, "-"); ok {
		n, err := strconv.Atoi(d)
		if err != nil || n < 0 {
			return 0
		}
		days, s = n, rest
	}
	parts := strings.Split(s, ":")
	var v []int
	for _, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return 0
		}
		v = append(v, n)
	}
	var h, m, sec int
	switch {
	case days > 0 && len(v) == 1:
		h = v[0]
	case days > 0 && len(v) == 2:
		h, m = v[0], v[1]
	case len(v) == 1:
		m = v[0]
	case len(v) == 2 && days == 0:
		m, sec = v[0], v[1]
	case len(v) == 3:
		h, m, sec = v[0], v[1], v[2]
	default:
		return 0
	}
	return time.Duration(((days*24+h)*60+m)*60+sec) * time.Second
}

// readGridEnginePlan reads the schedule file at path (ReadGridEnginePlan),
// giving up when ctx ends: a file on a hung network filesystem must not
// hold the reconciler.
func readGridEnginePlan(ctx context.Context, path string) ([]PlannedStart, error) {
	type result struct {
		plan []PlannedStart
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		p, err := ReadGridEnginePlan(path)
		ch <- result{p, err}
	}()
	select {
	case r := <-ch:
		return r.plan, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("schedule %s: %w", path, context.Cause(ctx))
	}
}
