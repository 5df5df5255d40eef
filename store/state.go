package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/pool"
)

// Launch is how a Trainer is started, kept opaque here: the trainer
// package owns its meaning.
type Launch struct {
	Launcher string          `json:"launcher"`
	Spec     json.RawMessage `json:"spec,omitempty"`
}

// specJSON is the trainers.spec column.
type specJSON struct {
	Curve  alloc.Curve `json:"curve"`
	Weight float64     `json:"weight,omitempty"`
	RUp    float64     `json:"rescale_up_s"`
	RDown  float64     `json:"rescale_down_s"`
	Launch Launch      `json:"launch"`
	// Model names what it trains ("": unsaid).
	Model string `json:"model,omitempty"`
	// Measured are the rescale costs measured on its processes (the
	// priors are the two above).
	Measured pool.Costs `json:"measured,omitzero"`
	// Learn is what the pool learnt of its curve (the curve above is
	// the user's, a prior; empty when none was given).
	Learn pool.Learning `json:"learn,omitzero"`
	// Starts are its failed starts in a row.
	Starts pool.Starts `json:"starts,omitzero"`
}

// Snapshot is the pool state as saved by the last reconciler round.
type Snapshot struct {
	State     pool.State
	Launch    map[string]Launch // per active Trainer
	AppliedID int64             // last event folded into State
}

// Load reads the saved pool state.
func (s *DB) Load(ctx context.Context) (*Snapshot, error) {
	snap := &Snapshot{Launch: map[string]Launch{}}
	err := s.readTx(ctx, func(tx *sql.Tx) error { return load(ctx, tx, snap) })
	if err != nil {
		return nil, fmt.Errorf("load pool: %w", err)
	}
	return snap, nil
}

func load(ctx context.Context, tx *sql.Tx, snap *Snapshot) error {
	meta, err := readMeta(ctx, tx)
	if err != nil {
		return err
	}
	if v := meta["applied_id"]; v != "" {
		if snap.AppliedID, err = strconv.ParseInt(v, 10, 64); err != nil {
			return fmt.Errorf("meta applied_id: %w", err)
		}
	}
	if snap.State.Now, err = parseTime(meta["now"]); err != nil {
		return err
	}
	if v := meta["totals"]; v != "" {
		if err := json.Unmarshal([]byte(v), &snap.State.Totals); err != nil {
			return fmt.Errorf("meta totals: %w", err)
		}
	}
	rows, err := tx.QueryContext(ctx, "SELECT name, state, since, ord, job, trainer FROM nodes ORDER BY name")
	if err != nil {
		return err
	}
	for rows.Next() {
		var n pool.Node
		var since, state string
		if err := rows.Scan(&n.Name, &state, &since, &n.Order, &n.Job, &n.Trainer); err != nil {
			rows.Close()
			return err
		}
		n.State = pool.NodeState(state)
		if n.Since, err = parseTime(since); err != nil {
			rows.Close()
			return err
		}
		snap.State.Nodes = append(snap.State.Nodes, n)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	held := map[string][]alloc.Node{}
	rows, err = tx.QueryContext(ctx, "SELECT trainer, node FROM allocations ORDER BY trainer, pos")
	if err != nil {
		return err
	}
	for rows.Next() {
		var t, n string
		if err := rows.Scan(&t, &n); err != nil {
			rows.Close()
			return err
		}
		held[t] = append(held[t], alloc.Node{Name: n})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	// Running in admission order, then queued in submission order: the
	// order the pool keeps them in.
	ts, err := queryTrainers(ctx, tx, `WHERE status IN ('running', 'queued')
		ORDER BY CASE status WHEN 'running' THEN 0 ELSE 1 END, admitted, seq`)
	if err != nil {
		return err
	}
	for _, t := range ts {
		t.Nodes = held[t.ID]
		snap.State.Trainers = append(snap.State.Trainers, t.Trainer)
		snap.Launch[t.ID] = t.Launch
	}
	return nil
}

func readMeta(ctx context.Context, tx *sql.Tx) (map[string]string, error) {
	rows, err := tx.QueryContext(ctx, "SELECT key, value FROM meta")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	m := map[string]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return nil, err
		}
		m[k] = v
	}
	return m, rows.Err()
}

