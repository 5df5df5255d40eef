package journal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/bftrainer/bftrainer/internal/atomicfile"
	"github.com/bftrainer/bftrainer/store"
)

// Budget bounds the error rows one source writes about bad input that
// others can drop — the journal's bad files, the spool's bad requests —
// to Limit rows per Window. While the budget lasts each bad item gets a
// row of its own; when it runs out, one row counts the rest; what arrives
// while it is spent is counted in the file Carry and reported in one row
// once the budget is back. A flood of junk costs a bounded number of rows,
// never a permanent error stream, and is never hidden.
type Budget struct {
	Source string        // the rows' source (counted against the budget)
	Limit  int           // rows per Window; 0: 10
	Window time.Duration // 0: an hour
	// Carry is the counter file of items not yet reported, in a directory
	// only this process's user may enter (made 0700 when missing); "":
	// what is over budget with nothing carried is counted, not kept.
	Carry string
	What  string // what the summary row counts: "bad files in the journal"
}

func (b Budget) limit() int {
	if b.Limit <= 0 {
		return defaultErrorBudget
	}
	return b.Limit
}

func (b Budget) window() time.Duration {
	if b.Window <= 0 {
		return defaultErrorWindow
	}
	return b.Window
}

// Rows returns the rows to record for bad, the error rows of the bad
// items in order: rows of their own for the first ones while the budget
// lasts, then one that counts the rest and those carried from before.
// listed is how many got a row of their own; carry is the count to keep
// for later (Save it once the rows are committed).
func (b Budget) Rows(ctx context.Context, db *store.DB, bad []store.Event, now time.Time) (rows []store.Event, listed, carry int, err error) {
	carried := b.Carried()
	if len(bad) == 0 && carried == 0 {
		return nil, 0, 0, nil
	}
	limit := b.limit()
	recent, err := db.Events(ctx, store.Filter{Kinds: []store.Kind{store.KindError}, Source: b.Source,
		Since: now.Add(-b.window()), Limit: limit})
	if err != nil {
		return nil, 0, 0, fmt.Errorf("error budget: %w", err)
	}
	avail := limit - len(recent)
	if avail <= 0 {
		return nil, 0, carried + len(bad), nil
	}
	listed = len(bad)
	if carried > 0 || len(bad) > avail {
		listed = min(len(bad), avail-1)
	}
	rows = append(rows, bad[:listed]...)
	if rest := len(bad) - listed + carried; rest > 0 {
		rows = append(rows, store.Event{At: now, Kind: store.KindError, Source: b.Source, Context: "over budget",
			Value: float64(rest), HasVal: true, Origin: fmt.Sprintf("%s.unlisted.%d", b.Source, now.UnixNano()),
			Error: fmt.Sprintf("%d more %s, removed without a row each (at most %d rows per %v)", rest, b.What, limit, b.window())})
	}
	return rows, listed, 0, nil
}

// Carried is the count of bad items not reported yet.
func (b Budget) Carried() int {
	if b.Carry == "" {
		return 0
	}
	if fi, err := os.Lstat(filepath.Dir(b.Carry)); err != nil || !ownDir(fi) {
		return 0
	}
	raw, err := os.ReadFile(b.Carry)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
	return max(n, 0)
}

// Save keeps n as the count not reported yet (0 removes the file).
func (b Budget) Save(n int) {
	if b.Carry == "" {
		return
	}
	if n == 0 {
		os.Remove(b.Carry)
		return
	}
	dir := filepath.Dir(b.Carry)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return
	}
	if fi, err := os.Lstat(dir); err != nil || !ownDir(fi) {
		return
	}
	atomicfile.WriteFile(b.Carry, []byte(strconv.Itoa(n)+"\n"), 0o600, false)
}
