package sidecar

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/accounting"
	"github.com/bftrainer/bftrainer/store"
	"github.com/bftrainer/bftrainer/trainer/wire"
)

// auditWindow is a clean hour: n1 and n2 in the pool, job 7 takes both
// (its controller prolog's leave half a second before its start, its
// node prolog's kill of a Trainer on n1 before its batch step), ends and
// gives them back; job 8 runs on n3, never the pool's; sync records n2
// leaving on the scheduler's word.
func auditWindow() (jobs []accounting.Job, evs []store.Event, t0 time.Time) {
	t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	report, _ := json.Marshal(wire.KillReport{Node: "n1", Containment: "cgroup", Clean: true})
	jobs = []accounting.Job{
		{ID: "7", Start: at(60), StepStart: at(61), End: at(120), Nodes: []string{"n1", "n2"}},
		{ID: "8", Start: at(30), End: at(90), Nodes: []string{"n3"}},
	}
	evs = []store.Event{
		{At: at(0), Kind: store.KindJoin, Source: syncSource, Nodes: []string{"n1", "n2"}},
		{At: at(10), Kind: store.KindAction, Source: "trainer", Context: "start", Trainer: "T", Nodes: []string{"n1"}},
		{At: at(59.5), Kind: store.KindLeave, Source: "slurm", Context: "prolog_slurmctld", Job: "7", Nodes: []string{"n1", "n2"}},
		{At: at(60.4), Kind: store.KindKill, Source: "slurm", Context: "prolog_slurmd", Job: "7", Nodes: []string{"n1"}, Value: 2, HasVal: true, Detail: report},
		{At: at(120.2), Kind: store.KindRelease, Source: "slurm", Context: "epilog_slurmctld", Job: "7", Nodes: []string{"n1", "n2"}},
		{At: at(121), Kind: store.KindIdle, Source: "reconciler", Job: "7", Nodes: []string{"n1", "n2"}},
		{At: at(200), Kind: store.KindLeave, Source: syncSource, Nodes: []string{"n2"}},
	}
	return jobs, evs, t0
}

func TestAuditClean(t *testing.T) {
	jobs, evs, t0 := auditWindow()
	r := CheckAudit(jobs, evs, t0, t0.Add(time.Hour), DefaultAuditOptions)
	if len(r.Violations) != 0 {
		t.Fatalf("a clean window: %+v", r.Violations)
	}
	if r.Jobs != 2 || r.Checked != 1 || r.Nodes != 2 || r.Leaves != 2 {
		t.Errorf("jobs %d checked %d nodes %d leaves %d, want 2 1 2 2", r.Jobs, r.Checked, r.Nodes, r.Leaves)
	}
}

