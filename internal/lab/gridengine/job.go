package gridengine

import (
	"context"
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

	"github.com/bftrainer/bftrainer/internal/lab"
)

// launch runs the check once on every host of a main job: qrsh -inherit
// reaches the other hosts of a parallel job, under Grid Engine's control,
// after the master host's prolog (-nostdin: a backgrounded qrsh reading
// its standard input was seen killed by SIGHUP, failing the job).
const launch = `if [ -n "${PE_HOSTFILE:-}" ]; then
	for h in $(cut -d' ' -f1 "$PE_HOSTFILE"); do qrsh -inherit -nostdin "$h" "$BFT_CHECK" & done
	wait
else
	"$BFT_CHECK"
fi`

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
	check := filepath.Join(dir, "bft-check.sh")
	if script == "" {
		script = filepath.Join(dir, "bft-main.sh")
		if err := lab.WriteOnce(script, lab.MainScript(launch)); err != nil {
			return nil, err
		}
		if err := lab.WriteOnce(check, lab.CheckScript("$(hostname)")); err != nil {
			return nil, err
		}
	}
	if s.Name == "" {
		s.Name = "main"
	}
	j := &Job{cell: c, Name: s.Name}
	env := append([]string{"BFT_CHECK=" + check, fmt.Sprintf("BFT_HOLD=%.3f", s.Hold.Seconds())}, s.Env...)
	if s.Held {
		j.release = lab.ReleaseFile(dir)
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

// Report reads the job's output so far.
func (j *Job) Report() (lab.Report, error) { return lab.ReadReport(j.Out) }

// WaitChecked waits, at most timeout, until the job has run its task on
// every host, and returns its report.
func (j *Job) WaitChecked(ctx context.Context, timeout time.Duration) (lab.Report, error) {
	var r lab.Report
	err := lab.Poll(ctx, timeout, func() (bool, error) {
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
	err := lab.Poll(ctx, timeout, func() (bool, error) {
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
	err := lab.Poll(ctx, timeout, func() (bool, error) {
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
// accounting record must say failed 0 and exit status 0, and the job must
// have checked exactly the given hosts and found no Trainer process on
// any. "" when all is well.
func Normal(recs []Record, r lab.Report, hosts []string) string {
	var bad []string
	for _, rec := range recs {
		if rec["failed"] != "0" || rec["exit_status"] != "0" {
			bad = append(bad, fmt.Sprintf("%s: failed %q exit_status %q", rec["hostname"], rec["failed"], rec["exit_status"]))
		}
	}
	return strings.Join(append(bad, r.Abnormal(hosts)...), "; ")
}
