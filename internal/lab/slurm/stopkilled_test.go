package slurm_test

import (
	"encoding/json"
	"testing"

	"github.com/bftrainer/bftrainer/trainer/wire"
)

// TestStopKilled: scenario 2 tells a runner's stop that killed the
// Trainer from one that found nothing, with cgroup containment (the kill
// is cgroup.kill: no "SIGKILL" in the report) and without.
func TestStopKilled(t *testing.T) {
	for _, tc := range []struct {
		name string
		rep  wire.KillReport
		want bool
	}{
		{"cgroup", wire.KillReport{Node: "slab1", Containment: wire.Cgroup, Clean: true,
			Cgroups: []wire.KilledCgroup{{Trainer: "tr", Path: "/sys/fs/cgroup/bft/slab1/tr/r1", PIDs: []int{10, 11}}}}, true},
		{"group", wire.KillReport{Node: "slab1", Containment: "degraded (no cgroup v2)",
			Groups: []wire.KilledGroup{{Trainer: "tr", PGID: 10, Signal: "SIGKILL", PIDs: []int{10}}}}, true},
		{"proc", wire.KillReport{Node: "slab1", Containment: "degraded (no cgroup v2)",
			Procs: []wire.KilledProc{{PID: 12, Comm: "python3", Why: "run token", Signal: "SIGKILL"}}}, true},
		{"nothing", wire.KillReport{Node: "slab1", Containment: wire.Cgroup, Clean: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, _ := json.Marshal(map[string]string{"note": tc.rep.String()})
			if got := stopKilled(d); got != tc.want {
				t.Fatalf("stopKilled(%s) = %v, want %v", d, got, tc.want)
			}
		})
	}
}
