package accounting

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Grid Engine's accounting: what `qacct -j` printed, every job's records.
//
// qacct prints one block per record, each after a line of "=" and one
// "name value" line per field; the fields read are jobnumber, taskid,
// hostname, start_time and end_time. A serial job has one
// record. A parallel job has one for its master task and, where its
// parallel environment has accounting_summary FALSE, one per task started
// on a host with qrsh -inherit: its hosts are the hosts of its records.
// Observed on Son of Grid Engine 8.1.9 (internal/lab/gridengine:
// hooks/testdata/gridengine/*.qacct-j.txt). Two limits follow from what
// qacct records, and docs/history.md ("Audit") says them:
//   - a host a parallel job was granted but ran no task on (or any host
//     but the master's, with accounting_summary TRUE) is not listed;
//   - a job is written when it ends: one still running is in qstat only
//     (ReadQstatRunning).
//
// Times are whole seconds, in the local time of the host qacct ran on.

// QacctTimeLayout is how qacct prints times (ctime(3)).
const QacctTimeLayout = time.ANSIC

// qacctSeparator starts each record.
const qacctSeparator = "====="

// IsQacct reports whether line is the first line of qacct -j output.
func IsQacct(line []byte) bool {
	return strings.HasPrefix(string(line), qacctSeparator)
}

// ReadQacct reads `qacct -j` output (every job, or some). Times are read in
// loc (nil: time.Local). The records of one run of a job — its master
// task's and its other tasks', which start and end within the master's —
// make one Job: its start the earliest, its end the latest, its nodes
// their hosts. Records of one job number (and array task) that do not
// overlap in time are separate runs (a number Grid Engine reused, a job
// rescheduled) and separate Jobs. (qsub_time cannot tell them apart: a
// task started with qrsh -inherit has its own.) Records that cannot be
// used are counted in Skipped by reason: never started (start_time "-/-"),
// no host, a time not understood, an end before the start.
func ReadQacct(r io.Reader, loc *time.Location) (*Listing, error) {
	if loc == nil {
		loc = time.Local
	}
	l := &Listing{Skipped: map[string]int{}, Loc: loc}
	byID := map[string][]Job{} // each record as a Job of one node
	var rec map[string]string
	recLine := 0
	flush := func() {
		if rec == nil {
			return
		}
		id := rec["jobnumber"]
		if task := rec["taskid"]; task != "" && task != "undefined" {
			id += "." + task
		}
		start, started, err1 := qacctTime(rec["start_time"], loc)
		end, ended, err2 := qacctTime(rec["end_time"], loc)
		host := rec["hostname"]
		switch {
		case id == "":
			l.Skipped[SkipFields]++
		case err1 != nil || err2 != nil:
			l.Skipped[SkipTime]++
		case !started || !ended:
			l.Skipped[SkipNotRun]++
		case host == "":
			l.Skipped[SkipNoNodes]++
		case end.Before(start):
			l.Skipped[SkipEndBefore]++
		default:
			byID[id] = append(byID[id], Job{ID: id, Line: recLine, Start: start, End: end, Nodes: []string{host}})
			l.End = maxTime(l.End, end)
		}
		rec = nil
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<16), 1<<20)
	for sc.Scan() {
		l.Lines++
		line := strings.TrimRight(sc.Text(), "\r")
		if strings.HasPrefix(line, qacctSeparator) {
			flush()
			rec, recLine = map[string]string{}, l.Lines
			continue
		}
		if rec == nil {
			if strings.TrimSpace(line) != "" {
				return nil, ErrQacct
			}
			continue
		}
		if name, value, _ := strings.Cut(line, " "); name != "" {
			rec[name] = strings.TrimSpace(value)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read qacct: %w", err)
	}
	flush()
	for _, recs := range byID {
		l.Jobs = append(l.Jobs, mergeRuns(recs)...)
	}
	// In the listing's order: a run's line is its first record's.
	slices.SortFunc(l.Jobs, func(a, b Job) int { return a.Line - b.Line })
	return l, nil
}

// mergeRuns merges one job number's records into runs: records that
// overlap in time are one run.
func mergeRuns(recs []Job) []Job {
	slices.SortStableFunc(recs, func(a, b Job) int { return a.Start.Compare(b.Start) })
	var runs []Job
	for _, r := range recs {
		if n := len(runs); n > 0 && !r.Start.After(runs[n-1].End) {
			j := &runs[n-1]
			j.End = maxTime(j.End, r.End)
			j.Line = min(j.Line, r.Line)
			if !slices.Contains(j.Nodes, r.Nodes[0]) {
				j.Nodes = append(j.Nodes, r.Nodes[0])
			}
			continue
		}
		runs = append(runs, r)
	}
	for i := range runs {
		slices.Sort(runs[i].Nodes)
	}
	return runs
}

// ErrQacct reports output that is not qacct -j's.
var ErrQacct = fmt.Errorf("qacct output: want the records of qacct -j, each after a line of %q", qacctSeparator+"…")

// qacctTime parses one of qacct's times; ok is false for "-/-" (never).
func qacctTime(s string, loc *time.Location) (t time.Time, ok bool, err error) {
	if s == "" || s == "-/-" {
		return time.Time{}, false, nil
	}
	t, err = time.ParseInLocation(QacctTimeLayout, s, loc)
	if err != nil {
		return time.Time{}, false, err
	}
	return t.UTC(), true, nil
}

// ReadQstatRunning reads `qstat -u '*' -s r -g t -xml`: one line per
// queue instance a running job holds (its master's and its slaves'), so
// every host it was granted, with the job's start (times in loc, nil:
// time.Local). The jobs it returns are running: their End is now, as the
// caller passes it, and Running is set. A task of an array job is
// "JOB.TASK", as the hooks name it.
func ReadQstatRunning(r io.Reader, loc *time.Location, now time.Time) ([]Job, error) {
	if loc == nil {
		loc = time.Local
	}
	var doc struct {
		Jobs []struct {
			Number string `xml:"JB_job_number"`
			Task   string `xml:"tasks"`
			Start  string `xml:"JAT_start_time"`
			Queue  string `xml:"queue_name"`
		} `xml:"queue_info>job_list"`
	}
	if err := xml.NewDecoder(r).Decode(&doc); err != nil {
		return nil, fmt.Errorf("qstat -g t -xml: %w", err)
	}
	var jobs []Job
	index := map[string]int{}
	for _, q := range doc.Jobs {
		_, host, ok := strings.Cut(q.Queue, "@")
		if q.Number == "" || !ok || host == "" {
			return nil, fmt.Errorf("qstat -g t -xml: a running job without a number or a queue instance (%q, %q)", q.Number, q.Queue)
		}
		start, err := time.ParseInLocation("2006-01-02T15:04:05", q.Start, loc)
		if err != nil {
			return nil, fmt.Errorf("qstat -g t -xml: job %s: start %q: %w", q.Number, q.Start, err)
		}
		id := q.Number
		if q.Task != "" {
			id += "." + q.Task
		}
		i, seen := index[id]
		if !seen {
			i = len(jobs)
			index[id] = i
			jobs = append(jobs, Job{ID: id, Start: start.UTC(), End: now, Running: true})
		}
		if j := &jobs[i]; !slices.Contains(j.Nodes, host) {
			j.Nodes = append(j.Nodes, host)
		}
	}
	for i := range jobs {
		slices.Sort(jobs[i].Nodes)
	}
	return jobs, nil
}
