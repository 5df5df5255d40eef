package gridengine

import (
	"context"
	"encoding/xml"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/bftrainer/bftrainer/internal/lab"
)

// Instance is one queue instance (a cluster queue on one host) as
// `qstat -f -xml` reports it.
type Instance struct {
	Name  string // queue@host
	Queue string
	Host  string
	Used  int // slots used by running jobs
	Resv  int // slots reserved by advance reservations
	Total int
	Load  string // load_avg, as reported ("" when the host reports none)
	// State is qstat's state letters, "" for none: u unknown (no execd),
	// a alarm (load threshold), d disabled, E error (a prolog or epilog
	// failed), s/S/C suspended, o orphaned, c configuration ambiguous.
	State string
	Jobs  []XMLJob // the jobs running in it
}

// Idle reports whether the instance is exactly idle: no job, no slot
// reserved, no state at all.
func (q Instance) Idle() bool { return q.Used == 0 && q.Resv == 0 && q.State == "" }

// XMLJob is one job_list element of qstat's XML.
type XMLJob struct {
	List   string `xml:"state,attr"` // "running" or "pending"
	Number string `xml:"JB_job_number"`
	Name   string `xml:"JB_name"`
	Owner  string `xml:"JB_owner"`
	State  string `xml:"state"` // qstat's letters: r, t, qw, hqw, Eqw, dr, …
	Queue  string `xml:"queue_name"`
	Slots  int    `xml:"slots"`
	Master string `xml:"master"` // with -g t: MASTER or SLAVE
}

// qstatXML is `qstat -f -xml`'s document: the queue instances with their
// running jobs, then the pending jobs.
type qstatXML struct {
	Queues []struct {
		Name  string   `xml:"name"`
		Used  int      `xml:"slots_used"`
		Resv  int      `xml:"slots_resv"`
		Total int      `xml:"slots_total"`
		Load  string   `xml:"load_avg"`
		State string   `xml:"state"`
		Jobs  []XMLJob `xml:"job_list"`
	} `xml:"queue_info>Queue-List"`
	Pending []XMLJob `xml:"job_info>job_list"`
}

// ParseQstatXML reads `qstat -f -xml` into its queue instances and its
// pending jobs.
func ParseQstatXML(b []byte) ([]Instance, []XMLJob, error) {
	var doc qstatXML
	if err := xml.Unmarshal(b, &doc); err != nil {
		return nil, nil, fmt.Errorf("qstat -xml: %w", err)
	}
	var qs []Instance
	for _, q := range doc.Queues {
		queue, host, ok := strings.Cut(q.Name, "@")
		if !ok {
			return nil, nil, fmt.Errorf("qstat -xml: queue instance %q has no host", q.Name)
		}
		qs = append(qs, Instance{Name: q.Name, Queue: queue, Host: host, Used: q.Used, Resv: q.Resv, Total: q.Total,
			Load: q.Load, State: q.State, Jobs: q.Jobs})
	}
	return qs, doc.Pending, nil
}

// Instances returns every queue instance of the cell, with its running
// jobs.
func (c *Cell) Instances(ctx context.Context) ([]Instance, error) {
	out, err := c.Output(ctx, "qstat", "-f", "-u", "*", "-xml")
	if err != nil {
		return nil, err
	}
	qs, _, err := ParseQstatXML([]byte(out))
	return qs, err
}

// IdleHosts returns the hosts whose every queue instance is exactly
// idle, sorted.
func (c *Cell) IdleHosts(ctx context.Context) ([]string, error) {
	qs, err := c.Instances(ctx)
	if err != nil {
		return nil, err
	}
	busy := map[string]bool{}
	seen := map[string]bool{}
	for _, q := range qs {
		seen[q.Host] = true
		busy[q.Host] = busy[q.Host] || !q.Idle()
	}
	var idle []string
	for h := range seen {
		if !busy[h] {
			idle = append(idle, h)
		}
	}
	slices.Sort(idle)
	return idle, nil
}

// WaitIdle waits, at most timeout, until every host of the cell is
// exactly idle; the error says which were not.
func (c *Cell) WaitIdle(ctx context.Context, timeout time.Duration) error {
	var last []Instance
	err := lab.Poll(ctx, timeout, func() (bool, error) {
		qs, err := c.Instances(ctx)
		if err != nil {
			return false, err
		}
		last = qs
		idle := map[string]bool{}
		for _, q := range qs {
			idle[q.Host] = q.Idle()
		}
		for _, h := range c.Hosts {
			if !idle[h] {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		var bad []string
		for _, q := range last {
			if !q.Idle() {
				bad = append(bad, fmt.Sprintf("%s used=%d resv=%d state=%q", q.Name, q.Used, q.Resv, q.State))
			}
		}
		return fmt.Errorf("hosts not idle (%s): %w", strings.Join(bad, "; "), err)
	}
	return nil
}

// ParsePEHostfile returns the hosts of a PE hostfile (sge_pe(5): one
// line per host, "host slots queue binding"), in its order.
func ParsePEHostfile(text string) ([]string, error) {
	var hosts []string
	for _, l := range strings.Split(text, "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		if len(f) < 3 {
			return nil, fmt.Errorf("PE hostfile: line %q: want host, slots, queue", l)
		}
		hosts = append(hosts, f[0])
	}
	return hosts, nil
}
