package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/store"
)

// TestSaveRoundsMatchOneSave: a store saved round after round (which
// rewrites only what changed: the allocations of the Trainers that moved;
// and compares with what it wrote last instead of the rows read back)
// loads the same state as a fresh store given only the last round, on a
// random pool whose nodes come and go, whose Trainers grow, shrink, are
// preempted, end and are submitted again under an ended one's name, and
// whose state is reloaded from a smaller one (nodes the store has and the
// state has not). Its tables, row by row, are those of a store given the
// same rounds that reads the tables back at every save; between rounds it
// is reopened (a crash: nothing remembered), edited by hand, written by
// another process, and a save of it fails half-way.
// With the curve learner off (CurvesLinear) a running Trainer's spec
// stays as it was, and a save updates its progress columns alone.
func TestSaveRoundsMatchOneSave(t *testing.T) {
	for _, curves := range []pool.CurveMode{pool.CurvesGiven, pool.CurvesLinear} {
		t.Run(string(curves), func(t *testing.T) { saveRoundsMatchOneSave(t, curves) })
	}
}

func saveRoundsMatchOneSave(t *testing.T, curves pool.CurveMode) {
	ctx := context.Background()
	dir := t.TempDir()
	db := MustOpen(t, filepath.Join(dir, "rounds.db"))
	rng := rand.New(rand.NewPCG(3, 4))
	p, err := pool.New(pool.Config{TFwd: 10, MaxTrainers: 4, Curves: curves}, pool.State{})
	if err != nil {
		t.Fatal(err)
	}
	curve := alloc.Curve{Nodes: []int{0, 1, 2, 4, 8}, Throughput: []float64{0, 10, 19, 36, 60}}
	now := t0
	prev := p.State()
	submitted := 0
	// ref reads the tables back at every save, as every save did before
	// saves remembered what they wrote.
	ref := MustOpen(t, filepath.Join(dir, "ref.db"))
	var fast, full int // db's saves of each path, over its handles
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
		switch round % 10 {
		case 1:
			// The service's next round: a new handle given what the
			// last one wrote (it compares with that, not the tables).
			f, u := db.SavePaths()
			fast, full = fast+f, full+u
			mem := db.Memory()
			db.Close()
			db = MustOpen(t, filepath.Join(dir, "rounds.db"))
			db.Remember(mem)
		case 3:
			// A crash between rounds: a new handle remembers nothing.
			f, u := db.SavePaths()
			fast, full = fast+f, full+u
			db.Close()
			db = MustOpen(t, filepath.Join(dir, "rounds.db"))
		case 5:
			// An admin's hand edit of a node, a Trainer and an allocation
			// (in both stores: a save keeps a hand-edited launch).
			for _, q := range []string{
				"UPDATE nodes SET job = 'hand' WHERE name = (SELECT min(name) FROM nodes)",
				"UPDATE trainers SET spec = json_set(spec, '$.launch.launcher', 'hand'), done = -1 WHERE status = 'running'",
				"DELETE FROM allocations WHERE node = (SELECT min(node) FROM allocations)",
			} {
				for _, s := range []*store.DB{db, ref} {
					if _, err := s.SQL().ExecContext(ctx, q); err != nil {
						t.Fatal(err)
					}
				}
			}
		case 7:
			// Another process saves a round of its own (a node and a
			// Trainer otherwise), in both stores.
			o := st
			o.Nodes = slices.Clone(st.Nodes)
			o.Trainers = slices.Clone(st.Trainers)
			if len(o.Nodes) > 0 {
				o.Nodes[0].Job = "other"
			}
			if len(o.Trainers) > 0 {
				o.Trainers[0].Done++
				o.Trainers[0].Nodes = nil
			}
			// db's memory is handed across the other's save, as a
			// service's round to round across a command's: its token
			// is no longer the stored one.
			f, u := db.SavePaths()
			fast, full = fast+f, full+u
			mem := db.Memory()
			db.Close()
			for _, name := range []string{"rounds.db", "ref.db"} {
				other := MustOpen(t, filepath.Join(dir, name))
				if err := other.Save(ctx, &store.Round{State: o, AppliedID: int64(round)}); err != nil {
					t.Fatal(err)
				}
				other.Close()
			}
			db = MustOpen(t, filepath.Join(dir, "rounds.db"))
			db.Remember(mem)
		case 9:
			// A save that fails after writing rows: an allocation on a
			// node the store has not. Nothing of it stays, in the tables
			// or in what db remembers.
			if i := slices.IndexFunc(st.Trainers, func(tr pool.Trainer) bool { return len(tr.Nodes) > 0 }); i >= 0 {
				o := st
				o.Nodes = slices.Clone(st.Nodes)
				o.Nodes[0].Job = "failed"
				o.Trainers = slices.Clone(st.Trainers)
				o.Trainers[i].Done++
				o.Trainers[i].Nodes = append(slices.Clone(o.Trainers[i].Nodes), alloc.Node{Name: "nowhere"})
				if err := db.Save(ctx, &store.Round{State: o, AppliedID: int64(round)}); err == nil {
					t.Fatalf("round %d: a save with an allocation on an unknown node succeeded", round)
				}
			}
		}
		if err := db.Save(ctx, &store.Round{State: st, Ended: ended, AppliedID: int64(round), PrevNow: prev.Now, PrevTotal: prev.Totals}); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if k := round % 10; k == 1 || k == 7 {
			// The handle just opened saved once: with what it was handed
			// (round 1), or reading the tables back, as another process
			// wrote after the memory was (round 7).
			f, u := db.SavePaths()
			if wantFast := k == 1; f+u != 1 || (f == 1) != wantFast {
				t.Fatalf("round %d: a handle given its predecessor's memory saved %d times fast, %d full; want fast %v", round, f, u, wantFast)
			}
		}
		ref.Forget()
		if err := ref.Save(ctx, &store.Round{State: st, Ended: ended, AppliedID: int64(round), PrevNow: prev.Now, PrevTotal: prev.Totals}); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if got, want := tables(t, db), tables(t, ref); got != want {
			t.Fatalf("round %d: the store that remembers its saves holds\n%s\nthe one that reads them back\n%s", round, lineDiff(got, want), lineDiff(want, got))
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
	f, u := db.SavePaths()
	fast, full = fast+f, full+u
	// Full: the first save of each handle (9), after each hand edit (8),
	// other process (8) and failed save (8); fast: the rest.
	if fast < 40 || full < 25 {
		t.Fatalf("saves compared with what was written: %d, that read the tables back: %d; want both ways exercised", fast, full)
	}
}

// tables prints every row of the state tables, as stored (meta but the
// last save's token).
func tables(t *testing.T, db *store.DB) string {
	t.Helper()
	out := ""
	for _, q := range []string{
		"SELECT name, state, since, ord, job, trainer FROM nodes ORDER BY name",
		"SELECT " + strings.ReplaceAll(trainerCols, "\n", " ") + " FROM trainers ORDER BY id",
		"SELECT trainer, node, pos FROM allocations ORDER BY trainer, pos",
		"SELECT day, idle_node_seconds, used_node_seconds FROM usage ORDER BY day",
		"SELECT key, value FROM meta WHERE key <> 'state_written' ORDER BY key",
	} {
		rows, err := db.SQL().Query(q)
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			v := make([]any, len(cols))
			p := make([]any, len(cols))
			for i := range v {
				p[i] = &v[i]
			}
			if err := rows.Scan(p...); err != nil {
				t.Fatal(err)
			}
			out += fmt.Sprintf("%q\n", v)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// lineDiff returns a's lines that b has not.
func lineDiff(a, b string) string {
	in := map[string]bool{}
	for _, l := range strings.Split(b, "\n") {
		in[l] = true
	}
	out := ""
	for _, l := range strings.Split(a, "\n") {
		if !in[l] {
			out += l + "\n"
		}
	}
	return out
}

// trainerCols are the trainers table's columns.
const trainerCols = `id, owner, status, launcher, min_nodes, max_nodes, samples, done, rate, node_count,
	rescale_loss, preempt_loss, rescales, preemptions, node_seconds, pending_cost,
	submitted, admitted, ended, seq, spec`

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
	var cpu time.Duration
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
		c0 := cpuTime(b)
		b.StartTimer()
		if err := db.Save(ctx, &store.Round{State: st, AppliedID: int64(i + 1), PrevNow: prev.Now, PrevTotal: prev.Totals}); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		cpu += cpuTime(b) - c0
		prev = st
	}
	// The process's CPU time in the saves (the machine is shared: wall
	// time says more about the neighbours than about the save).
	b.ReportMetric(float64(cpu.Microseconds())/1e3/float64(b.N), "cpu-ms/op")
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestEndedAndResubmittedInOneRound: a Trainer that ends in a round and a
// new one submitted under its name in the same round are two rows: the
// ended one renamed NAME~SEQ with its final state, the new one under the
// name. (The save wrote the new one first, over the ended one's running
// row, and the end then overwrote it: the new submission was lost.)
func TestEndedAndResubmittedInOneRound(t *testing.T) {
	ctx := context.Background()
	db := MustOpen(t, filepath.Join(t.TempDir(), "r.db"))
	curve := alloc.Curve{Nodes: []int{0, 1, 2}, Throughput: []float64{0, 10, 19}}
	old := pool.Trainer{Spec: pool.Spec{ID: "t1", Owner: "alice", Min: 1, Max: 2, Curve: curve, Submit: t0}, Status: pool.Running, Admitted: t0}
	st := pool.State{Now: t0, Trainers: []pool.Trainer{old}}
	launch := map[string]store.Launch{"t1": {Launcher: "exec"}}
	if err := db.Save(ctx, &store.Round{State: st, Launch: launch, AppliedID: 1}); err != nil {
		t.Fatal(err)
	}
	at := t0.Add(time.Minute)
	ended := old
	ended.Status, ended.Ended, ended.Done = pool.Finished, at, 42
	fresh := pool.Trainer{Spec: pool.Spec{ID: "t1", Owner: "bob", Min: 1, Max: 2, Curve: curve, Submit: at}, Status: pool.Queued}
	st = pool.State{Now: at, Trainers: []pool.Trainer{fresh}}
	if err := db.Save(ctx, &store.Round{State: st, Ended: []pool.Trainer{ended}, Launch: map[string]store.Launch{"t1": {Launcher: "torchrun"}}, AppliedID: 2, PrevNow: t0}); err != nil {
		t.Fatal(err)
	}
	all, err := db.Trainers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tr := range all {
		got = append(got, fmt.Sprintf("%s %s %s %s %g", tr.ID, tr.Owner, tr.Status, tr.Launch.Launcher, tr.Done))
	}
	want := []string{"t1~1 alice finished exec 42", "t1 bob queued torchrun 0"}
	if !slices.Equal(got, want) {
		t.Fatalf("trainers %q, want %q", got, want)
	}
}
