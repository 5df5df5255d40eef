package sidecar

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/bftrainer/bftrainer/internal/atomicfile"
	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/store"
)

// Metrics: after every round the reconciler writes the pool's gauges and
// counters in Prometheus' text exposition format (version 0.0.4) to a file
// for node_exporter's textfile collector — the way HPC sites already graph
// Slurm. The file is replaced atomically (a temporary name in the same
// directory, then a rename), as the collector requires: it may read at
// any moment. docs/metrics.md documents every metric.
//
// Counters come from what the store keeps for good — the pool's totals
// and a running tally of the history (store.Tally) — so they only grow,
// whichever process writes them, and rate() reads them across restarts.

// histogramBoundsMs are the histograms' buckets, by event kind: a hook
// must end within hooks.deadline (2 s by default; tens of ms is the aim),
// a MILP decision within its time limit (10 s by default), and a
// reclaim's kill on a node within the hook.
func histogramBoundsMs() map[store.Kind][]float64 {
	return map[store.Kind][]float64{
		store.KindHook:  {1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000},
		store.KindSolve: {1, 5, 10, 50, 100, 500, 1000, 5000, 10000, 30000, 60000},
		store.KindKill:  {1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000},
	}
}

// trainerStates are every Trainer status, each written (0 when none), so
// that a graph of one does not vanish.
var trainerStates = [...]pool.Status{pool.Queued, pool.Running, pool.Finished, pool.Cancelled, pool.Failed}

// writeMetrics writes the metrics file for the pool as the round left it.
func (r *Reconciler) writeMetrics(ctx context.Context, st pool.State, now time.Time) error {
	tl, err := r.DB.Tally(ctx, histogramBoundsMs())
	if err != nil {
		return err
	}
	var idle, lent, completing, busy int
	for _, n := range st.Nodes {
		switch n.State {
		case pool.Idle:
			idle++
			if n.Trainer != "" {
				lent++
			}
		case pool.Pending:
			completing++
		case pool.Busy:
			busy++
		}
	}
	var e exposition
	e.gauge("bftrainer_idle_nodes", "Nodes in the idle pool, free or lent to Trainers.", float64(idle))
	e.gauge("bftrainer_lent_nodes", "Idle nodes lent to Trainers.", float64(lent))
	e.gauge("bftrainer_completing_nodes", "Nodes released by their job, waiting for the scheduler to report them exactly idle.", float64(completing))
	e.gauge("bftrainer_busy_nodes", "Nodes the pool knows the scheduler runs jobs on.", float64(busy))
	e.family("bftrainer_trainers", "Trainers by state (all ever submitted).", "gauge")
	for _, s := range trainerStates {
		e.sample("bftrainer_trainers", `state="`+string(s)+`"`, float64(tl.Trainers[string(s)]))
	}
	waiting := 0
	for _, t := range st.Trainers {
		if t.Waiting() {
			waiting++
		}
	}
	e.gauge("bftrainer_waiting_trainers", "Admitted Trainers holding no node: nothing of them runs (of state=\"running\" above).", float64(waiting))
	e.gauge("bftrainer_max_trainers", "Trainers that may run at once (pool.max_trainers).", float64(r.Pool.MaxTrainers))
	t := st.Totals
	e.counter("bftrainer_reclaims_total", "Reclaims: a Trainer losing nodes to the scheduler (each Trainer once per event).", float64(t.Preemptions))
	e.counter("bftrainer_rescales_total", "Rescales decided by the allocator.", float64(t.Rescales))
	e.family("bftrainer_lost_samples_total", "Samples of progress lost, by cause.", "counter")
	e.sample("bftrainer_lost_samples_total", `cause="rescale"`, t.RescaleLoss)
	e.sample("bftrainer_lost_samples_total", `cause="reclaim"`, t.PreemptLoss)
	e.counter("bftrainer_samples_total", "Samples as the pool counts them, net of losses: measured where Trainers report (or log) their progress, modelled from their curves where they do not; bftrainer report sums the measured ones only.", t.Samples)
	e.counter("bftrainer_idle_node_seconds_total", "Node-seconds of idle nodes offered to the pool.", t.IdleNodeSeconds)
	e.counter("bftrainer_used_node_seconds_total", "Node-seconds of idle nodes held by Trainers.", t.UsedNodeSeconds)
	e.histogram("bftrainer_hook_duration_seconds", "Scheduler hook calls: wall time from the hook's start to its event recorded.", tl.Histograms[store.KindHook])
	e.histogram("bftrainer_solve_duration_seconds", "Allocation decisions the solver was called for: wall time of the solve and its commit.", tl.Histograms[store.KindSolve])
	e.histogram("bftrainer_kill_duration_seconds", "Kills of Trainer processes on a node by a scheduler hook (reclaims): wall time of the kill.", tl.Histograms[store.KindKill])
	e.counter("bftrainer_errors_total", "Events recorded with an error (hooks fail open and record here).", float64(tl.Errors))
	if r.Backlog != nil {
		if n, err := r.Backlog(); err == nil {
			e.gauge("bftrainer_journal_records", "Hook records waiting in the journal for a round to record them.", float64(n))
		} else {
			r.Log.Printf("metrics: journal backlog: %v", err)
		}
	}
	if r.Database != "" {
		standin := 0.0
		if r.DB.Path() != r.Database {
			standin = 1
		}
		e.gauge("bftrainer_standin", "1 while rounds run on the stand-in, a copy of the database, because the database's filesystem is read-only.", standin)
	}
	e.gauge("bftrainer_last_round_timestamp_seconds", "When the reconciler's last round ended, Unix time.", float64(now.UnixNano())/1e9)
	return writeAtomic(r.Metrics, e.b.Bytes())
}

// exposition writes Prometheus' text format: each family's HELP and TYPE,
// then its samples, no timestamps (the textfile collector refuses them).
type exposition struct{ b bytes.Buffer }

func (e *exposition) family(name, help, typ string) {
	help = strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(help)
	fmt.Fprintf(&e.b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
}

// sample writes one sample; labels is `k="v",…` or "".
func (e *exposition) sample(name, labels string, v float64) {
	if labels != "" {
		name += "{" + labels + "}"
	}
	fmt.Fprintf(&e.b, "%s %s\n", name, value(v))
}

func (e *exposition) gauge(name, help string, v float64) {
	e.family(name, help, "gauge")
	e.sample(name, "", v)
}

func (e *exposition) counter(name, help string, v float64) {
	e.family(name, help, "counter")
	e.sample(name, "", v)
}

// histogram writes h (ms) in seconds: cumulative buckets, le="+Inf" last,
// then _sum and _count.
func (e *exposition) histogram(name, help string, h store.Histogram) {
	e.family(name, help, "histogram")
	var cum int64
	for i, b := range h.Bounds {
		cum += h.Counts[i]
		e.sample(name+"_bucket", `le="`+value(b/1000)+`"`, float64(cum))
	}
	e.sample(name+"_bucket", `le="+Inf"`, float64(h.Count))
	e.sample(name+"_sum", "", h.Sum/1000)
	e.sample(name+"_count", "", float64(h.Count))
}

// value formats a sample value or a bucket bound as the format spells
// them.
func value(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// writeAtomic replaces path with b: a temporary file beside it (its name
// starts with a dot and does not end in .prom, so the collector skips
// it), then a rename. Readable by all, like node_exporter's other files.
func writeAtomic(path string, b []byte) error {
	if err := atomicfile.WriteFile(path, b, 0o644, false); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}
