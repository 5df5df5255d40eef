package gridengine

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bftrainer/bftrainer/trainer/trainertest"
)

// mainScript is a main job. Its first line is the moment it started;
// then the task script runs once on every host of the job (qrsh -inherit
// reaches the other hosts of a parallel job, under Grid Engine's
// control, after the master host's prolog), so the output says where the
// job ran and what it found there. Then it holds its hosts (BFT_HOLD
// seconds, or until the file BFT_RELEASE exists, at most 10 minutes) and
// says when it ends.
const mainScript = `#!/bin/sh
echo "first $(date +%s.%N) host=$(hostname)"
if [ -n "${PE_HOSTFILE:-}" ]; then
	for h in $(cut -d' ' -f1 "$PE_HOSTFILE"); do qrsh -inherit -nostdin "$h" "$BFT_TASK" & done
	wait
else
	"$BFT_TASK"
fi
echo "checked $(date +%s.%N)"
if [ -n "${BFT_RELEASE:-}" ]; then
	i=0
	while [ ! -e "$BFT_RELEASE" ] && [ $i -lt 6000 ]; do sleep 0.1; i=$((i + 1)); done
else
	sleep "${BFT_HOLD:-0}"
fi
echo "end $(date +%s.%N)"
`

// taskScript runs on each host of a main job: it names the host and the
// live processes whose bftrainer run token (BFTRAINER_RUN=TRAINER/NODE/…,
// inherited by every descendant) names this host: Trainer processes
// still running where the main job runs.
const taskScript = `#!/bin/sh
n=$(hostname)
procs=$(grep -alz "^BFTRAINER_RUN=[^/]*/$n/" /proc/[0-9]*/environ 2>/dev/null | sed 's|^/proc/||; s|/environ$||' | tr '\n' ',')
procs=${procs%,}
echo "task host=$n job=$JOB_ID procs=${procs:-none}"
`

// JobSpec is a job to submit.
type JobSpec struct {
	Name string // -N; "" means "main"
	// Hosts, when set, are exactly the hosts the job runs on; the first
	// is its master host. With more than one, the job is a parallel job
	// of one slot per host.
	Hosts []string
	// Slots, when Hosts is empty, makes a parallel job of that many hosts
	// wherever the scheduler puts it; 0 or 1 is a serial job.
	Slots   int
	Hold    time.Duration // how long it holds its hosts after the check
	Held    bool          // hold until Release instead
	User    string        // the job's owner; "" means root
	Reserve bool          // -R y: ask the scheduler for a reservation
	Runtime time.Duration // -l h_rt (whole seconds); 0 for none
	Script  string        // another job script instead of the main job's (its output is not parsed)
	Env     []string      // more KEY=VALUE for the job (-v; values without commas)
	Args    []string      // more qsub arguments
}

// Job is a submitted job.
type Job struct {
	ID        string
	Name      string
	Submitted time.Time // just before qsub ran
	Out       string    // its output file (stdout and stderr)
	cell      *Cell
	release   string
}

