package sidecar

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/bftrainer/bftrainer/hooks"
	"github.com/bftrainer/bftrainer/journal"
	"github.com/bftrainer/bftrainer/store"
	"github.com/bftrainer/bftrainer/trainer/wire"
)

// Killer kills every Trainer process of ours on a node: the node agent,
// in process for HookOptions.Killer (trainer.NewNodeAgent), through its
// client for HookOptions.RemoteKiller (trainer.AgentClient).
type Killer interface {
	// KillAll kills what runs on the given node and reports it once they
	// are gone (the report says what was sent to which process, also
	// with an error). It runs in the node's prolog, with fence: new
	// starts are refused until the epilog, so that a re-plan made just
	// before the reclaim cannot start a Trainer there. An error means
	// something of ours may remain.
	KillAll(ctx context.Context, node string, fence bool) (wire.KillReport, error)
	// Clean runs in the node's epilog: what is left is killed too, and
	// the node may take Trainers again.
	Clean(ctx context.Context, node string) (wire.KillReport, error)
}

// Hook handles one scheduler hook call, the instant path, and always
// returns within the hook deadline: whatever happens inside (a bad
// environment, an unreadable configuration, a full or read-only journal,
// a panic), the error goes to the hook log, and to the history when it can,
// and the scheduler's job is never delayed, failed or drained by us. Nor
// is the event lost: when the deadline passes after the call's record is
// prepared but before the journal took it (its filesystem hung, the
// process starved), Hook writes the same record (same ID) to the fallback
// before it returns, unless the call's own write takes it first; when
// neither takes it within a second Hook.Deadline (no fallback configured,
// full, hung too) it logs it whole, to be put back by hand; the hung
// write may still land, and the record is ingested once, by its ID. So Hook returns within Hook.Deadline, twice
// it at most when the record is still to be saved at the deadline. A
// hook never opens the database: no reader of it can delay a hook. env
// is the hook's environment; args are its arguments after `bftrainer hook`
// (a registered scheduler's name first, optionally; see hooks.Input).
//
// What a call does:
//
//   - Reclaim (the controller's prolog): record the hook and a leave of the
//     job's nodes in one journal record, then nudge the reconciler.
//   - Release (the controller's epilog): record a release; the nodes join
//     once the scheduler reports them exactly idle.
//   - KillLocal and CleanupLocal (a node's own prolog and epilog): kill
//     our processes on this node first, from the local registry, with no
//     database and no network — even when the call is only partly
//     understood, or the configuration did not load; then record it, but
//     only where the journal exists (the controller, or a single
//     machine): a compute node never gets one.
//   - A Reclaim or Release that is the only hook its scheduler runs for
//     the job (Call.OnlyHook: Grid Engine's prolog and epilog, on a
//     compute node) does both: it kills (or cleans up) on every node of the
//     job first — here from the local registry, on the others through
//     their node agents (RemoteKiller), all at once — then records the
//     leave (or release) with the kills, where the journal exists.
//
// It never solves and never waits for a re-plan.
func (c *Core) Hook(ctx context.Context, env hooks.Env, args []string) {
	started := c.o.Hook.Started
	if started.IsZero() {
		started = c.o.Now()
	}
	if c.o.Hook.ConfigErr != nil {
		c.o.Hook.Log.Printf("hook: %v", c.o.Hook.ConfigErr)
	}
	ctx, cancel := context.WithTimeout(ctx, c.o.Hook.Deadline)
	defer cancel()
	type result struct {
		label string
		err   error
	}
	done := make(chan result, 1)
	p := newProgress()
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- result{"", fmt.Errorf("panic: %v\n%s", r, debug.Stack())}
			}
		}()
		label, err := c.hook(ctx, env, args, started, p)
		done <- result{label, err}
	}()
	label := strings.Join(append([]string{"hook"}, args...), " ")
	report := func(r result) {
		if r.label != "" {
			label = "hook " + r.label
		}
		if r.err != nil {
			c.o.Hook.Log.Printf("%s: %v", label, r.err)
		}
	}
	select {
	case r := <-done:
		report(r)
	case <-ctx.Done():
		// On a starved machine (a process that did not run for a while)
		// the deadline and the end come together: a call that has ended,
		// or whose record is written (what is left, the reconciler's
		// nudge, its service's interval covers), did its work in time for
		// the scheduler's purposes, and says nothing of a deadline.
		select {
		case r := <-done:
			report(r)
		default:
			if p.rec.Load() == nil || p.written.Load() {
				if !p.quiet.Load() {
					c.o.Hook.Log.Printf("%s: deadline %v exceeded; exiting 0 to leave the scheduler's job alone", label, c.o.Hook.Deadline)
				}
				return
			}
			c.rescue(label, p)
		}
	}
}

