package alloc_test

import (
	"context"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/alloc"
)

// TestAdaptivePlannedHorizon: a free node the scheduler plans a main job
// on is priced only up to its planned start (certainIdle: a new node would
// otherwise stay idle the whole τ = 500 s). Planned in 100 s it is worth
// 100/s·100 s less the sure reclaim R_down·O(1) = 2·100; planned in 1 s it
// is worth less than nothing and a Trainer holding nothing does not take
// it; planned in a day it is worth what an unplanned node is. The plan is
// a horizon, never a refusal.
func TestAdaptivePlannedHorizon(t *testing.T) {
	gain := func(until time.Time) float64 {
		free := nodes("new", 1, 0)
		free[0].Until = until
		p := &alloc.Problem{Trainers: []alloc.Trainer{{ID: "a", Min: 1, Max: 4, Curve: linear, RUp: 3, RDown: 2}},
			Free: free, Now: now, Idle: certainIdle()}
		return alloc.AdaptiveHorizon{}.Gains(p)(0, 1)
	}
	if got, want := gain(time.Time{}), 100.0*500; !approxRel(got, want, 1e-6) {
		t.Errorf("unplanned: %v, want %v", got, want)
	}
	if got, want := gain(now.Add(100*time.Second)), 100.0*100-2*100; !approxRel(got, want, 1e-6) {
		t.Errorf("planned in 100 s: %v, want %v", got, want)
	}
	if got, want := gain(now.Add(24*time.Hour)), 100.0*500; !approxRel(got, want, 1e-6) {
		t.Errorf("planned in a day: %v, want %v", got, want)
	}
	if got := gain(now.Add(time.Second)); got >= 0 {
		t.Errorf("planned in 1 s: %v, want < 0", got)
	}
	for _, c := range []struct {
		name  string
		until time.Time
		want  int
	}{{"in 1 s", now.Add(time.Second), 0}, {"in a day", now.Add(24 * time.Hour), 1}} {
		free := nodes("new", 1, 0)
		free[0].Until = c.until
		p := &alloc.Problem{Trainers: []alloc.Trainer{{ID: "a", Min: 1, Max: 4, Curve: linear, RUp: 3, RDown: 2}},
			Free: free, Now: now, Idle: certainIdle()}
		pl, err := alloc.Adaptive{}.Solve(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		if got := pl.Trainers[0].To; got != c.want {
			t.Errorf("planned %s: takes %d nodes, want %d", c.name, got, c.want)
		}
	}
}

// TestPlacementTakesUnplannedFirst: growth takes unplanned nodes before
// planned ones, however long the planned ones have been idle, and the
// latest planned start before an earlier one; a shrink gives up the
// planned node first.
func TestPlacementTakesUnplannedFirst(t *testing.T) {
	free := []alloc.Node{
		{Name: "old-soon", Since: now.Add(-time.Hour), Until: now.Add(time.Minute)},
		{Name: "old-late", Since: now.Add(-time.Hour), Until: now.Add(time.Hour)},
		{Name: "young", Since: now},
	}
	p := &alloc.Problem{Trainers: []alloc.Trainer{{ID: "a", Min: 1, Max: 4, Curve: linear}}, Free: free, Now: now}
	if got, want := alloc.Place(p, []int{2})[0].Add, []string{"young", "old-late"}; !slices.Equal(got, want) {
		t.Errorf("growth by 2 takes %v, want %v", got, want)
	}
	held := []alloc.Node{{Name: "planned", Since: now.Add(-time.Hour), Until: now.Add(time.Hour)}, {Name: "plain", Since: now}}
	p = &alloc.Problem{Trainers: []alloc.Trainer{{ID: "a", Min: 1, Max: 4, Curve: linear, Held: held}}, Now: now}
	if got, want := alloc.Place(p, []int{1})[0].Release, []string{"planned"}; !slices.Equal(got, want) {
		t.Errorf("shrink by 1 releases %v, want %v", got, want)
	}
}

// Nodes that shrinking Trainers release join the free pool in column
// order, not in the order they were released: growth takes the one idle
// longest first, wherever it came from.
func TestPlacementTakesReleasedInColumnOrder(t *testing.T) {
	at := func(name string, ago time.Duration) alloc.Node { return alloc.Node{Name: name, Since: now.Add(-ago)} }
	p := &alloc.Problem{Now: now,
		Free: []alloc.Node{at("f", 150*time.Minute)},
		Trainers: []alloc.Trainer{
			{ID: "a", Min: 1, Max: 4, Curve: linear, Held: []alloc.Node{at("a1", 3*time.Hour), at("a2", time.Hour)}},
			{ID: "b", Min: 1, Max: 4, Curve: linear, Held: []alloc.Node{at("b1", 4*time.Hour), at("b2", 2*time.Hour)}},
			{ID: "c", Min: 1, Max: 4, Curve: linear},
		}}
	as := alloc.Place(p, []int{0, 0, 3})
	// a releases a2 then a1 (youngest first), b b2 then b1.
	if got, want := as[0].Release, []string{"a2", "a1"}; !slices.Equal(got, want) {
		t.Errorf("a releases %v, want %v", got, want)
	}
	if got, want := as[2].Add, []string{"b1", "a1", "f"}; !slices.Equal(got, want) {
		t.Errorf("c grows onto %v, want %v (idle longest first)", got, want)
	}
}

// Nodes idle since the same moment, in the same order, are taken by name:
// the sort's last key, which the integer keys leave to a second pass.
func TestPlacementBreaksTiesByName(t *testing.T) {
	var free []alloc.Node
	for _, name := range []string{"z", "c", "y", "a", "x", "b"} {
		order := 1
		if name >= "x" {
			order = 0 // x, y, z first
		}
		free = append(free, alloc.Node{Name: name, Since: now.Add(-time.Hour), Order: order})
	}
	p := &alloc.Problem{Trainers: []alloc.Trainer{{ID: "a", Min: 1, Max: 8, Curve: linear}}, Free: free, Now: now}
	if got, want := alloc.Place(p, []int{5})[0].Add, []string{"x", "y", "z", "a", "b"}; !slices.Equal(got, want) {
		t.Errorf("growth by 5 takes %v, want %v", got, want)
	}
	// Adaptive shares its own sort with Place.
	pl, err := alloc.Adaptive{}.Solve(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if got := pl.Trainers[0].Add; len(got) < 3 || !slices.Equal(got[:3], []string{"x", "y", "z"}) {
		t.Errorf("adaptive: growth takes %v, want x, y, z first", got)
	}
}

// A Plan's name lists are stretches of one array (place): each has no
// room past its end, so a caller that appends to one copies it and never
// writes over the next; and Place keeps no pointer into the Problem.
func TestPlacementListsShareNothing(t *testing.T) {
	at := func(name string, ago time.Duration) alloc.Node { return alloc.Node{Name: name, Since: now.Add(-ago)} }
	p := &alloc.Problem{Now: now,
		Free: []alloc.Node{at("f1", time.Hour), at("f2", 2*time.Hour)},
		Trainers: []alloc.Trainer{
			{ID: "a", Min: 1, Max: 4, Curve: linear, Held: []alloc.Node{at("a1", 3*time.Hour), at("a2", time.Hour), at("a3", time.Minute)}},
			{ID: "b", Min: 1, Max: 4, Curve: linear, Held: []alloc.Node{at("b1", 4*time.Hour)}},
			{ID: "c", Min: 1, Max: 4, Curve: linear},
		}}
	as := alloc.Place(p, []int{1, 3, 2})
	want := make([][3][]string, len(as))
	for j, a := range as {
		want[j] = [3][]string{slices.Clone(a.Nodes), slices.Clone(a.Add), slices.Clone(a.Release)}
		if tail := a.Nodes[len(a.Nodes)-len(a.Add):]; !slices.Equal(tail, a.Add) {
			t.Errorf("%s: nodes %v do not end with the nodes it takes, %v", a.ID, a.Nodes, a.Add)
		}
	}
	for _, a := range as {
		for _, l := range [][]string{a.Nodes, a.Add, a.Release} {
			_ = append(l, "written-past-the-end")
		}
	}
	for j, a := range as {
		if got := [3][]string{a.Nodes, a.Add, a.Release}; !reflect.DeepEqual(got, want[j]) {
			t.Errorf("%s after appends to every list: nodes, add, release %v, want %v", a.ID, got, want[j])
		}
	}
	if live, room := alloc.KeptPlaceRefs(); live != 0 || room == 0 {
		t.Errorf("Place's kept lists hold %d pointers in room for %d, want 0 in some", live, room)
	}
}
