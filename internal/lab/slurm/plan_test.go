package slurm

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/hooks"
)

// TestSlurmPlannedStart reads a real backfill plan. On three nodes, job A
// holds two of them with a 10-minute limit; job B needs all three and
// must wait for A. Slurm's backfill pass plans B at A's limit, on all
// three nodes — the third idle all the while — and the Slurm scheduler's
// Plan capability (squeue --start) reads exactly that: B, its start at A's
// start plus 10 minutes, its nodes, its 5-minute limit. A job Slurm
// cannot plan yet is left out, not an error.
func TestSlurmPlannedStart(t *testing.T) {
	ctx := context.Background()
	l := testLab(t, Options{Nodes: 3, Prefix: "plab"})
	a, err := l.Submit(ctx, JobSpec{Nodes: 2, NodeList: "plab[1-2]", Held: true, Name: "a", Args: []string{"--time=10"}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	if _, err := a.WaitChecked(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	info, err := l.Job(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	aStart, err := time.ParseInLocation("2006-01-02T15:04:05", info["StartTime"], time.Local)
	if err != nil {
		t.Fatalf("job %s StartTime %q: %v", a.ID, info["StartTime"], err)
	}
	b, err := l.Submit(ctx, JobSpec{Nodes: 3, Held: true, Name: "b", Args: []string{"--time=5"}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()

	squeue, err := lookPath("squeue")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("SLURM_CONF", l.Conf)
	s, _ := hooks.Builtin().Lookup(hooks.Slurm)
	var got hooks.PlannedStart
	err = Poll(ctx, time.Minute, func() (bool, error) {
		plan, err := s.Plan.Read(ctx, squeue)
		if err != nil {
			return false, err
		}
		i := slices.IndexFunc(plan, func(p hooks.PlannedStart) bool { return p.Job == b.ID })
		if i >= 0 {
			got = plan[i]
		}
		return i >= 0, nil
	})
	if err != nil {
		out, _ := l.Output(ctx, "squeue", "--start", "-h", "-t", "PD", "-o", "%i|%S|%Y|%l")
		t.Fatalf("no plan for job %s: %v; squeue --start printed %q", b.ID, err, out)
	}
	t.Logf("planned start of job %s: %+v (job %s started %s)", b.ID, got, a.ID, aStart)
	if want := l.Nodes; !slices.Equal(got.Nodes, want) {
		t.Errorf("job %s planned on %v, want %v", b.ID, got.Nodes, want)
	}
	if d := got.Start.Sub(aStart.Add(10 * time.Minute)); d < -2*time.Second || d > 2*time.Second {
		t.Errorf("job %s planned at %s, want job %s's start plus its 10 min limit (%s)", b.ID, got.Start, a.ID, aStart.Add(10*time.Minute))
	}
	if got.Duration != 5*time.Minute {
		t.Errorf("job %s reserves %v, want its 5 min limit", b.ID, got.Duration)
	}
}

// testLab starts a small cluster of its own for one test, in a short
// temporary directory, and stops it when the test ends; it skips, saying
// why, under -short or where Slurm is not installed.
func testLab(t *testing.T, o Options) *Lab {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a real Slurm cluster")
	}
	if err := Need(); err != nil {
		t.Skip(err)
	}
	script, err := filepath.Abs("lab.sh")
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "lab")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	l, err := startLab(context.Background(), script, dir, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Stop(context.Background()); err != nil {
			t.Errorf("stop the lab: %v", err)
		}
	})
	return l
}
