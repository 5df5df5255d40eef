package gridengine

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/internal/lab"
	"github.com/bftrainer/bftrainer/store"
)

// TestGridEnginePlannedMove runs the move path on Grid Engine's stated
// plan (its reservations, read from the schedule file): job A holds the
// first host with no run time asked (the scheduler assumes
// default_duration, an hour); an exec Trainer holds the second; job B
// asks for both with a reservation, which the scheduler makes from A's
// assumed end. With a 2-hour lead the reconciler service moves the
// Trainer off the reserved host at once — a `move` row for B, its
// processes stopped there — and lends the host to no one while the
// reservation stands. When A ends, B starts on both hosts and finds
// nothing of the Trainer's; its prolog kills nothing and the Trainer is
// never preempted.
func TestGridEnginePlannedMove(t *testing.T) {
	c, rec := cell(t)
	ctx := context.Background()
	in := newInstall(t, c, rec, func(in *install) { in.planLead = 2 * time.Hour })
	if err := c.WaitIdle(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	first, second := c.Hosts[0], c.Hosts[1]
	a := must[*Job](t)(c.Submit(ctx, JobSpec{Name: "serial", Hosts: []string{first}, Held: true}))
	defer func() {
		if err := endJob(ctx, a); err != nil {
			t.Error(err)
		}
	}()
	must[lab.Report](t)(a.WaitChecked(ctx, time.Minute))
	must[string](t)(in.run(ctx, "sync", "--scheduler", "gridengine"))
	tr := must[string](t)(in.submitSleeper(ctx, "mv"))
	if err := in.waitAgree(ctx, time.Minute, second); err != nil {
		t.Fatal(err)
	}
	if got := must[string](t)(in.held(ctx, second)); got != tr {
		t.Fatalf("%s is lent to %q, want %s", second, got, tr)
	}
	b := must[*Job](t)(c.Submit(ctx, JobSpec{Name: "wide", Slots: 2, Reserve: true, Runtime: 10 * time.Minute, Held: true}))
	defer func() {
		if err := endJob(ctx, b); err != nil {
			t.Error(err)
		}
	}()
	var moves []store.Event
	if err := in.poll(ctx, time.Minute, func() (bool, error) {
		var err error
		moves, err = in.events(ctx, store.Filter{Kinds: []store.Kind{store.KindMove}, Job: b.ID})
		return len(moves) > 0, err
	}); err != nil {
		interval, _ := lastInterval(c)
		t.Fatalf("no move for job %s: %v; the schedule's last run:\n%s", b.ID, err, interval)
	}
	for _, m := range moves {
		t.Logf("move: %s off %v at %s (%s)", m.Trainer, m.Nodes, m.At.Format(time.RFC3339Nano), m.Detail)
		if m.Trainer != tr || !slices.Equal(m.Nodes, []string{second}) {
			t.Errorf("move %s off %v, want %s off %s", m.Trainer, m.Nodes, tr, second)
		}
	}
	// Off the host: the runner stopped the Trainer there, and the pool
	// lends it to no one while the reservation stands.
	if err := in.poll(ctx, time.Minute, func() (bool, error) {
		procs, err := in.trainerProcs()
		if err != nil {
			return false, err
		}
		held, err := in.held(ctx, second)
		return len(procs[second]) == 0 && held == "", err
	}); err != nil {
		t.Fatalf("the Trainer is not off %s after its move: %v", second, err)
	}
	if err := a.Release(); err != nil {
		t.Fatal(err)
	}
	r := must[lab.Report](t)(b.WaitChecked(ctx, time.Minute))
	for _, h := range c.Hosts {
		if p := r.Procs[h]; p != "none" {
			t.Errorf("job %s found Trainer processes on %s: %s", b.ID, h, p)
		}
	}
	kills := must[[]store.Event](t)(in.events(ctx, store.Filter{Kinds: []store.Kind{store.KindKill}, Job: b.ID}))
	for _, k := range kills {
		if k.Value > 0 {
			t.Errorf("job %s's prolog killed %v processes on %v: want nothing left to kill", b.ID, k.Value, k.Nodes)
		}
	}
	if pre := must[[]store.Event](t)(in.events(ctx, store.Filter{Kinds: []store.Kind{store.KindPreempt}, Trainer: tr})); len(pre) > 0 {
		t.Errorf("the Trainer was preempted (%d rows): want only the move", len(pre))
	}
	t.Logf("job %s began %.1f s after the move (A released then: a job the plan assumed would run an hour)", b.ID, r.First.Sub(moves[len(moves)-1].At).Seconds())
}
