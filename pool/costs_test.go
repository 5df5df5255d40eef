package pool_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/pool"
)

// TestMeasuredCosts: the submitted R is a prior counted twice in a
// running median of the measurements; reclaims are kept apart from
// graceful shrinks (a reclaim costs R_down until one is measured); the
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
		reclaim    float64
		measuredUp int
	}{
		{"one up: the prior outvotes it", pool.CostUp, 0.1, 18, 12, 12, 1},
		{"two: halfway", pool.CostUp, 0.3, (0.3 + 18) / 2, 12, 12, 2},
		{"three: the measurements decide", pool.CostUp, 0.2, 0.3, 12, 12, 3},
		{"a down", pool.CostDown, 0.05, 0.3, 12, 12, 3},
		{"a reclaim is no down", pool.CostReclaim, 30, 0.3, 12, 12, 3},
		{"another down", pool.CostDown, 0.07, 0.3, (0.07 + 12) / 2, 12, 3},
		{"another reclaim", pool.CostReclaim, 20, 0.3, (0.07 + 12) / 2, (12 + 20) / 2, 3},
		{"an outlier up moves the median by one rank only", pool.CostUp, 40, (0.3 + 18) / 2, (0.07 + 12) / 2, (12 + 20) / 2, 4},
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
			if got := tr().ReclaimDown(); got != tc.reclaim {
				t.Errorf("reclaim cost = %v, want %v", got, tc.reclaim)
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
	// nothing (no rate), then a reclaim of one of its nodes costs the
	// reclaim estimate · rate.
	decide(t, p)
	if n := len(tr().Nodes); n != 3 {
		t.Fatalf("holds %d nodes, want 3", n)
	}
	rate := tr().Rate
	p.Leave(at(10), []string{"c"}, "job1")
	if got, want := tr().PreemptLoss, 16*rate; got != want {
		t.Fatalf("reclaim charged %v samples, want the reclaim cost %v · rate %v = %v", got, 16, rate, want)
	}
	// Saved and loaded, the measurements come back.
	q, err := pool.New(pool.Config{TFwd: 10}, p.State())
	if err != nil {
		t.Fatal(err)
	}
	qt, _ := q.Trainer("j")
	if qt.RescaleUp() != tr().RescaleUp() || qt.RescaleDown() != tr().RescaleDown() || qt.ReclaimDown() != tr().ReclaimDown() {
		t.Fatalf("after a reload: %v %v %v, want %v %v %v", qt.RescaleUp(), qt.RescaleDown(), qt.ReclaimDown(), tr().RescaleUp(), tr().RescaleDown(), tr().ReclaimDown())
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

// TestCostsBeforeTheSplit: a State saved when reclaims were kept with the
// graceful shrinks (only "up" and "down") reads back as it was charged
// then: a reclaim costs the R_down those give.
func TestCostsBeforeTheSplit(t *testing.T) {
	var c pool.Costs
	if err := json.Unmarshal([]byte(`{"up":[1],"down":[2,2,2]}`), &c); err != nil {
		t.Fatal(err)
	}
	tr := pool.Trainer{Spec: pool.Spec{RUp: 18, RDown: 12}, Measured: c}
	if got := tr.RescaleDown(); got != 2 {
		t.Fatalf("R_down %v, want 2 (three measurements of 2 against the prior twice)", got)
	}
	if got := tr.ReclaimDown(); got != 2 {
		t.Errorf("reclaim cost %v, want R_down 2 (no reclaim kept apart)", got)
	}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"up":[1],"down":[2,2,2]}` {
		t.Errorf("written back as %s: no reclaim field when none is measured", b)
	}
}

// TestKillLoss: Config.KillLoss adds to every reclaim, never to a graceful
// shrink or a move.
func TestKillLoss(t *testing.T) {
	for _, kill := range []time.Duration{0, 30 * time.Second} {
		p := mustNew(t, pool.Config{TFwd: 10, KillLoss: kill})
		p.Join(at(0), []string{"a", "b"}, "")
		if err := p.Submit(at(0), pool.Spec{ID: "j", Min: 1, Max: 2, Curve: linear(2, 100), RUp: 1, RDown: 3}); err != nil {
			t.Fatal(err)
		}
		p.Admit()
		decide(t, p)
		tr, _ := p.Trainer("j")
		rate := tr.Rate
		p.Leave(at(10), []string{"b"}, "main")
		if got, want := tr.PreemptLoss, (3+kill.Seconds())*rate; !near(got, want) {
			t.Errorf("kill loss %v: reclaim charged %v, want (R_down 3 + %v) · rate %v = %v", kill, got, kill.Seconds(), rate, want)
		}
	}
}
