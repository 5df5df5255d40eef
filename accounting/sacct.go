// Package accounting reads what a batch scheduler's own accounting says of
// its jobs — which job held which nodes from when to when — for the audit
// (the history checked against the scheduler's records) and for replays of
// a site's own past (sim). It is a leaf: names only.
package accounting

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/bftrainer/bftrainer/names"
)

// Slurm's accounting: what `sacct --parsable2` printed for a window.
//
// The columns are found by the header sacct prints (never --noheader), in any
// order; sacctColumns are the ones read. Recommended:
//
//	sacct --allusers --allocations --parsable2 --starttime 2026-11-01 --endtime now \
//	      --format JobID,Submit,Start,End,NNodes,NodeList,State > month.sacct
const (
	sacctJobID    = "JobID"
	sacctStart    = "Start"
	sacctEnd      = "End"
	sacctNodeList = "NodeList"
)

// sacctColumns are the columns a trace needs.
var sacctColumns = []string{sacctJobID, sacctStart, sacctEnd, sacctNodeList}

// Reasons an sacct line is skipped, the keys of Listing.Skipped.
const (
	SkipStep      = "job step (not an allocation)"
	SkipNotRun    = "never started"
	SkipNoNodes   = "no nodes"
	SkipFields    = "field count not the header's"
	SkipTime      = "time not understood"
	SkipHostlist  = "node list not understood"
	SkipEndBefore = "ends before it starts"
)

// SacctTimeLayout is how sacct prints times (SLURM_TIME_FORMAT unset or
// "standard"): local time, no zone.
const SacctTimeLayout = "2006-01-02T15:04:05"

// ErrSacctHeader reports sacct output without the header line that names
// its columns, or without a column a trace needs.
var ErrSacctHeader = errors.New("sacct output: the header line must name the columns JobID, Start, End and NodeList (run sacct --parsable2 without --noheader)")

// Job is one allocation of the scheduler's accounting: a main job that ran.
type Job struct {
	ID         string
	Line       int
	Start, End time.Time // End is the listing's last time for a job still running
	Running    bool      // End was "Unknown": the job had not ended when sacct ran
	Nodes      []string
	// StepStart is when the job's own processes started: the earliest
	// start of its steps (batch script, srun steps; not the extern step,
	// which exists from the allocation on), zero when none is listed.
	// Slurm's Start is the allocation's, before the node prologs ran.
	StepStart time.Time
}

// Listing is a parsed accounting listing.
type Listing struct {
	Jobs    []Job
	Lines   int
	Skipped map[string]int // lines left out, by reason (the Skip* constants)
	Loc     *time.Location // the zone the times were read in
	End     time.Time      // the last start or end of any job: where what the listing knows ends
}

// IsSacctHeader reports whether line is the header of sacct --parsable2.
func IsSacctHeader(line []byte) bool {
	first, _, ok := strings.Cut(string(line), "|")
	return ok && strings.EqualFold(first, sacctJobID)
}

// ReadSacct reads `sacct --parsable2` output. Times are read in loc (sacct
// prints the local time of the machine it ran on: pass that zone; nil means
// time.Local). Lines that cannot be used are counted in Skipped by reason,
// never silently taken: steps (JobID with a dot), allocations that never
// started or hold no node, and malformed lines.
func ReadSacct(r io.Reader, loc *time.Location) (*Listing, error) {
	if loc == nil {
		loc = time.Local
	}
	l := &Listing{Skipped: map[string]int{}, Loc: loc}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<16), 1<<20)
	var col map[string]int
	steps := map[string]time.Time{} // allocation → its earliest step start
	var width int
	var last time.Time
	for sc.Scan() {
		l.Lines++
		line := strings.TrimRight(sc.Text(), "\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		fields := strings.Split(line, "|")
		if col == nil {
			if !IsSacctHeader([]byte(line)) {
				return nil, ErrSacctHeader
			}
			col = map[string]int{}
			for i, f := range fields {
				col[strings.ToLower(strings.TrimSpace(f))] = i
			}
			for _, c := range sacctColumns {
				if _, ok := col[strings.ToLower(c)]; !ok {
					return nil, fmt.Errorf("%w: no %s column", ErrSacctHeader, c)
				}
			}
			width = len(fields)
			continue
		}
		if len(fields) != width {
			l.Skipped[SkipFields]++
			continue
		}
		get := func(name string) string { return strings.TrimSpace(fields[col[strings.ToLower(name)]]) }
		id := get(sacctJobID)
		if base, step, ok := strings.Cut(id, "."); ok {
			l.Skipped[SkipStep]++
			if st, ok, err := sacctTime(get(sacctStart), loc); err == nil && ok && step != "extern" {
				if cur, seen := steps[base]; !seen || st.Before(cur) {
					steps[base] = st
				}
			}
			continue
		}
		start, ok, err := sacctTime(get(sacctStart), loc)
		if err != nil {
			l.Skipped[SkipTime]++
			continue
		}
		if !ok {
			l.Skipped[SkipNotRun]++
			continue
		}
		end, ended, err := sacctTime(get(sacctEnd), loc)
		if err != nil {
			l.Skipped[SkipTime]++
			continue
		}
		nl := get(sacctNodeList)
		if nl == "" || strings.EqualFold(nl, "None assigned") {
			l.Skipped[SkipNoNodes]++
			continue
		}
		nodes, err := names.ExpandHostlist(nl)
		if err != nil || len(nodes) == 0 {
			l.Skipped[SkipHostlist]++
			continue
		}
		if ended && end.Before(start) {
			l.Skipped[SkipEndBefore]++
			continue
		}
		last = maxTime(last, start)
		if ended {
			last = maxTime(last, end)
		}
		l.Jobs = append(l.Jobs, Job{ID: id, Line: l.Lines, Start: start, End: end, Running: !ended, Nodes: nodes})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read sacct: %w", err)
	}
	if col == nil {
		return nil, ErrSacctHeader
	}
	// A job still running holds its nodes to the end of what the listing
	// knows.
	l.End = last
	for i := range l.Jobs {
		j := &l.Jobs[i]
		if j.Running {
			j.End = last
		}
		j.StepStart = steps[j.ID]
	}
	return l, nil
}

// sacctTime parses one of sacct's times; ok is false for "Unknown", "None"
// or empty (not started, or not ended).
func sacctTime(s string, loc *time.Location) (t time.Time, ok bool, err error) {
	switch s {
	case "", "Unknown", "None":
		return time.Time{}, false, nil
	}
	t, err = time.ParseInLocation(SacctTimeLayout, s, loc)
	if err != nil {
		return time.Time{}, false, err
	}
	return t.UTC(), true, nil
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// SkippedTotal is the number of lines left out.
func (l *Listing) SkippedTotal() int {
	n := 0
	for _, c := range l.Skipped {
		n += c
	}
	return n
}
