package slurm

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/accounting"
)

// TestSlurmAccounting: the lab with real accounting (slurmdbd on a private
// MariaDB) answers sacct as a site's Slurm does, and what it prints reads
// as a replay trace: two jobs that ran, with the nodes they held; a job
// that cannot run yet listed as never started.
func TestSlurmAccounting(t *testing.T) {
	if err := NeedAccounting(); err != nil {
		t.Skip(err)
	}
	ctx := context.Background()
	l := testLab(t, Options{Nodes: 3, Prefix: "alab", Accounting: true, Timeout: 2 * time.Minute})
	a, err := l.Submit(ctx, JobSpec{Nodes: 2, NodeList: "alab[1-2]", Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.Submit(ctx, JobSpec{Nodes: 1, NodeList: "alab3", Name: "b"})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range []*Job{a, b} {
		if _, err := j.WaitChecked(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	// Four nodes on a three-node cluster: pending for ever.
	never, err := l.Submit(ctx, JobSpec{Nodes: 4, Name: "never"})
	if err != nil {
		t.Fatal(err)
	}
	var out string
	var log *accounting.Listing
	// slurmctld sends the records to slurmdbd asynchronously.
	err = Poll(ctx, time.Minute, func() (bool, error) {
		out, err = l.Output(ctx, "sacct", "--allusers", "--parsable2", "--starttime", "now-1hour",
			"--format", "JobID,Submit,Start,End,NNodes,NodeList,State")
		if err != nil {
			return false, err
		}
		if log, err = accounting.ReadSacct(strings.NewReader(out), time.Local); err != nil {
			return false, err
		}
		ended := 0
		for _, j := range log.Jobs {
			if !j.Running {
				ended++
			}
		}
		return ended == 2 && log.Skipped[accounting.SkipNotRun] == 1, nil
	})
	if err != nil {
		t.Fatalf("sacct: %v\n%s", err, out)
	}
	want := map[string][]string{a.ID: {"alab1", "alab2"}, b.ID: {"alab3"}}
	for _, j := range log.Jobs {
		if w, ok := want[j.ID]; !ok || !slices.Equal(j.Nodes, w) {
			t.Errorf("sacct job %s on %v, want %v (jobs %v)\n%s", j.ID, j.Nodes, w, want, out)
		}
	}
	if !strings.Contains(out, "\n"+never.ID+"|") {
		t.Errorf("the pending job %s is not listed:\n%s", never.ID, out)
	}
	t.Logf("sacct printed:\n%s", out)
}
