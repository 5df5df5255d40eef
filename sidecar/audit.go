package sidecar

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"time"

	"github.com/bftrainer/bftrainer/accounting"
	"github.com/bftrainer/bftrainer/store"
	"github.com/bftrainer/bftrainer/trainer/wire"
)

// The audit: the proof an admin shows users that bftrainer never touched
// their jobs. The history is checked against the scheduler's own accounting
// (Slurm's sacct), job by job, node by node, and the other way round.

// Kinds of audit violation, the values of AuditViolation.Kind.
const (
	// AuditLateLeave: a node of the pool was still in it when a main job
	// started there (no leave recorded by the start plus the tolerance).
	AuditLateLeave = "late-leave"
	// AuditTrainerStarted: a Trainer process was started on a node while a
	// main job held it.
	AuditTrainerStarted = "trainer-started"
	// AuditKillLate: Trainer processes on the node were killed after the
	// job's own processes had started (plus the tolerance) by something
	// other than the job's own node prolog (which runs before any of
	// them, by Slurm's ordering: kill-unclean judges its kill).
	AuditKillLate = "kill-late"
	// AuditKillUnclean: the kill did not account for every process (a
	// survivor, a degraded kill, an error).
	AuditKillUnclean = "kill-unclean"
	// AuditEarlyJoin: a node joined the pool while a main job held it.
	AuditEarlyJoin = "early-join"
	// AuditUnexplainedLeave: a leave in the history with no job of the
	// scheduler's to explain it (a job the accounting does not know, or
	// does not show on the node at that time).
	AuditUnexplainedLeave = "unexplained-leave"
)

// AuditViolation is one thing the history and the accounting disagree on.
type AuditViolation struct {
	Kind   string    `json:"kind"`
	Job    string    `json:"job,omitempty"`
	Node   string    `json:"node"`
	At     time.Time `json:"at"`
	Detail string    `json:"detail"`
}

// AuditReport is an audit's outcome.
type AuditReport struct {
	From       time.Time        `json:"from"`
	To         time.Time        `json:"to"`
	Tolerance  time.Duration    `json:"-"`
	Lead       time.Duration    `json:"-"`
	Jobs       int              `json:"jobs"`         // main jobs in the accounting that ran in the window
	Checked    int              `json:"jobs_on_pool"` // of those, the ones that ran on a node the pool had held
	Nodes      int              `json:"pool_nodes"`   // pool nodes those jobs ran on
	Leaves     int              `json:"leaves"`       // leaves in the window, each checked against the accounting
	Violations []AuditViolation `json:"violations"`
}

// AuditOptions says how strict an audit is.
type AuditOptions struct {
	// Tolerance is the clock skew allowed between the history (the
	// controller's and the nodes' clocks, sub-second) and the accounting
	// (whole seconds, truncated).
	Tolerance time.Duration
	// Lead is how long before a job's start its controller prolog may have
	// recorded the leave (Slurm runs PrologSlurmctld before the start it
	// accounts; a prolog that waits is still the job's).
	Lead time.Duration
}

// DefaultAuditOptions are the audit's defaults: 2 s of clock tolerance
// (sacct's whole seconds plus skew), 10 minutes of lead.
var DefaultAuditOptions = AuditOptions{Tolerance: 2 * time.Second, Lead: 10 * time.Minute}

// auditKinds are the events the audit reads.
var auditKinds = []store.Kind{store.KindJoin, store.KindIdle, store.KindLeave, store.KindRelease, store.KindKill, store.KindAction}

