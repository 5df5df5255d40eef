package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/store"
)

// TestSaveRoundsMatchOneSave: a store saved round after round (which
// rewrites only what changed: the allocations of the Trainers that moved)
// loads the same state as a fresh store given only the last round, on a
// random pool whose nodes come and go, whose Trainers grow, shrink, are
// preempted, end and are submitted again under an ended one's name, and
// whose state is reloaded from a smaller one (nodes the store has and the
// state has not).
func TestSaveRoundsMatchOneSave(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db := MustOpen(t, filepath.Join(dir, "rounds.db"))
	rng := rand.New(rand.NewPCG(3, 4))
	p, err := pool.New(pool.Config{TFwd: 10, MaxTrainers: 4}, pool.State{})
	if err != nil {
		t.Fatal(err)
	}
	curve := alloc.Curve{Nodes: []int{0, 1, 2, 4, 8}, Throughput: []float64{0, 10, 19, 36, 60}}
	now := t0
	prev := p.State()
	submitted := 0
	for round := range 80 {
		now = now.Add(time.Duration(1+rng.IntN(30)) * time.Second)
		var names []string
		for range 1 + rng.IntN(6) {
			names = append(names, fmt.Sprintf("n%02d", rng.IntN(40)))
		}
		switch rng.IntN(4) {
		case 0, 1:
			p.Join(now, names, "")
		case 2:
			p.Leave(now, names, "job")
		default:
			p.Release(now, names, "")
		}
		if rng.IntN(3) == 0 {
			// A new Trainer, its name sometimes an ended one's.
			id := fmt.Sprintf("t%d", submitted)
			if submitted > 0 && rng.IntN(3) == 0 {
				id = fmt.Sprintf("t%d", rng.IntN(submitted))
			}
			if err := p.Submit(now, pool.Spec{ID: id, Min: 1, Max: 8, Curve: curve, RUp: 1, RDown: 1, Samples: 1e3 + 1e4*rng.Float64()}); err == nil {
				submitted++
			}
		}
		p.Step(pool.Event{At: now})
		if _, err := p.Decide(ctx, alloc.Exact{}, true); err != nil {
			t.Fatal(err)
		}
		var ended []pool.Trainer
		for _, c := range p.Changes() {
			if c.Kind == pool.Ended {
				ended = append(ended, *c.Final)
			}
		}
		st := p.State()
		if round == 50 {
			// Reload from a state missing the free nodes n3x: the store
			// has them, the next round's state has not.
			st.Nodes = st.Nodes[:0:0]
			for _, n := range p.State().Nodes {
				if n.Trainer == "" && n.State == pool.Idle && n.Name >= "n30" {
					continue
				}
				st.Nodes = append(st.Nodes, n)
			}
			if p, err = pool.New(p.Config(), st); err != nil {
				t.Fatal(err)
			}
			st = p.State()
		}
		if err := db.Save(ctx, &store.Round{State: st, Ended: ended, AppliedID: int64(round), PrevNow: prev.Now, PrevTotal: prev.Totals}); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		prev = st
		got := load(t, db)
		one := MustOpen(t, filepath.Join(dir, fmt.Sprintf("one%d.db", round)))
		if err := one.Save(ctx, &store.Round{State: st, AppliedID: int64(round)}); err != nil {
			t.Fatal(err)
		}
		want := load(t, one)
		if got != want {
			t.Fatalf("round %d: the store saved round by round loads\n%s\nthe one saved once\n%s", round, got, want)
		}
		if q, err := pool.New(p.Config(), mustSnap(t, db).State); err != nil {
			t.Fatal(err)
		} else if a, b := fmt.Sprintf("%+v", q.State()), fmt.Sprintf("%+v", st); a != b {
			t.Fatalf("round %d: state changed through the store:\n got %s\nwant %s", round, a, b)
		}
		one.Close()
	}
	if submitted < 10 {
		t.Fatalf("only %d Trainers submitted: the test exercised little", submitted)
	}
}

func mustSnap(t *testing.T, db *store.DB) *store.Snapshot {
	t.Helper()
	snap, err := db.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// load prints a store's nodes, running and queued Trainers with their
// node lists in order.
func load(t *testing.T, db *store.DB) string {
	t.Helper()
	snap := mustSnap(t, db)
	out := ""
	for _, n := range snap.State.Nodes {
		out += fmt.Sprintf("node %s %s %s %d %s %s\n", n.Name, n.State, n.Since.Format(time.RFC3339Nano), n.Order, n.Job, n.Trainer)
	}
	for _, tr := range snap.State.Trainers {
		out += fmt.Sprintf("trainer %s %s %v\n", tr.ID, tr.Status, alloc.Names(tr.Nodes))
	}
	return out
}

// BenchmarkSaveRound saves a round of an exascale pool (10,624 nodes,
// 1,000 running Trainers) after an event: 16 nodes leave, 16 join, one
// decision (issue 23: saving the state is a stage of the decision).
func BenchmarkSaveRound(b *testing.B) {
	ctx := context.Background()
	db := MustOpen(b, filepath.Join(b.TempDir(), "bench.db"))
	p, err := pool.New(pool.Config{TFwd: 10, MaxTrainers: 1000}, pool.State{})
	if err != nil {
		b.Fatal(err)
	}
	curve := alloc.Curve{Nodes: []int{0, 1, 2, 4, 8, 16}, Throughput: []float64{0, 10, 19, 36, 60, 100}}
	for j := range 1000 {
		if err := p.Submit(t0, pool.Spec{ID: fmt.Sprintf("t%04d", j), Min: 1, Max: 16, Curve: curve, RUp: 1, RDown: 1, Samples: 1e9}); err != nil {
			b.Fatal(err)
		}
	}
	var names []string
	for i := range 10624 {
		names = append(names, fmt.Sprintf("n%05d", i))
	}
	p.Join(t0, names, "")
	p.Step(pool.Event{At: t0})
	if _, err := p.Decide(ctx, alloc.Exact{}, false); err != nil {
		b.Fatal(err)
	}
	prev := p.State()
	if err := db.Save(ctx, &store.Round{State: prev, AppliedID: 0}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		at := t0.Add(time.Duration(i+1) * time.Second)
		var gone, come []string
		for k := range 16 {
			gone = append(gone, fmt.Sprintf("n%05d", (i*16+k)%10624))
			come = append(come, fmt.Sprintf("x%05d-%02d", i, k))
		}
		p.Leave(at, gone, "main")
		p.Join(at, come, "")
		if _, err := p.Decide(ctx, alloc.Exact{}, false); err != nil {
			b.Fatal(err)
		}
		st := p.State()
		b.StartTimer()
		if err := db.Save(ctx, &store.Round{State: st, AppliedID: int64(i + 1), PrevNow: prev.Now, PrevTotal: prev.Totals}); err != nil {
			b.Fatal(err)
		}
		prev = st
	}
}
