package sidecar

import (
	"context"
	"fmt"
	"time"

	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/store"
)

// Timeline is the live pool's node use over a window, rebuilt from the
// history for the same plot a replay draws: at each sample's instant,
// Idle nodes were idle (free or lent), Used were lent to Trainers, and
// Shares lists the Trainers holding nodes, in admission order.
type Timeline struct {
	Times    []time.Time
	Idle     []int
	Used     []int
	Shares   [][]TimelineShare
	Trainers []string // TimelineShare.Trainer indexes it: admission order
	Events   int      // events recorded in the window
	From, To time.Time
}

// TimelineShare is one Trainer's nodes at a sample.
type TimelineShare struct {
	Trainer int
	Nodes   int
}

// timelineKinds are the events the timeline is rebuilt from: the nodes'
// comings and goings, and the Trainers' sizes.
var timelineKinds = []store.Kind{store.KindJoin, store.KindLeave, store.KindRelease, store.KindIdle,
	store.KindAdmit, store.KindRescale, store.KindPreempt, store.KindStartFailed, store.KindEnd}

// Timeline rebuilds node use between since and until (zero: the first
// event; now) at samples instants evenly spread, each the state in force
// then.
//
// The idle nodes are the input events folded into a pool by the pool's
// own rules (a late event of another job is stale, as live), without
// Trainers: joins, leaves, releases, and the idle checks that join
// released nodes. A release whose job no idle check ever followed joined
// at once (the reconciler had no scheduler to ask) — until a scheduler
// that never reports a node idle leaves it pending, which only a sync
// ends; such a node is drawn idle from its release. The Trainers' sizes
// are the decisions' own records: the count after each rescale and
// reclaim, 0 at their end.
func (c *Core) Timeline(ctx context.Context, since, until time.Time, samples int) (*Timeline, error) {
	if samples < 2 {
		return nil, invalid(fmt.Errorf("timeline: %d samples, want at least 2", samples))
	}
	if until.IsZero() {
		until = c.o.Now()
	}
	if !until.After(since) {
		return nil, invalid(fmt.Errorf("timeline: the window %s to %s is empty", since.UTC().Format(time.RFC3339), until.UTC().Format(time.RFC3339)))
	}
	db, err := c.openRead(ctx)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	evs, err := db.Events(ctx, store.Filter{Until: until, Kinds: timelineKinds})
	if err != nil {
		return nil, err
	}
	if len(evs) == 0 {
		return nil, fmt.Errorf("timeline: no node or Trainer events recorded before %s", until.UTC().Format(time.RFC3339))
	}
	if since.Before(evs[0].At) {
		since = evs[0].At
	}
	if !until.After(since) {
		return nil, fmt.Errorf("timeline: nothing recorded between %s and %s", since.UTC().Format(time.RFC3339), until.UTC().Format(time.RFC3339))
	}
	b, err := newTimelineBuilder(evs)
	if err != nil {
		return nil, err
	}
	tl := &Timeline{From: since, To: until}
	span := until.Sub(since)
	k := 0
	for s := range samples {
		at := since.Add(time.Duration(float64(span) * float64(s) / float64(samples-1)))
		for ; k < len(evs) && !evs[k].At.After(at); k++ {
			if !evs[k].At.Before(since) {
				tl.Events++
			}
			b.apply(evs[k])
		}
		b.sample(tl, at)
	}
	tl.Trainers = b.order
	return tl, nil
}

// timelineBuilder folds events into the state a sample records.
type timelineBuilder struct {
	p        *pool.Pool
	joinedAt map[string]bool // jobs whose released nodes an idle check joined
	sizes    map[string]int  // Trainer → nodes
	index    map[string]int  // Trainer → admission order
	order    []string
}

func newTimelineBuilder(evs []store.Event) (*timelineBuilder, error) {
	p, err := pool.New(pool.Config{}, pool.State{})
	if err != nil {
		return nil, err
	}
	b := &timelineBuilder{p: p, joinedAt: map[string]bool{}, sizes: map[string]int{}, index: map[string]int{}}
	for _, ev := range evs {
		if ev.Kind == store.KindIdle {
			b.joinedAt[ev.Job] = true
		}
	}
	return b, nil
}

func (b *timelineBuilder) admitted(id string) {
	if _, ok := b.index[id]; !ok {
		b.index[id] = len(b.order)
		b.order = append(b.order, id)
	}
}

func (b *timelineBuilder) sample(tl *Timeline, at time.Time) {
	var shares []TimelineShare
	used := 0
	for i, id := range b.order {
		if n := b.sizes[id]; n > 0 {
			shares = append(shares, TimelineShare{Trainer: i, Nodes: n})
			used += n
		}
	}
	tl.Times = append(tl.Times, at)
	tl.Idle = append(tl.Idle, b.p.IdleCount())
	tl.Used = append(tl.Used, used)
	tl.Shares = append(tl.Shares, shares)
}