// Audit reads the configured scheduler's accounting for the window (or
// listing, when the caller read it already: a file an admin saved) and the
// history, and checks one against the other (CheckAudit).
func (c *Core) Audit(ctx context.Context, from, to time.Time, listing *accounting.Listing, o AuditOptions) (*AuditReport, error) {
	if !to.After(from) {
		return nil, invalid(fmt.Errorf("audit: the window %s to %s is empty", from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339)))
	}
	if listing == nil {
		// To the lead past the window: a leave near its end is explained
		// by a job that starts just after it.
		var err error
		if listing, err = c.readAccounting(ctx, from, to.Add(o.Lead)); err != nil {
			return nil, err
		}
	}
	db, err := c.openRead(ctx)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	// Every node event up to the window's end (a node's state at a job's
	// start depends on what came before the window), and everything up to
	// the lead after it (a leave recorded for a job that starts then).
	evs, err := db.Events(ctx, store.Filter{Until: to.Add(o.Lead), Kinds: auditKinds})
	if err != nil {
		return nil, err
	}
	r := CheckAudit(listing.Jobs, evs, from, to, o)
	return &r, nil
}

// ErrNoAccounting says the configured scheduler has no accounting bftrainer
// reads, or its program is not installed here.
var ErrNoAccounting = errors.New("no scheduler accounting to audit against")

func (c *Core) readAccounting(ctx context.Context, from, to time.Time) (*accounting.Listing, error) {
	s, ok := c.o.Schedulers.Default()
	if c.o.Scheduler != "" {
		s, ok = c.o.Schedulers.Lookup(c.o.Scheduler)
	}
	if !ok || s.Accounting == nil {
		return nil, fmt.Errorf("%w: scheduler %q has none (give the accounting as a file)", ErrNoAccounting, s.Name)
	}
	prog, set := c.o.Listings[s.Accounting.Key]
	if !set {
		prog = s.Accounting.Program
	}
	if prog == "" {
		return nil, fmt.Errorf("%w: [scheduler] %s is off in the configuration", ErrNoAccounting, s.Accounting.Key)
	}
	if _, err := exec.LookPath(prog); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrNoAccounting, prog, err)
	}
	return s.Accounting.Read(ctx, prog, from, to)
}

// nodeEvent is one event on one node.
type nodeEvent struct {
	at  time.Time
	ev  *store.Event
	idx int // position in the history: the tie-break
}

// CheckAudit checks the history against the accounting's jobs over the
// window [from, to] (pure: no clock, no I/O). For every job that ran in the
// window on a node the pool had held, on each such node:
//   - the node left the pool by the job's start plus the tolerance
//     (AuditLateLeave);
//   - no Trainer process was started there while the job held it
//     (AuditTrainerStarted);
//   - what the node prolog killed there was gone by the time the job's own
//     processes started (the first step's start, else the job's), plus the
//     tolerance (AuditKillLate), and the kill was clean (AuditKillUnclean);
//   - the node did not rejoin the pool before the job ended
//     (AuditEarlyJoin).
//
// And the other way: every leave the hooks recorded in the window names a
// job the accounting shows on that node, starting within the lead after it
// (AuditUnexplainedLeave). Leaves recorded by sync or the reconciler's
// start check are the scheduler's own node states, read at that moment,
// and explained by them.
func CheckAudit(jobs []accounting.Job, evs []store.Event, from, to time.Time, o AuditOptions) AuditReport {
	r := AuditReport{From: from, To: to, Tolerance: o.Tolerance, Lead: o.Lead}
	byNode := map[string][]nodeEvent{}
	for i := range evs {
		e := &evs[i]
		for _, n := range e.Nodes {
			byNode[n] = append(byNode[n], nodeEvent{e.At, e, i})
		}
	}
	for _, es := range byNode {
		slices.SortStableFunc(es, func(a, b nodeEvent) int { return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.idx, b.idx)) })
	}
	add := func(kind, job, node string, at time.Time, format string, args ...any) {
		r.Violations = append(r.Violations, AuditViolation{Kind: kind, Job: job, Node: node, At: at.UTC(), Detail: fmt.Sprintf(format, args...)})
	}
	nodes := map[string]bool{}
	for _, j := range jobs {
		if j.End.Before(from) || j.Start.After(to) {
			continue
		}
		r.Jobs++
		checked := false
		for _, n := range j.Nodes {
			es := byNode[n]
			if !everInPool(es, j.End) {
				continue
			}
			checked, nodes[n] = true, true
			auditJobNode(j, n, es, o, add)
		}
		if checked {
			r.Checked++
		}
	}
	r.Nodes = len(nodes)
	auditLeaves(jobs, evs, from, to, o, add)
	slices.SortStableFunc(r.Violations, func(a, b AuditViolation) int {
		return cmp.Or(a.At.Compare(b.At), cmp.Compare(a.Node, b.Node), cmp.Compare(a.Kind, b.Kind))
	})
	for _, e := range evs {
		if e.Kind == store.KindLeave && !e.At.Before(from) && !e.At.After(to) {
			r.Leaves++
		}
	}
	return r
}

