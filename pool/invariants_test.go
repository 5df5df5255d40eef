package pool_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/pool"
)

// checkInvariants verifies the pool's bookkeeping: every idle node is free
// or held by exactly one running Trainer, the free list is sorted and
// matches the node table, and the state survives a reload.
func checkInvariants(tb testing.TB, p *pool.Pool) {
	tb.Helper()
	st := p.State()
	idle := map[string]string{}
	for _, n := range st.Nodes {
		if n.State == pool.Idle {
			idle[n.Name] = n.Trainer
		}
	}
	seen := map[string]bool{}
	for _, t := range p.Running() {
		for _, n := range t.Nodes {
			if owner, ok := idle[n.Name]; !ok || owner != t.ID {
				tb.Fatalf("trainer %s holds %s, node table says idle=%v owner=%q", t.ID, n.Name, ok, owner)
			}
			if seen[n.Name] {
				tb.Fatalf("node %s held twice", n.Name)
			}
			seen[n.Name] = true
		}
	}
	free := p.Free()
	for i, n := range free {
		if owner, ok := idle[n.Name]; !ok || owner != "" {
			tb.Fatalf("free node %s: idle=%v owner=%q", n.Name, ok, owner)
		}
		if seen[n.Name] {
			tb.Fatalf("node %s free and held", n.Name)
		}
		seen[n.Name] = true
		if i > 0 && free[i-1].Since.After(n.Since) {
			tb.Fatalf("free list not sorted at %d", i)
		}
	}
	if len(seen) != len(idle) {
		tb.Fatalf("%d idle nodes in the table, %d free or held", len(idle), len(seen))
	}
	q, err := pool.New(p.Config(), st)
	if err != nil {
		tb.Fatalf("reload: %v", err)
	}
	if a, b := fmt.Sprintf("%+v", q.State()), fmt.Sprintf("%+v", st); a != b {
		tb.Fatalf("reload changed the state")
	}
}

func TestRandomEventsKeepInvariants(t *testing.T) {
	solvers := []alloc.Solver{alloc.Exact{}, alloc.EqualShare{}, alloc.Greedy{}}
	for seed := uint64(0); seed < 40; seed++ {
		r := rand.New(rand.NewPCG(seed, 99))
		cfg := pool.Config{TFwd: float64(r.IntN(100)), MaxTrainers: 1 + r.IntN(4), Semantics: alloc.Semantics(r.IntN(2))}
		p := mustNew(t, cfg)
		solver := solvers[r.IntN(len(solvers))]
		nodes := make([]string, 12)
		for i := range nodes {
			nodes[i] = fmt.Sprintf("n%02d", i)
		}
		pick := func() []string {
			var out []string
			for _, n := range nodes {
				if r.IntN(4) == 0 {
					out = append(out, n)
				}
			}
			return out
		}
		sec, submitted := 0, 0
		for step := 0; step < 300; step++ {
			sec += r.IntN(20)
			now := at(sec)
			job := fmt.Sprintf("j%d", r.IntN(3))
			switch r.IntN(7) {
			case 0:
				p.Leave(now, pick(), job)
			case 1:
				p.Join(now, pick(), job)
			case 2:
				p.Release(now, pick(), job)
			case 3:
				s := pool.Spec{ID: fmt.Sprintf("t%d", submitted), Min: 1 + r.IntN(3), Max: 3 + r.IntN(4), Curve: linear(6, 1+r.Float64()*10), RUp: r.Float64() * 20, RDown: r.Float64() * 20, Samples: r.Float64() * 2000}
				submitted++
				if err := p.Submit(now, s); err != nil {
					t.Fatal(err)
				}
			case 4:
				if ts := p.Running(); len(ts) > 0 {
					if err := p.Cancel(now, ts[r.IntN(len(ts))].ID); err != nil {
						t.Fatal(err)
					}
				}
			case 5:
				if ts := p.Running(); len(ts) > 0 {
					tr := ts[r.IntN(len(ts))]
					if err := p.Progress(now, tr.ID, max(0, tr.Done)+r.Float64()*100); err != nil {
						t.Fatal(err)
					}
				}
			default:
				p.Step(pool.Event{At: now})
			}
			p.Admit()
			pr := p.Problem()
			pl, err := solver.Solve(context.Background(), pr)
			if err != nil {
				t.Fatal(err)
			}
			if err := alloc.Check(pr, pl); err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
			if err := p.Commit(pl); err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
			checkInvariants(t, p)
		}
	}
}
