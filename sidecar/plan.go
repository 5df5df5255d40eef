package sidecar

import (
	"context"
	"log"
	"strings"
	"time"

	"github.com/bftrainer/bftrainer/hooks"
	"github.com/bftrainer/bftrainer/pool"
)

// planSource is the scheduler's plan as the reconciler reads it (never a
// hook): at most once every Every, each read bounded by Timeout, the
// answer cached in between. A read that fails or does not answer in time
// is "no plan" until the next read, with its reason logged: the plan is a
// hint, and without it every reclaim is the prolog's kill, as before.
type planSource struct {
	Name    string // the scheduler's, for the log
	Read    func(ctx context.Context) ([]hooks.PlannedStart, error)
	Every   time.Duration // 0: read at every round
	Timeout time.Duration // 0: planTimeout
	Log     *log.Logger

	read bool // a read was made (at its time)
	at   time.Time
	plan []pool.Planned
	err  error
}

// planTimeout bounds a plan read by default: the reconciler's round waits
// for it, and a scheduler that does not answer in seconds has no plan
// worth waiting for.
const planTimeout = 3 * time.Second

// get returns the plan for a round at now: the cached one while younger
// than Every, else a fresh read.
func (s *planSource) get(ctx context.Context, now time.Time) []pool.Planned {
	if s == nil || s.Read == nil {
		return nil
	}
	if s.read && now.Sub(s.at) < s.Every && !now.Before(s.at) {
		return s.plan
	}
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = planTimeout
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	starts, err := s.Read(rctx)
	s.read, s.at, s.err = true, now, err
	if err != nil {
		s.plan = nil
		if rctx.Err() != nil && ctx.Err() == nil {
			s.Log.Printf("plan: %s did not answer within %v; deciding without a plan", s.Name, timeout)
		} else {
			// One line: squeue's stderr may hold several.
			s.Log.Printf("plan: %s; deciding without a plan", strings.Join(strings.Fields(err.Error()), " "))
		}
		return nil
	}
	s.plan = planFrom(starts)
	return s.plan
}

// planFrom translates the scheduler's planned starts into the pool's.
func planFrom(starts []hooks.PlannedStart) []pool.Planned {
	out := make([]pool.Planned, 0, len(starts))
	for _, p := range starts {
		out = append(out, pool.Planned{Job: p.Job, Nodes: p.Nodes, Start: p.Start})
	}
	return out
}