// progress is how far a call's work has gone, for Hook at its deadline.
type progress struct {
	rec     atomic.Pointer[journal.Record] // the call's record, once prepared (events built, ID chosen)
	written atomic.Bool                    // the journal (or its fallback) took rec
	wrote   chan struct{}                  // closed once written is set
	quiet   atomic.Bool                    // rec is written and nothing is left to log
}

func newProgress() *progress { return &progress{wrote: make(chan struct{})} }

// markWritten says the call's own write took its record.
func (p *progress) markWritten() {
	if p.written.CompareAndSwap(false, true) {
		close(p.wrote)
	}
}

// rescue saves the call's record at the deadline when it is prepared but
// its write has not returned (the journal's filesystem hung, the process
// starved): the same record, same ID, goes to the fallback, while the
// call's own write may still return. Whichever takes the record first
// within the grace (Hook.Deadline again) ends the call, with one line
// that says where the record is; when neither does — no fallback
// configured, full, hung too, and the journal still hung — the whole
// record goes to the hook log, to be put back by hand. The write still
// under way may land later too: ingestion is by ID, and the record is
// recorded once. A call starved past its deadline just before its write
// (1,000 hook processes on two busy cores) so ends a little late with its
// record in the journal, not in the log to be restored by hand.
func (c *Core) rescue(label string, p *progress) {
	rec := p.rec.Load()
	deadline := c.o.Now()
	write := c.writeFallback
	if write == nil {
		write = c.journal.WriteFallback
	}
	grace := c.fallbackGrace
	if grace <= 0 {
		grace = c.o.Hook.Deadline
	}
	type result struct {
		w   journal.Written
		err error
	}
	fell := make(chan result, 1)
	go func() {
		w, err := write(*rec)
		fell <- result{w, err}
	}()
	if c.afterDeadline != nil {
		c.afterDeadline()
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	var ferr error
	for {
		select {
		case <-p.wrote:
			c.o.Hook.Log.Printf("%s: deadline %v exceeded; the record was written %v after it; exiting 0 to leave the scheduler's job alone",
				label, c.o.Hook.Deadline, c.o.Now().Sub(deadline).Round(time.Millisecond))
			return
		case r := <-fell:
			fell = nil
			if r.err == nil {
				c.o.Hook.Log.Printf("%s: deadline %v exceeded; the journal had not taken the record; recorded in the fallback, %s; exiting 0 to leave the scheduler's job alone",
					label, c.o.Hook.Deadline, r.w.Path)
				return
			}
			ferr = r.err // the journal's own write may still take it
		case <-t.C:
			err := fmt.Errorf("the journal had not taken the record by the deadline, nor the fallback %v later", grace)
			if ferr != nil {
				err = fmt.Errorf("the journal had not taken the record %v after the deadline %v; the fallback: %w", grace, c.o.Hook.Deadline, ferr)
			}
			c.o.Hook.Log.Printf("%s: %v", label, lostRecord(*rec, err))
			return
		}
	}
}

// hook is Hook's work: decode, act, record, trigger. label names the call
// for the log; p follows its record.
func (c *Core) hook(ctx context.Context, env hooks.Env, args []string, started time.Time, p *progress) (label string, err error) {
	name := c.o.Scheduler
	if c.o.Hook.ConfigErr != nil {
		name = "" // not to be trusted either
	}
	if len(args) > 0 {
		if _, ok := c.o.Schedulers.Lookup(args[0]); ok {
			name, args = args[0], args[1:]
		}
	}
	host, _ := c.o.Hook.Hostname()
	in := hooks.Input{Env: env, Args: args, Hostname: host, ReadFile: c.o.Hook.ReadFile}
	s, err := c.o.Schedulers.Choose(name, in)
	if err != nil {
		return "", err
	}
	call, perr := s.Parse(in)
	st := stages{started: started, configured: c.o.Hook.Configured, decoded: c.o.Now()}
	label = strings.TrimSpace(s.Name + " " + call.Context)
	// Calls that run on a compute node record only where the database is.
	local := call.Action == hooks.KillLocal || call.Action == hooks.CleanupLocal || call.OnlyHook
	if perr == nil && call.Action == hooks.Ignore {
		return label, nil
	}
	var errs []error
	if perr != nil {
		errs = append(errs, perr)
	}
	// Act first: a node's kill needs nothing but the local registry.
	evs, killed, kerr := c.act(ctx, call)
	st.acted = c.o.Now()
	if kerr != nil {
		errs = append(errs, kerr)
	}
	if c.o.Hook.ConfigErr != nil {
		// Without a trustworthy configuration we do not know the
		// database: record nothing, trigger nothing.
		return label, errors.Join(errs...)
	}
	if local {
		// A compute node has no journal: its kill is in the node's
		// registry and the controller's history has the job's leave.
		if _, err := os.Stat(c.o.Journal); err != nil {
			return label, errors.Join(errs...)
		}
	}
	if perr != nil {
		// A call not understood is recorded as an error, with what was
		// decoded, never as a hook event the reconciler would act on.
		evs = append([]store.Event{{At: started, Kind: store.KindError, Source: s.Name, Context: call.Context,
			Ms: ms(c.o.Now().Sub(started)), HasMs: true, Error: errors.Join(errs...).Error()}}, evs...)
		if err := c.record(evs, started, !local, p); err != nil {
			errs = append(errs, err)
		}
		return label, errors.Join(errs...)
	}
	evs = append([]store.Event{c.hookEvent(call, st, killed, errs)}, evs...)
	if err := c.record(evs, started, !local, p); err != nil {
		return label, errors.Join(append(errs, err)...)
	}
	p.quiet.Store(len(errs) == 0) // errors still to log: the deadline says it
	if (call.Action == hooks.Reclaim || call.Action == hooks.Release) && c.o.Trigger != nil {
		if err := c.o.Trigger(); err != nil {
			errs = append(errs, fmt.Errorf("start reconciler: %w", err))
		}
	}
	return label, errors.Join(errs...)
}

// act does what the call asks of this node and returns the events that
// say so: a kill for the node's own hooks (when it killed something or
// failed), a leave for a reclaim, a release for a release. killed is the
// processes killed, -1 when no kill ran.
func (c *Core) act(ctx context.Context, call hooks.Call) (evs []store.Event, killed int, err error) {
	switch call.Action {
	case hooks.Reclaim, hooks.Release:
		ev := callEvent(call, c.o.Now())
		if !call.OnlyHook {
			return []store.Event{ev}, -1, nil
		}
		evs, killed, err = c.killJob(ctx, call)
		return append([]store.Event{ev}, evs...), killed, err
	case hooks.KillLocal, hooks.CleanupLocal:
	default:
		return nil, -1, nil
	}
	if c.o.Hook.Killer == nil || call.Local == "" {
		return nil, -1, nil
	}
	ev, n, err := c.kill(ctx, c.o.Hook.Killer, call, call.Local, call.Action == hooks.CleanupLocal)
	if ev == nil {
		return nil, n, err
	}
	return []store.Event{*ev}, n, err
}

// remoteKills bounds the node agents an OnlyHook call reaches at once.
const remoteKills = 32

// killJob kills (Reclaim) or cleans up (Release) on every node of an
// OnlyHook call's job, all at once: Local from this machine's registry,
// the others through RemoteKiller (left to the reconciler's runner without
// one). It returns the kill events in the job's node order and the
// processes killed (-1 when no kill ran).
//
// The kills get half the hook's deadline: the call's record (the job's
// leave above all) is written after them, and a node agent that does not
// answer — a hung ssh, a kill that ignores its context — must not keep it
// from being written in time. A kill still under way then is an error of
// the record, and goes on in the background while the process lives.
func (c *Core) killJob(ctx context.Context, call hooks.Call) ([]store.Event, int, error) {
	clean := call.Action == hooks.Release
	type result struct {
		i   int
		ev  *store.Event
		n   int
		err error
	}
	kctx, cancel := context.WithTimeout(ctx, c.o.Hook.Deadline/2)
	defer cancel()
	done := make(chan result, len(call.Nodes))
	sem := make(chan struct{}, remoteKills)
	pending := map[int]bool{}
	for i, node := range call.Nodes {
		k := c.o.Hook.RemoteKiller
		if node == call.Local {
			k = c.o.Hook.Killer
		}
		if k == nil {
			continue
		}
		pending[i] = true
		go func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			ev, n, err := c.kill(kctx, k, call, node, clean)
			done <- result{i, ev, n, err}
		}()
	}
	res := make([]*result, len(call.Nodes))
	for len(pending) > 0 {
		select {
		case r := <-done:
			res[r.i] = &r
			delete(pending, r.i)
		case <-kctx.Done():
			for i := range pending {
				res[i] = &result{i: i, err: fmt.Errorf("kill on %s: no answer within %v: %w", call.Nodes[i], c.o.Hook.Deadline/2, kctx.Err())}
			}
			clear(pending)
		}
	}
	var evs []store.Event
	var errs []error
	killed := -1
	for _, r := range res {
		if r == nil {
			continue
		}
		killed = max(killed, 0) + r.n
		if r.ev != nil {
			evs = append(evs, *r.ev)
		}
		if r.err != nil {
			errs = append(errs, r.err)
		}
	}
	return evs, killed, errors.Join(errs...)
}

