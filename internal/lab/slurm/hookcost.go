package slurm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// What the hooks cost a main job, measured against peers in the same run
// (bftrainer-bench slurm, "hooks_added_ms"): three clusters started side
// by side on this machine, the same slurm.conf but for their hooks —
//
//	none      no Prolog, Epilog, PrologSlurmctld or EpilogSlurmctld
//	noop      /bin/true in all four
//	bftrainer bftrainer's binary in all four, its reconciler a service
//	          (hooks.spawn_reconciler = "never", as the guide runs it)
//
// — and the same PrologFlags (Alloc). Main jobs run one at a time,
// round-robin over the three clusters (one job in none, one in noop, one
// in bftrainer, …), so that the machine's load, which other work changes
// from one minute to the next, falls on every mode alike. Each scheduler
// setting (the lab's fast SchedulerParameters and Slurm's defaults) is set
// on all three clusters by `scontrol reconfigure` before its jobs.

// CostMode is one cluster of the cost measurement: a name and its lab.
type CostMode struct {
	Name string // none, noop or bftrainer
	Lab  *Lab
}

// CostSetting is a scheduler setting of the cost measurement: its name and
// the SchedulerParameters value ("" for Slurm's defaults: the line
// removed).
type CostSetting struct {
	Name  string
	Value string
}

// CostSettings are the lab's fast scheduler settings and Slurm's defaults.
var CostSettings = []CostSetting{
	{"fast", "batch_sched_delay=0,sched_interval=1,bf_interval=1"},
	{"default", ""},
}

// CostSample is one main job of the cost measurement.
type CostSample struct {
	Mode, Setting string
	DelaySample
	// Epilog is, per node of the job, how long its slurmd took from the
	// job's termination request to its epilog's end (slurmd's log): the
	// time the node stays COMPLETING for the job's end.
	Epilog []time.Duration
}

// CostLab starts a lab beside the cluster, started as the cluster's was
// (nodes, partitions, SlurmUser, extra lines: start the cluster with
// CostExtra) but for its hooks, set to hook ("" for none), and the given
// node prefix. Stop it with Stop.
func (c *Cluster) CostLab(ctx context.Context, name, prefix, hook string) (*Lab, error) {
	o := c.Options
	o.Prefix, o.Hook = prefix, hook
	return startLab(ctx, c.Lab.Script, filepath.Join(c.Dir, "lab-"+name), o)
}

// CostExtra are the slurm.conf lines every cost cluster needs: slurmd's
// debug2 level logs the start and the end of its handling of a job's
// termination request, epilog included, whether or not there is one (with
// LogTimeFormat=iso8601_ms, to the millisecond).
var CostExtra = []string{"SlurmdDebug=debug2"}

