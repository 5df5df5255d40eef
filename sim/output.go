package sim

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// stepLogHeader is the header of the per-event CSV (Options.StepLog), the reference
// replayer's step-logs.csv columns:
//
//	evtTime   event time (naive, as the trace)
//	Thr       net samples processed by all Trainers in the interval ending at the event,
//	          after rescale and reclaim costs and with finished Trainers' overshoot trimmed
//	Rate      Σ throughput (samples/s) of the running Trainers after the decision
//	ReScost   rescale cost (samples) booked by the decision, charged at the next event
//	evt       event index in the replayed trace (0 = t0)
//	Nleft     nodes that left the pool at the event
//	Npre      Trainers that lost nodes to it (reclaims)
//	Njoin     nodes that joined the pool at the event
//	nJob      running (admitted) Trainers after the decision
//	nNd       idle nodes (free or held)
//	nJrun     Trainers holding at least one node
//	nNrun     nodes held by Trainers
//	PreCost   reclaim cost (samples) charged at the event
//
// As in the reference, the row of the event where the last Trainer finishes ends the
// log (with Rate 0, where the reference repeats the last decision's); with
// alloc.Reference semantics there is no row for t0 (no decision is taken then).
const stepLogHeader = "evtTime,Thr,Rate,ReScost,evt,Nleft,Npre,Njoin,nJob,nNd,nJrun,nNrun,PreCost"

// stepRow is one row of the step log.
type stepRow struct {
	At                          time.Time
	Thr, Rate, ReScost, PreCost float64
	Event, Left, Preempted      int
	Joined, Jobs, Nodes         int
	JobsRunning, NodesRunning   int
}

// stepWriter writes step-log rows through a buffer.
type stepWriter struct {
	w   *bufio.Writer
	buf []byte
}

func newStepWriter(w io.Writer) *stepWriter { return &stepWriter{w: bufio.NewWriterSize(w, 1<<16)} }

func (s *stepWriter) header() error {
	if _, err := s.w.WriteString(stepLogHeader + "\n"); err != nil {
		return fmt.Errorf("step log: %w", err)
	}
	return nil
}

func (s *stepWriter) write(r stepRow) error {
	b := r.At.UTC().AppendFormat(s.buf[:0], traceTimeLayout+".999999999")
	for _, v := range []float64{r.Thr, r.Rate, r.ReScost} {
		b = append(b, ',')
		b = strconv.AppendFloat(b, v, 'f', 6, 64)
	}
	for _, v := range []int{r.Event, r.Left, r.Preempted, r.Joined, r.Jobs, r.Nodes, r.JobsRunning, r.NodesRunning} {
		b = append(b, ',')
		b = strconv.AppendInt(b, int64(v), 10)
	}
	b = append(b, ',')
	b = strconv.AppendFloat(b, r.PreCost, 'f', 6, 64)
	b = append(b, '\n')
	s.buf = b
	if _, err := s.w.Write(b); err != nil {
		return fmt.Errorf("step log: %w", err)
	}
	return nil
}

func (s *stepWriter) flush() error {
	if err := s.w.Flush(); err != nil {
		return fmt.Errorf("step log: %w", err)
	}
	return nil
}

// WriteSummaryTable writes one aligned text row per summary, for a terminal.
func WriteSummaryTable(w io.Writer, rows []Summary) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "allocator\tsemantics\ttfwd_s\tmax_trainers\tfinished\tmakespan_h\tmean_jct_h\te_ovh\te_1node\tutilisation\trescales\treclaims\tevents\tsolve_ms_p50\tsolve_ms_p99\twall_s")
	for _, s := range rows {
		maxJ := strconv.Itoa(s.MaxTrainers)
		if s.Admission == "auto" {
			maxJ = "auto"
		}
		fmt.Fprintf(tw, "%s\t%s\t%g\t%s\t%d/%d\t%.2f\t%.2f\t%.3f\t%.3f\t%.3f\t%d\t%d\t%d\t%.2f\t%.2f\t%.1f\n",
			s.Allocator, s.Semantics, s.TFwd, maxJ, s.Finished, s.Trainers,
			s.MakespanH, s.MeanJCTH, s.EOvh, s.E1Node, s.Utilisation,
			s.Rescales, s.Reclaims, s.Events, s.SolveMsP50, s.SolveMsP99, s.WallS)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write summary: %w", err)
	}
	return nil
}

// WriteSummaryJSON writes the summaries as an indented JSON array (an array even for
// one, so that scripts need not branch).
func WriteSummaryJSON(w io.Writer, rows []Summary) error {
	if rows == nil {
		rows = []Summary{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rows); err != nil {
		return fmt.Errorf("write summary: %w", err)
	}
	return nil
}

// trainersHeader is the header of WriteTrainersCSV's output.
const trainersHeader = "id,model,submit,admitted,ended,finished,jct_h,samples,rescale_loss,preempt_loss,rescales,reclaims,node_h"

// WriteTrainersCSV writes one row per Trainer: when it was submitted, admitted and
// finished (empty if it was not), its job completion time, samples, losses and node-hours.
func WriteTrainersCSV(w io.Writer, trainers []TrainerResult) error {
	cw := csv.NewWriter(w)
	cw.Write(strings.Split(trainersHeader, ","))
	stamp := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format(traceTimeLayout + ".999999999")
	}
	num := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	for _, t := range trainers {
		cw.Write([]string{t.ID, t.Model, stamp(t.Submit), stamp(t.Admitted), stamp(t.Ended),
			strconv.FormatBool(t.Finished), num(t.JCTH), num(t.Samples), num(t.RescaleLoss),
			num(t.PreemptLoss), strconv.Itoa(t.Rescales), strconv.Itoa(t.Reclaims), num(t.NodeHours)})
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("write trainers: %w", err)
	}
	return nil
}

// ProgressBar returns an Options.Progress that draws a one-line bar on w (a terminal),
// redrawn only when it moves by a percent, and ends the line when done reaches total.
func ProgressBar(w io.Writer, label string) func(done, total int) {
	last := -1
	return func(done, total int) {
		if total <= 0 {
			return
		}
		pct := min(100, 100*done/total)
		if pct == last {
			return
		}
		last = pct
		const width = 30
		fill := width * pct / 100
		fmt.Fprintf(w, "\r%s [%s%s] %3d%% %d/%d events", label,
			strings.Repeat("#", fill), strings.Repeat(".", width-fill), pct, done, total)
		if done >= total {
			fmt.Fprintln(w)
		}
	}
}