// kill runs one kill (or clean-up) on node with k and returns its event —
// for a clean-up, nil when it killed nothing and failed in nothing — and
// what it killed.
func (c *Core) kill(ctx context.Context, k Killer, call hooks.Call, node string, clean bool) (*store.Event, int, error) {
	start := c.o.Now()
	var rep wire.KillReport
	var err error
	if clean {
		rep, err = k.Clean(ctx, node)
	} else {
		rep, err = k.KillAll(ctx, node, true)
	}
	if err != nil {
		err = fmt.Errorf("kill on %s: %w", node, err)
	}
	killed := rep.Count()
	if killed == 0 && err == nil && clean {
		// An epilog's clean-up that found nothing (the rule: nothing of
		// ours runs beside a main job) keeps no event. A reclaim's kill
		// always does, nothing killed included: every reclaim's time is
		// in the history, and the audit sees the prolog ran.
		return nil, 0, nil
	}
	ev := killEvent(call, node, rep, c.o.Now().Sub(start), err, c.o.Now())
	return &ev, killed, err
}

// stages are the moments of a hook call, for its record: where the
// hook's own time went (what runs before Started — exec, the Go runtime,
// package initialisation — and after the record — the journal's write,
// the exit — is not in it: `bftrainer-bench hook` times exec to exit).
type stages struct {
	started, configured, decoded, acted time.Time
}

