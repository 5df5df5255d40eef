package slurm

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bftrainer/bftrainer/internal/lab"
	"github.com/bftrainer/bftrainer/names"
	"github.com/bftrainer/bftrainer/trainer/trainertest"
)

// mainScript is a main job. Its first line is the moment it started; then
// every node of the job looks for Trainer processes on itself: a step
// waits for its node's prolog (with PrologFlags=Alloc alone, the batch
// script itself may start before the other nodes' prologs have finished),
// so this is what any program of the job would see there. Then it holds
// its nodes (BFT_HOLD seconds, or until the file BFT_RELEASE exists, at
// most 10 minutes) — with BFT_WATCH set, every node keeps looking all that
// time and says each Trainer process it finds — and says when it ends.
const mainScript = `#!/bin/bash
echo "first $(date +%s.%N)"
srun -N "$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 --kill-on-bad-exit=0 "$BFT_CHECK"
echo "checked $(date +%s.%N)"
if [ -n "${BFT_WATCH:-}" ]; then
	stop="$BFT_CHECK.stop.$SLURM_JOB_ID"
	srun -N "$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 --kill-on-bad-exit=0 "$BFT_CHECK" watch "$stop" &
	watch=$!
fi
if [ -n "${BFT_RELEASE:-}" ]; then
	i=0
	while [ ! -e "$BFT_RELEASE" ] && [ $i -lt 6000 ]; do sleep 0.1; i=$((i + 1)); done
else
	sleep "${BFT_HOLD:-0}"
fi
if [ -n "${watch:-}" ]; then
	# The watch ends itself once the stop file is there: a srun killed
	# while it is still launching its step hangs ("forcing job
	# termination"), and the job with it, until its time limit.
	touch "$stop"
	wait "$watch" 2>/dev/null
	rm -f "$stop"
fi
echo "end $(date +%s.%N)"
`

// checkScript runs on each node of a main job: a live process whose
// bftrainer run token (trainer/token.go: BFTRAINER_RUN=TRAINER/NODE/NONCE,
// inherited by every descendant, even one that called setsid) names this
// node is a Trainer process still running where the main job runs.
// Zombies have no environment left and are not counted. With "watch" it
// looks again every 0.2 s until the file named by its second argument
// exists (or it is killed), and prints a "found" line for each look that
// finds any.
const checkScript = `#!/bin/sh
n=$SLURMD_NODENAME
look() {
	procs=$(grep -alz "^BFTRAINER_RUN=[^/]*/$n/" /proc/[0-9]*/environ 2>/dev/null | sed 's|^/proc/||; s|/environ$||' | tr '\n' ',')
	procs=${procs%,}
}
if [ "$1" = watch ]; then
	while [ -z "$2" ] || [ ! -e "$2" ]; do
		look
		[ -n "$procs" ] && echo "found node=$n procs=$procs at=$(date +%s.%N)"
		sleep 0.2
	done
	exit 0
fi
look
echo "check node=$n procs=${procs:-none}"
`

// JobSpec is a main job to submit.
type JobSpec struct {
	Nodes     int           // -N
	NodeList  string        // -w, optional
	Partition string        // -p; "" means the default (main)
	Hold      time.Duration // how long it holds its nodes after the check
	Held      bool          // hold until Release instead
	Watch     bool          // every node looks for Trainer processes all the while it is held
	Name      string        // -J; "" means "main"
	User      *User         // nil: root
	Script    string        // another batch script instead of the main job's (its output is not parsed)
	Env       []string      // more KEY=VALUE for the job
	Args      []string      // more sbatch arguments
}

// Job is a submitted job.
type Job struct {
	ID        string
	Submitted time.Time // just before sbatch ran
	Out       string    // its output file
	Name      string
	lab       *Lab
	release   string
}

// Submit submits a job with sbatch.
func (l *Lab) Submit(ctx context.Context, s JobSpec) (*Job, error) {
	dir := l.JobsDir()
	script := s.Script
	if script == "" {
		script = filepath.Join(dir, "bft-main.sh")
		if err := lab.WriteOnce(script, mainScript); err != nil {
			return nil, err
		}
		if err := lab.WriteOnce(filepath.Join(dir, "bft-check.sh"), checkScript); err != nil {
			return nil, err
		}
	}
	if s.Name == "" {
		s.Name = "main"
	}
	j := &Job{lab: l, Name: s.Name}
	// The job's variables travel in sbatch's own environment (the default
	// --export=ALL): an explicit --export=ALL,VAR=… makes Slurm 22.05 load
	// the user's environment on the node first, which delays the batch
	// launch by about 1.2 s.
	env := []string{"BFT_CHECK=" + filepath.Join(dir, "bft-check.sh"), fmt.Sprintf("BFT_HOLD=%.3f", s.Hold.Seconds())}
	if s.Watch {
		env = append(env, "BFT_WATCH=1")
	}
	if s.Held {
		b := make([]byte, 6)
		rand.Read(b)
		j.release = filepath.Join(dir, "release-"+hex.EncodeToString(b))
		env = append(env, "BFT_RELEASE="+j.release)
	}
	args := []string{"--parsable", "-J", s.Name, "-o", filepath.Join(dir, "%j.out"), "-N", strconv.Itoa(max(1, s.Nodes))}
	if s.NodeList != "" {
		args = append(args, "-w", s.NodeList)
	}
	if s.Partition != "" {
		args = append(args, "-p", s.Partition)
	}
	args = append(args, s.Args...)
	args = append(args, script)
	cmd := l.Command(ctx, "sbatch", args...)
	cmd.Env = append(append(cmd.Env, env...), s.Env...)
	if s.User != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(s.User.UID), Gid: uint32(s.User.GID)}}
	}
	j.Submitted = time.Now()
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("sbatch %s: %w: %s", strings.Join(args, " "), err, exitStderr(err))
	}
	id, _, _ := strings.Cut(strings.TrimSpace(string(out)), ";")
	if _, err := strconv.Atoi(id); err != nil {
		return nil, fmt.Errorf("sbatch: unexpected answer %q", out)
	}
	j.ID = id
	j.Out = filepath.Join(dir, id+".out")
	return j, nil
}

