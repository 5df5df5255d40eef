package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"math"
	"strconv"
	"sync"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/pool"
)

// What a DB's last Save wrote (issue 23). A save compared the round with
// the state tables by reading every row back — 10,624 nodes, the
// allocations and every active Trainer's spec at exascale size, most of a
// save's time. A DB now remembers the rows its last committed Save left,
// and the next Save compares the round with that memory instead, as long
// as no one else has written the tables since: every Save ends by writing
// a fresh token to meta.state_written, remembered with the rows, and
// triggers (migration 0004) delete it whenever a row of nodes, trainers or
// allocations changes — a hand edit, another process's save (which also
// writes its own token). A Save whose memory's token is not the stored one
// forgets its memory and reads the tables back as before; one that fails
// forgets it too. After any committed Save the tables hold exactly the
// round's rows (the nodes, the allocations) and the rows it wrote
// (Trainers), so the memory is built from the round, never from rows read.

// stateWrittenKey is the meta key of the last save's token.
const stateWrittenKey = "state_written"

// memory is a DB's memory of its last save, guarded by mu, which is held
// for the whole of a Save.
type memory struct {
	mu    sync.Mutex
	last  *written
	id    string // this DB's part of the tokens
	saves uint64
	// fast and full count the saves that compared with the memory and
	// those that read the tables back (the tests check both ran).
	fast, full int
}

// token returns a token no other save writes: this DB's random id and
// its count of saves.
func (m *memory) token() string {
	if m.id == "" {
		var b [8]byte
		rand.Read(b[:]) // never fails (Go 1.24 on)
		m.id = hex.EncodeToString(b[:])
	}
	m.saves++
	return m.id + "-" + strconv.FormatUint(m.saves, 10)
}

// written is the state tables as a committed Save left them.
type written struct {
	token string
	// nodes are the node rows, by name; seen marks those the save in
	// progress found in its round (stamp).
	nodes map[string]*writtenNode
	stamp uint64
	// alloc are the allocation rows: a Trainer's nodes in order (only
	// Trainers with some).
	alloc map[string][]string
	// trainers are the running and queued Trainers' rows.
	trainers map[string]*writtenTrainer
}

type writtenNode struct {
	n    pool.Node
	seen uint64
}

// writtenTrainer is a running or queued Trainer's row: its launch, and
// the row's columns when this DB wrote them (not when the row was only
// read back: then the next save writes it again).
type writtenTrainer struct {
	launch Launch
	row    trainerRow
	hasRow bool
}

// trainerRow is a trainers row but for its id and seq, its floats as
// bits: two rows are alike exactly when they are stored alike. The
// progress columns, which change every round for a running Trainer, are
// apart from the rest, which changes seldom.
type trainerRow struct {
	fixed    trainerFixed
	progress trainerProgress
}

type trainerFixed struct {
	owner, status, launcher          string
	min, max                         int
	samples                          uint64
	submitted, admitted, ended, spec string
}

type trainerProgress struct {
	done, rate               uint64
	nodeCount                int
	rescaleLoss, preemptLoss uint64
	rescales, preemptions    int
	nodeSeconds, pendingCost uint64
}

func newTrainerRow(t *pool.Trainer, launch Launch, spec string) trainerRow {
	b := math.Float64bits
	return trainerRow{
		fixed: trainerFixed{owner: t.Owner, status: string(t.Status), launcher: launch.Launcher, min: t.Min, max: t.Max,
			samples: b(t.Samples), submitted: formatTime(t.Submit), admitted: formatTime(t.Admitted), ended: formatTime(t.Ended),
			spec: spec},
		progress: trainerProgress{done: b(finiteOr0(t.Done)), rate: b(finiteOr0(t.Rate)), nodeCount: len(t.Nodes),
			rescaleLoss: b(t.RescaleLoss), preemptLoss: b(t.PreemptLoss), rescales: t.Rescales, preemptions: t.Preemptions,
			nodeSeconds: b(t.NodeSeconds), pendingCost: b(t.PendingCost)},
	}
}

// args are the row's values in trainerCols order.
func (r *trainerRow) args(id string, seq int64) []any {
	f, x, p := math.Float64frombits, &r.fixed, &r.progress
	return []any{id, x.owner, x.status, x.launcher, x.min, x.max, f(x.samples), f(p.done), f(p.rate), p.nodeCount,
		f(p.rescaleLoss), f(p.preemptLoss), p.rescales, p.preemptions, f(p.nodeSeconds), f(p.pendingCost),
		x.submitted, x.admitted, x.ended, seq, x.spec}
}

// updateTrainer writes a Trainer's row that is there (all but id and
// seq): the upsert's insert first is the slower way to the same row.
const updateTrainer = `UPDATE trainers SET owner = ?, status = ?, launcher = ?, min_nodes = ?, max_nodes = ?,
	samples = ?, done = ?, rate = ?, node_count = ?, rescale_loss = ?, preempt_loss = ?, rescales = ?,
	preemptions = ?, node_seconds = ?, pending_cost = ?, submitted = ?, admitted = ?, ended = ?, spec = ? WHERE id = ?`