// ms returns the stages' durations in milliseconds: config (the
// configuration read), decode (the call parsed) and
// act (the node's kill, or the events built), each from the one before.
func (s stages) ms() map[string]float64 {
	out := map[string]float64{}
	prev := s.started
	if !s.configured.IsZero() {
		out["config"] = ms(s.configured.Sub(prev))
		prev = s.configured
	}
	out["decode"] = ms(s.decoded.Sub(prev))
	out["act"] = ms(s.acted.Sub(s.decoded))
	return out
}

// hookEvent is the history's row for the call itself; its detail has the
// call's stages (stages_ms).
func (c *Core) hookEvent(call hooks.Call, st stages, killed int, errs []error) store.Event {
	started := st.started
	detail := map[string]any{"action": call.Action.String(), "stages_ms": st.ms()}
	if call.Local != "" {
		detail["local"] = call.Local
	}
	if killed >= 0 {
		detail["killed"] = killed
	}
	d, _ := json.Marshal(detail)
	ev := store.Event{At: started, Kind: store.KindHook, Source: call.Scheduler, Context: call.Context,
		Job: call.JobID, User: call.User, Nodes: call.Nodes, Detail: d, Ms: ms(c.o.Now().Sub(started)), HasMs: true}
	if len(errs) > 0 {
		ev.Error = errors.Join(errs...).Error()
	}
	return ev
}

// record is the hook's one write: its events, complete, as one record in
// the journal (or its fallback), which the reconciler ingests exactly
// once. It takes no lock and waits on no reader of the database. The
// record, its ID chosen, is published to p before the write, for Hook to
// save at its deadline if the write has not returned (rescue). When
// neither directory takes it, the whole record goes to the hook log, to
// be put back by hand: an event is never dropped in silence. A controller
// hook (create) running as root makes a missing journal first, as the
// reconciler would: the first job after an install is not logged only.
func (c *Core) record(evs []store.Event, started time.Time, create bool, p *progress) error {
	rec := journal.Record{At: started, Events: evs}
	id, err := journal.NewID()
	if err != nil {
		return lostRecord(rec, err)
	}
	rec.ID = id
	pub := rec
	p.rec.Store(&pub)
	write := c.write
	if write == nil {
		write = c.journal.Write
	}
	w, err := write(rec)
	if err != nil && create && os.Geteuid() == 0 && errors.Is(err, os.ErrNotExist) {
		if cerr := c.createJournal(); cerr == nil {
			w, err = write(rec)
		}
	}
	if err != nil {
		return lostRecord(rec, err)
	}
	p.markWritten()
	if w.Primary != nil {
		c.o.Hook.Log.Printf("record hook: %v; recorded in the fallback, %s", w.Primary, w.Path)
	}
	return nil
}

// lostRecord is the error of a record neither the journal nor its
// fallback took (why: err), with the whole record, to be saved by hand as
// its Name in the journal; ingestion takes it once, by its ID, even if a
// write still under way lands it too.
func lostRecord(rec journal.Record, err error) error {
	b, jerr := json.Marshal(rec)
	if jerr != nil {
		return fmt.Errorf("record hook: %w; the record cannot be written out either: %v", err, jerr)
	}
	return fmt.Errorf("record hook: %w; the record, to save as %s in the journal: %s", err, rec.Name(), b)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
