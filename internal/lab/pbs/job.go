package pbs

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bftrainer/bftrainer/internal/lab"
)

// launch runs the check on every node of the job: its own directly, the
// sisters' through pbs_tmrsh (PBS's task manager, as a job's MPI would),
// whose tasks' output goes to PBS's output file: the check appends to its
// first argument, the job's report, instead.
func (c *Cell) launch() string {
	return `for h in $(sort -u "$PBS_NODEFILE"); do
	if [ "$h" = "$(hostname)" ]; then "$BFT_CHECK"; else ` + c.Bin("pbs_tmrsh") + ` "$h" "$BFT_CHECK" "$BFT_OUT"; fi
done`
}

// Job is a main job submitted to the cell.
type Job struct {
	ID        string
	Out       string // the report its script writes
	Release   string // the file that ends it (held jobs)
	Submitted time.Time
	cell      *Cell
}

// Submit submits a main job as root holding n nodes, one CPU each, one
// per host (select=n:ncpus=1, place=scatter unless resources has another
// place=), with more resources (-l, e.g. "walltime=00:05:00"). A held job
// runs until End is called.
func (c *Cell) Submit(ctx context.Context, name string, n int, held bool, resources ...string) (*Job, error) {
	c.jobLock.Lock()
	c.jobSeq++
	seq := c.jobSeq
	c.jobLock.Unlock()
	check := filepath.Join(c.JobsDir(), "check.sh")
	if err := lab.WriteOnce(check, "#!/bin/sh\nif [ -n \"$1\" ]; then exec >>\"$1\" 2>&1; fi\n"+strings.TrimPrefix(lab.CheckScript("$(hostname)"), "#!/bin/sh\n")); err != nil {
		return nil, err
	}
	script := filepath.Join(c.JobsDir(), "main.sh")
	body := "#!/bin/sh\nexec >>\"$BFT_OUT\" 2>&1\n" + strings.TrimPrefix(lab.MainScript(c.launch()), "#!/bin/sh\n")
	if err := lab.WriteOnce(script, body); err != nil {
		return nil, err
	}
	j := &Job{Out: filepath.Join(c.JobsDir(), fmt.Sprintf("%s.%d.out", name, seq)), cell: c}
	vars := "BFT_CHECK=" + check + ",BFT_OUT=" + j.Out
	if held {
		j.Release = lab.ReleaseFile(c.JobsDir())
		vars += ",BFT_RELEASE=" + j.Release
	} else {
		vars += ",BFT_HOLD=0"
	}
	args := []string{"-N", name, "-j", "oe", "-o", filepath.Join(c.JobsDir(), fmt.Sprintf("%s.%d.pbs", name, seq)),
		"-l", fmt.Sprintf("select=%d:ncpus=1", n), "-v", vars}
	place := "place=scatter"
	for _, r := range resources {
		if strings.HasPrefix(r, "place=") {
			place = r
		} else {
			args = append(args, "-l", r)
		}
	}
	args = append(args, "-l", place, script)
	j.Submitted = time.Now()
	out, err := c.On(ctx, Server, c.Bin("qsub"), args...)
	if err != nil {
		return nil, err
	}
	j.ID = strings.TrimSpace(out)
	return j, nil
}

// End lets a held job end.
func (j *Job) End() error { return os.WriteFile(j.Release, nil, 0o644) }

// Report reads what the job's script wrote so far.
func (j *Job) Report() (lab.Report, error) { return lab.ReadReport(j.Out) }

// WaitChecked waits until the job has checked all its nodes.
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
		return r, fmt.Errorf("job %s never checked its nodes (state %+v): %w", j.ID, st, err)
	}
	return r, nil
}

// Status is what `qstat -x -f -F json` says of a job.
type Status struct {
	State      string `json:"job_state"`
	RunCount   int    `json:"run_count"`
	HoldTypes  string `json:"Hold_Types"`
	ExitStatus *int   `json:"Exit_status"`
	ExecVnode  string `json:"exec_vnode"`
	Comment    string `json:"comment"`
}

// Status returns the job's state, finished jobs included.
func (j *Job) Status(ctx context.Context) (Status, error) {
	out, err := j.cell.On(ctx, Server, j.cell.Bin("qstat"), "-x", "-f", "-F", "json", j.ID)
	if err != nil {
		return Status{}, err
	}
	var doc struct {
		Jobs map[string]Status `json:"Jobs"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		return Status{}, fmt.Errorf("qstat -f -F json %s: %w", j.ID, err)
	}
	s, ok := doc.Jobs[j.ID]
	if !ok {
		return s, fmt.Errorf("qstat: no job %s", j.ID)
	}
	return s, nil
}

// WaitFinished waits until the job is finished (F) and returns its state.
func (j *Job) WaitFinished(ctx context.Context, timeout time.Duration) (Status, error) {
	var s Status
	err := lab.Poll(ctx, timeout, func() (bool, error) {
		var err error
		s, err = j.Status(ctx)
		return s.State == "F", err
	})
	if err != nil {
		return s, fmt.Errorf("job %s never finished (%+v): %w", j.ID, s, err)
	}
	return s, nil
}

// useCP has every MoM deliver the jobs' output files by copying them
// (the cell's directory is shared): no scp between the hosts. It appends
// to mom_priv/config and makes the MoMs read it again (SIGHUP).
func (c *Cell) useCP() error {
	for _, h := range c.Hosts {
		f, err := os.OpenFile(filepath.Join(c.Home(h), "mom_priv", "config"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return err
		}
		_, err = f.WriteString("$usecp *:/ /\n")
		f.Close()
		if err != nil {
			return err
		}
		b, err := os.ReadFile(filepath.Join(c.Home(h), "mom_priv", "mom.lock"))
		if err != nil {
			return err
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			return fmt.Errorf("%s mom.lock: %w", h, err)
		}
		if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
			return fmt.Errorf("SIGHUP pbs_mom on %s: %w", h, err)
		}
	}
	return nil
}
