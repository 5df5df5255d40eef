package pool_test

import (
	"errors"
	"testing"

	"github.com/bftrainer/bftrainer/pool"
)

// TestMeasuredCosts: the submitted R is a prior counted twice in a
// running median of the measurements; reclaims count as R_down; the
// estimate reaches the allocator's problem and the pool's accounting,
// survives a save and load, and follows only the last KeepCosts.
func TestMeasuredCosts(t *testing.T) {
	p, err := pool.New(pool.Config{TFwd: 10}, pool.State{})
	if err != nil {
		t.Fatal(err)
	}
	p.Join(at(0), []string{"a", "b", "c"}, "")
	if err := p.Submit(at(0), pool.Spec{ID: "j", Min: 1, Max: 3, Curve: linear(3, 100), RUp: 18, RDown: 12}); err != nil {
		t.Fatal(err)
	}
	p.Admit()
	tr := func() *pool.Trainer { x, _ := p.Trainer("j"); return x }
	for _, tc := range []struct {
		name       string
		dir        string
		seconds    float64
		up, down   float64
		measuredUp int
	}{
		{"one up: the prior outvotes it", pool.CostUp, 0.1, 18, 12, 1},
		{"two: halfway", pool.CostUp, 0.3, (0.3 + 18) / 2, 12, 2},
		{"three: the measurements decide", pool.CostUp, 0.2, 0.3, 12, 3},
		{"a reclaim is a down", pool.CostReclaim, 1.5, 0.3, 12, 3},
		{"a down", pool.CostDown, 0.05, 0.3, (1.5 + 12) / 2, 3},
		{"another reclaim", pool.CostReclaim, 0.9, 0.3, 1.5, 3},
		{"an outlier up moves the median by one rank only", pool.CostUp, 40, (0.3 + 18) / 2, 1.5, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := p.MeasuredCost("j", tc.dir, tc.seconds); err != nil {
				t.Fatal(err)
			}
			if got := tr().RescaleUp(); got != tc.up {
				t.Errorf("R_up = %v, want %v", got, tc.up)
			}
			if got := tr().RescaleDown(); got != tc.down {
				t.Errorf("R_down = %v, want %v", got, tc.down)
			}
			if got := len(tr().Measured.Up); got != tc.measuredUp {
				t.Errorf("%d up costs kept, want %d", got, tc.measuredUp)
			}
			if tr().RUp != 18 || tr().RDown != 12 {
				t.Errorf("the submitted values changed: %v %v", tr().RUp, tr().RDown)
			}
		})
	}
	pr := p.Problem()
	if got := pr.Trainers[0]; got.RUp != tr().RescaleUp() || got.RDown != tr().RescaleDown() {
		t.Fatalf("the problem has R_up %v, R_down %v; the Trainer's estimate is %v, %v", got.RUp, got.RDown, tr().RescaleUp(), tr().RescaleDown())
	}
	// The accounting charges the estimate too: a scale-up from 0 costs
	// nothing (no rate), then a reclaim of one of its nodes costs R_down ·
	// rate.
	decide(t, p)
	if n := len(tr().Nodes); n != 3 {
		t.Fatalf("holds %d nodes, want 3", n)
	}
	rate := tr().Rate
	p.Leave(at(10), []string{"c"}, "job1")
	if got, want := tr().PreemptLoss, 1.5*rate; got != want {
		t.Fatalf("reclaim charged %v samples, want R_down %v · rate %v = %v", got, 1.5, rate, want)
	}
	// Saved and loaded, the measurements come back.
	q, err := pool.New(pool.Config{TFwd: 10}, p.State())
	if err != nil {
		t.Fatal(err)
	}
	qt, _ := q.Trainer("j")
	if qt.RescaleUp() != tr().RescaleUp() || qt.RescaleDown() != tr().RescaleDown() {
		t.Fatalf("after a reload: %v %v, want %v %v", qt.RescaleUp(), qt.RescaleDown(), tr().RescaleUp(), tr().RescaleDown())
	}
	// Only the last KeepCosts count: enough consistent new values
	// replace old ones entirely.
	for range pool.KeepCosts {
		if err := p.MeasuredCost("j", pool.CostUp, 2); err != nil {
			t.Fatal(err)
		}
	}
	if got := tr().RescaleUp(); got != 2 || len(tr().Measured.Up) != pool.KeepCosts {
		t.Fatalf("after %d measurements of 2 s: R_up %v from %d kept", pool.KeepCosts, got, len(tr().Measured.Up))
	}
	for _, bad := range []struct {
		id, dir string
		s       float64
	}{{"j", "sideways", 1}, {"j", pool.CostUp, -1}, {"nobody", pool.CostUp, 1}} {
		if err := p.MeasuredCost(bad.id, bad.dir, bad.s); err == nil {
			t.Errorf("MeasuredCost(%q, %q, %v) accepted", bad.id, bad.dir, bad.s)
		}
	}
	if err := p.MeasuredCost("nobody", pool.CostUp, 1); !errors.Is(err, pool.ErrUnknownTrainer) {
		t.Errorf("unknown trainer: %v", err)
	}
}