// Submit submits a job with qsub.
func (c *Cell) Submit(ctx context.Context, s JobSpec) (*Job, error) {
	dir := c.JobsDir()
	script := s.Script
	task := filepath.Join(dir, "bft-task.sh")
	if script == "" {
		script = filepath.Join(dir, "bft-main.sh")
		if err := writeOnce(script, mainScript); err != nil {
			return nil, err
		}
		if err := writeOnce(task, taskScript); err != nil {
			return nil, err
		}
	}
	if s.Name == "" {
		s.Name = "main"
	}
	j := &Job{cell: c, Name: s.Name}
	env := append([]string{"BFT_TASK=" + task, fmt.Sprintf("BFT_HOLD=%.3f", s.Hold.Seconds())}, s.Env...)
	if s.Held {
		b := make([]byte, 6)
		rand.Read(b)
		j.release = filepath.Join(dir, "release-"+hex.EncodeToString(b))
		env = append(env, "BFT_RELEASE="+j.release)
	}
	args := []string{"-terse", "-N", s.Name, "-wd", dir, "-j", "y", "-o", filepath.Join(dir, "$JOB_ID.out"), "-v", strings.Join(env, ",")}
	slots := max(s.Slots, len(s.Hosts))
	if slots > 1 {
		args = append(args, "-pe", c.PE, strconv.Itoa(slots))
	}
	if len(s.Hosts) > 0 {
		var qs []string
		for _, h := range s.Hosts {
			qs = append(qs, c.Queue+"@"+h)
		}
		args = append(args, "-q", strings.Join(qs, ","))
		if len(s.Hosts) > 1 {
			args = append(args, "-masterq", qs[0])
		}
	}
	if s.Reserve {
		args = append(args, "-R", "y")
	}
	if s.Runtime > 0 {
		args = append(args, "-l", fmt.Sprintf("h_rt=%d", int(s.Runtime/time.Second)))
	}
	args = append(append(args, s.Args...), script)
	var cred *syscall.Credential
	if s.User != "" {
		u, err := user.Lookup(s.User)
		if err != nil {
			return nil, fmt.Errorf("submit: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	j.Submitted = time.Now()
	out, err := c.output(ctx, cred, "qsub", args...)
	if err != nil {
		return nil, fmt.Errorf("submit: %w", err)
	}
	id := strings.TrimSpace(out)
	if _, err := strconv.Atoi(id); err != nil {
		return nil, fmt.Errorf("submit: qsub answered %q", out)
	}
	j.ID = id
	j.Out = filepath.Join(dir, id+".out")
	return j, nil
}

func writeOnce(path, body string) error {
	if b, err := os.ReadFile(path); err == nil && string(b) == body {
		return nil
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(body), 0o755); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Release lets a Held job end.
func (j *Job) Release() error {
	if j.release == "" {
		return nil
	}
	return os.WriteFile(j.release, nil, 0o644)
}

// Delete deletes the job (qdel -f).
func (j *Job) Delete(ctx context.Context) error {
	_, err := j.cell.Output(ctx, "qdel", "-f", j.ID)
	return err
}

// JobReport is what a main job wrote.
type JobReport struct {
	First, Checked, End time.Time
	Master              string            // the host its script ran on
	Procs               map[string]string // host → Trainer processes found there ("none", or pids)
}

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
		kv := map[string]string{}
		for _, f := range fs[1:] {
			if k, v, ok := strings.Cut(f, "="); ok {
				kv[k] = v
			}
		}
		switch fs[0] {
		case "first", "checked", "end":
			t, err := trainertest.ParseUnix(fs[1])
			if err != nil {
				return r, fmt.Errorf("%s: %q: %w", j.Out, sc.Text(), err)
			}
			switch fs[0] {
			case "first":
				r.First, r.Master = t, kv["host"]
			case "checked":
				r.Checked = t
			default:
				r.End = t
			}
		case "task":
			r.Procs[kv["host"]] = kv["procs"]
		}
	}
	return r, sc.Err()
}

// WaitChecked waits, at most timeout, until the job has run its task on
// every host, and returns its report.
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
		st, _ := j.Status(ctx)
		return r, fmt.Errorf("job %s did not check its hosts (state %q): %w", j.ID, st.State, err)
	}
	return r, nil
}

// JobStatus is where a job stands in qstat.
type JobStatus struct {
	// State is qstat's state letters (qw, r, t, Eqw, dr, …); "" once
	// qstat no longer lists the job (it ended, its epilog done).
	State  string
	Master string   // the master host, while it runs
	Hosts  []string // every host it runs on, master first
}

// gtXML is `qstat -g t -xml`: one job_list per task and host, running
// ones (with their queue and MASTER or SLAVE) first, then pending ones.
type gtXML struct {
	Running []XMLJob `xml:"queue_info>job_list"`
	Pending []XMLJob `xml:"job_info>job_list"`
}