// everInPool reports whether the node joined the pool before t.
func everInPool(es []nodeEvent, t time.Time) bool {
	for _, e := range es {
		if !e.at.Before(t) {
			return false
		}
		if e.ev.Kind == store.KindJoin || e.ev.Kind == store.KindIdle {
			return true
		}
	}
	return false
}

// inPoolAt reports whether the node was in the pool at t: its last join,
// idle, leave or release at or before t was a join or an idle check. A
// join at or after end (the job's own end, for a job shorter than the
// tolerance) does not count.
func inPoolAt(es []nodeEvent, t, end time.Time) (in bool) {
	for _, e := range es {
		if e.at.After(t) {
			break
		}
		switch e.ev.Kind {
		case store.KindJoin, store.KindIdle:
			if e.at.Before(end) {
				in = true
			}
		case store.KindLeave, store.KindRelease:
			in = false
		}
	}
	return in
}

func auditJobNode(j accounting.Job, n string, es []nodeEvent, o AuditOptions, add func(kind, job, node string, at time.Time, format string, args ...any)) {
	startBy := j.Start.Add(o.Tolerance)
	if inPoolAt(es, startBy, j.End) {
		left := "and it never left"
		for _, e := range es {
			if e.at.After(startBy) && e.ev.Kind == store.KindLeave {
				left = fmt.Sprintf("it left at %s, %.3f s after the start", e.at.UTC().Format(time.RFC3339Nano), e.at.Sub(j.Start).Seconds())
				break
			}
		}
		add(AuditLateLeave, j.ID, n, j.Start, "in the pool when the job started at %s; %s", j.Start.UTC().Format(time.RFC3339), left)
	}
	procsFrom := j.Start
	if !j.StepStart.IsZero() {
		procsFrom = j.StepStart
	}
	// The job held the node over [Start, End); an event within the
	// tolerance of either end is the clocks', not a violation.
	for _, e := range es {
		if !e.at.After(j.Start) || !e.at.Before(j.End) {
			continue
		}
		switch e.ev.Kind {
		case store.KindAction:
			if e.ev.Context == "start" && e.ev.Error == "" && e.at.After(startBy) {
				add(AuditTrainerStarted, j.ID, n, e.at, "Trainer %s started on the node while the job held it (%s to %s)",
					e.ev.Trainer, j.Start.UTC().Format(time.RFC3339), j.End.UTC().Format(time.RFC3339))
			}
		case store.KindJoin, store.KindIdle:
			if e.at.After(startBy) && e.at.Before(j.End.Add(-o.Tolerance)) {
				add(AuditEarlyJoin, j.ID, n, e.at, "joined the pool (%s, source %s) while the job held it, until %s",
					e.ev.Kind, e.ev.Source, j.End.UTC().Format(time.RFC3339))
			}
		}
	}
	// The node prolog's kills for this job (or, unnamed, within its hold).
	for _, e := range es {
		if e.ev.Kind != store.KindKill {
			continue
		}
		mine := e.ev.Job == j.ID || (e.ev.Job == "" && !e.at.Before(j.Start.Add(-o.Lead)) && e.at.Before(j.End))
		if !mine {
			continue
		}
		killed := e.ev.HasVal && e.ev.Value > 0
		// The job's own node prolog kills before any process of the job
		// starts on the node: Slurm starts no step (the batch script
		// included) on a node before its prolog returns. The accounting's
		// step start is when slurmctld launched the step, not when it ran:
		// under load the prologs run seconds after it (the pilot: a kill
		// 2.1 s after sacct's start, the job's first line 1 s after the
		// kill). Grid Engine's start_time, too, is before its prolog ran.
		// A kill that names the job is its own prolog's (Slurm's
		// prolog_slurmd; Grid Engine's prolog, on the master host, for
		// every host of the job): it is proven clean or not by
		// kill-unclean; kill-late is for kills the job's prolog did not
		// make.
		ownProlog := e.ev.Job == j.ID
		if killed && !ownProlog && e.at.After(procsFrom.Add(o.Tolerance)) {
			add(AuditKillLate, j.ID, n, e.at, "killed %g Trainer process(es) %.3f s after the job's own processes started (%s)",
				e.ev.Value, e.at.Sub(procsFrom).Seconds(), procsFrom.UTC().Format(time.RFC3339))
		}
		if why := uncleanKill(e.ev); why != "" {
			add(AuditKillUnclean, j.ID, n, e.at, "%s", why)
		}
	}
}

