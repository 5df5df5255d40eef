package sidecar

import (
	"context"

	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/hooks"
	"github.com/bftrainer/bftrainer/journal"
	"github.com/bftrainer/bftrainer/names"
	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/store"
)

// Status is the pool and its Trainers now — the saved state with the
// events no round has folded yet, brought to now (as Preview, without
// solving; releases folded as a round would, without asking the
// scheduler) — and how far to trust it: what waits to be recorded or
// folded, whether hooks are failing, whether a reconciler has run lately,
// whether the database can be written. Front doors render it field by
// field, by its JSON names, so a field added here shows in every format.
type Status struct {
	Database        string `json:"database"`
	Idle            int    `json:"idle"`             // nodes in the pool, free or lent
	IdleNodes       string `json:"idle_nodes"`       // as a hostlist
	Lent            int    `json:"lent"`             // idle nodes held by Trainers
	Free            int    `json:"free"`             // idle nodes held by none
	Completing      int    `json:"completing"`       // released, not yet exactly idle
	CompletingNodes string `json:"completing_nodes"` // as a hostlist
	// Planned are released nodes the scheduler holds for a pending
	// job's planned start (Slurm's "plnd", a backfill reservation): not
	// completing, and they join no pool until the scheduler lets them go
	// or the job lands. Asked of the scheduler's listing, when it
	// answers; otherwise they count as completing.
	Planned      int    `json:"planned"`
	PlannedNodes string `json:"planned_nodes"` // as a hostlist
	Busy         int    `json:"busy"`          // the scheduler's
	// Containment is how this machine contains Trainer processes:
	// "cgroup", or "degraded (why)"; "" when the core has no local killer.
	Containment     string `json:"containment,omitempty"`
	TrainersRunning int    `json:"trainers_running"` // admitted and holding nodes
	TrainersWaiting int    `json:"trainers_waiting"` // admitted, holding no node: nothing of them runs
	TrainersQueued  int    `json:"trainers_queued"`
	MaxTrainers     int    `json:"max_trainers"`
	// Starts is false when rounds start no Trainer process
	// (trainer.transport = "none"): Trainers the pool runs are planned
	// only.
	Starts   bool `json:"starts_trainers"`
	Unfolded int  `json:"unfolded_events"` // recorded events no reconciler has folded yet (shown as if it had)
	// LastRound is when a reconciler last saved the pool (zero: never).
	LastRound time.Time `json:"last_round"`
	// Journal is what the hooks recorded that the history does not have
	// yet.
	Journal Backlog `json:"journal"`
	// HookErrors are the errors hooks, and the journal's ingestion,
	// recorded in the last hour.
	HookErrors Errors `json:"hook_errors"`
	// Writable is why the database cannot be written now; nil when it can
	// (as far as this process can tell).
	Writable error `json:"not_writable,omitempty"`
	// StandIn is the stand-in's path while rounds run on it (the
	// database's filesystem read-only: standin.go); what status shows
	// is read from it then.
	StandIn string `json:"standin,omitempty"`
	// Stale says, one sentence each, what makes this view out of date or
	// the system unwell; empty when all is well.
	Stale    []string        `json:"stale"`
	Trainers []StatusTrainer `json:"trainers"` // running and waiting, in admission order

	// Pool is the folded pool itself, for Go callers.
	Pool *pool.Pool `json:"-"`
}

// StatusTrainer is one admitted Trainer in a Status.
type StatusTrainer struct {
	Trainer string `json:"trainer"`
	Owner   string `json:"owner"`
	State   string `json:"state"` // running, or waiting: it holds no node (ShownStatus)
	Nodes   int    `json:"nodes"`
	Names   string `json:"names"` // as a hostlist
}

// ShownStatus is a Trainer's status as users read it: "waiting" for an
// admitted Trainer that holds no node (it runs nothing: none given yet,
// all reclaimed, or backing off after a failed start), its pool status
// otherwise.
func ShownStatus(t pool.Trainer) string {
	if t.Waiting() {
		return "waiting"
	}
	return string(t.Status)
}

// Backlog is the journal's waiting records.
type Backlog struct {
	Records int       `json:"records"`
	Oldest  time.Time `json:"oldest"`
	Err     error     `json:"error,omitempty"` // the journal cannot be read (an ordinary user may not)
}

// Errors is a count of error rows and the newest one.
type Errors struct {
	Count int         `json:"count"`
	Since time.Time   `json:"since"`
	Last  store.Event `json:"-"`
}

// containment is a Killer that can say how it contains processes (the
// node agent: wire.Cgroup, or "degraded (reason)").
type containment interface{ Mode() string }

// hookErrorWindow is how far back status looks for hook errors.
const hookErrorWindow = time.Hour

