package trainer

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/bftrainer/bftrainer/trainer/wire"
)

// Progress is a new reading of a Trainer's progress log (ReadProgress):
// what a `bftrainer progress` report would have said.
type Progress struct {
	Trainer string
	Node    string    // where it was read
	At      time.Time // the line's time, never after the read
	Samples float64   // done by the whole job then
	World   int       // the line's world size; 0: it says none
	// Backward: fewer samples than the reading before — the program
	// restarted from a checkpoint.
	Backward bool
	// Restart: the workers restarted since the reading before (Backward,
	// or the lines' world size changed): no rate spans the two, since
	// the restart's dead time lies between them.
	Restart bool
}

// progressWatch is what the runner keeps of a Trainer's progress log, in
// its Record: where to read it, and what it last read.
type progressWatch struct {
	Path  string      `json:"path"` // resolved on the nodes
	Log   ProgressLog `json:"log"`
	Nodes []string    `json:"nodes,omitempty"` // the Trainer's, in the order taken: read on the first with a launch
	Off   bool        `json:"off,omitempty"`   // it reports itself (Want.Reports): not read
	Tried time.Time   `json:"tried,omitzero"`  // the last read, by this machine's clock
	Last  *Progress   `json:"last,omitempty"`  // the last reading returned
	Said  string      `json:"said,omitempty"`  // the last failure or note returned, not repeated
	Fails int         `json:"fails,omitempty"` // failed reads in a row: each doubles the wait, up to 16 times
}

// due reports whether the log is to be read now: every after the last
// read, longer after failures (a node that hangs does not hold every
// round for the read's timeout).
func (pw *progressWatch) due(now time.Time, every time.Duration) bool {
	return now.Sub(pw.Tried) >= every<<min(pw.Fails, 4)
}

// watchProgress notes, at each Apply, the Trainer's progress log (from its
// spec), its nodes and whether it reports itself.
func (rec *Record) watchProgress(w Want) {
	var spec struct {
		Workdir     string       `json:"workdir"`
		ProgressLog *ProgressLog `json:"progress_log"`
	}
	if json.Unmarshal(w.Spec, &spec) != nil || spec.ProgressLog == nil {
		rec.Progress = nil
		return
	}
	path, err := spec.ProgressLog.Resolve(spec.Workdir)
	if err != nil { // CheckSpec refused it already
		rec.Progress = nil
		return
	}
	pw := rec.Progress
	if pw == nil || pw.Path != path {
		pw = &progressWatch{Path: path}
	}
	pw.Log, pw.Nodes, pw.Off = *spec.ProgressLog, slices.Clone(w.Nodes), w.Reports
	rec.Progress = pw
}

// start is when the Trainer's run began: its submission, else its
// earliest launch. A log line before it is a previous run's.
func (rec *Record) start() time.Time {
	if !rec.Since.IsZero() {
		return rec.Since
	}
	var first time.Time
	for _, l := range rec.Nodes {
		if !l.Started.IsZero() && (first.IsZero() || l.Started.Before(first)) {
			first = l.Started
		}
	}
	return first
}

// ReadProgress reads the progress log of every Trainer that declares one
// and does not report itself, each at most once per ReadEvery, on the
// first of its nodes with a running launch — over the node transport, by
// the node agent as the Trainer's owner (node-agent tail) — all at once
// and within ReadTimeout (a Trainer whose reads fail is read less often:
// each failure in a row doubles its interval, up to 16 times). It returns
// the new readings: the latest
// complete line (ProgressLog.LastReading) when it is later than the last
// one returned and not older than the Trainer's run (a log left by an
// earlier run of the same path is not this run's progress). A failure or
// a stale log is said once, as a "progress-log" action, until it changes.
// A missing file says nothing: the program has not written yet.
func (r *Runner) ReadProgress(ctx context.Context) ([]Progress, []Action) {
	every := r.ReadEvery
	if every == 0 {
		every = 5 * time.Second
	}
	if every < 0 {
		return nil, nil
	}
	s, err := r.open()
	if err != nil {
		return nil, []Action{{Op: "state", Err: err}}
	}
	now := time.Now()
	type read struct {
		id, node string
		rec      *Record
		tail     wire.Tail
		err      error
	}
	var reads []*read
	for _, id := range slices.Sorted(maps.Keys(s.st.Trainers)) {
		rec := s.st.Trainers[id]
		pw := rec.Progress
		if rec.Exited || pw == nil || pw.Off || !pw.due(now, every) {
			continue
		}
		for _, n := range pw.Nodes {
			if l := rec.Nodes[n]; l != nil && !l.Pending && l.Exit == nil {
				reads = append(reads, &read{id: id, node: n, rec: rec})
				break
			}
		}
	}
	if len(reads) == 0 {
		return nil, nil
	}
	timeout := r.ReadTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	r.parallel(len(reads), func(i int) {
		rd := reads[i]
		rd.tail, rd.err = r.tail(rctx, rd.node, rd.id, rd.rec)
	})
	after := time.Now()
	var out []Progress
	var acts []Action
	say := func(rd *read, err error, note string) {
		pw := rd.rec.Progress
		msg := note
		if err != nil {
			msg = err.Error()
		}
		if msg != pw.Said {
			acts = append(acts, Action{Trainer: rd.id, Node: rd.node, Op: "progress-log", Err: err, Note: note})
		}
		pw.Said = msg
	}
	for _, rd := range reads {
		pw := rd.rec.Progress
		pw.Tried = now
		if rd.err != nil {
			pw.Fails++
			say(rd, rd.err, "")
			continue
		}
		pw.Fails = 0
		if rd.tail.Missing {
			pw.Said = ""
			continue
		}
		got, ok := pw.Log.LastReading(rd.tail)
		switch {
		case !ok:
			say(rd, nil, fmt.Sprintf("%s: no complete line reads as progress (time, %s)", pw.Path, pw.Log.samplesKey()))
			continue
		case got.At.Before(rd.rec.start()):
			say(rd, nil, fmt.Sprintf("%s: its last line (%s) is older than the run: an earlier run's log", pw.Path, got.At.UTC().Format(time.RFC3339)))
			continue
		case pw.Last != nil && !got.At.After(pw.Last.At):
			continue // nothing new
		}
		pw.Said = ""
		p := Progress{Trainer: rd.id, Node: rd.node, At: got.At, Samples: got.Samples, World: got.World}
		if p.At.After(after) {
			p.At = after // a node clock ahead of ours
		}
		p.Backward = pw.Last != nil && p.Samples < pw.Last.Samples
		p.Restart = p.Backward || pw.Last != nil && p.World != 0 && pw.Last.World != 0 && p.World != pw.Last.World
		last := p // clamped: a line from the future does not hide the next ones
		pw.Last = &last
		out = append(out, p)
	}
	s.save()
	return out, append(s.acts, acts...)
}

// tail asks the node agent for the end of the Trainer's progress log.
func (r *Runner) tail(ctx context.Context, node, id string, rec *Record) (wire.Tail, error) {
	return AgentClient{r.Nodes}.Tail(ctx, node, id, wire.TailRequest{Path: rec.Progress.Path, Run: rec.Run})
}