// updateArgs are updateTrainer's values.
func (r *trainerRow) updateArgs(id string) []any {
	a := r.args(id, 0)
	return append(append(a[1:19:19], a[20]), id)
}

// updateProgress writes a Trainer's progress columns alone.
const updateProgress = `UPDATE trainers SET done = ?, rate = ?, node_count = ?, rescale_loss = ?, preempt_loss = ?,
	rescales = ?, preemptions = ?, node_seconds = ?, pending_cost = ? WHERE id = ?`

// progressArgs are updateProgress's values.
func (r *trainerRow) progressArgs(id string) []any {
	f, p := math.Float64frombits, &r.progress
	return []any{f(p.done), f(p.rate), p.nodeCount, f(p.rescaleLoss), f(p.preemptLoss), p.rescales, p.preemptions,
		f(p.nodeSeconds), f(p.pendingCost), id}
}

// sameNode says whether a node's row would read as a's: the same
// columns, the time the same instant (so formatted alike).
func sameNode(a, b *pool.Node) bool {
	return a.Name == b.Name && a.State == b.State && a.Order == b.Order && a.Job == b.Job && a.Trainer == b.Trainer &&
		a.Since.Equal(b.Since)
}

// sameNames says whether names are the nodes' names, in order.
func sameNames(names []string, nodes []alloc.Node) bool {
	if len(names) != len(nodes) {
		return false
	}
	for i := range names {
		if names[i] != nodes[i].Name {
			return false
		}
	}
	return true
}

// namesOf copies the nodes' names (the round's slices stay the caller's).
func namesOf(nodes []alloc.Node) []string {
	out := make([]string, len(nodes))
	for i := range nodes {
		out[i] = nodes[i].Name
	}
	return out
}

// rememberNodes sets w's node rows to nodes (after a save that read the
// tables back: they now hold exactly these).
func (w *written) rememberNodes(nodes []pool.Node) {
	w.nodes = make(map[string]*writtenNode, len(nodes))
	for i := range nodes {
		w.nodes[nodes[i].Name] = &writtenNode{n: nodes[i]}
	}
}

// rememberAllocations sets w's allocation rows to the Trainers' nodes.
func (w *written) rememberAllocations(ts []pool.Trainer) {
	w.alloc = make(map[string][]string, len(ts))
	for i := range ts {
		if len(ts[i].Nodes) > 0 {
			w.alloc[ts[i].ID] = namesOf(ts[i].Nodes)
		}
	}
}

// saveNodesWritten writes the nodes whose row differs from w's and
// deletes w's nodes the round has not, bringing w up to date.
func saveNodesWritten(ctx context.Context, tx *sql.Tx, nodes []pool.Node, w *written) error {
	w.stamp++
	had, found := len(w.nodes), 0
	var up *sql.Stmt
	defer func() {
		if up != nil {
			up.Close()
		}
	}()
	for i := range nodes {
		n := &nodes[i]
		e := w.nodes[n.Name]
		if e != nil && e.seen != w.stamp {
			found++
		}
		if e != nil && sameNode(&e.n, n) {
			e.seen = w.stamp
			continue
		}
		if up == nil {
			var err error
			if up, err = tx.PrepareContext(ctx, upsertNode); err != nil {
				return err
			}
		}
		if _, err := up.ExecContext(ctx, n.Name, string(n.State), formatTime(n.Since), n.Order, n.Job, n.Trainer); err != nil {
			return err
		}
		if e == nil {
			e = &writtenNode{}
			w.nodes[n.Name] = e
		}
		e.n, e.seen = *n, w.stamp
	}
	if found == had {
		return nil
	}
	for name, e := range w.nodes {
		if e.seen == w.stamp {
			continue
		}
		if _, err := tx.ExecContext(ctx, "DELETE FROM nodes WHERE name = ?", name); err != nil {
			return err
		}
		delete(w.nodes, name)
	}
	return nil
}

// SaveMemory is what a DB's last committed Save wrote, handed to the next
// handle of the same database (Memory, then Remember): the reconciler
// service opens the database for each round only (sidecar.Core.Watch), and
// keeps the fast save from round to round. The next handle trusts it only
// as its own: while meta.state_written holds the token it was written with.
type SaveMemory struct{ last *written }

// Memory returns what this DB's last committed Save wrote; nothing when it
// has not saved, or its last save failed. Take it once the DB is done
// saving (before Close).
func (s *DB) Memory() SaveMemory {
	s.mem.mu.Lock()
	defer s.mem.mu.Unlock()
	return SaveMemory{last: s.mem.last}
}

// Remember gives a new handle what another handle of the same database
// wrote last (Memory), if it has not saved yet itself.
func (s *DB) Remember(m SaveMemory) {
	s.mem.mu.Lock()
	defer s.mem.mu.Unlock()
	if s.mem.last == nil && s.mem.saves == 0 {
		s.mem.last = m.last
	}
}
