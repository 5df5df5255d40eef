package store

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Report is the harvest summary over a time window.
type Report struct {
	Since             string  `json:"since,omitempty"`
	Until             string  `json:"until,omitempty"`
	IdleNodeHours     float64 `json:"idle_node_hours"`
	UsedNodeHours     float64 `json:"used_node_hours"`
	Utilisation       float64 `json:"utilisation"`
	TrainersFinished  int     `json:"trainers_finished"`
	TrainersFailed    int     `json:"trainers_failed"`
	TrainersCancelled int     `json:"trainers_cancelled"`
	TrainersRunning   int     `json:"trainers_running"` // admitted and holding nodes
	TrainersWaiting   int     `json:"trainers_waiting"` // admitted, holding no node
	TrainersQueued    int     `json:"trainers_queued"`
	// Samples are the samples the Trainers measured (their progress
	// reports, or their progress logs' readings): processed.
	Samples float64 `json:"samples"`
	// ModelledSamples are those of Trainers that measured nothing: the
	// pool's model of them (their curve over the time they held nodes),
	// never counted as processed.
	ModelledSamples    float64 `json:"modelled_samples"`
	ModelledTrainers   int     `json:"modelled_trainers"`
	RescaleLossSamples float64 `json:"rescale_loss_samples"`
	PreemptLossSamples float64 `json:"preempt_loss_samples"`
	Rescales           int     `json:"rescales"`
	Preemptions        int     `json:"preemptions"`
	HookCalls          int     `json:"hook_calls"`
	HookMsP50          float64 `json:"hook_ms_p50"`
	HookMsP99          float64 `json:"hook_ms_p99"`
	Solves             int     `json:"solves"`
	SolveMsP50         float64 `json:"solve_ms_p50"`
	SolveMsP99         float64 `json:"solve_ms_p99"`
	Errors             int     `json:"errors"`
}

// Rows returns the report as (figure, value) pairs for a table: hours
// to the thousandth (3.6 s), samples whole.
func (r *Report) Rows() [][2]string {
	h := func(v float64) string { return fmt.Sprintf("%.3f", v) }
	n := func(v float64) string { return fmt.Sprintf("%.0f", v) }
	return [][2]string{
		{"idle node-hours offered", h(r.IdleNodeHours)},
		{"node-hours used by Trainers", h(r.UsedNodeHours)},
		{"utilisation", fmt.Sprintf("%.4f", r.Utilisation)},
		{"Trainers finished / failed / cancelled", fmt.Sprintf("%d / %d / %d", r.TrainersFinished, r.TrainersFailed, r.TrainersCancelled)},
		{"Trainers running / waiting / queued", fmt.Sprintf("%d / %d / %d", r.TrainersRunning, r.TrainersWaiting, r.TrainersQueued)},
		{"samples processed (measured, Trainers in window)", n(r.Samples)},
		{"samples modelled (not processed: no progress measured)", fmt.Sprintf("%s of %d Trainers", n(r.ModelledSamples), r.ModelledTrainers)},
		{"samples lost to rescales", fmt.Sprintf("%s in %d rescales", n(r.RescaleLossSamples), r.Rescales)},
		{"samples lost to reclaims", fmt.Sprintf("%s in %d reclaims", n(r.PreemptLossSamples), r.Preemptions)},
		{"hook calls", fmt.Sprintf("%d (p50 %.3f ms, p99 %.3f ms)", r.HookCalls, r.HookMsP50, r.HookMsP99)},
		{"solves", fmt.Sprintf("%d (p50 %.3f ms, p99 %.3f ms)", r.Solves, r.SolveMsP50, r.SolveMsP99)},
		{"errors swallowed", fmt.Sprint(r.Errors)},
	}
}

