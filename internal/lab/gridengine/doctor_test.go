package gridengine

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bftrainer/bftrainer/hooks"
)

// TestGridEngineDoctor runs doctor's Grid Engine checks on a real cell's
// queue configuration (qconf -sql, qconf -sq): the queue's prolog and
// epilog as contrib/gridengine/README.md gives them are ok; an epilog
// taken away (NONE), and a prolog that runs as the job's owner, each fail
// with the qconf line that fixes them.
func TestGridEngineDoctor(t *testing.T) {
	c, rec := cell(t)
	ctx := context.Background()
	hook := filepath.Join(t.TempDir(), "bftrainer")
	if err := os.WriteFile(hook, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.SetHooks(ctx, rec.Command("prolog"), rec.Command("epilog")); err != nil {
			t.Error(err)
		}
	})
	line := func(h string) string { return hook + " hook gridengine " + h + " $host $job_id $job_owner" }
	check := func(t *testing.T) map[string]hooks.Finding {
		t.Helper()
		list, err := c.Output(ctx, "qconf", "-sql")
		if err != nil {
			t.Fatal(err)
		}
		queues := map[string][]byte{}
		for _, q := range strings.Fields(list) {
			out, err := c.Output(ctx, "qconf", "-sq", q)
			if err != nil {
				t.Fatal(err)
			}
			queues[q] = []byte(out)
		}
		got := map[string]hooks.Finding{}
		for _, f := range hooks.CheckGridEngineQueues(queues, hooks.Want{Hook: hook}) {
			got[f.Name] = f
			t.Logf("%-4s %s: %s", f.Status, f.Name, f.Detail)
		}
		return got
	}
	pro, epi := "gridengine."+c.Queue+".prolog", "gridengine."+c.Queue+".epilog"
	if err := c.SetHooks(ctx, line("prolog"), line("epilog")); err != nil {
		t.Fatal(err)
	}
	got := check(t)
	if got[pro].Status != hooks.OK || got[epi].Status != hooks.OK {
		t.Fatalf("the guide's wiring: %+v, %+v; want both ok", got[pro], got[epi])
	}
	if err := c.SetHooks(ctx, line("prolog"), ""); err != nil {
		t.Fatal(err)
	}
	if f := check(t)[epi]; f.Status != hooks.Fail || !strings.Contains(f.Detail, "has no epilog") || !strings.Contains(f.Hint, "qconf -mattr queue epilog") {
		t.Errorf("no epilog: %+v, want a fail and the qconf line", f)
	}
	// A prolog without "root@" runs as the job's owner.
	if _, err := c.Output(ctx, "qconf", "-mattr", "queue", "prolog", line("prolog"), c.Queue); err != nil {
		t.Fatal(err)
	}
	if f := check(t)[pro]; f.Status != hooks.Fail || !strings.Contains(f.Detail, "not root") {
		t.Errorf("a prolog run as the job's owner: %+v, want a fail", f)
	}
}
