package slurm

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/bftrainer/bftrainer/trainer/trainertest"
)

// Step is one line of train.py's progress log.
type Step = trainertest.Step

// ReadSteps parses a progress log; a missing file has no steps yet.
func ReadSteps(path string) ([]Step, error) { return trainertest.ReadSteps(path) }

// Round is one training step as all its ranks logged it.
type Round struct {
	At      time.Time // the first rank's line
	Done    time.Time // the last rank's line: the step is complete
	Step    int
	World   int
	Samples float64  // the job's samples once the step was done
	Nodes   []string // sorted
}

// rounds groups the steps logged at or after since into complete rounds:
// every rank of the world logged the step. Redone steps (after a restart
// from the checkpoint) form rounds of their own when their world differs.
func rounds(steps []Step, since time.Time) []Round {
	type key struct{ step, world int }
	byKey := map[key]*Round{}
	var order []key
	for _, s := range steps {
		if s.At.Before(since) || s.Done || s.World < 1 {
			continue
		}
		k := key{s.Step, s.World}
		r := byKey[k]
		if r == nil {
			r = &Round{At: s.At, Step: s.Step, World: s.World, Samples: s.Samples}
			byKey[k] = r
			order = append(order, k)
		}
		if s.At.After(r.Done) {
			r.Done = s.At
		}
		if !slices.Contains(r.Nodes, s.Node) {
			r.Nodes = append(r.Nodes, s.Node)
		}
	}
	var out []Round
	for _, k := range order {
		r := byKey[k]
		if len(r.Nodes) == r.World {
			slices.Sort(r.Nodes)
			out = append(out, *r)
		}
	}
	return out
}

// WaitRounds waits, at most timeout, until k complete rounds after since
// satisfy ok, and returns the first of them.
func WaitRounds(ctx context.Context, log string, since time.Time, k int, timeout time.Duration, ok func(Round) bool) (Round, error) {
	var first Round
	var last []Round
	err := Poll(ctx, timeout, func() (bool, error) {
		steps, err := ReadSteps(log)
		if err != nil {
			return false, err
		}
		rs := rounds(steps, since)
		last = rs
		n := 0
		for _, r := range rs {
			if ok(r) {
				if n == 0 {
					first = r
				}
				n++
			}
		}
		return n >= k, nil
	})
	if err != nil {
		if len(last) > 6 {
			last = last[len(last)-6:]
		}
		return first, fmt.Errorf("%s: no %d matching training rounds since %s (last rounds %+v): %w", log, k, since.Format("15:04:05.000"), last, err)
	}
	return first, nil
}

// OnNodes matches rounds run on exactly these nodes.
func OnNodes(nodes ...string) func(Round) bool {
	want := slices.Sorted(slices.Values(nodes))
	return func(r Round) bool { return slices.Equal(r.Nodes, want) }
}

// maxStepGap bounds the time between two consecutive steps that counts as
// training: a longer gap is a rescale (workers restarting, torch
// imports, the rendezvous) and trains nothing.
const maxStepGap = 2 * time.Second

// NodeSeconds returns the node-seconds spent training in [from, to):
// for each pair of consecutive rank-0 lines (one step apart, same world,
// at most maxStepGap apart), world × the time between them, clipped to
// the window.
func NodeSeconds(steps []Step, from, to time.Time) float64 {
	var r0 []Step
	for _, s := range steps {
		if s.Rank == 0 && !s.Done && s.World > 0 {
			r0 = append(r0, s)
		}
	}
	slices.SortFunc(r0, func(a, b Step) int { return a.At.Compare(b.At) })
	total := 0.0
	for i := 1; i < len(r0); i++ {
		a, b := r0[i-1], r0[i]
		if b.Step != a.Step+1 || b.World != a.World || b.At.Sub(a.At) > maxStepGap {
			continue
		}
		lo, hi := a.At, b.At
		if lo.Before(from) {
			lo = from
		}
		if hi.After(to) {
			hi = to
		}
		if hi.After(lo) {
			total += float64(a.World) * hi.Sub(lo).Seconds()
		}
	}
	return total
}

// samplesGained returns the job's net progress in [from, to): the
// samples done at its last step before to, minus those at its last step
// before from (a restart from the checkpoint takes the count back, and
// that loss counts).
func samplesGained(steps []Step, from, to time.Time) float64 {
	var before, by Step
	for _, s := range steps {
		if s.At.Before(from) && !s.At.Before(before.At) {
			before = s
		}
		if s.At.Before(to) && !s.At.Before(by.At) {
			by = s
		}
	}
	return max(0, by.Samples-before.Samples)
}

// Change is what one change of a Trainer's world cost, read from its
// progress log (MeasureChange).
type Change struct {
	From, To int
	LastOld  Round   // the last complete step at the old world before the new one's first line
	FirstNew Round   // the first complete step beyond it at the new world
	Redone   int     // steps trained again at the new world (LastOld's and earlier)
	Rate     float64 // samples per second at the new world, over the k steps measured
	// Lost is the training time the change cost, in seconds of the new
	// world: how far the samples done at FirstNew fall short of what the
	// new world alone, training on from LastOld without the change,
	// would have done by then, at Rate:
	//   (FirstNew.Done − LastOld.Done) − (FirstNew.Samples − LastOld.Samples) / Rate.
	// With nothing redone and no world in between, that is the gap
	// between the two steps less one ordinary step at the new size
	// (docs/trainers.md §6). A stall, a formation and the step in flight
	// count; samples a restore took back count at Rate; progress a world
	// in between made is credited at Rate. Never below 0.
	Lost float64
}

// MeasureChange measures a change from world from to world to, in the
// rounds logged at or after since, once k complete steps beyond the old
// world's last are logged at the new world (ok false before that).
func MeasureChange(steps []Step, since time.Time, from, to, k int) (c Change, ok bool) {
	k = max(k, 2)
	var firstLine time.Time
	for _, s := range steps {
		if !s.Done && s.World == to && !s.At.Before(since) && (firstLine.IsZero() || s.At.Before(firstLine)) {
			firstLine = s.At
		}
	}
	if firstLine.IsZero() {
		return c, false
	}
	rs := rounds(steps, since)
	found := false
	for _, r := range rs {
		if r.World == from && r.Done.Before(firstLine) && (!found || r.Done.After(c.LastOld.Done)) {
			c.LastOld, found = r, true
		}
	}
	if !found {
		return c, false
	}
	var beyond []Round
	for _, r := range rs {
		if r.World != to || r.At.Before(firstLine) {
			continue
		}
		if r.Step <= c.LastOld.Step {
			c.Redone++
		} else {
			beyond = append(beyond, r)
		}
	}
	if len(beyond) < k {
		return c, false
	}
	slices.SortFunc(beyond, func(a, b Round) int { return a.Step - b.Step })
	first, last := beyond[0], beyond[k-1]
	span := last.Done.Sub(first.Done).Seconds()
	if span <= 0 || last.Samples <= first.Samples {
		return c, false
	}
	c.From, c.To, c.FirstNew = from, to, first
	c.Rate = (last.Samples - first.Samples) / span
	c.Lost = max(0, first.Done.Sub(c.LastOld.Done).Seconds()-(first.Samples-c.LastOld.Samples)/c.Rate)
	return c, true
}