// Report computes the harvest summary. Node-hours come from the per-day
// usage table (whole days); the rest from the events in [since, until).
func (s *DB) Report(ctx context.Context, since, until time.Time) (*Report, error) {
	r := &Report{Since: formatTime(since), Until: formatTime(until)}
	where, args := window(since, until)
	err := s.readTx(ctx, func(tx *sql.Tx) error {
		uw, uargs := "", []any{}
		if !since.IsZero() {
			uw, uargs = " WHERE day >= ?", append(uargs, since.UTC().Format("2006-01-02"))
		}
		if !until.IsZero() {
			if uw == "" {
				uw = " WHERE day < ?"
			} else {
				uw += " AND day < ?"
			}
			uargs = append(uargs, until.UTC().Format("2006-01-02"))
		}
		if err := tx.QueryRowContext(ctx, "SELECT coalesce(sum(idle_node_seconds), 0)/3600.0, coalesce(sum(used_node_seconds), 0)/3600.0 FROM usage"+uw, uargs...).
			Scan(&r.IdleNodeHours, &r.UsedNodeHours); err != nil {
			return err
		}
		if r.IdleNodeHours > 0 {
			r.Utilisation = r.UsedNodeHours / r.IdleNodeHours
		}
		tw, targs := "", []any{}
		if !since.IsZero() {
			tw, targs = " AND (ended = '' OR ended >= ?)", append(targs, formatTime(since))
		}
		// A Trainer's measured samples are its last report's, else its
		// last progress-log reading's (pool.Trainer.MeasuredDone); the
		// done column is the pool's estimate between them.
		if err := tx.QueryRowContext(ctx, `SELECT
			coalesce(sum(status = 'finished'), 0), coalesce(sum(status = 'failed'), 0), coalesce(sum(status = 'cancelled'), 0),
			coalesce(sum(status = 'running' AND node_count > 0), 0), coalesce(sum(status = 'running' AND node_count = 0), 0),
			coalesce(sum(status = 'queued'), 0),
			coalesce(sum(CASE WHEN `+reportsSQL+` > 0 THEN `+reportDoneSQL+`
				WHEN `+readingsSQL+` > 0 THEN `+readDoneSQL+` ELSE 0 END), 0),
			coalesce(sum(CASE WHEN `+reportsSQL+` > 0 OR `+readingsSQL+` > 0 THEN 0 ELSE done END), 0),
			coalesce(sum(`+reportsSQL+` = 0 AND `+readingsSQL+` = 0 AND done > 0), 0),
			coalesce(sum(rescale_loss), 0), coalesce(sum(preempt_loss), 0),
			coalesce(sum(rescales), 0), coalesce(sum(preemptions), 0) FROM trainers WHERE 1=1`+tw, targs...).
			Scan(&r.TrainersFinished, &r.TrainersFailed, &r.TrainersCancelled, &r.TrainersRunning, &r.TrainersWaiting, &r.TrainersQueued,
				&r.Samples, &r.ModelledSamples, &r.ModelledTrainers, &r.RescaleLossSamples, &r.PreemptLossSamples, &r.Rescales, &r.Preemptions); err != nil {
			return err
		}
		var err error
		if r.HookCalls, r.HookMsP50, r.HookMsP99, err = percentiles(ctx, tx, "SELECT ms FROM events WHERE kind = 'hook' AND ms IS NOT NULL"+where, args...); err != nil {
			return err
		}
		if r.Solves, r.SolveMsP50, r.SolveMsP99, err = percentiles(ctx, tx, "SELECT ms FROM events WHERE kind = 'solve' AND ms IS NOT NULL"+where, args...); err != nil {
			return err
		}
		return tx.QueryRowContext(ctx, "SELECT count(*) FROM events WHERE error <> ''"+where, args...).Scan(&r.Errors)
	})
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	return r, nil
}

// The trainers.spec column's progress measurements (pool.Learning).
const (
	reportsSQL    = `coalesce(json_extract(spec, '$.learn.reports'), 0)`
	reportDoneSQL = `coalesce(json_extract(spec, '$.learn.report_done'), 0)`
	readingsSQL   = `coalesce(json_extract(spec, '$.learn.readings'), 0)`
	readDoneSQL   = `coalesce(json_extract(spec, '$.learn.read_done'), 0)`
)

func window(since, until time.Time) (string, []any) {
	var w []string
	var args []any
	if !since.IsZero() {
		w, args = append(w, "at >= ?"), append(args, formatTime(since))
	}
	if !until.IsZero() {
		w, args = append(w, "at < ?"), append(args, formatTime(until))
	}
	if len(w) == 0 {
		return "", nil
	}
	return " AND " + strings.Join(w, " AND "), args
}

// percentiles returns the count, median and 99th percentile (nearest
// rank) of a column: SQLite has no percentile function.
func percentiles(ctx context.Context, tx *sql.Tx, q string, args ...any) (int, float64, float64, error) {
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return 0, 0, 0, err
	}
	defer rows.Close()
	var xs []float64
	for rows.Next() {
		var x float64
		if err := rows.Scan(&x); err != nil {
			return 0, 0, 0, err
		}
		xs = append(xs, x)
	}
	if err := rows.Err(); err != nil {
		return 0, 0, 0, err
	}
	if len(xs) == 0 {
		return 0, 0, 0, nil
	}
	sort.Float64s(xs)
	return len(xs), Quantile(xs, 0.5), Quantile(xs, 0.99), nil
}

// Quantile returns the nearest-rank q-quantile of sorted values.
func Quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
