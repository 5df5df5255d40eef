package gridengine

import (
	"context"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/hooks"
	"github.com/bftrainer/bftrainer/internal/lab"
)

// TestPlannedStarts: a serial job runs on the first host (no run time
// asked: the scheduler assumes default_duration), and a 2-host job asks
// for a reservation. The scheduler reserves both hosts from the first
// job's assumed end; the second host looks exactly idle to qhost all the
// while, and hooks.ReadGridEnginePlan reads the reservation from the
// schedule file: the job, both hosts, the start Grid Engine planned.
func TestPlannedStarts(t *testing.T) {
	c, _ := cell(t)
	ctx := context.Background()
	if err := c.WaitIdle(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	a := must[*Job](t)(c.Submit(ctx, JobSpec{Name: "serial", Hosts: c.Hosts[:1], Held: true}))
	defer func() {
		if err := endJob(ctx, a); err != nil {
			t.Error(err)
		}
	}()
	ra := must[lab.Report](t)(a.WaitChecked(ctx, time.Minute))
	b := must[*Job](t)(c.Submit(ctx, JobSpec{Name: "wide", Slots: 2, Reserve: true, Runtime: 10 * time.Minute}))
	defer b.Delete(ctx)
	interval := must[string](t)(waitReservation(ctx, c, b.ID, time.Minute))
	plan := must[[]hooks.PlannedStart](t)(hooks.ReadGridEnginePlan(c.ScheduleFile()))
	i := slices.IndexFunc(plan, func(p hooks.PlannedStart) bool { return p.Job == b.ID })
	if i < 0 {
		t.Fatalf("plan %+v has no start for job %s; the schedule's last run:\n%s", plan, b.ID, interval)
	}
	p := plan[i]
	t.Logf("planned start: %+v (now %s)", p, time.Now().Format(time.RFC3339))
	if got := slices.Sorted(slices.Values(p.Nodes)); !slices.Equal(got, c.Hosts) {
		t.Errorf("job %s reserves %v, want %v", b.ID, got, c.Hosts)
	}
	// It starts when the running job is assumed to end: that job's own
	// line in the same run gives its start and assumed duration.
	end, err := assumedEnd(interval, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Start.Equal(end) {
		t.Errorf("job %s planned at %s, want the end of job %s at %s", b.ID, p.Start, a.ID, end)
	}
	if !p.Start.After(ra.First) || p.Duration < 10*time.Minute {
		t.Errorf("planned %s for %v, want after job %s started (%s) and at least its 10 min", p.Start, p.Duration, a.ID, ra.First)
	}
	// The reserved host looks exactly idle to the listing sync reads.
	s, _ := hooks.Builtin().Lookup("gridengine")
	states := must[map[string]string](t)(s.Listing.Parse([]byte(must[string](t)(c.Output(ctx, "qhost", "-q", "-xml")))))
	if states[c.Hosts[1]] != "idle" || states[c.Hosts[0]] == "idle" {
		t.Errorf("qhost says %v; want %s busy and the reserved %s idle", states, c.Hosts[0], c.Hosts[1])
	}
	fi := must[os.FileInfo](t)(os.Stat(c.ScheduleFile()))
	t.Logf("schedule file: %d bytes (the scheduler writes a run only when it has something to record); its last run:\n%s", fi.Size(), interval)
}

// assumedEnd returns when a running job is assumed to end, from its
// RUNNING line in a scheduling run of the schedule file.
func assumedEnd(run, job string) (time.Time, error) {
	for _, l := range strings.Split(run, "\n") {
		f := strings.Split(l, ":")
		if len(f) == 9 && f[0] == job && f[2] == "RUNNING" {
			start, err1 := strconv.ParseInt(f[3], 10, 64)
			dur, err2 := strconv.ParseInt(f[4], 10, 64)
			if err := errors.Join(err1, err2); err != nil {
				return time.Time{}, err
			}
			return time.Unix(start+dur, 0), nil
		}
	}
	return time.Time{}, errors.New("job " + job + " has no RUNNING line in the run")
}