// Status reads the pool and its health; nothing is saved or applied, no
// solver runs (status works without one).
func (c *Core) Status(ctx context.Context) (*Status, error) {
	db, err := c.openRead(ctx)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	f, err := c.foldNow(ctx, db)
	if err != nil {
		return nil, err
	}
	p := f.pool
	now := c.o.Now()
	st := &Status{Database: c.o.Database, MaxTrainers: c.o.Pool.MaxTrainers, Unfolded: f.events, Trainers: []StatusTrainer{},
		Pool: p, LastRound: f.snap.State.Now, Starts: c.Starts()}
	if k, ok := c.o.Hook.Killer.(containment); ok {
		st.Containment = k.Mode()
	}
	var idle, completing []string
	for _, n := range p.State().Nodes {
		switch n.State {
		case pool.Idle:
			idle = append(idle, n.Name)
			if n.Trainer != "" {
				st.Lent++
			}
		case pool.Pending:
			completing = append(completing, n.Name)
		case pool.Busy:
			st.Busy++
		}
	}
	st.Idle, st.IdleNodes = len(idle), names.CompressHostlist(idle)
	st.Free = st.Idle - st.Lent
	planned := c.plannedOf(ctx, completing)
	completing = slices.DeleteFunc(completing, func(n string) bool { return slices.Contains(planned, n) })
	st.Completing, st.CompletingNodes = len(completing), names.CompressHostlist(completing)
	st.Planned, st.PlannedNodes = len(planned), names.CompressHostlist(planned)
	st.TrainersQueued = len(p.Queued())
	for _, t := range p.Running() {
		if t.Waiting() {
			st.TrainersWaiting++
		} else {
			st.TrainersRunning++
		}
		st.Trainers = append(st.Trainers, StatusTrainer{Trainer: t.ID, Owner: t.Owner, State: ShownStatus(*t), Nodes: len(t.Nodes),
			Names: names.CompressHostlist(alloc.Names(t.Nodes))})
	}
	st.Journal.Records, st.Journal.Oldest, st.Journal.Err = c.journal.Backlog()
	since := now.Add(-hookErrorWindow)
	sources := append(c.o.Schedulers.Names(), journal.Source)
	n, last, err := db.Errors(ctx, since, sources...)
	if err != nil {
		return nil, err
	}
	st.HookErrors = Errors{Count: n, Since: since, Last: last}
	st.Writable = c.writable()
	st.StandIn = c.StandIn()
	st.Stale = c.stale(st, now)
	return st, nil
}

// plannedTimeout bounds status's question to the scheduler's listing.
const plannedTimeout = 5 * time.Second

// plannedOf returns the nodes of released that the scheduler's listing
// says it holds for a planned start (hooks.Listing.Planned); none when
// it has no such state, is turned off, or does not answer in time.
func (c *Core) plannedOf(ctx context.Context, released []string) []string {
	if len(released) == 0 {
		return nil
	}
	q, _ := c.listing("")
	hq, ok := q.(hooks.Query)
	if !ok || hq.Listing == nil || hq.Listing.Planned == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, plannedTimeout)
	defer cancel()
	states, err := hq.NodeStates(ctx, released)
	if err != nil {
		c.o.Log.Printf("status: %v", err)
		return nil
	}
	var out []string
	for _, n := range released {
		if hq.Listing.Planned(states[n]) {
			out = append(out, n)
		}
	}
	return out
}

// Starts reports whether rounds start Trainer processes: false when the
// runner is none (trainer.transport = "none"), or cannot be built here.
func (c *Core) Starts() bool {
	if c.o.Runner == nil {
		return false
	}
	run, err := c.o.Runner()
	return err == nil && run != nil
}

// staleAfter is how long recorded work may wait for a reconciler before
// status says none runs: a few service intervals, at least half a minute.
func (c *Core) staleAfter() time.Duration {
	return max(3*c.o.Interval, 30*time.Second)
}

// stale says what is wrong with the view or the system.
func (c *Core) stale(st *Status, now time.Time) []string {
	var out []string
	waitingSince := time.Time{}
	if st.Journal.Records > 0 {
		out = append(out, fmt.Sprintf("%d hook record(s) not yet in the history, the oldest from %s",
			st.Journal.Records, st.Journal.Oldest.UTC().Format(time.RFC3339)))
		waitingSince = st.Journal.Oldest
	}
	if st.Unfolded > 0 {
		out = append(out, fmt.Sprintf("%d recorded event(s) not yet folded by a reconciler (shown as if they were)", st.Unfolded))
		if waitingSince.IsZero() || st.LastRound.Before(waitingSince) {
			waitingSince = st.LastRound
		}
	}
	if !waitingSince.IsZero() && now.Sub(waitingSince) > c.staleAfter() {
		last := "ever"
		if !st.LastRound.IsZero() {
			last = "since " + st.LastRound.UTC().Format(time.RFC3339)
		}
		out = append(out, fmt.Sprintf("no reconciler has run %s, and work waits: is `bftrainer reconcile --watch` (its service) running?", last))
	}
	if st.HookErrors.Count > 0 {
		e := st.HookErrors.Last
		out = append(out, fmt.Sprintf("hooks failing: %d error(s) in the last hour; the last, %s, %s %s: %s",
			st.HookErrors.Count, e.At.UTC().Format(time.RFC3339), e.Source, e.Context, e.Error))
	}
	if st.Writable != nil {
		out = append(out, fmt.Sprintf("the database cannot be written: %v", st.Writable))
	}
	if st.StandIn != "" {
		out = append(out, fmt.Sprintf("rounds run on the stand-in %s, a copy of the database, until the database can be written again; then its records move there", st.StandIn))
	}
	return out
}

// writable tells why the database cannot be written now: its filesystem
// read-only or full, or (for the root reconciler) no permission; nil when
// nothing says it cannot.
func (c *Core) writable() error {
	dir := filepath.Dir(c.o.Database)
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return err
	}
	if fs.Flags&unix.ST_RDONLY != 0 {
		return fmt.Errorf("%s is on a read-only filesystem", dir)
	}
	if fs.Bavail == 0 {
		return fmt.Errorf("the filesystem of %s is full", dir)
	}
	if os.Geteuid() != 0 {
		return nil // an ordinary user is not meant to write it
	}
	for _, p := range []string{c.o.Database, dir} {
		if err := unix.Access(p, unix.W_OK); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	return nil
}
