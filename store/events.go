package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/bftrainer/bftrainer/pool"
)

// Kind is an event's kind. It is the pool's own type (pool.Kind): one
// vocabulary for the events the pool folds and changes it reports, and
// for the history's rows, with the kinds the pool knows spelt by its
// constants and the history's own (hooks, kills, solves, actions) added
// here. sidecar/translate.go is where one becomes the other.
type Kind = pool.Kind

// Event kinds. Input kinds are folded into the pool by the reconciler, in
// id order; the others are history written by the reconciler and the
// commands.
const (
	// Inputs.
	KindJoin          = pool.Joined    // nodes exactly idle: join the pool
	KindLeave         = pool.Left      // the scheduler takes nodes
	KindRelease       = pool.Released  // a job ended on nodes not yet idle
	KindSubmit        = pool.Submitted // a Trainer submitted (detail: the spec)
	KindCancel   Kind = "cancel"       // a Trainer cancelled
	KindProgress      = pool.Reported  // a Trainer's own progress report (value: samples)
	KindExit     Kind = "exit"         // a Trainer's processes ended (detail: status)
	KindCost     Kind = "cost"         // a rescale's cost measured by its launcher (value: seconds lost; detail: direction, from, to)
	// KindStart is a round's start of a Trainer, as its runner reported
	// it: error set when it failed (nodes: those it gives back), empty
	// when a start ran (its failures in a row are forgotten).
	KindStart Kind = "start"

	// History.
	KindHook        Kind = "hook"            // a scheduler hook call (context, job, nodes, ms, error)
	KindKill        Kind = "kill"            // processes killed on a node by a hook (reclaim fast path)
	KindAdmit            = pool.Admitted     // a Trainer got a slot
	KindRescale          = pool.Rescaled     // a Trainer's nodes changed by a decision (value: cost)
	KindPreempt          = pool.Preempted    // a reclaim took nodes from a Trainer (value: cost)
	KindMove             = pool.Moved        // a Trainer shrunk gracefully off nodes planned for a main job, before it landed (value: cost; job; detail: from, to, planned start)
	KindEnd              = pool.Ended        // a Trainer ended (detail: status)
	KindStale            = pool.Stale        // an event ignored: the node is held by another job
	KindSolve       Kind = "solve"           // a decision (detail: solver, trainers, status; value: objective; ms)
	KindKept             = pool.Undecided    // a decision that kept the allocation (solver not optimal)
	KindAction      Kind = "action"          // a Trainer process started or stopped (detail)
	KindSync        Kind = "sync"            // a reconciliation with the scheduler's own view
	KindIdle        Kind = "idle"            // released nodes found exactly idle: they joined
	KindError       Kind = "error"           // an error swallowed (hooks fail open)
	KindCurve            = pool.CurveUpdated // the curve learner took an observation (value: samples/s; detail: nodes, seconds, since)
	KindStartFailed      = pool.StartFailed  // a failed start gave a Trainer's nodes back (context: the reason and its back-off)
)

// inputKinds are folded into the pool state.
var inputKinds = []Kind{KindJoin, KindLeave, KindRelease, KindSubmit, KindCancel, KindProgress, KindExit, KindCost, KindStart}

// Kinds returns every event kind the history records, inputs first: what
// a filter by kind may name. A new kind is added to the constants above
// and here.
func Kinds() []Kind {
	return append(slices.Clone(inputKinds), KindHook, KindKill, KindAdmit, KindRescale, KindPreempt, KindMove, KindEnd,
		KindStale, KindSolve, KindKept, KindCurve, KindStartFailed, KindAction, KindSync, KindIdle, KindError)
}

// Event is one row of the history.
type Event struct {
	ID      int64
	At      time.Time
	Kind    Kind
	Source  string // slurm, lsf, pbs, cli, reconciler, trainer
	Context string // hook context or command
	Job     string
	Trainer string
	User    string
	Nodes   []string
	Count   int // node count when Nodes is not listed (solves); else len(Nodes)
	Value   float64
	HasVal  bool // Value is set (NULL otherwise)
	Ms      float64
	HasMs   bool
	Detail  json.RawMessage
	Error   string
	// Origin is an id the writer chose, unique among all events (see
	// AppendOnce); empty for events written directly.
	Origin string
}