// uncleanKill says why a kill record does not prove the node clean, or "".
func uncleanKill(e *store.Event) string {
	if e.Error != "" {
		return "the kill reported an error: " + e.Error
	}
	if len(e.Detail) == 0 {
		return ""
	}
	var rep wire.KillReport
	if err := json.Unmarshal(e.Detail, &rep); err != nil {
		return ""
	}
	switch {
	case len(rep.Survivors) > 0:
		return fmt.Sprintf("process(es) %v survived the kill", rep.Survivors)
	case !rep.Clean && rep.Escapes != "":
		return fmt.Sprintf("the kill was %s: %s", rep.Containment, rep.Escapes)
	}
	return ""
}

// auditLeaves checks each leave the hooks recorded in the window against
// the accounting.
func auditLeaves(jobs []accounting.Job, evs []store.Event, from, to time.Time, o AuditOptions, add func(kind, job, node string, at time.Time, format string, args ...any)) {
	byID := map[string][]accounting.Job{}
	for _, j := range jobs {
		byID[j.ID] = append(byID[j.ID], j)
	}
	for _, e := range evs {
		if e.Kind != store.KindLeave || e.At.Before(from) || e.At.After(to) {
			continue
		}
		if e.Source == syncSource || e.Source == "reconciler" || e.Source == "cli" {
			continue // the scheduler's own node states, or an admin's word
		}
		for _, n := range e.Nodes {
			if why := unexplained(e, n, byID, jobs, o); why != "" {
				add(AuditUnexplainedLeave, e.Job, n, e.At, "%s", why)
			}
		}
	}
}

// unexplained says why a hook's leave of node n has no job to explain it, or
// "".
func unexplained(e store.Event, n string, byID map[string][]accounting.Job, jobs []accounting.Job, o AuditOptions) string {
	fits := func(j accounting.Job) bool {
		return slices.Contains(j.Nodes, n) && !e.At.Before(j.Start.Add(-o.Lead)) && !e.At.After(j.End.Add(o.Tolerance))
	}
	if e.Job != "" {
		cands, ok := byID[e.Job]
		if !ok {
			return fmt.Sprintf("left for job %s (hook %s), which the accounting does not list as run", e.Job, e.Context)
		}
		for _, j := range cands {
			if fits(j) {
				return ""
			}
		}
		return fmt.Sprintf("left for job %s (hook %s), which the accounting does not show on %s within %v of that time", e.Job, e.Context, n, o.Lead)
	}
	for _, j := range jobs {
		if fits(j) {
			return ""
		}
	}
	return fmt.Sprintf("left with no job (source %s, hook %s) and no job of the accounting on the node then", e.Source, e.Context)
}
