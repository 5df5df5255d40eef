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

// checkEstimate reads PBS's estimate of queued's start through hooks' PBS
// Planner, from `qstat -f -F json` as the cell prints it now, and checks
// it: the one planned job is queued, on n of the cell's nodes, starting at
// running's end (its stime plus walltime wall), for walltime want. With
// -update it writes what qstat printed (-f -F json and -T) into
// hooks/testdata/pbs.
func checkEstimate(t *testing.T, ctx context.Context, c *Cell, running, queued string, n int, wall, want time.Duration) {
	t.Helper()
	qstat := func(args ...string) string {
		return must[string](t)(c.On(ctx, Server, "env", append([]string{"TZ=UTC", c.Bin("qstat")}, args...)...))
	}
	var doc struct {
		Jobs map[string]struct {
			State string `json:"job_state"`
			Stime string `json:"stime"`
		}
	}
	qstatF := qstat("-f", "-F", "json")
	if err := json.Unmarshal([]byte(qstatF), &doc); err != nil {
		t.Fatal(err)
	}
	r := doc.Jobs[running]
	if r.State != "R" {
		t.Fatalf("job %s is %q, not running", running, r.State)
	}
	stime, err := time.ParseInLocation("Mon Jan _2 15:04:05 2006", r.Stime, time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	qstatT := qstat("-T")
	t.Logf("qstat -T:\n%s", qstatT)
	plan, err := hooks.PBSPlan([]byte(qstatF), time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("plan: %+v", plan)
	if len(plan) != 1 || plan[0].Job != queued {
		t.Fatalf("plan %+v, want one start, of %s", plan, queued)
	}
	p := plan[0]
	if len(p.Nodes) != n || slices.ContainsFunc(p.Nodes, func(n string) bool { return !slices.Contains(c.Hosts, n) }) {
		t.Errorf("planned nodes %v, want %d of %v", p.Nodes, n, c.Hosts)
	}
	if end := stime.Add(wall); p.Start.Before(end.Add(-5*time.Second)) || p.Start.After(end.Add(30*time.Second)) {
		t.Errorf("planned start %s, want about the running job's end %s", p.Start, end)
	}
	if p.Duration != want {
		t.Errorf("planned duration %v, want the walltime, %v", p.Duration, want)
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
