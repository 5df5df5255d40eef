package pool_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/bftrainer/bftrainer/pool"
)

// TestStateNodesSortedByName: State lists every node once, sorted by name,
// whatever order the nodes came in (joins, leaves and releases of names
// the pool did not know, in random order and batches, State read between
// some of them), and a reload gives the same list.
func TestStateNodesSortedByName(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	p := mustNew(t, pool.Config{TFwd: 50})
	known := map[string]bool{}
	for ev := range 60 {
		var names []string
		for range 1 + rng.IntN(20) {
			names = append(names, fmt.Sprintf("n%04d", rng.IntN(500)))
		}
		switch rng.IntN(3) {
		case 0:
			p.Join(at(ev), names, "")
		case 1:
			p.Leave(at(ev), names, "j")
		default:
			p.Release(at(ev), names, "")
		}
		for _, n := range names {
			known[n] = true
		}
		if rng.IntN(3) > 0 {
			continue
		}
		st := p.State()
		var got []string
		for _, n := range st.Nodes {
			got = append(got, n.Name)
		}
		var want []string
		for n := range known {
			want = append(want, n)
		}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("event %d: State lists %d nodes %v…, want %d sorted", ev, len(got), got[:min(5, len(got))], len(want))
		}
		q, err := pool.New(p.Config(), st)
		if err != nil {
			t.Fatal(err)
		}
		q.Join(at(ev), []string{"a-first", "zz-last"}, "")
		qs := q.State().Nodes
		if len(qs) != len(want)+2 || qs[0].Name != "a-first" || qs[len(qs)-1].Name != "zz-last" {
			t.Fatalf("event %d: a reloaded pool's state is not sorted", ev)
		}
	}
}

// BenchmarkState times State on a 10,624-node pool after an event (16
// nodes leave, 16 new ones join), against the previous State's way of
// listing the nodes (every node copied, then all sorted by name) in the
// same run: the sub-benchmarks "state" and "sortall".
func BenchmarkState(b *testing.B) {
	p := mustNew(b, pool.Config{TFwd: 10})
	var names []string
	for i := range 10624 {
		names = append(names, fmt.Sprintf("n%05d", i))
	}
	p.Join(at(0), names, "")
	round := 0
	event := func() {
		round++
		var gone, come []string
		for k := range 16 {
			gone = append(gone, fmt.Sprintf("n%05d", (round*16+k)%10624))
			come = append(come, fmt.Sprintf("x%05d-%02d", round, k))
		}
		p.Leave(at(round), gone, "main")
		p.Join(at(round), come, "")
	}
	b.Run("state", func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			event()
			b.StartTimer()
			p.State()
		}
	})
	b.Run("sortall", func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			event()
			b.StartTimer()
			st := p.State()
			rng := rand.New(rand.NewPCG(uint64(round), 1))
			rng.Shuffle(len(st.Nodes), func(i, j int) { st.Nodes[i], st.Nodes[j] = st.Nodes[j], st.Nodes[i] })
			slices.SortFunc(st.Nodes, func(a, b pool.Node) int { return strings.Compare(a.Name, b.Name) })
		}
	})
}
