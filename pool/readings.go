package pool

// Progress read from a Trainer's progress log by its launcher: the second
// source of a Trainer's samples, beside its own reports (bftrainer
// progress). Reports win: once a Trainer has reported itself, readings of
// its log are ignored, and the two never pair into one observation.

import (
	"fmt"
	"time"

	"github.com/bftrainer/bftrainer/alloc"
)

// Sources of a Trainer's samples, as a history row names them.
const (
	SourceReport = "report" // its own progress report (bftrainer progress)
	SourceLog    = "log"    // its launcher's reading of its progress log
)

// LogReadings are what the pool keeps of the readings of a Trainer's
// progress log: how many it folded and the last one (its line's time and
// samples), the previous point of the next observation.
type LogReadings struct {
	Readings int       `json:"readings,omitempty"`
	ReadAt   time.Time `json:"read_at,omitzero"`
	ReadDone float64   `json:"read_done,omitempty"`
}

// ProgressRead records a reading of a Trainer's progress log: samples
// done at at, the line's own time (which may be before the pool's clock:
// the observation is timed by the lines, not by when they were folded).
// It is what Progress does for a report — Done, an observation of the
// curve from the previous reading at an unchanged count, the finish at
// the target — except for a Trainer that has reported itself: reports
// win, and the reading is ignored (used reports false). A count that went
// down (a restart from a checkpoint) is no observation, nor is the
// interval to a reading marked restart (the workers restarted in between:
// the log's world size changed); the next one is measured from it.
func (p *Pool) ProgressRead(at time.Time, id string, samples float64, restart bool) (used bool, err error) {
	t, ok := p.byID[id]
	if !ok {
		return false, fmt.Errorf("progress %q: %w", id, ErrUnknownTrainer)
	}
	if samples < 0 || samples != samples {
		return false, fmt.Errorf("progress %q: samples must be ≥ 0", id)
	}
	if t.Learn.Reports > 0 {
		return false, nil
	}
	p.accrue(at)
	p.totals.Samples += samples - t.Done
	t.Done = samples
	p.record(Change{Kind: Reported, Trainer: id, Note: fmt.Sprintf("%.0f samples (progress log)", samples), Source: SourceLog})
	if t.Status == Running {
		p.read(t, at, samples, restart)
	}
	if t.Samples > 0 && samples >= t.Samples {
		p.end(t, Finished, "its progress log reached its samples")
	}
	p.finishReached()
	p.Admit()
	return true, nil
}

// read folds a reading into t's learning: the samples since the previous
// reading, if its count did not change and its workers did not restart in
// between, are an observation; a restart after the count's change starts
// its settle window again (torchrun re-forms its world at the new count
// some time after the change).
func (p *Pool) read(t *Trainer, at time.Time, samples float64, restart bool) {
	l := &t.Learn
	n := len(t.Nodes)
	if l.Readings > 0 && !restart && !l.ReadAt.Before(l.Steady) && n >= max(t.Min, 1) && samples >= l.ReadDone {
		if dt := at.Sub(l.ReadAt).Seconds(); dt > 0 {
			// The settle window counts from the count's change, or from
			// the workers' restart after it (Learning.Resumed).
			since := l.ReadAt.Sub(l.Steady).Seconds()
			if l.Resumed.After(l.Steady) {
				since = l.ReadAt.Sub(l.Resumed).Seconds()
			}
			_ = p.observe(t.ID, alloc.CurveObs{Nodes: n, Rate: (samples - l.ReadDone) / dt, Duration: dt, Since: max(0, since)}, SourceLog)
		}
	}
	if restart && !at.Before(l.Steady) {
		l.Resumed = at
	}
	l.ReadAt, l.ReadDone = at, samples
	l.Readings++
}
