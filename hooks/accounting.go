package hooks

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/bftrainer/bftrainer/accounting"
)

// Accounting reads a scheduler's own accounting of its jobs — which job
// held which nodes from when to when — for `bftrainer audit`, which checks
// the history against it. A scheduler without one leaves it nil.
type Accounting struct {
	// Key is its program's key in the configuration's [scheduler] table
	// ("sacct"), and Program its default.
	Key, Program string
	// Read returns the jobs that ran on any node at any time between from
	// and to, as program lists them.
	Read func(ctx context.Context, program string, from, to time.Time) (*accounting.Listing, error)
}

// sacctFormat is the columns the audit reads (accounting.ReadSacct finds
// them by the header): the allocations and their steps — a step's start is
// when the job's own processes started on its nodes.
const sacctFormat = "JobID,Submit,Start,End,NNodes,NodeList,State"

// readSlurmAccounting runs sacct over the window for every user's jobs,
// steps included. Times are fixed to UTC and the standard format so that
// the output means the same whatever the caller's environment says.
func readSlurmAccounting(ctx context.Context, program string, from, to time.Time) (*accounting.Listing, error) {
	layout := "2006-01-02T15:04:05"
	out, err := accountingOutput(ctx, []string{"SLURM_TIME_FORMAT=standard"}, program, "--allusers", "--parsable2", "--duplicates",
		"--starttime", from.UTC().Format(layout), "--endtime", to.UTC().Format(layout), "--format", sacctFormat)
	if err != nil {
		return nil, err
	}
	l, err := accounting.ReadSacct(bytes.NewReader(out), time.UTC)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", program, err)
	}
	return l, nil
}

// readGridEngineAccounting runs qacct -j for every job's records (qacct
// has no filter on a job's end: the audit keeps the jobs of its window),
// and qstat, from qacct's directory, for the jobs still running, which
// qacct does not list yet (accounting.ReadQstatRunning). Both print local
// times; both run with TZ=UTC so that they mean the same whatever the
// caller's environment says. A cell that never ran a job has no
// accounting file: qacct then says qacctNoJobs and exits 1, and that is no
// job, not an error.
func readGridEngineAccounting(ctx context.Context, program string, _, _ time.Time) (*accounting.Listing, error) {
	out, err := accountingOutput(ctx, nil, program, "-j")
	if err != nil && strings.TrimSpace(string(out)) == qacctNoJobs {
		out, err = nil, nil
	}
	if err != nil {
		return nil, err
	}
	l, err := accounting.ReadQacct(bytes.NewReader(out), time.UTC)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", program, err)
	}
	qstat := "qstat"
	if strings.ContainsRune(program, '/') {
		qstat = filepath.Join(filepath.Dir(program), "qstat")
	}
	now := time.Now().UTC()
	if out, err = accountingOutput(ctx, nil, qstat, "-u", "*", "-s", "r", "-g", "t", "-xml"); err != nil {
		return nil, err
	}
	running, err := accounting.ReadQstatRunning(bytes.NewReader(out), time.UTC, now)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", qstat, err)
	}
	l.Jobs = append(l.Jobs, running...)
	if len(running) > 0 {
		l.End = now
	}
	return l, nil
}

// qacctNoJobs is what qacct -j prints (exit status 1, and "…/accounting:
// No such file or directory" on stderr) on a cell that never ran a job:
// seen on Son of Grid Engine 8.1.9's fresh cell (internal/lab/gridengine).
const qacctNoJobs = "no jobs running since startup"

// accountingOutput runs an accounting program with TZ=UTC (and env) and
// returns what it printed on stdout, also when it fails; its error names
// it and says what it wrote on stderr.
func accountingOutput(ctx context.Context, env []string, program string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, program, args...)
	cmd.Env = append(append(os.Environ(), "TZ=UTC"), env...)
	cmd.WaitDelay = time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s: %w: %s", program, err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}
