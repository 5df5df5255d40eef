package slurm

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// slurmdLog is what slurmd 22.05 logs at SlurmdDebug=debug2 for a job's
// end (trimmed, from the lab): job 7 with an epilog, then job 8 without
// one, whose termination request has no end yet.
const slurmdLog = `[2026-12-01T14:14:04.410] [7.batch] job 7 completed with slurm_rc = 0, job_rc = 0
[2026-12-01T14:14:04.413] debug2: Start processing RPC: REQUEST_TERMINATE_JOB
[2026-12-01T14:14:04.413] debug2: Processing RPC: REQUEST_TERMINATE_JOB
[2026-12-01T14:14:04.413] debug:  _rpc_terminate_job: uid = 0 JobId=7
[2026-12-01T14:14:04.413] debug:  credential for job 7 revoked
[2026-12-01T14:14:04.433] debug2: prep/script: _run_subpath_command: epilog success rc:0 output:
[2026-12-01T14:14:04.433] debug:  completed epilog for jobid 7
[2026-12-01T14:14:04.433] debug:  JobId=7: sent epilog complete msg: rc = 0
[2026-12-01T14:14:04.434] debug2: Finish processing RPC: REQUEST_TERMINATE_JOB
[2026-12-01T14:14:09.001] debug:  _rpc_terminate_job: uid = 0 JobId=70
[2026-12-01T14:14:09.002] debug2: Finish processing RPC: REQUEST_TERMINATE_JOB
[2026-12-01T14:14:10.000] debug:  _rpc_terminate_job: uid = 0 JobId=8
`

func TestEpilogTime(t *testing.T) {
	dir := t.TempDir()
	l := &Lab{Dir: dir}
	if err := os.MkdirAll(filepath.Join(dir, "log"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "log", "slurmd-x1.log"), []byte(slurmdLog), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := l.EpilogTime("7", "x1")
	if err != nil {
		t.Fatal(err)
	}
	if want := 21 * time.Millisecond; d != want {
		t.Errorf("job 7: %v, want %v (termination request to the end of its handling)", d, want)
	}
	// Job 70's lines are not job 7's, and job 8's request has no end.
	if d, err := l.EpilogTime("70", "x1"); err != nil || d != time.Millisecond {
		t.Errorf("job 70: %v, %v; want 1ms", d, err)
	}
	if _, err := l.EpilogTime("8", "x1"); !errors.Is(err, ErrNoEpilogLines) {
		t.Errorf("job 8: %v, want ErrNoEpilogLines", err)
	}
}
