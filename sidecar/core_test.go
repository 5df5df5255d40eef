package sidecar

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/store"
	"github.com/bftrainer/bftrainer/trainer"
)

// mustCore builds a core on a database in a temporary directory, acting
// as *user.
func mustCore(tb testing.TB, user *string) *Core {
	tb.Helper()
	c, err := New(Options{Database: filepath.Join(tb.TempDir(), "b.db"), Pool: pool.Config{TFwd: 10},
		User: func() string { return *user }})
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

func execRequest(id string) SubmitRequest {
	spec, _ := json.Marshal(trainer.Spec{Argv: []string{"/bin/true"}})
	return SubmitRequest{ID: id, Min: 1, Curve: alloc.Curve{Nodes: []int{0, 1, 2}, Throughput: []float64{0, 1, 2}},
		Launch: store.Launch{Launcher: trainer.Exec, Spec: spec}}
}

// TestFrontDoorChecks: the core checks and authorises every request once,
// whoever calls it; refusals are ErrInvalid or ErrDenied.
func TestFrontDoorChecks(t *testing.T) {
	ctx := context.Background()
	user := "alice"
	c := mustCore(t, &user)
	if _, err := c.Nodes(ctx, true, []string{"n[1-2]"}, "", false); err != nil {
		t.Fatal(err)
	}
	bad := []struct {
		name string
		edit func(*SubmitRequest)
	}{
		{"bad name", func(r *SubmitRequest) { r.ID = "a;b" }},
		{"min above max", func(r *SubmitRequest) { r.Min, r.Max = 3, 2 }},
		{"unknown launcher", func(r *SubmitRequest) { r.Launch.Launcher = "sh" }},
		{"negative samples", func(r *SubmitRequest) { r.Samples = -1 }},
		{"no program", func(r *SubmitRequest) { r.Launch.Spec = json.RawMessage(`{"argv":[]}`) }},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			req := execRequest("t1")
			tt.edit(&req)
			if _, err := c.Submit(ctx, req); !errors.Is(err, ErrInvalid) {
				t.Fatalf("Submit: %v, want ErrInvalid", err)
			}
		})
	}
	rc, err := c.Submit(ctx, execRequest("t1"))
	if err != nil || rc.Spooled || rc.ID != "t1" {
		t.Fatalf("Submit: %+v %v", rc, err)
	}
	tr, ok, err := c.Trainer(ctx, "t1")
	if err != nil || !ok || tr.Status != pool.Running || len(tr.Nodes) != 2 || tr.Max != 2 {
		t.Fatalf("t1 = %+v (%v, %v), want running on 2 nodes, max from its curve", tr, ok, err)
	}
	if _, err := c.Submit(ctx, execRequest("t1")); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a second t1: %v, want ErrInvalid", err)
	}
	if _, err := c.Progress(ctx, "t1", -5, 0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("negative progress: %v, want ErrInvalid", err)
	}
	user = "bob"
	if _, err := c.Cancel(ctx, "t1"); !errors.Is(err, ErrDenied) {
		t.Fatalf("bob cancels alice's Trainer: %v, want ErrDenied", err)
	}
	user = "alice"
	if _, err := c.Cancel(ctx, "t1"); err != nil {
		t.Fatal(err)
	}
	if tr, _, _ := c.Trainer(ctx, "t1"); tr.Status != pool.Cancelled {
		t.Fatalf("t1 is %s after its owner's cancel", tr.Status)
	}
	if _, err := c.Hosts(ctx, "../../etc/passwd"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Hosts of a path: %v, want ErrInvalid", err)
	}
}

// TestSpoolNeedsADirectory: with no spool configured a request that would
// be spooled is refused, not left in the working directory, where no
// reconciler looks.
func TestSpoolNeedsADirectory(t *testing.T) {
	before, _ := filepath.Glob("*.req")
	if _, err := (&spool{}).put(spoolRequest{Kind: store.KindCancel, Trainer: "t1"}); err == nil {
		t.Fatal("spooled with no spool directory")
	}
	if after, _ := filepath.Glob("*.req"); len(after) != len(before) {
		t.Fatalf("requests in the working directory: %v", after)
	}
}