// Status returns the job's state and hosts.
func (j *Job) Status(ctx context.Context) (JobStatus, error) {
	out, err := j.cell.Output(ctx, "qstat", "-g", "t", "-u", "*", "-xml")
	if err != nil {
		return JobStatus{}, err
	}
	var doc gtXML
	if err := xml.Unmarshal([]byte(out), &doc); err != nil {
		return JobStatus{}, fmt.Errorf("qstat -g t -xml: %w", err)
	}
	var st JobStatus
	var others []string
	for _, t := range append(doc.Running, doc.Pending...) {
		if t.Number != j.ID {
			continue
		}
		st.State = t.State
		_, host, ok := strings.Cut(t.Queue, "@")
		if !ok {
			continue
		}
		if t.Master == "MASTER" {
			st.Master = host
		} else if !slices.Contains(others, host) {
			others = append(others, host)
		}
	}
	if st.Master != "" {
		st.Hosts = []string{st.Master}
	}
	slices.Sort(others)
	for _, h := range others {
		if h != st.Master {
			st.Hosts = append(st.Hosts, h)
		}
	}
	return st, nil
}

// WaitStatus waits, at most timeout, until cond holds for the job's
// status, and returns it.
func (j *Job) WaitStatus(ctx context.Context, timeout time.Duration, what string, cond func(JobStatus) bool) (JobStatus, error) {
	var st JobStatus
	err := Poll(ctx, timeout, func() (bool, error) {
		var err error
		st, err = j.Status(ctx)
		return err == nil && cond(st), err
	})
	if err != nil {
		return st, fmt.Errorf("job %s not %s (state %q, hosts %v): %w", j.ID, what, st.State, st.Hosts, err)
	}
	return st, nil
}

// Record is one qacct record of a job: its fields by name (failed,
// exit_status, hostname, granted_pe, start_time, …).
type Record map[string]string

// Accounting returns the job's accounting records: one for a serial
// job; for a parallel job one for the master task and one per task
// started with qrsh -inherit (accounting_summary is FALSE).
func (j *Job) Accounting(ctx context.Context) ([]Record, error) {
	out, err := j.cell.Output(ctx, "qacct", "-j", j.ID)
	if err != nil {
		return nil, err
	}
	var recs []Record
	var r Record
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "=====") {
			r = Record{}
			recs = append(recs, r)
			continue
		}
		k, v, _ := strings.Cut(l, " ")
		if r != nil && k != "" {
			r[k] = strings.TrimSpace(v)
		}
	}
	return recs, nil
}

// WaitEnded waits, at most timeout, until qstat no longer lists the job
// (its epilog has run, its slots are free) and qacct has its records,
// and returns them.
func (j *Job) WaitEnded(ctx context.Context, timeout time.Duration) ([]Record, error) {
	if _, err := j.WaitStatus(ctx, timeout, "ended", func(st JobStatus) bool { return st.State == "" }); err != nil {
		return nil, err
	}
	var recs []Record
	err := Poll(ctx, timeout, func() (bool, error) {
		var err error
		recs, err = j.Accounting(ctx)
		return err == nil && len(recs) > 0, nil
	})
	if err != nil {
		return nil, fmt.Errorf("job %s: no accounting record: %w", j.ID, err)
	}
	return recs, nil
}

// Normal reports what was not normal about an ended main job: every
// accounting record must say failed 0 and exit status 0, the job must
// have run its task on exactly the given hosts and found no Trainer
// process on any. "" when all is well.
func Normal(recs []Record, r JobReport, hosts []string) string {
	var bad []string
	for _, rec := range recs {
		if rec["failed"] != "0" || rec["exit_status"] != "0" {
			bad = append(bad, fmt.Sprintf("%s: failed %q exit_status %q", rec["hostname"], rec["failed"], rec["exit_status"]))
		}
	}
	if r.First.IsZero() || r.End.IsZero() {
		bad = append(bad, "no first or end line")
	}
	for _, h := range hosts {
		switch p, ok := r.Procs[h]; {
		case !ok:
			bad = append(bad, h+" not checked")
		case p != "none":
			bad = append(bad, "Trainer processes on "+h+": "+p)
		}
	}
	for h := range r.Procs {
		if !slices.Contains(hosts, h) {
			bad = append(bad, "ran on "+h+" too")
		}
	}
	return strings.Join(bad, "; ")
}
