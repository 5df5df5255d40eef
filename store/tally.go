package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
)

// Tally is what a monitoring system counts from the history: histograms of
// the wall time (ms) of the events of some kinds (hook calls, decisions),
// the events that recorded an error, and the Trainers by status. The
// histograms and the error count are cumulative over the whole history and
// only grow, as counters must.
type Tally struct {
	Histograms map[Kind]Histogram // by event kind
	Errors     int64              // events with an error
	Trainers   map[string]int     // by status
}

// Histogram counts values (ms) in buckets: Counts[i] those ≤ Bounds[i]
// and above the bound before; the last count, past every bound, those
// above them all.
type Histogram struct {
	Bounds []float64 `json:"bounds"` // ascending upper bounds
	Counts []int64   `json:"counts"` // len(Bounds)+1
	Count  int64     `json:"count"`
	Sum    float64   `json:"sum"`
}

// observe counts one value.
func (h *Histogram) observe(v float64) {
	h.Counts[sort.SearchFloat64s(h.Bounds, v)]++
	h.Count++
	h.Sum += v
}

// tallyKey is where the running tally is kept in meta: it is brought up
// to date from the events after LastID, so that each call reads only the
// rows added since the last (the events table only grows).
const tallyKey = "tally"

type tallyState struct {
	LastID     int64              `json:"last_id"`
	Histograms map[Kind]Histogram `json:"histograms"`
	Errors     int64              `json:"errors"`
}

// Tally brings the running tally up to date and returns it. bounds names
// the histograms to keep, by event kind, with their bucket bounds in ms;
// a histogram asked for with other bounds than kept is counted again from
// the first event. It writes (the running tally, in meta): the reconciler,
// the database's one writer of state, calls it.
func (s *DB) Tally(ctx context.Context, bounds map[Kind][]float64) (*Tally, error) {
	out := &Tally{Trainers: map[string]int{}}
	err := s.tx(ctx, func(tx *sql.Tx) error {
		st, err := readTally(ctx, tx, bounds)
		if err != nil {
			return err
		}
		if err := tallyEvents(ctx, tx, st); err != nil {
			return err
		}
		b, err := json.Marshal(st)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value", tallyKey, string(b)); err != nil {
			return err
		}
		out.Histograms, out.Errors = st.Histograms, st.Errors
		return countTrainers(ctx, tx, out.Trainers)
	})
	if err != nil {
		return nil, fmt.Errorf("tally: %w", err)
	}
	return out, nil
}

// readTally reads the kept tally, starting it over when the histograms
// asked for are not the ones kept.
func readTally(ctx context.Context, tx *sql.Tx, bounds map[Kind][]float64) (*tallyState, error) {
	var st tallyState
	var raw string
	switch err := tx.QueryRowContext(ctx, "SELECT value FROM meta WHERE key = ?", tallyKey).Scan(&raw); err {
	case sql.ErrNoRows:
	case nil:
		if err := json.Unmarshal([]byte(raw), &st); err != nil {
			return nil, fmt.Errorf("meta %s: %w", tallyKey, err)
		}
	default:
		return nil, err
	}
	same := len(st.Histograms) == len(bounds)
	for kind, b := range bounds {
		same = same && slices.Equal(st.Histograms[kind].Bounds, b) && len(st.Histograms[kind].Counts) == len(b)+1
	}
	if !same {
		st = tallyState{Histograms: map[Kind]Histogram{}}
		for kind, b := range bounds {
			if !sort.Float64sAreSorted(b) {
				return nil, fmt.Errorf("histogram %s: bounds not ascending", kind)
			}
			st.Histograms[kind] = Histogram{Bounds: slices.Clone(b), Counts: make([]int64, len(b)+1)}
		}
	}
	return &st, nil
}

// tallyEvents counts the events after st.LastID.
func tallyEvents(ctx context.Context, tx *sql.Tx, st *tallyState) error {
	rows, err := tx.QueryContext(ctx, "SELECT id, kind, ms, error <> '' FROM events WHERE id > ? ORDER BY id", st.LastID)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id     int64
			kind   Kind
			ms     sql.NullFloat64
			failed bool
		)
		if err := rows.Scan(&id, &kind, &ms, &failed); err != nil {
			return err
		}
		st.LastID = id
		if failed {
			st.Errors++
		}
		if h, ok := st.Histograms[kind]; ok && ms.Valid {
			h.observe(ms.Float64)
			st.Histograms[kind] = h
		}
	}
	return rows.Err()
}

func countTrainers(ctx context.Context, tx *sql.Tx, into map[string]int) error {
	rows, err := tx.QueryContext(ctx, "SELECT status, count(*) FROM trainers GROUP BY status")
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var status string
		var n int
		if err := rows.Scan(&status, &n); err != nil {
			return err
		}
		into[status] = n
	}
	return rows.Err()
}