// Append adds events to the history in one transaction and returns the
// id of the last. Hooks call it with one or two events.
func (s *DB) Append(ctx context.Context, evs ...Event) (int64, error) {
	var last int64
	err := s.tx(ctx, func(tx *sql.Tx) error {
		var err error
		last, err = appendEvents(ctx, tx, evs)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("append events: %w", err)
	}
	return last, nil
}

// AppendOnce adds, in one transaction and in order, the events whose
// Origin is not recorded yet, and returns how many it added. Every event
// must carry an Origin. Writing the same events again adds nothing: that
// makes ingesting a journal record whose file outlived a crash harmless.
func (s *DB) AppendOnce(ctx context.Context, evs ...Event) (added int, err error) {
	for i := range evs {
		if evs[i].Origin == "" {
			return 0, fmt.Errorf("append events once: event %d (%s) has no origin", i, evs[i].Kind)
		}
	}
	err = s.tx(ctx, func(tx *sql.Tx) error {
		var err error
		added, err = insertEvents(ctx, tx, insertEventOnce, evs)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("append events once: %w", err)
	}
	return added, nil
}

const insertEvent = `INSERT INTO events (at, kind, source, context, job, trainer, user, nodes, node_count, value, ms, detail, error, origin)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

// insertEventOnce skips an event whose origin is recorded (the conflict
// target repeats the partial index's WHERE, as SQLite requires).
const insertEventOnce = insertEvent + ` ON CONFLICT (origin) WHERE origin IS NOT NULL DO NOTHING`

func appendEvents(ctx context.Context, tx *sql.Tx, evs []Event) (int64, error) {
	if _, err := insertEvents(ctx, tx, insertEvent, evs); err != nil {
		return 0, err
	}
	if len(evs) == 0 {
		return 0, nil
	}
	return evs[len(evs)-1].ID, nil
}

// insertEvents inserts evs with the statement q, sets the ID of each one
// inserted and returns how many were.
func insertEvents(ctx context.Context, tx *sql.Tx, q string, evs []Event) (int, error) {
	if len(evs) == 0 {
		return 0, nil
	}
	st, err := tx.PrepareContext(ctx, q)
	if err != nil {
		return 0, err
	}
	defer st.Close()
	added := 0
	for i := range evs {
		e := &evs[i]
		if e.At.IsZero() {
			e.At = time.Now()
		}
		var val, ms any
		if e.HasVal {
			val = e.Value
		}
		if e.HasMs {
			ms = e.Ms
		}
		var origin any
		if e.Origin != "" {
			origin = e.Origin
		}
		detail := string(e.Detail)
		res, err := st.ExecContext(ctx, formatTime(e.At), e.Kind, e.Source, e.Context, e.Job, e.Trainer, e.User,
			strings.Join(e.Nodes, " "), max(len(e.Nodes), e.Count), val, ms, detail, e.Error, origin)
		if err != nil {
			return 0, err
		}
		if n, err := res.RowsAffected(); err != nil {
			return 0, err
		} else if n == 0 {
			continue // already recorded (insertEventOnce)
		}
		if e.ID, err = res.LastInsertId(); err != nil {
			return 0, err
		}
		added++
	}
	return added, nil
}

// Filter selects history rows. Zero fields match everything.
type Filter struct {
	Since, Until time.Time
	Kinds        []Kind
	Node         string
	Trainer      string
	Job          string
	Source       string
	AfterID      int64
	Limit        int  // 0: no limit
	Desc         bool // newest first
	InputsOnly   bool // only kinds the reconciler folds
}

// Events returns history rows matching the filter, in id order (or
// reversed with Desc).
func (s *DB) Events(ctx context.Context, f Filter) ([]Event, error) {
	var where []string
	var args []any
	if !f.Since.IsZero() {
		where, args = append(where, "at >= ?"), append(args, formatTime(f.Since))
	}
	if !f.Until.IsZero() {
		where, args = append(where, "at < ?"), append(args, formatTime(f.Until))
	}
	kinds := f.Kinds
	if f.InputsOnly {
		kinds = inputKinds
	}
	if len(kinds) > 0 {
		where = append(where, "kind IN ("+strings.TrimSuffix(strings.Repeat("?,", len(kinds)), ",")+")")
		for _, k := range kinds {
			args = append(args, k)
		}
	}
	if f.Node != "" {
		// Space-separated list: match a whole word.
		where, args = append(where, "(' ' || nodes || ' ') LIKE ? ESCAPE '\\'"), append(args, "% "+escapeLike(f.Node)+" %")
	}
	if f.Trainer != "" {
		where, args = append(where, "trainer = ?"), append(args, f.Trainer)
	}
	if f.Job != "" {
		where, args = append(where, "job = ?"), append(args, f.Job)
	}
	if f.Source != "" {
		where, args = append(where, "source = ?"), append(args, f.Source)
	}
	if f.AfterID > 0 {
		where, args = append(where, "id > ?"), append(args, f.AfterID)
	}
	q := "SELECT id, at, kind, source, context, job, trainer, user, nodes, node_count, value, ms, detail, error, coalesce(origin, '') FROM events"
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	if f.Desc {
		q += " ORDER BY id DESC"
	} else {
		q += " ORDER BY id"
	}
	if f.Limit > 0 {
		q += fmt.Sprintf(" LIMIT %d", f.Limit)
	}
	var out []Event
	err := s.readTx(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = queryEvents(ctx, tx, q, args...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	return out, nil
}

func escapeLike(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)
	return r.Replace(s)
}

func queryEvents(ctx context.Context, tx *sql.Tx, q string, args ...any) ([]Event, error) {
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		var e Event
		var at, nodes, detail string
		var val, ms sql.NullFloat64
		if err := rows.Scan(&e.ID, &at, &e.Kind, &e.Source, &e.Context, &e.Job, &e.Trainer, &e.User, &nodes, &e.Count, &val, &ms, &detail, &e.Error, &e.Origin); err != nil {
			return nil, err
		}
		if e.At, err = parseTime(at); err != nil {
			return nil, err
		}
		if nodes != "" {
			e.Nodes = strings.Fields(nodes)
		}
		e.Value, e.HasVal = val.Float64, val.Valid
		e.Ms, e.HasMs = ms.Float64, ms.Valid
		if detail != "" {
			e.Detail = json.RawMessage(detail)
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// readTx runs fn in a read transaction. Reads use a plain BEGIN so that a
// reader never takes the write lock.
func (s *DB) readTx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.rdb.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	return fn(tx)
}

// Errors counts the rows at or after since whose error is set, written by
// one of sources, and returns the newest: how status tells that hooks (or
// the journal's ingestion) are failing.
func (s *DB) Errors(ctx context.Context, since time.Time, sources ...string) (n int, last Event, err error) {
	if len(sources) == 0 {
		return 0, Event{}, nil
	}
	in := strings.TrimSuffix(strings.Repeat("?,", len(sources)), ",")
	args := []any{formatTime(since)}
	for _, src := range sources {
		args = append(args, src)
	}
	where := " WHERE at >= ? AND error <> '' AND source IN (" + in + ")"
	err = s.readTx(ctx, func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM events"+where, args...).Scan(&n); err != nil || n == 0 {
			return err
		}
		evs, err := queryEvents(ctx, tx, "SELECT id, at, kind, source, context, job, trainer, user, nodes, node_count, value, ms, detail, error, coalesce(origin, '') FROM events"+
			where+" ORDER BY id DESC LIMIT 1", args...)
		if len(evs) > 0 {
			last = evs[0]
		}
		return err
	})
	if err != nil {
		return 0, Event{}, fmt.Errorf("read errors: %w", err)
	}
	return n, last, nil
}
