package hooks

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
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
	cmd := exec.CommandContext(ctx, program, "--allusers", "--parsable2", "--duplicates",
		"--starttime", from.UTC().Format(layout), "--endtime", to.UTC().Format(layout), "--format", sacctFormat)
	cmd.Env = append(os.Environ(), "TZ=UTC", "SLURM_TIME_FORMAT=standard")
	cmd.WaitDelay = time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %s", program, err, strings.TrimSpace(stderr.String()))
	}
	l, err := accounting.ReadSacct(bytes.NewReader(out), time.UTC)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", program, err)
	}
	return l, nil
}
