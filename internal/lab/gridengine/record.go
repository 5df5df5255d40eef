package gridengine

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bftrainer/bftrainer/internal/lab"
	"github.com/bftrainer/bftrainer/trainer/trainertest"
)

// recordScript is the Recorder's hook: it keeps one directory per call
// (written aside, then renamed, so a reader never sees half a call) with
// its arguments, environment, user, host, parent program, time and, for
// a parallel job, a copy of the PE hostfile (Grid Engine removes it with
// the job). It exits BFT_PROLOG_EXIT (a job's own variable) in a prolog,
// 0 otherwise.
const recordScript = `#!/bin/sh
d=@CALLS@
t=$(mktemp -d "$d/.call.XXXXXX") || exit 0
printf '%s\0' "$@" > "$t/argv"
env -0 > "$t/env"
id -u > "$t/uid"
hostname > "$t/host"
cat "/proc/$PPID/comm" > "$t/parent" 2>/dev/null
date +%s.%N > "$t/time"
if [ -n "${PE_HOSTFILE:-}" ]; then cp "$PE_HOSTFILE" "$t/pe_hostfile" 2>/dev/null; fi
mv "$t" "$d/$1.$(hostname).${JOB_ID:-none}.$$"
if [ "$1" = prolog ]; then exit "${BFT_PROLOG_EXIT:-0}"; fi
exit 0
`

// Recorder is a hook that records every call: what Grid Engine gives a
// queue prolog or epilog, or a parallel environment's start and stop
// procedures.
type Recorder struct {
	Script string // the hook program
	Calls  string // one directory per call
}

// NewRecorder writes the recorder hook into dir.
func NewRecorder(dir string) (*Recorder, error) {
	r := &Recorder{Script: filepath.Join(dir, "record.sh"), Calls: filepath.Join(dir, "calls")}
	if err := os.MkdirAll(r.Calls, 0o755); err != nil {
		return nil, err
	}
	body := strings.ReplaceAll(recordScript, "@CALLS@", r.Calls)
	if err := os.WriteFile(r.Script, []byte(body), 0o755); err != nil {
		return nil, err
	}
	return r, nil
}

// Command is the hook's command line for a hook point (prolog, epilog,
// pestart, pestop): the context first, then Grid Engine's
// pseudo-variables, expanded by Grid Engine.
func (r *Recorder) Command(context string) string {
	args := "$host $job_id $job_owner $job_name $queue"
	if strings.HasPrefix(context, "pe") {
		args = "$host $job_id $job_owner $pe $pe_slots $pe_hostfile"
	}
	return r.Script + " " + context + " " + args
}

// HookCall is one recorded call.
type HookCall struct {
	Context    string            // the first argument: prolog, epilog, pestart, pestop
	Args       []string          // the expanded arguments after it
	Host       string            // hostname where it ran
	JobID      string            // $JOB_ID
	UID        int               // the user it ran as
	Parent     string            // the program that started it (sge_shepherd)
	Time       time.Time         // when it ran
	Env        map[string]string // its whole environment
	PEHostfile string            // the PE hostfile's contents, for a parallel job
}

// ReadCalls returns every finished call, in the order they ran.
func (r *Recorder) ReadCalls() ([]HookCall, error) {
	ents, err := os.ReadDir(r.Calls)
	if err != nil {
		return nil, err
	}
	var calls []HookCall
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		c, err := readCall(filepath.Join(r.Calls, e.Name()))
		if err != nil {
			return nil, err
		}
		calls = append(calls, c)
	}
	slices.SortFunc(calls, func(a, b HookCall) int { return a.Time.Compare(b.Time) })
	return calls, nil
}

func readCall(dir string) (HookCall, error) {
	var c HookCall
	read := func(name string) []byte {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		return b
	}
	argv := strings.Split(strings.TrimSuffix(string(read("argv")), "\x00"), "\x00")
	if len(argv) == 0 || argv[0] == "" {
		return c, fmt.Errorf("hook call %s: no arguments", dir)
	}
	c.Context, c.Args = argv[0], argv[1:]
	c.Host = strings.TrimSpace(string(read("host")))
	c.Parent = strings.TrimSpace(string(read("parent")))
	c.PEHostfile = string(read("pe_hostfile"))
	uid, err := strconv.Atoi(strings.TrimSpace(string(read("uid"))))
	if err != nil {
		return c, fmt.Errorf("hook call %s: uid: %w", dir, err)
	}
	c.UID = uid
	if c.Time, err = trainertest.ParseUnix(strings.TrimSpace(string(read("time")))); err != nil {
		return c, fmt.Errorf("hook call %s: time: %w", dir, err)
	}
	c.Env = map[string]string{}
	for _, kv := range bytes.Split(read("env"), []byte{0}) {
		if k, v, ok := strings.Cut(string(kv), "="); ok {
			c.Env[k] = v
		}
	}
	c.JobID = c.Env["JOB_ID"]
	return c, nil
}

// JobCalls returns the finished calls of one job.
func (r *Recorder) JobCalls(job string) ([]HookCall, error) {
	calls, err := r.ReadCalls()
	if err != nil {
		return nil, err
	}
	var out []HookCall
	for _, c := range calls {
		if c.JobID == job {
			out = append(out, c)
		}
	}
	return out, nil
}

// WaitJobCalls waits, at most timeout, until a job has at least n
// finished calls, and returns them.
func (r *Recorder) WaitJobCalls(ctx context.Context, job string, n int, timeout time.Duration) ([]HookCall, error) {
	var calls []HookCall
	err := lab.Poll(ctx, timeout, func() (bool, error) {
		var err error
		calls, err = r.JobCalls(job)
		return len(calls) >= n, err
	})
	if err != nil {
		return calls, fmt.Errorf("job %s: %d of %d hook calls: %w", job, len(calls), n, err)
	}
	return calls, nil
}