// TestAuditPlanted: each kind of violation planted in the clean window is
// found, on the node and job it was planted on, and nothing else is.
func TestAuditPlanted(t *testing.T) {
	at := func(t0 time.Time, s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	type found struct{ kind, job, node string }
	tests := []struct {
		name  string
		plant func(evs []store.Event, t0 time.Time) []store.Event
		want  []found
	}{
		{"leave after the start", func(evs []store.Event, t0 time.Time) []store.Event {
			evs[2].At = at(t0, 65)
			return evs
		}, []found{{AuditLateLeave, "7", "n1"}, {AuditLateLeave, "7", "n2"}}},
		{"no leave at all", func(evs []store.Event, t0 time.Time) []store.Event {
			return slices.Delete(evs, 2, 3)
		}, []found{{AuditLateLeave, "7", "n1"}, {AuditLateLeave, "7", "n2"}}},
		{"a Trainer started beside the job", func(evs []store.Event, t0 time.Time) []store.Event {
			return append(evs, store.Event{At: at(t0, 90), Kind: store.KindAction, Source: "trainer", Context: "start", Trainer: "T", Nodes: []string{"n2"}})
		}, []found{{AuditTrainerStarted, "7", "n2"}}},
		{"killed after the job's processes started", func(evs []store.Event, t0 time.Time) []store.Event {
			// Not by the job's own prolog (which runs before the job's
			// processes whatever the accounting says): a kill within
			// the job's hold that names no job.
			evs[3].At, evs[3].Job = at(t0, 64), ""
			return evs
		}, []found{{AuditKillLate, "7", "n1"}}},
		{"its own prolog killed late by the accounting's clock", func(evs []store.Event, t0 time.Time) []store.Event {
			// The pilot's case: sacct's step start is slurmctld's launch;
			// the prolog ran 3 s later, before the job's first line.
			evs[3].At = at(t0, 64)
			return evs
		}, nil},
		{"Grid Engine's prolog killed late by the accounting's clock", func(evs []store.Event, t0 time.Time) []store.Event {
			// Its start_time is before the prolog runs, too; the prolog on
			// the master host kills on every host of the job.
			evs[3].At, evs[3].Source, evs[3].Context = at(t0, 64), "gridengine", "prolog"
			return evs
		}, nil},
		{"a survivor", func(evs []store.Event, t0 time.Time) []store.Event {
			evs[3].Detail, _ = json.Marshal(wire.KillReport{Node: "n1", Containment: "cgroup", Survivors: []int{4242}})
			return evs
		}, []found{{AuditKillUnclean, "7", "n1"}}},
		{"the kill failed", func(evs []store.Event, t0 time.Time) []store.Event {
			evs[3].Error = "cgroup.kill: permission denied"
			return evs
		}, []found{{AuditKillUnclean, "7", "n1"}}},
		{"rejoined while the job ran", func(evs []store.Event, t0 time.Time) []store.Event {
			return append(evs, store.Event{At: at(t0, 100), Kind: store.KindJoin, Source: "slurm", Context: "epilog_slurmctld", Job: "7", Nodes: []string{"n2"}})
		}, []found{{AuditEarlyJoin, "7", "n2"}}},
		{"a leave for a job that never ran", func(evs []store.Event, t0 time.Time) []store.Event {
			return append(evs, store.Event{At: at(t0, 300), Kind: store.KindLeave, Source: "slurm", Context: "prolog_slurmctld", Job: "99", Nodes: []string{"n1"}})
		}, []found{{AuditUnexplainedLeave, "99", "n1"}}},
		{"a leave for a job on other nodes", func(evs []store.Event, t0 time.Time) []store.Event {
			return append(evs, store.Event{At: at(t0, 29), Kind: store.KindLeave, Source: "slurm", Context: "prolog_slurmctld", Job: "8", Nodes: []string{"n1"}})
		}, []found{{AuditUnexplainedLeave, "8", "n1"}}},
		{"a leave with no job", func(evs []store.Event, t0 time.Time) []store.Event {
			return append(evs, store.Event{At: at(t0, 300), Kind: store.KindLeave, Source: "slurm", Context: "prolog_slurmctld", Nodes: []string{"n1"}})
		}, []found{{AuditUnexplainedLeave, "", "n1"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			jobs, evs, t0 := auditWindow()
			evs = tt.plant(evs, t0)
			r := CheckAudit(jobs, evs, t0, t0.Add(time.Hour), DefaultAuditOptions)
			var got []found
			for _, v := range r.Violations {
				got = append(got, found{v.Kind, v.Job, v.Node})
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("found %+v, want %+v\n%+v", got, tt.want, r.Violations)
			}
		})
	}
}

// TestAuditTolerance: within the clock tolerance a leave or a kill a
// little after the accounting's whole-second start is no violation;
// past it, it is.
func TestAuditTolerance(t *testing.T) {
	jobs, evs, t0 := auditWindow()
	evs[2].At = t0.Add(61500 * time.Millisecond) // 1.5 s after the start
	evs[3].At = t0.Add(62900 * time.Millisecond) // 1.9 s after the batch step
	evs[3].Job = ""                              // a kill not the job's own prolog's (that one is never late)
	if r := CheckAudit(jobs, evs, t0, t0.Add(time.Hour), DefaultAuditOptions); len(r.Violations) != 0 {
		t.Fatalf("within 2 s: %+v", r.Violations)
	}
	o := DefaultAuditOptions
	o.Tolerance = time.Second
	r := CheckAudit(jobs, evs, t0, t0.Add(time.Hour), o)
	var kinds []string
	for _, v := range r.Violations {
		kinds = append(kinds, v.Kind)
	}
	if want := []string{AuditLateLeave, AuditLateLeave, AuditKillLate}; !slices.Equal(kinds, want) {
		t.Fatalf("with 1 s: %v, want %v", kinds, want)
	}
}

// TestAuditShortJob: a job shorter than the tolerance, whose release and
// rejoin follow within it, is clean: the rejoin after its end does not
// count as the node still in the pool at its start.
func TestAuditShortJob(t *testing.T) {
	jobs, evs, t0 := auditWindow()
	jobs[0].End = t0.Add(61 * time.Second)
	evs[4].At = t0.Add(61200 * time.Millisecond)
	evs[5].At = t0.Add(61300 * time.Millisecond)
	if r := CheckAudit(jobs, evs, t0, t0.Add(time.Hour), DefaultAuditOptions); len(r.Violations) != 0 {
		t.Fatalf("a short clean job: %+v", r.Violations)
	}
}