// Trainer is a Trainer as stored: its pool state, its launch and its
// submission order.
type Trainer struct {
	pool.Trainer
	Launch Launch
	Seq    int64
}

const trainerCols = `id, owner, status, launcher, min_nodes, max_nodes, samples, done, rate, node_count,
	rescale_loss, preempt_loss, rescales, preemptions, node_seconds, pending_cost,
	submitted, admitted, ended, seq, spec`

func queryTrainers(ctx context.Context, tx *sql.Tx, where string, args ...any) ([]Trainer, error) {
	rows, err := tx.QueryContext(ctx, "SELECT "+trainerCols+" FROM trainers "+where, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Trainer
	for rows.Next() {
		var t Trainer
		var status, launcher, submitted, admitted, ended, spec string
		var nodeCount int
		if err := rows.Scan(&t.ID, &t.Owner, &status, &launcher, &t.Min, &t.Max, &t.Samples, &t.Done, &t.Rate, &nodeCount,
			&t.RescaleLoss, &t.PreemptLoss, &t.Rescales, &t.Preemptions, &t.NodeSeconds, &t.PendingCost,
			&submitted, &admitted, &ended, &t.Seq, &spec); err != nil {
			return nil, err
		}
		t.Status = pool.Status(status)
		if t.Submit, err = parseTime(submitted); err != nil {
			return nil, err
		}
		if t.Admitted, err = parseTime(admitted); err != nil {
			return nil, err
		}
		if t.Ended, err = parseTime(ended); err != nil {
			return nil, err
		}
		var sj specJSON
		if err := json.Unmarshal([]byte(spec), &sj); err != nil {
			return nil, fmt.Errorf("trainer %q spec: %w", t.ID, err)
		}
		t.Curve, t.Weight, t.RUp, t.RDown, t.Launch, t.Measured, t.Learn, t.Model, t.Starts = sj.Curve, sj.Weight, sj.RUp, sj.RDown, sj.Launch, sj.Measured, sj.Learn, sj.Model, sj.Starts
		out = append(out, t)
	}
	return out, rows.Err()
}

// Round is what a reconciler round saves, atomically.
type Round struct {
	State     pool.State
	Ended     []pool.Trainer    // Trainers that ended in this round, final state
	Launch    map[string]Launch // launch specs of Trainers submitted in this round
	AppliedID int64             // last event folded
	PrevNow   time.Time         // pool clock before the round, for usage per day
	PrevTotal pool.Totals
	Events    []Event // history written by the round
}

// Save writes a reconciler round: pool state, ended Trainers, usage and
// history, in one transaction. It refuses to go back: a round whose
// AppliedID is below the saved one lost a race and is not saved. It
// compares the round with what this DB's last Save wrote when no one has
// written the state tables since, else with the rows read back
// (written.go).
func (s *DB) Save(ctx context.Context, r *Round) error {
	s.mem.mu.Lock()
	defer s.mem.mu.Unlock()
	w := s.mem.last
	s.mem.last = nil // until this save commits
	token := s.mem.token()
	var trainers map[string]*writtenTrainer
	err := s.tx(ctx, func(tx *sql.Tx) error {
		meta, err := readMeta(ctx, tx)
		if err != nil {
			return err
		}
		if v := meta["applied_id"]; v != "" {
			saved, _ := strconv.ParseInt(v, 10, 64)
			if r.AppliedID < saved {
				return fmt.Errorf("round folded events up to %d, the store has %d: %w", r.AppliedID, saved, errStaleRound)
			}
		}
		if w != nil && meta[stateWrittenKey] != w.token {
			w = nil // written since by someone else: read them back
		}
		if w == nil {
			s.mem.full++
		} else {
			s.mem.fast++
		}
		// Only the Trainers whose node lists changed have their
		// allocations rewritten (a round moves a few; rewriting all
		// 10,624 of an exascale pool was most of a save, issue 23): their
		// old rows go first, so that nodes and Trainers may change under
		// them and a node may pass from one Trainer to another; their new
		// rows after the Trainers they name are written.
		changed, err := dropAllocations(ctx, tx, r.State.Trainers, w)
		if err != nil {
			return err
		}
		if err := saveNodes(ctx, tx, r.State.Nodes, w); err != nil {
			return err
		}
		if trainers, err = saveTrainers(ctx, tx, r, w); err != nil {
			return err
		}
		if err := saveAllocations(ctx, tx, changed); err != nil {
			return err
		}
		if err := addUsage(ctx, tx, r.PrevNow, r.State.Now, r.State.Totals.IdleNodeSeconds-r.PrevTotal.IdleNodeSeconds,
			r.State.Totals.UsedNodeSeconds-r.PrevTotal.UsedNodeSeconds); err != nil {
			return err
		}
		totals, err := json.Marshal(r.State.Totals)
		if err != nil {
			return err
		}
		// The token last, after every row (whose triggers delete it).
		for _, kv := range [][2]string{
			{"applied_id", strconv.FormatInt(r.AppliedID, 10)},
			{"now", formatTime(r.State.Now)},
			{"totals", string(totals)},
			{stateWrittenKey, token},
		} {
			if _, err := tx.ExecContext(ctx, "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value", kv[0], kv[1]); err != nil {
				return err
			}
		}
		_, err = appendEvents(ctx, tx, r.Events)
		return err
	})
	if err != nil {
		return fmt.Errorf("save round: %w", err)
	}
	if w == nil {
		// The tables now hold exactly the round's nodes and allocations.
		w = &written{}
		w.rememberNodes(r.State.Nodes)
		w.rememberAllocations(r.State.Trainers)
	}
	w.token, w.trainers = token, trainers
	s.mem.last = w
	return nil
}

// upsertNode writes a node's row.
const upsertNode = `INSERT INTO nodes (name, state, since, ord, job, trainer) VALUES (?, ?, ?, ?, ?, ?)
	ON CONFLICT (name) DO UPDATE SET state = excluded.state, since = excluded.since, ord = excluded.ord,
	job = excluded.job, trainer = excluded.trainer`

// errStaleRound is returned by Save for a round that lost a race.
var errStaleRound = fmt.Errorf("stale round")

// saveNodes writes the nodes whose row would change and deletes those
// gone. The saved rows are compared as stored (the time as its text, as
// formatTime writes it): a node is rewritten exactly when its row would
// read differently, with no time parsed and no pool.Node built per row
// (reading the 10,624 rows of an exascale pool back was a third of a
// save, issue 23).
//
// With w (what this DB wrote last, still the tables' rows) the nodes are
// compared with w instead, and w is brought up to date.
func saveNodes(ctx context.Context, tx *sql.Tx, nodes []pool.Node, w *written) error {
	if w != nil {
		return saveNodesWritten(ctx, tx, nodes, w)
	}
	type row struct {
		state, since, job, trainer string
		ord                        int
	}
	have := make(map[string]row, len(nodes))
	rows, err := tx.QueryContext(ctx, "SELECT name, state, since, ord, job, trainer FROM nodes")
	if err != nil {
		return err
	}
	for rows.Next() {
		var name string
		var r row
		if err := rows.Scan(&name, &r.state, &r.since, &r.ord, &r.job, &r.trainer); err != nil {
			rows.Close()
			return err
		}
		have[name] = r
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	up, err := tx.PrepareContext(ctx, upsertNode)
	if err != nil {
		return err
	}
	defer up.Close()
	for _, n := range nodes {
		since := formatTime(n.Since)
		old, ok := have[n.Name]
		delete(have, n.Name)
		if ok && old == (row{state: string(n.State), since: since, job: n.Job, trainer: n.Trainer, ord: n.Order}) {
			continue
		}
		if _, err := up.ExecContext(ctx, n.Name, string(n.State), since, n.Order, n.Job, n.Trainer); err != nil {
			return err
		}
	}
	for name := range have {
		if _, err := tx.ExecContext(ctx, "DELETE FROM nodes WHERE name = ?", name); err != nil {
			return err
		}
	}
	return nil
}

// saveTrainers writes the round's Trainers, running and queued then
// ended, and returns the running and queued Trainers' rows as they now
// stand. With w (what this DB wrote last) a row alike to the one it
// wrote is not written again, and the launches are w's; without, the
// launches are read back.
func saveTrainers(ctx context.Context, tx *sql.Tx, r *Round, w *written) (map[string]*writtenTrainer, error) {
	var existing map[string]*writtenTrainer
	if w != nil {
		existing = w.trainers
	} else {
		existing = map[string]*writtenTrainer{}
		rows, err := tx.QueryContext(ctx, "SELECT id, spec FROM trainers WHERE status IN ('running', 'queued')")
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var id, spec string
			if err := rows.Scan(&id, &spec); err != nil {
				rows.Close()
				return nil, err
			}
			// Only the launch is kept (the rest is written again): decoding
			// the whole spec of every Trainer, curve and learning included,
			// was half the time of writing them (issue 23).
			var sj struct {
				Launch Launch `json:"launch"`
			}
			if err := json.Unmarshal([]byte(spec), &sj); err != nil {
				rows.Close()
				return nil, fmt.Errorf("trainer %q spec: %w", id, err)
			}
			existing[id] = &writtenTrainer{launch: sj.Launch}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	up, err := tx.PrepareContext(ctx, `INSERT INTO trainers (`+trainerCols+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET owner = excluded.owner, status = excluded.status, launcher = excluded.launcher,
		min_nodes = excluded.min_nodes, max_nodes = excluded.max_nodes, samples = excluded.samples, done = excluded.done,
		rate = excluded.rate, node_count = excluded.node_count, rescale_loss = excluded.rescale_loss,
		preempt_loss = excluded.preempt_loss, rescales = excluded.rescales, preemptions = excluded.preemptions,
		node_seconds = excluded.node_seconds, pending_cost = excluded.pending_cost, submitted = excluded.submitted,
		admitted = excluded.admitted, ended = excluded.ended, spec = excluded.spec`)
	if err != nil {
		return nil, err
	}
	defer up.Close()
	var prog, upd *sql.Stmt
	defer func() {
		for _, st := range []*sql.Stmt{prog, upd} {
			if st != nil {
				st.Close()
			}
		}
	}()
	// A new row's seq is the saved maximum plus its place among this
	// round's writes; the maximum (a scan of the table) is read at the
	// first row that may be new, before any is inserted.
	var maxSeq int64
	haveMax := false
	writes := 0
	write := func(t *pool.Trainer, ended bool) error {
		writes++
		e, saved := existing[t.ID]
		// r.Launch is by name, for the Trainers submitted in this round:
		// an ended Trainer saved before keeps its own, whatever a new one
		// of its name brought.
		launch, ok := r.Launch[t.ID]
		if saved && (!ok || ended) {
			launch = e.launch
		}
		spec, err := json.Marshal(specJSON{Curve: t.Curve, Weight: t.Weight, RUp: t.RUp, RDown: t.RDown, Launch: launch, Measured: t.Measured, Learn: t.Learn, Model: t.Model, Starts: t.Starts})
		if err != nil {
			return err
		}
		row := newTrainerRow(t, launch, string(spec))
		// existing follows the table's running and queued rows.
		if t.Status.Active() {
			existing[t.ID] = &writtenTrainer{launch: launch, row: row, hasRow: true}
		} else {
			delete(existing, t.ID)
		}
		if saved {
			// Its row is there: the update alone (the upsert tries an
			// insert first), of its progress alone when the rest is as
			// this DB wrote it, none when all is.
			st, args := &upd, row.updateArgs
			if e.hasRow && e.row.fixed == row.fixed {
				if e.row.progress == row.progress {
					return nil
				}
				st, args = &prog, row.progressArgs
			}
			if *st == nil {
				q := updateTrainer
				if st == &prog {
					q = updateProgress
				}
				if *st, err = tx.PrepareContext(ctx, q); err != nil {
					return err
				}
			}
			res, err := (*st).ExecContext(ctx, args(t.ID)...)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil || n != 1 {
				return fmt.Errorf("trainer %q: saved as running or queued, but %d rows updated (%v)", t.ID, n, err)
			}
			return nil
		}
		// A name reused by a new submission is a new record: the ended
		// one it would overwrite keeps its row (and its owner), renamed
		// NAME~SEQ — no Trainer name has a '~'. A Trainer saved running
		// or queued is its own row (above): nothing to rename.
		if _, err := tx.ExecContext(ctx, `UPDATE trainers SET id = id || '~' || seq
			WHERE id = ? AND submitted != ? AND status IN ('finished', 'cancelled', 'failed')`, t.ID, formatTime(t.Submit)); err != nil {
			return err
		}
		if !haveMax {
			if err := tx.QueryRowContext(ctx, "SELECT coalesce(max(seq), 0) FROM trainers").Scan(&maxSeq); err != nil {
				return err
			}
			haveMax = true
		}
		// seq is ignored on update: it keeps its first value.
		_, err = up.ExecContext(ctx, row.args(t.ID, maxSeq+int64(writes))...)
		return err
	}
	// The ended first: a Trainer that ended in this round and a new one
	// submitted under its name in the same round are two rows (the ended
	// one renamed NAME~SEQ). Written the other way round, the new one
	// updated the ended one's running row, which its end then overwrote:
	// the new submission was lost.
	for i := range r.Ended {
		if err := write(&r.Ended[i], true); err != nil {
			return nil, err
		}
	}
	for i := range r.State.Trainers {
		if err := write(&r.State.Trainers[i], false); err != nil {
			return nil, err
		}
	}
	return existing, nil
}

func finiteOr0(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0
	}
	return x
}

// dropAllocations compares the saved allocations (w's when given, else
// the rows read back) with the Trainers' node lists, deletes the rows of
// every Trainer whose list differs (or that is no longer in the state)
// and returns the Trainers whose rows are to be written again. It brings
// w up to date.
func dropAllocations(ctx context.Context, tx *sql.Tx, ts []pool.Trainer, w *written) ([]*pool.Trainer, error) {
	var saved map[string][]string
	if w != nil {
		saved = w.alloc
	} else {
		saved = map[string][]string{}
		rows, err := tx.QueryContext(ctx, "SELECT trainer, node FROM allocations ORDER BY trainer, pos")
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var t, n string
			if err := rows.Scan(&t, &n); err != nil {
				rows.Close()
				return nil, err
			}
			saved[t] = append(saved[t], n)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	var changed []*pool.Trainer
	var drop []string
	in := make(map[string]bool, len(ts))
	for i := range ts {
		t := &ts[i]
		old, ok := saved[t.ID]
		if in[t.ID] {
			old, ok = nil, false // its rows were dropped or kept above
		}
		in[t.ID] = true
		if sameNames(old, t.Nodes) {
			continue
		}
		if ok {
			drop = append(drop, t.ID)
		}
		changed = append(changed, t)
	}
	for id := range saved {
		if !in[id] {
			drop = append(drop, id)
		}
	}
	if w != nil {
		for _, id := range drop {
			delete(w.alloc, id)
		}
		for _, t := range changed {
			if len(t.Nodes) > 0 {
				w.alloc[t.ID] = namesOf(t.Nodes)
			}
		}
	}
	if len(drop) == 0 {
		return changed, nil
	}
	del, err := tx.PrepareContext(ctx, "DELETE FROM allocations WHERE trainer = ?")
	if err != nil {
		return nil, err
	}
	defer del.Close()
	for _, id := range drop {
		if _, err := del.ExecContext(ctx, id); err != nil {
			return nil, fmt.Errorf("allocations of %s: %w", id, err)
		}
	}
	return changed, nil
}

// saveAllocations writes the allocation rows of ts (whose old rows
// dropAllocations deleted).
func saveAllocations(ctx context.Context, tx *sql.Tx, ts []*pool.Trainer) error {
	if len(ts) == 0 {
		return nil
	}
	st, err := tx.PrepareContext(ctx, "INSERT INTO allocations (trainer, node, pos) VALUES (?, ?, ?)")
	if err != nil {
		return err
	}
	defer st.Close()
	for _, t := range ts {
		for i, n := range t.Nodes {
			if _, err := st.ExecContext(ctx, t.ID, n.Name, i); err != nil {
				return fmt.Errorf("allocation %s on %s: %w", t.ID, n.Name, err)
			}
		}
	}
	return nil
}

// addUsage spreads node-seconds accrued over [from, to] across the UTC days
// it covers, in proportion to time.
func addUsage(ctx context.Context, tx *sql.Tx, from, to time.Time, idle, used float64) error {
	if idle == 0 && used == 0 {
		return nil
	}
	if from.IsZero() || !to.After(from) {
		from = to
	}
	total := to.Sub(from).Seconds()
	for day := from.UTC().Truncate(24 * time.Hour); ; day = day.Add(24 * time.Hour) {
		end := day.Add(24 * time.Hour)
		share := 1.0
		if total > 0 {
			lo, hi := maxTime(day, from), minTime(end, to)
			share = hi.Sub(lo).Seconds() / total
		}
		if share > 0 {
			if _, err := tx.ExecContext(ctx, `INSERT INTO usage (day, idle_node_seconds, used_node_seconds) VALUES (?, ?, ?)
				ON CONFLICT (day) DO UPDATE SET idle_node_seconds = idle_node_seconds + excluded.idle_node_seconds,
				used_node_seconds = used_node_seconds + excluded.used_node_seconds`,
				day.Format("2006-01-02"), idle*share, used*share); err != nil {
				return err
			}
		}
		if !end.Before(to) {
			return nil
		}
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// Trainers returns stored Trainers (all, or those with the given
// statuses), in submission order.
func (s *DB) Trainers(ctx context.Context, statuses ...pool.Status) ([]Trainer, error) {
	where, args := "", []any{}
	if len(statuses) > 0 {
		where = "WHERE status IN ("
		for i, st := range statuses {
			if i > 0 {
				where += ","
			}
			where += "?"
			args = append(args, string(st))
		}
		where += ")"
	}
	var out []Trainer
	err := s.readTx(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = queryTrainers(ctx, tx, where+" ORDER BY seq", args...)
		if err != nil {
			return err
		}
		return fillNodes(ctx, tx, out)
	})
	if err != nil {
		return nil, fmt.Errorf("read trainers: %w", err)
	}
	return out, nil
}

// Trainer returns one stored Trainer by id; ok is false if unknown.
func (s *DB) Trainer(ctx context.Context, id string) (Trainer, bool, error) {
	var out []Trainer
	err := s.readTx(ctx, func(tx *sql.Tx) error {
		var err error
		if out, err = queryTrainers(ctx, tx, "WHERE id = ?", id); err != nil {
			return err
		}
		return fillNodes(ctx, tx, out)
	})
	if err != nil {
		return Trainer{}, false, fmt.Errorf("read trainer %q: %w", id, err)
	}
	if len(out) == 0 {
		return Trainer{}, false, nil
	}
	return out[0], true, nil
}

func fillNodes(ctx context.Context, tx *sql.Tx, ts []Trainer) error {
	for i := range ts {
		rows, err := tx.QueryContext(ctx, "SELECT node FROM allocations WHERE trainer = ? ORDER BY pos", ts[i].ID)
		if err != nil {
			return err
		}
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				rows.Close()
				return err
			}
			ts[i].Nodes = append(ts[i].Nodes, alloc.Node{Name: n})
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	return nil
}
