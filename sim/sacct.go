package sim

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/bftrainer/bftrainer/names"
)

// A Slurm site's own accounting as a trace: what `sacct --parsable2` printed
// for a window. Any Slurm site can then ask what its last month would have
// yielded, on its real node names and the nodes its jobs really held (an
// SWF log knows only how many).
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

// Reasons an sacct line is skipped, the keys of SacctLog.Skipped.
const (
	SkipSacctStep      = "job step (not an allocation)"
	SkipSacctNotRun    = "never started"
	SkipSacctNoNodes   = "no nodes"
	SkipSacctFields    = "field count not the header's"
	SkipSacctTime      = "time not understood"
	SkipSacctHostlist  = "node list not understood"
	SkipSacctEndBefore = "ends before it starts"
)

// sacctTimeLayout is how sacct prints times (SLURM_TIME_FORMAT unset or
// "standard"): local time, no zone.
const sacctTimeLayout = "2006-01-02T15:04:05"

// ErrSacctHeader reports sacct output without the header line that names
// its columns, or without a column a trace needs.
var ErrSacctHeader = errors.New("sacct output: the header line must name the columns JobID, Start, End and NodeList (run sacct --parsable2 without --noheader)")

// SacctJob is one allocation of an sacct listing.
type SacctJob struct {
	ID         string
	Line       int
	Start, End time.Time // End is the listing's last time for a job still running
	Running    bool      // End was "Unknown": the job had not ended when sacct ran
	Nodes      []string
}

// SacctLog is a parsed sacct listing.
type SacctLog struct {
	Jobs    []SacctJob
	Lines   int
	Skipped map[string]int // lines left out, by reason (the SkipSacct* constants)
	Loc     *time.Location // the zone the times were read in
	End     time.Time      // the last start or end of any job: where what the listing knows ends
}

// isSacctHeader reports whether line is the header of sacct --parsable2.
func isSacctHeader(line []byte) bool {
	first, _, ok := strings.Cut(string(line), "|")
	return ok && strings.EqualFold(first, sacctJobID)
}

// ReadSacct reads `sacct --parsable2` output. Times are read in loc (sacct
// prints the local time of the machine it ran on: pass that zone; nil means
// time.Local). Lines that cannot be used are counted in Skipped by reason,
// never silently taken: steps (JobID with a dot), allocations that never
// started or hold no node, and malformed lines.
func ReadSacct(r io.Reader, loc *time.Location) (*SacctLog, error) {
	if loc == nil {
		loc = time.Local
	}
	l := &SacctLog{Skipped: map[string]int{}, Loc: loc}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<16), 1<<20)
	var col map[string]int
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
			if !isSacctHeader([]byte(line)) {
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
			l.Skipped[SkipSacctFields]++
			continue
		}
		get := func(name string) string { return strings.TrimSpace(fields[col[strings.ToLower(name)]]) }
		id := get(sacctJobID)
		if strings.Contains(id, ".") {
			l.Skipped[SkipSacctStep]++
			continue
		}
		start, ok, err := sacctTime(get(sacctStart), loc)
		if err != nil {
			l.Skipped[SkipSacctTime]++
			continue
		}
		if !ok {
			l.Skipped[SkipSacctNotRun]++
			continue
		}
		end, ended, err := sacctTime(get(sacctEnd), loc)
		if err != nil {
			l.Skipped[SkipSacctTime]++
			continue
		}
		nl := get(sacctNodeList)
		if nl == "" || strings.EqualFold(nl, "None assigned") {
			l.Skipped[SkipSacctNoNodes]++
			continue
		}
		nodes, err := names.ExpandHostlist(nl)
		if err != nil || len(nodes) == 0 {
			l.Skipped[SkipSacctHostlist]++
			continue
		}
		if ended && end.Before(start) {
			l.Skipped[SkipSacctEndBefore]++
			continue
		}
		last = maxTime(last, start)
		if ended {
			last = maxTime(last, end)
		}
		l.Jobs = append(l.Jobs, SacctJob{ID: id, Line: l.Lines, Start: start, End: end, Running: !ended, Nodes: nodes})
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
		if l.Jobs[i].Running {
			l.Jobs[i].End = last
		}
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
	t, err = time.ParseInLocation(sacctTimeLayout, s, loc)
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
func (l *SacctLog) SkippedTotal() int {
	n := 0
	for _, c := range l.Skipped {
		n += c
	}
	return n
}