// Release lets a Held job end.
func (j *Job) Release() error {
	if j.release == "" {
		return nil
	}
	return os.WriteFile(j.release, nil, 0o644)
}

// JobReport is what a main job wrote.
type JobReport struct {
	First, Checked, End time.Time
	Procs               map[string]string // node → Trainer processes it found there ("none", or pids)
	// Found are the watch's finds (Watch): a Trainer process on a node
	// while the job held it, "node=… procs=… at=…" each.
	Found []string
}

// StartDelay is the time from sbatch to the job's first line.
func (j *Job) StartDelay(r JobReport) time.Duration { return r.First.Sub(j.Submitted) }

// Report reads the job's output so far.
func (j *Job) Report() (JobReport, error) {
	r := JobReport{Procs: map[string]string{}}
	f, err := os.Open(j.Out)
	if err != nil {
		return r, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 2 {
			continue
		}
		switch fs[0] {
		case "first", "checked", "end":
			t, err := trainertest.ParseUnix(fs[1])
			if err != nil {
				return r, fmt.Errorf("%s: %q: %w", j.Out, sc.Text(), err)
			}
			switch fs[0] {
			case "first":
				r.First = t
			case "checked":
				r.Checked = t
			default:
				r.End = t
			}
		case "found":
			r.Found = append(r.Found, strings.Join(fs[1:], " "))
		case "check":
			var node, procs string
			for _, kv := range fs[1:] {
				k, v, _ := strings.Cut(kv, "=")
				switch k {
				case "node":
					node = v
				case "procs":
					procs = v
				}
			}
			r.Procs[node] = procs
		}
	}
	return r, sc.Err()
}

// WaitChecked waits, at most timeout, until the job has checked its
// nodes, and returns its report.
func (j *Job) WaitChecked(ctx context.Context, timeout time.Duration) (JobReport, error) {
	var r JobReport
	err := Poll(ctx, timeout, func() (bool, error) {
		var err error
		r, err = j.Report()
		if os.IsNotExist(err) {
			return false, nil
		}
		return !r.Checked.IsZero(), err
	})
	if err != nil {
		info, _ := j.lab.Job(ctx, j.ID)
		return r, fmt.Errorf("job %s did not check its nodes (%s %s): %w", j.ID, info["JobState"], info["Reason"], err)
	}
	return r, nil
}

// terminal job states (squeue's long names).
var terminal = []string{"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}

// WaitEnded waits, at most timeout, until the job has ended (its epilogs
// done: COMPLETING is not an end), and returns its fields.
func (j *Job) WaitEnded(ctx context.Context, timeout time.Duration) (JobInfo, error) {
	var info JobInfo
	err := Poll(ctx, timeout, func() (bool, error) {
		var err error
		info, err = j.lab.Job(ctx, j.ID)
		if err != nil {
			return false, err
		}
		return slices.Contains(terminal, info["JobState"]), nil
	})
	if err != nil {
		return info, fmt.Errorf("job %s did not end (%s): %w", j.ID, info["JobState"], err)
	}
	return info, nil
}

// Nodes expands a job's NodeList.
func (info JobInfo) Nodes() ([]string, error) {
	if info["NodeList"] == "" || info["NodeList"] == "(null)" {
		return nil, nil
	}
	return names.ExpandHostlist(info["NodeList"])
}

// Normal reports what was not normal about an ended main job: it must have
// completed with exit 0, never been requeued, and found no Trainer process
// on any of its nodes. "" when all is well.
func Normal(info JobInfo, r JobReport) string {
	var bad []string
	if info["JobState"] != "COMPLETED" || info["ExitCode"] != "0:0" {
		bad = append(bad, fmt.Sprintf("state %s exit %s (%s)", info["JobState"], info["ExitCode"], info["Reason"]))
	}
	if info["Restarts"] != "0" {
		bad = append(bad, "restarts "+info["Restarts"])
	}
	if r.First.IsZero() || r.End.IsZero() {
		bad = append(bad, "no first or end line")
	}
	nodes, err := info.Nodes()
	if err != nil {
		bad = append(bad, err.Error())
	}
	if len(r.Found) > 0 {
		bad = append(bad, fmt.Sprintf("Trainer processes while the job ran: %s", strings.Join(r.Found[:min(3, len(r.Found))], "; ")))
	}
	for _, n := range nodes {
		switch p, ok := r.Procs[n]; {
		case !ok:
			bad = append(bad, n+" not checked")
		case p != "none":
			bad = append(bad, "Trainer processes on "+n+": "+p)
		}
	}
	return strings.Join(bad, "; ")
}

// exitStderr returns the standard error an exec.ExitError kept.
func exitStderr(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return strings.TrimSpace(string(ee.Stderr))
	}
	return ""
}