// SetSchedulerParameters sets SchedulerParameters in slurm.conf ("" removes
// the line: Slurm's defaults) and has slurmctld re-read it, then checks
// that it did.
func (l *Lab) SetSchedulerParameters(ctx context.Context, value string) error {
	var add []string
	if value != "" {
		add = []string{"SchedulerParameters=" + value}
	}
	if err := l.rewriteConf(ctx, []string{"SchedulerParameters"}, add); err != nil {
		return err
	}
	want := value
	if want == "" {
		want = "(null)"
	}
	var last string
	err := Poll(ctx, 30*time.Second, func() (bool, error) {
		out, err := l.Output(ctx, "scontrol", "show", "config")
		if err != nil {
			return false, err
		}
		for _, line := range strings.Split(out, "\n") {
			if k, v, ok := strings.Cut(line, "="); ok && strings.TrimSpace(k) == "SchedulerParameters" {
				last = strings.TrimSpace(v)
				return last == want, nil
			}
		}
		last = "absent"
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("SchedulerParameters %q: slurmctld says %q: %w", value, last, err)
	}
	return nil
}

// HookCost runs runs main jobs of nodes nodes per mode and setting,
// round-robin over the modes (see the comment above CostMode), and
// returns them in the order they ran. Every job must end normally. The
// labs are left with the last setting.
func HookCost(ctx context.Context, modes []CostMode, settings []CostSetting, runs, nodes int, logf func(string, ...any)) ([]CostSample, error) {
	var out []CostSample
	for _, st := range settings {
		for _, m := range modes {
			if err := m.Lab.SetSchedulerParameters(ctx, st.Value); err != nil {
				return out, fmt.Errorf("%s: %w", m.Name, err)
			}
		}
		// Slurm's first job after a reconfigure waits for a pass of its
		// own: one job per mode first, not counted.
		logf("hook cost, %s scheduler settings: %d main jobs per mode (and one first, not counted)", st.Name, runs)
		for i := -1; i < runs; i++ {
			for _, m := range modes {
				s, err := costJob(ctx, m.Lab, nodes)
				if err != nil {
					return out, fmt.Errorf("%s, %s settings, main job %d: %w", m.Name, st.Name, i+2, err)
				}
				if i >= 0 {
					s.Mode, s.Setting = m.Name, st.Name
					out = append(out, s)
				}
			}
		}
	}
	return out, nil
}

// costJob waits until every node is exactly idle, runs one main job and
// reads its times.
func costJob(ctx context.Context, l *Lab, nodes int) (CostSample, error) {
	var s CostSample
	if err := Poll(ctx, 2*time.Minute, func() (bool, error) {
		idle, err := l.IdleNodes(ctx)
		return len(idle) == len(l.Nodes), err
	}); err != nil {
		return s, fmt.Errorf("nodes not idle: %w", err)
	}
	smp, info, _, err := l.DelayJob(ctx, JobSpec{Nodes: nodes, Name: "cost"})
	if err != nil {
		return s, err
	}
	s.DelaySample = smp
	ns, err := info.Nodes()
	if err != nil {
		return s, err
	}
	// A job has ended once every epilog is done: slurmd has logged them.
	for _, n := range ns {
		d, err := l.EpilogTime(smp.Job, n)
		if err != nil {
			return s, err
		}
		s.Epilog = append(s.Epilog, d)
	}
	return s, nil
}

// slurmdTime matches a slurmd log line's millisecond timestamp.
var slurmdTime = regexp.MustCompile(`^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})\] (.*)$`)

// ErrNoEpilogLines: slurmd's log does not time the job's epilog (its
// debug level is below debug2).
var ErrNoEpilogLines = errors.New("slurmd log: no termination request or no end of its handling")

// EpilogTime returns how long node's slurmd took from job's termination
// request to the end of its handling (the epilog run and its completion
// sent to slurmctld, which then takes the node out of COMPLETING), from
// its log (SlurmdDebug=debug2: "_rpc_terminate_job: … JobId=N", then the
// next "Finish processing RPC: REQUEST_TERMINATE_JOB"; the bench runs one
// job at a time on a node).
func (l *Lab) EpilogTime(job, node string) (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join(l.Dir, "log", "slurmd-"+node+".log"))
	if err != nil {
		return 0, err
	}
	term := regexp.MustCompile(`_rpc_terminate_job: .*JobId=` + job + `\b`)
	done := regexp.MustCompile(`Finish processing RPC: REQUEST_TERMINATE_JOB`)
	var from, to time.Time
	for _, line := range strings.Split(string(b), "\n") {
		m := slurmdTime.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		switch {
		case from.IsZero() && term.MatchString(m[2]):
			from, err = time.ParseInLocation("2006-01-02T15:04:05.000", m[1], time.Local)
		case !from.IsZero() && to.IsZero() && done.MatchString(m[2]):
			to, err = time.ParseInLocation("2006-01-02T15:04:05.000", m[1], time.Local)
		}
		if err != nil {
			return 0, err
		}
	}
	if from.IsZero() || to.IsZero() {
		return 0, fmt.Errorf("job %s on %s: %w", job, node, ErrNoEpilogLines)
	}
	return to.Sub(from), nil
}
