package pbs

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/hooks"
	"github.com/bftrainer/bftrainer/internal/lab"
	"github.com/bftrainer/bftrainer/trainer/trainertest"
)

var updateFlag = flag.Bool("update", false, "write the captured qstat outputs into hooks/testdata/pbs")

// strictOrdering has the scheduler run jobs in strict priority order and
// calendar the top job (sched_config's strict_ordering; the server's
// backfill_depth, 1 by default, is how many): it then sets the queued job's
// estimated.start_time and estimated.exec_vnode. It makes pbs_sched read
// its configuration again (SIGHUP).
func (c *Cell) strictOrdering() error {
	p := filepath.Join(c.Home(Server), "sched_priv", "sched_config")
	b, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "strict_ordering:") {
			l = "strict_ordering: true ALL"
		}
		out = append(out, l)
	}
	if err := os.WriteFile(p, []byte(strings.Join(out, "\n")), 0o644); err != nil {
		return err
	}
	lock, err := os.ReadFile(filepath.Join(c.Home(Server), "sched_priv", "sched.lock"))
	if err != nil {
		return err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(lock)))
	if err != nil {
		return err
	}
	return syscall.Kill(pid, syscall.SIGHUP)
}

// TestPlannedStart fills the cell with a running job of known walltime,
// queues a 2-node job behind it under strict ordering, and reads PBS's
// estimate of the queued job's start through hooks' PBS Planner: the job,
// two of the cell's nodes, a start at the running job's end and the
// queued job's walltime. With -update it writes what qstat printed into
// hooks/testdata/pbs.
func TestPlannedStart(t *testing.T) {
	if err := Need(); err != nil {
		t.Skip(err)
	}
	ctx := context.Background()
	c, err := Start(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	})
	if err := c.strictOrdering(); err != nil {
		t.Fatal(err)
	}
	sleep := func(name, sel, walltime string) string {
		out, err := c.On(ctx, Server, c.Bin("qsub"), "-N", name, "-j", "oe", "-o", filepath.Join(c.JobsDir(), name+".pbs"),
			"-l", "select="+sel, "-l", "place=scatter:excl", "-l", "walltime="+walltime, "--", "/bin/sleep", "600")
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}
	running := sleep("fill", "3:ncpus=1", "00:10:00")
	var stime time.Time
	if err := lab.Poll(ctx, 60*time.Second, func() (bool, error) {
		out, err := c.On(ctx, Server, "env", "TZ=UTC", c.Bin("qstat"), "-f", "-F", "json", running)
		if err != nil {
			return false, err
		}
		var doc struct {
			Jobs map[string]struct {
				State string `json:"job_state"`
				Stime string `json:"stime"`
			}
		}
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			return false, err
		}
		j := doc.Jobs[running]
		if j.State != "R" {
			return false, nil
		}
		stime, err = time.ParseInLocation("Mon Jan _2 15:04:05 2006", j.Stime, time.UTC)
		return err == nil, err
	}); err != nil {
		t.Fatalf("job %s never ran: %v", running, err)
	}
	queued := sleep("wide", "2:ncpus=1", "00:05:00")
	var qstatF, qstatT string
	var plan []hooks.PlannedStart
	if err := lab.Poll(ctx, 60*time.Second, func() (bool, error) {
		out, err := c.On(ctx, Server, "env", "TZ=UTC", c.Bin("qstat"), "-f", "-F", "json")
		if err != nil {
			return false, err
		}
		qstatF = out
		plan, err = hooks.PBSPlan([]byte(out), time.UTC)
		return len(plan) > 0, err
	}); err != nil {
		t.Fatalf("no planned start for %s: %v\n%s", queued, err, qstatF)
	}
	qstatT = must[string](t)(c.On(ctx, Server, "env", "TZ=UTC", c.Bin("qstat"), "-T"))
	t.Logf("qstat -T:\n%s", qstatT)
	t.Logf("plan: %+v", plan)
	if len(plan) != 1 || plan[0].Job != queued {
		t.Fatalf("plan %+v, want one start, of %s", plan, queued)
	}
	p := plan[0]
	if len(p.Nodes) != 2 || slices.ContainsFunc(p.Nodes, func(n string) bool { return !slices.Contains(c.Hosts, n) }) || p.Nodes[0] == p.Nodes[1] {
		t.Errorf("planned nodes %v, want two of %v", p.Nodes, c.Hosts)
	}
	if end := stime.Add(10 * time.Minute); p.Start.Before(end.Add(-5*time.Second)) || p.Start.After(end.Add(30*time.Second)) {
		t.Errorf("planned start %s, want about the running job's end %s", p.Start, end)
	}
	if p.Duration != 5*time.Minute {
		t.Errorf("planned duration %v, want the walltime, 5m", p.Duration)
	}
	if *updateFlag {
		dir := filepath.Join(trainertest.RepoRoot(t), "hooks", "testdata", "pbs")
		for name, body := range map[string]string{"planned.qstat-f.json": qstatF, "planned.qstat-T.txt": qstatT} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}
