package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// DefaultTrainers is the size of the built-in workload: on the generated
// two-day, 1,024-node trace it keeps the pool busy for about a day.
const DefaultTrainers = 100

// ErrInputs marks Inputs a replay cannot run on: options that contradict
// each other or are out of range. Its messages name the options by the
// bftrainer replay flags that set them.
var ErrInputs = errors.New("sim: bad replay inputs")

// inputError is an ErrInputs with its own message.
type inputError struct{ msg string }

func (e inputError) Error() string        { return e.msg }
func (e inputError) Is(target error) bool { return target == ErrInputs }

func inputErrorf(format string, args ...any) error {
	return inputError{fmt.Sprintf(format, args...)}
}

// Inputs are what a replay runs on, as bftrainer replay's flags give them:
// a trace (read, re-simulated or generated), a Trainer workload (read or
// built in) and the event it starts at. Resolve applies the replay policy
// every caller shares: the command line and the bench alike.
type Inputs struct {
	// Trace is a trace already read (say, once for several workloads);
	// nil: TracePath.
	Trace *Trace
	// TracePath is the trace file (Summit CSV, SWF or sacct --parsable2;
	// any gzipped); "" with no Trace: a generated two-day, 1,024-node
	// trace fitted to Summit, starting with the workload.
	TracePath string
	// NodesPath names the nodes of a CSV or sacct trace (node_idx,node_name).
	NodesPath string
	// Jobs is a workload already read; nil: WorkloadPath.
	Jobs []Job
	// WorkloadPath is the paper's workload CSV; "" with no Jobs: the
	// built-in workload of Trainers Trainers, from the trace's start.
	WorkloadPath string
	// Schedule is "recorded" (or "") for the trace as recorded, or "easy"
	// to re-simulate an SWF log with FCFS + EASY backfill.
	Schedule string
	// Plan is "off" (or ""), "on", "head" or "all": the scheduler's plan
	// the allocator is given, with Schedule easy only.
	Plan string
	// PlanDepth is how many queued jobs Plan all plans (≥ 1).
	PlanDepth int
	// PlanWalltimeScale multiplies the requested walltimes the plan is
	// made from, with Schedule easy (1: as requested).
	PlanWalltimeScale float64
	// FromEvent is the trace event the replay starts at; nil: StartEvent,
	// the last event at or before the first submit.
	FromEvent *int
	// Seed seeds the generated trace and the built-in workload.
	Seed uint64
	// Trainers is the size of the built-in workload (> 0 when it is used).
	Trainers int
}

// Resolved is a replay's trace, windowed at its start, and its workload.
type Resolved struct {
	Trace *Trace // windowed: event 0 is the start
	Jobs  []Job
	From  int // the start's index in the whole trace
	// Planned says the allocator is to be given the scheduler's plan
	// (Options.Plan).
	Planned bool
}

// Resolve reads or makes the trace and the workload, checks that they go
// together, picks the start event and windows the trace there. Errors of
// the inputs themselves are ErrInputs; a trace in no known format is
// ErrTraceFormat.
func (in Inputs) Resolve() (*Resolved, error) {
	jobs := in.Jobs
	if jobs == nil && in.WorkloadPath != "" {
		var err error
		if jobs, err = ReadWorkloadFile(in.WorkloadPath); err != nil {
			return nil, err
		}
	}
	easy := in.Schedule == "easy"
	plan := in.Plan != "" && in.Plan != "off"
	if plan && !easy {
		return nil, inputErrorf("--plan %s needs --schedule easy (a recorded schedule has no plan)", in.Plan)
	}
	depth := 1
	if in.Plan == "all" {
		if depth = in.PlanDepth; depth < 1 {
			return nil, inputErrorf("--plan-depth %d, want ≥ 1", depth)
		}
	}
	tr, err := in.trace(jobs, easy, depth)
	if err != nil {
		return nil, err
	}
	if len(tr.Events) == 0 {
		return nil, fmt.Errorf("trace %s has no events", in.TracePath)
	}
	if jobs == nil {
		if in.Trainers <= 0 {
			return nil, inputErrorf("--trainers must be positive")
		}
		i := 0
		if in.FromEvent != nil {
			i = *in.FromEvent
		}
		start := tr.Events[min(max(i, 0), len(tr.Events)-1)].Time
		jobs = DefaultWorkload(in.Trainers, start, in.Seed)
	}
	var from int
	if in.FromEvent == nil {
		from = StartEvent(tr, jobs)
	} else if from = *in.FromEvent; from < 0 || from >= len(tr.Events) {
		return nil, inputErrorf("--from-event %d: the trace has events 0 to %d", from, len(tr.Events)-1)
	}
	return &Resolved{Trace: tr.Window(from), Jobs: jobs, From: from, Planned: plan}, nil
}

