package sim

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bftrainer/bftrainer/alloc"
)

// TestResolveGenerated: with no files the trace is generated and the
// built-in workload starts at its first event, which the replay starts at;
// with a workload, the generated trace starts with it.
func TestResolveGenerated(t *testing.T) {
	r, err := Inputs{Seed: 1, Trainers: 5}.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Jobs) != 5 {
		t.Fatalf("%d Trainers, want 5", len(r.Jobs))
	}
	whole := GenerateTrace(DefaultTraceModel(), 1)
	if want := StartEvent(whole, r.Jobs); r.From != want {
		t.Errorf("starts at event %d, want StartEvent's %d", r.From, want)
	}
	if !r.Trace.Events[0].Time.Equal(whole.Events[r.From].Time) {
		t.Errorf("window starts %v, want event %d's %v", r.Trace.Events[0].Time, r.From, whole.Events[r.From].Time)
	}
	shifted := ShiftWorkload(r.Jobs, whole.Events[0].Time.AddDate(0, 0, 30))
	r2, err := Inputs{Jobs: shifted, Seed: 1}.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := r2.Trace.Events[0].Time, earliestSubmit(shifted); got.After(want) {
		t.Errorf("generated trace starts %v, after the workload's first submit %v", got, want)
	}
}

// TestResolveGiven: a trace and workload already read are windowed at
// StartEvent, or at FromEvent when it is given.
func TestResolveGiven(t *testing.T) {
	tr := handTrace(t, 2, handEvent{at: 0, join: []int32{0}}, handEvent{at: 60, join: []int32{1}}, handEvent{at: 120, leave: []int32{0}})
	jobs := []Job{linearJob("a", 90, 1, 2, 1, 0, 0, 100)}
	r, err := Inputs{Trace: tr, Jobs: jobs}.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	if r.From != 1 || len(r.Trace.Events) != 2 {
		t.Errorf("from %d with %d events, want 1 with 2 (the last event at or before the submit)", r.From, len(r.Trace.Events))
	}
	zero := 0
	if r, err = (Inputs{Trace: tr, Jobs: jobs, FromEvent: &zero}).Resolve(); err != nil || r.From != 0 || len(r.Trace.Events) != 3 {
		t.Errorf("FromEvent 0: %+v, %v; want the whole trace", r, err)
	}
}

// TestResolveErrors: inputs that contradict each other are ErrInputs,
// named by the flags; a trace in no known format is ErrTraceFormat.
func TestResolveErrors(t *testing.T) {
	tr := handTrace(t, 1, handEvent{at: 0, join: []int32{0}})
	bad := filepath.Join(t.TempDir(), "trace.txt")
	if err := os.WriteFile(bad, []byte("not a trace\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	five := 5
	for _, tt := range []struct {
		in   Inputs
		want string
		is   error
	}{
		{Inputs{Trace: tr, Trainers: 1, Plan: "head"}, "--plan head needs --schedule easy", ErrInputs},
		{Inputs{TracePath: "x.swf", Schedule: "easy", Plan: "all"}, "--plan-depth 0, want ≥ 1", ErrInputs},
		{Inputs{TracePath: "x.swf", NodesPath: "n.csv", Schedule: "easy"}, "drop --nodes", ErrInputs},
		{Inputs{NodesPath: "n.csv"}, "--nodes needs --trace", ErrInputs},
		{Inputs{Schedule: "easy"}, "--schedule easy needs --trace", ErrInputs},
		{Inputs{Trace: tr}, "--trainers must be positive", ErrInputs},
		{Inputs{Trace: tr, Trainers: 1, FromEvent: &five}, "--from-event 5: the trace has events 0 to 0", ErrInputs},
		{Inputs{TracePath: bad, Trainers: 1}, "", ErrTraceFormat},
	} {
		_, err := tt.in.Resolve()
		if !errors.Is(err, tt.is) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: %v, want %v saying %q", tt.in, err, tt.is, tt.want)
		}
	}
}

// TestResolvedWarnings: a workload wholly after the trace is said, with
// its hint, as the summary counts it; Replay writes its files in dir.
func TestResolvedWarnings(t *testing.T) {
	tr := handTrace(t, 1, handEvent{at: 0, join: []int32{0}}, handEvent{at: 60, leave: []int32{0}})
	late := []Job{linearJob("a", 3600, 1, 1, 1, 0, 0, 100), linearJob("b", 7200, 1, 1, 1, 0, 0, 100)}
	r, err := Inputs{Trace: tr, Jobs: late}.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "out")
	res, err := r.Replay(context.Background(), Options{Solver: alloc.Adaptive{}}, dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"steps.csv", "trainers.csv", "timeline.svg"} {
		if fi, err := os.Stat(filepath.Join(dir, f)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v, want it written", f, err)
		}
	}
	ws := r.Warnings(res.Summary)
	if len(ws) != 1 || !strings.Contains(ws[0].Text, "every Trainer is submitted after the trace ends") || ws[0].Hint == "" {
		t.Errorf("warnings %+v, want the one of a workload after the trace, with a hint", ws)
	}
}
