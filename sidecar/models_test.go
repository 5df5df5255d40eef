package sidecar

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/pool"
)

// TestModelCurveSaved: through the core and a real database, a Trainer's
// model is saved with it; a second Trainer of the model is planned on the
// curve learned of the first's progress reports, one of another model is
// not; the first's shape, kept when it ends, plans a third; a model name
// outside the safe alphabet is refused.
func TestModelCurveSaved(t *testing.T) {
	ctx := context.Background()
	user := "alice"
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c, err := New(Options{Database: filepath.Join(t.TempDir(), "b.db"),
		Pool: pool.Config{TFwd: 10, Learner: alloc.CurveLearner{Settle: 5, MinSample: 1}},
		User: func() string { return user }, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Nodes(ctx, true, []string{"n[1-4]"}, "", false); err != nil {
		t.Fatal(err)
	}
	submit := func(id, model string) {
		t.Helper()
		req := execRequest(id)
		req.Curve, req.Max, req.Model = alloc.Curve{}, 2, model
		if _, err := c.Submit(ctx, req); err != nil {
			t.Fatalf("submit %s: %v", id, err)
		}
	}
	bad := execRequest("x")
	bad.Model = "-rf"
	if _, err := c.Submit(ctx, bad); !errors.Is(err, ErrInvalid) {
		t.Fatalf("model %q: %v, want ErrInvalid", bad.Model, err)
	}
	submit("a", "ncf")
	for s := 0; s <= 120; s += 10 {
		if _, err := c.Progress(ctx, "a", float64(100*s), 0); err != nil {
			t.Fatal(err)
		}
		now = now.Add(10 * time.Second)
	}
	submit("b", "ncf")
	submit("c", "bert")
	if tr, _, err := c.Trainer(ctx, "b"); err != nil || tr.Model != "ncf" {
		t.Fatalf("b saved with model %q (%v), want ncf", tr.Model, err)
	}
	if on, n, err := c.OnModelCurve(ctx, "b"); err != nil || !on || n != 1 {
		t.Fatalf("OnModelCurve(b) = %v, %d, %v: want planned on a's curve", on, n, err)
	}
	if on, _, err := c.OnModelCurve(ctx, "c"); err != nil || on {
		t.Fatalf("OnModelCurve(c) = %v, %v: want not (another model)", on, err)
	}
	if _, err := c.Cancel(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Cancel(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	submit("d", "ncf")
	if on, n, err := c.OnModelCurve(ctx, "d"); err != nil || !on || n != 1 {
		t.Fatalf("OnModelCurve(d) after a ended = %v, %d, %v: want planned on a's saved curve", on, n, err)
	}
}