// trace is the inputs' trace, whole: given, read, re-simulated or generated.
func (in Inputs) trace(jobs []Job, easy bool, depth int) (*Trace, error) {
	switch {
	case in.Trace != nil:
		return in.Trace, nil
	case in.TracePath != "" && easy:
		if in.NodesPath != "" {
			return nil, inputErrorf("--schedule easy takes the SWF header's machine size; drop --nodes")
		}
		tr, _, err := OpenEASYTracePlan(in.TracePath, in.PlanWalltimeScale, depth)
		return tr, err
	case in.TracePath != "":
		return OpenTrace(in.TracePath, in.NodesPath)
	case in.NodesPath != "":
		return nil, inputErrorf("--nodes needs --trace")
	case easy:
		return nil, inputErrorf("--schedule easy needs --trace (an SWF job log)")
	}
	m := DefaultTraceModel()
	if len(jobs) > 0 {
		m.Start = earliestSubmit(jobs) // the generated trace starts with the workload
	}
	return GenerateTrace(m, in.Seed), nil
}

func earliestSubmit(jobs []Job) time.Time {
	t := jobs[0].Submit
	for _, j := range jobs[1:] {
		if j.Submit.Before(t) {
			t = j.Submit
		}
	}
	return t
}

// ReadWorkloadFile reads the workload CSV at path (ReadWorkload); a file
// with no Trainers is an error.
func ReadWorkloadFile(path string) ([]Job, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open workload: %w", err)
	}
	defer f.Close()
	jobs, err := ReadWorkload(f)
	if err != nil {
		return nil, err
	}
	if len(jobs) == 0 {
		return nil, fmt.Errorf("workload %s: no Trainers", path)
	}
	return jobs, nil
}

// Warning is something a replay's inputs left out or could not line up,
// with what to do about it where there is something ("" if not).
type Warning struct {
	Text, Hint string
}

// Warnings says what the inputs left out or could not line up, as the
// replay's summary counts it: a workload wholly before or after the trace,
// Trainers submitted after it ends, trace lines skipped, SWF jobs truncated.
func (r *Resolved) Warnings(s Summary) []Warning {
	var ws []Warning
	switch {
	case s.LateTrainers == s.Trainers:
		ws = append(ws, Warning{fmt.Sprintf("every Trainer is submitted after the trace ends (%s): nothing ran", r.Trace.Source),
			"shift the workload's submit times into the trace, or pick another --trace"})
	case s.LateTrainers > 0:
		ws = append(ws, Warning{Text: fmt.Sprintf("%d of %d Trainers are submitted after the trace ends and never ran", s.LateTrainers, s.Trainers)})
	}
	if s.EarlyTrainers == s.Trainers && s.Trainers > 1 {
		ws = append(ws, Warning{"every Trainer is submitted before the trace's first replayed event: all were eligible at once at t0",
			"--from-event, or shift the workload's submit times into the trace"})
	}
	if s.SkippedLines > 0 {
		ws = append(ws, Warning{Text: fmt.Sprintf("%d line(s) of the trace could not be used and were skipped", s.SkippedLines)})
	}
	if s.TruncatedJobs > 0 {
		ws = append(ws, Warning{Text: fmt.Sprintf("%d job(s) of the log did not fit the machine and got fewer nodes than recorded", s.TruncatedJobs)})
	}
	return ws
}

// TimelineEvery is how many events apart the timeline's samples are when
// Resolved.Replay writes timeline.svg (Options.Timeline).
const TimelineEvery = 2000

// Replay replays the resolved inputs once with opt. With dir not "" it
// writes there steps.csv (Options.StepLog), trainers.csv
// (WriteTrainersCSV) and timeline.svg (WriteTimelineSVG), making dir if
// need be.
func (r *Resolved) Replay(ctx context.Context, opt Options, dir string) (*Result, error) {
	if dir == "" {
		return Replay(ctx, r.Trace, r.Jobs, opt)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("output directory: %w", err)
	}
	var res *Result
	err := WriteFile(filepath.Join(dir, "steps.csv"), func(w io.Writer) error {
		opt.StepLog, opt.Timeline = w, TimelineEvery
		var err error
		res, err = Replay(ctx, r.Trace, r.Jobs, opt)
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := WriteFile(filepath.Join(dir, "trainers.csv"), func(w io.Writer) error { return WriteTrainersCSV(w, res.Trainers) }); err != nil {
		return nil, err
	}
	// The title says how much of the trace is drawn: a replay stops when
	// every Trainer has finished, often long before the trace ends.
	title := fmt.Sprintf("%s, %s semantics: %s h replayed of %s", res.Summary.Allocator, res.Summary.Semantics,
		Hours(time.Duration(res.Summary.MakespanH*float64(time.Hour))), r.Trace.Source)
	if err := WriteFile(filepath.Join(dir, "timeline.svg"), func(w io.Writer) error { return WriteTimelineSVG(w, res, title) }); err != nil {
		return nil, err
	}
	return res, nil
}

// WriteFile creates path, lets fn fill it, and reports the first error,
// closing included.
func WriteFile(path string, fn func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := fn(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