// Trace is the idle-node trace of the listing: a node is busy while any job
// holds it (jobs sharing a node count once), idle otherwise. The nodes are
// nodeNames when given (every node of the cluster, so that nodes no job used
// count as idle throughout; a job's node missing from it is an error), else
// every node some job held, in hostname order. The trace starts at the
// earliest start with every node idle but those starting then, and ends at
// the listing's last start or end (an event with no change marks it when
// nothing changed then).
//
// What sacct does not know, the trace does not either: a node down, drained
// or reserved without a job counts as idle.
func (l *SacctLog) Trace(nodeNames []string) (*Trace, error) {
	if len(l.Jobs) == 0 {
		return nil, errors.New("sacct trace: no job that ran")
	}
	if nodeNames == nil {
		seen := map[string]bool{}
		for _, j := range l.Jobs {
			for _, n := range j.Nodes {
				if !seen[n] {
					seen[n] = true
					nodeNames = append(nodeNames, n)
				}
			}
		}
		nodeNames = names.SortHostnames(nodeNames)
	}
	if len(nodeNames) > maxTraceNodes {
		return nil, fmt.Errorf("sacct trace: %d nodes, more than %d", len(nodeNames), maxTraceNodes)
	}
	index := make(map[string]int32, len(nodeNames))
	for i, n := range nodeNames {
		index[n] = int32(i)
	}
	// Each job's nodes as indices, and its start and end as changes.
	type change struct {
		at    time.Time
		delta int32 // +1 a job starts holding the nodes, -1 it stops
		job   int
	}
	held := make([][]int32, len(l.Jobs))
	var changes []change
	for k, j := range l.Jobs {
		for _, n := range j.Nodes {
			i, ok := index[n]
			if !ok {
				return nil, fmt.Errorf("sacct trace: job %s (line %d) ran on %s, which is not among the nodes given", j.ID, j.Line, n)
			}
			held[k] = append(held[k], i)
		}
		if !j.End.After(j.Start) && !j.Running {
			continue // held for no time: no change
		}
		changes = append(changes, change{j.Start, +1, k})
		if !j.Running {
			// A running job's nodes never come back within the trace.
			changes = append(changes, change{j.End, -1, k})
		}
	}
	// At one instant, ends before starts, so that a node passed from one
	// job to the next at the same second is never idle.
	slices.SortFunc(changes, func(a, b change) int {
		return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.delta, b.delta), cmp.Compare(a.job, b.job))
	})
	n := len(nodeNames)
	holders := make([]int32, n)
	idle := make([]bool, n)
	for i := range idle {
		idle[i] = true
	}
	t := &Trace{Nodes: nodeNames}
	d := newDeltaTracker(n)
	first := true
	for c := 0; c < len(changes); {
		now := changes[c].at
		for ; c < len(changes) && changes[c].at.Equal(now); c++ {
			ch := changes[c]
			for _, i := range held[ch.job] {
				d.touch(i, idle[i])
				holders[i] += ch.delta
				idle[i] = holders[i] == 0
			}
		}
		e := Event{Time: now}
		if first {
			// Relative to all-busy: every node idle now joins.
			for i, ok := range idle {
				if ok {
					e.Joined = append(e.Joined, int32(i))
				}
			}
			d.reset()
			first = false
		} else if e.Joined, e.Left = d.flush(idle); len(e.Joined) == 0 && len(e.Left) == 0 {
			continue
		}
		t.Events = append(t.Events, e)
	}
	if len(t.Events) == 0 {
		return nil, errors.New("sacct trace: no job held a node for any time")
	}
	if end := l.End; end.After(t.Events[len(t.Events)-1].Time) {
		// The window goes on after the last change (a job still running,
		// one ending on a node another still holds): an event with no
		// change marks where the listing ends.
		t.Events = append(t.Events, Event{Time: end})
	}
	t.Skipped = l.SkippedTotal()
	t.Source = fmt.Sprintf("sacct (%d jobs, %d nodes, %d events)", len(l.Jobs), n, len(t.Events))
	return t, nil
}
