package sim

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// swfFieldCount is the number of fields of a Standard Workload Format job line.
const swfFieldCount = 18

// swfMaxLine bounds an SWF line; longer lines are skipped, not buffered.
const swfMaxLine = 1 << 16

// swfMaxValue bounds any SWF time field (seconds, about 31,000 years) and node count, so
// that sums of times never overflow.
const swfMaxValue = 1e12

// maxSkippedLines is how many skipped line numbers an SWFLog keeps.
const maxSkippedLines = 20

// Reasons a job line of an SWF log is skipped, the keys of SWFLog.Skipped.
const (
	SkipFieldCount  = "field count not 18"
	SkipNotNumber   = "field not a number"
	SkipOutOfRange  = "value out of range"
	SkipSubmit      = "submit time unknown or negative"
	SkipWait        = "wait time negative"
	SkipRun         = "run time unknown or negative"
	SkipNodes       = "node count unknown or negative"
	SkipZeroNodes   = "zero nodes"
	SkipRequest     = "requested nodes or time negative"
	SkipLineTooLong = "line too long"
)

// SWFJob is one job of an SWF log: the fields a replay needs, times in seconds from the
// log's UnixStartTime. -1 means unknown, as in SWF.
type SWFJob struct {
	ID       int64 // field 1, job number
	Line     int   // line of the file the job was read from
	Submit   int64 // field 2, submit time
	Wait     int64 // field 3, wait time; -1 unknown
	Run      int64 // field 4, run time (known, ≥ 0: jobs without one are skipped)
	Nodes    int   // field 5, allocated processors (= nodes here); field 8 when field 5 is -1
	ReqNodes int   // field 8, requested processors; -1 unknown
	ReqTime  int64 // field 9, requested (wall) time; -1 unknown
}

// Start is the recorded start time (submit + wait), or -1 if the wait is unknown.
func (j SWFJob) Start() int64 {
	if j.Wait < 0 {
		return -1
	}
	return j.Submit + j.Wait
}

// SWFLog is a parsed Standard Workload Format log.
type SWFLog struct {
	Jobs          []SWFJob          // jobs kept, in file order
	UnixStartTime int64             // header UnixStartTime (0 if absent): the origin of all times
	MaxNodes      int               // header MaxNodes, 0 if absent
	MaxProcs      int               // header MaxProcs, 0 if absent
	Header        map[string]string // every `; Key: value` header line
	Lines         int               // lines read
	Skipped       map[string]int    // job lines skipped, by reason (the Skip* constants)
	SkippedLines  []int             // line numbers of the first skipped lines
}

// Time converts seconds from the log's origin into an absolute UTC time.
func (l *SWFLog) Time(sec int64) time.Time {
	return time.Unix(l.UnixStartTime+sec, 0).UTC()
}

// MachineNodes is the machine size the log states: MaxNodes, else MaxProcs, else the
// largest job's node count.
func (l *SWFLog) MachineNodes() int {
	switch {
	case l.MaxNodes > 0:
		return l.MaxNodes
	case l.MaxProcs > 0:
		return l.MaxProcs
	}
	n := 0
	for _, j := range l.Jobs {
		n = max(n, j.Nodes)
	}
	return n
}

// SkippedTotal is the number of job lines skipped for any reason.
func (l *SWFLog) SkippedTotal() int {
	n := 0
	for _, c := range l.Skipped {
		n += c
	}
	return n
}

// readSWF reads a Standard Workload Format log (18 whitespace-separated fields per job
// line, `;` header lines; gzip input is detected). "Processors" are taken to be nodes.
// Header lines `; Key: value` are kept in Header, and MaxNodes, MaxProcs and UnixStartTime
// are parsed. A job line that cannot be used (wrong field count, a non-number, a negative
// time, no run time, no or zero nodes, …) is skipped and counted in Skipped by reason, and
// its line number kept in SkippedLines for the first few: a bad line never fails the read.
// A -1 wait, requested nodes or requested time means unknown, as SWF defines, and is kept;
// a -1 allocated node count is replaced by the requested one. The only errors are I/O errors.
func readSWF(r io.Reader) (*SWFLog, error) {
	r, err := maybeGunzip(r)
	if err != nil {
		return nil, fmt.Errorf("read swf: %w", err)
	}
	l := &SWFLog{Header: map[string]string{}, Skipped: map[string]int{}}
	br := bufio.NewReaderSize(r, swfMaxLine)
	for {
		line, tooLong, err := readSWFLine(br)
		if len(line) > 0 || tooLong || err == nil {
			l.Lines++
			if tooLong {
				l.skip(SkipLineTooLong)
			} else {
				l.parseLine(line)
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read swf: line %d: %w", l.Lines+1, err)
		}
	}
	return l, nil
}

// readSWFLine returns the next line without its end; a line over swfMaxLine is consumed
// and reported as too long.
func readSWFLine(br *bufio.Reader) (line []byte, tooLong bool, err error) {
	line, err = br.ReadSlice('\n')
	for errors.Is(err, bufio.ErrBufferFull) {
		tooLong = true
		_, err = br.ReadSlice('\n')
	}
	if tooLong {
		return nil, true, err
	}
	return bytes.TrimRight(line, "\r\n"), false, err
}

func (l *SWFLog) skip(reason string) {
	l.Skipped[reason]++
	if len(l.SkippedLines) < maxSkippedLines {
		l.SkippedLines = append(l.SkippedLines, l.Lines)
	}
}

func (l *SWFLog) parseLine(line []byte) {
	text := strings.TrimSpace(string(line))
	if text == "" {
		return
	}
	if text[0] == ';' {
		l.parseHeader(text[1:])
		return
	}
	fields := strings.Fields(text)
	if len(fields) != swfFieldCount {
		l.skip(SkipFieldCount)
		return
	}
	var v [swfFieldCount]int64
	for k, f := range fields {
		x, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			fl, ferr := strconv.ParseFloat(f, 64)
			if ferr != nil || math.IsNaN(fl) || math.IsInf(fl, 0) {
				l.skip(SkipNotNumber)
				return
			}
			if math.Abs(fl) > swfMaxValue {
				l.skip(SkipOutOfRange)
				return
			}
			x = int64(math.Round(fl))
		}
		if x > swfMaxValue || x < -swfMaxValue {
			l.skip(SkipOutOfRange)
			return
		}
		v[k] = x
	}
	j := SWFJob{ID: v[0], Line: l.Lines, Submit: v[1], Wait: v[2], Run: v[3],
		Nodes: int(v[4]), ReqNodes: int(v[7]), ReqTime: v[8]}
	if j.Nodes == -1 {
		j.Nodes = j.ReqNodes
	}
	switch {
	case j.Submit < 0:
		l.skip(SkipSubmit)
	case j.Wait < -1:
		l.skip(SkipWait)
	case j.Run < 0:
		l.skip(SkipRun)
	case j.Nodes < 0:
		l.skip(SkipNodes)
	case j.Nodes == 0:
		l.skip(SkipZeroNodes)
	case j.Nodes > maxTraceNodes:
		l.skip(SkipOutOfRange)
	case j.ReqNodes < -1 || j.ReqTime < -1 || j.ReqNodes > maxTraceNodes:
		l.skip(SkipRequest)
	default:
		l.Jobs = append(l.Jobs, j)
	}
}

// parseHeader reads `Key: value` (the `;` already removed).
func (l *SWFLog) parseHeader(s string) {
	key, val, ok := strings.Cut(s, ":")
	if !ok {
		return
	}
	key, val = strings.TrimSpace(key), strings.TrimSpace(val)
	if key == "" || strings.ContainsAny(key, " \t") {
		return // a free-text comment, not a header field
	}
	l.Header[key] = val
	n, err := strconv.ParseInt(strings.Fields(val + " x")[0], 10, 64)
	if err != nil || n < 0 || n > swfMaxValue {
		return
	}
	switch key {
	case "MaxNodes":
		l.MaxNodes = int(min(n, maxTraceNodes))
	case "MaxProcs":
		l.MaxProcs = int(min(n, maxTraceNodes))
	case "UnixStartTime":
		l.UnixStartTime = n
	}
}

// RecordedStats counts what RecordedTrace did with the log's jobs.
type RecordedStats struct {
	Jobs          int     // jobs placed on the machine
	UnknownStart  int     // jobs left out: wait unknown, so no recorded start
	ZeroLength    int     // jobs left out: run time 0, they hold no node
	Truncated     int     // jobs given fewer nodes than recorded (log oversubscribes the machine)
	LostNodeHours float64 // node-hours the truncated jobs did not get
	BusyNodeHours float64 // node-hours held by jobs
	Utilisation   float64 // BusyNodeHours / (nodes × trace span)
}

// RecordedTrace is the idle-node trace of the schedule the log records: each job holds its
// nodes from its recorded start (submit + wait) to its end (start + run). See Recorded.
func (l *SWFLog) RecordedTrace(nodes int) (*Trace, error) {
	t, _, err := l.Recorded(nodes)
	return t, err
}

// Recorded is RecordedTrace with counts of what was done.
//
// The trace starts at the earliest submit time with every node idle (the machine before
// the log is unknown; Window past the warm-up if it matters) and ends when the last job
// ends. Jobs with an unknown wait, or a zero run time, are left out and counted.
//
// Which physical nodes a job takes is not in the log, so a rule is needed. The rule is
// "idle shortest first": at each start the job takes the free nodes that became free most
// recently, ties (nodes freed at the same instant) broken by the lowest index; nodes never
// used yet count as freed at the origin, lowest index first. Reasons: a scheduler that
// starts a job on nodes just released (or a job chain reusing its predecessor's nodes)
// is common, and this rule leaves the nodes that have been idle longest idle longer,
// which gives idle periods the heavy tail the Summit trace shows (old idle nodes stay
// idle); it is also the optimistic case for bftrainer, whose pool takes the longest-idle
// nodes first, and O(1) per node (a stack). The idle count over time does not depend on
// the rule; only which nodes are idle, and so idle-period lengths and pre-emptions, do.
//
// At one instant all ends are applied before any start, starts in order of start time,
// then submit time, then file order; events at equal times are merged, so a node that ends
// one job and starts another at the same instant produces no event. A job that does not fit
// (the log holds more nodes busy than the machine has) gets every free node, fewer than it
// recorded; it is counted in Truncated and the node-time it misses in LostNodeHours.
func (l *SWFLog) Recorded(nodes int) (*Trace, RecordedStats, error) {
	var st RecordedStats
	if nodes <= 0 || nodes > maxTraceNodes {
		return nil, st, fmt.Errorf("recorded trace: node count %d out of range", nodes)
	}
	if len(l.Jobs) == 0 {
		return nil, st, fmt.Errorf("recorded trace: no jobs")
	}
	t0 := int64(math.MaxInt64)
	var spans []jobSpan
	for i, j := range l.Jobs {
		t0 = min(t0, j.Submit)
		switch {
		case j.Wait < 0:
			st.UnknownStart++
		case j.Run == 0:
			st.ZeroLength++
		default:
			s := j.Start()
			spans = append(spans, jobSpan{start: s, end: s + j.Run, nodes: j.Nodes, submit: j.Submit, order: i})
		}
	}
	t, bs := buildSpanTrace(l, t0, nodes, spans, nil, nil)
	st.Jobs = len(spans)
	st.Truncated = bs.truncated
	st.LostNodeHours = bs.lostNodeSeconds / 3600
	st.BusyNodeHours = bs.busyNodeSeconds / 3600
	st.Utilisation = bs.utilisation(nodes)
	t.Source = fmt.Sprintf("swf recorded schedule (%d jobs, %d nodes, %d events)", st.Jobs, nodes, len(t.Events))
	return t, st, nil
}

// jobSpan is one job's hold on nodes, in seconds from the log's origin.
type jobSpan struct {
	start, end int64
	nodes      int
	submit     int64
	order      int // position in the log: the last tie-break
}

// spanBuildStats is what buildSpanTrace measured.
type spanBuildStats struct {
	truncated       int
	lostNodeSeconds float64
	busyNodeSeconds float64
	span            int64 // seconds from the first to the last event
}

func (s spanBuildStats) utilisation(nodes int) float64 {
	if s.span <= 0 {
		return 0
	}
	return s.busyNodeSeconds / (float64(nodes) * float64(s.span))
}

// buildSpanTrace turns jobs' node holds into a Trace, assigning physical nodes by the
// "idle shortest first" rule documented on SWFLog.Recorded. Spans must have end > start
// and start ≥ t0. onStart, if set, is told each span's start and the nodes it takes.
func buildSpanTrace(l *SWFLog, t0 int64, nodes int, spans []jobSpan, plans []easyPlan, onStart func(span int32, nodes []int32)) (*Trace, spanBuildStats) {
	var st spanBuildStats
	starts := make([]int32, len(spans))
	ends := make([]int32, len(spans))
	for i := range spans {
		starts[i], ends[i] = int32(i), int32(i)
	}
	slices.SortFunc(starts, func(a, b int32) int {
		x, y := &spans[a], &spans[b]
		return cmp.Or(cmp.Compare(x.start, y.start), cmp.Compare(x.submit, y.submit), cmp.Compare(x.order, y.order))
	})
	slices.SortFunc(ends, func(a, b int32) int {
		return cmp.Or(cmp.Compare(spans[a].end, spans[b].end), cmp.Compare(spans[a].order, spans[b].order))
	})

	// free is a stack of free nodes: the top (end) was freed most recently, and among nodes
	// freed at one instant the lowest index is nearest the top.
	free := make([]int32, nodes)
	for i := range free {
		free[i] = int32(nodes - 1 - i)
	}
	idle := make([]bool, nodes)
	for i := range idle {
		idle[i] = true
	}
	held := make([][]int32, len(spans))
	d := newDeltaTracker(nodes)

	names := make([]string, nodes)
	for i := range names {
		names[i] = fmt.Sprintf("nid%05d", i)
	}
	t := &Trace{Nodes: names}

	// Event 0: every node joins at t0 (relative to all-busy); starts at t0 merge into it.
	first := true
	last := t0
	si, ei := 0, 0
	var freed []int32
	pi := 0 // the next plan to name nodes for (plans: the re-simulation's reservations)
	for si < len(starts) || ei < len(ends) || pi < len(plans) || first {
		now := int64(math.MaxInt64)
		if si < len(starts) {
			now = spans[starts[si]].start
		}
		if ei < len(ends) {
			now = min(now, spans[ends[ei]].end)
		}
		if pi < len(plans) {
			now = min(now, plans[pi].now)
		}
		if first && now > t0 {
			now = t0
		}
		freed = freed[:0]
		for ; ei < len(ends) && spans[ends[ei]].end == now; ei++ {
			k := ends[ei]
			freed = append(freed, held[k]...)
			held[k] = nil
		}
		slices.Sort(freed)
		slices.Reverse(freed)
		for _, n := range freed {
			d.touch(n, idle[n])
			idle[n] = true
		}
		free = append(free, freed...)
		for ; si < len(starts) && spans[starts[si]].start == now; si++ {
			k := starts[si]
			sp := &spans[k]
			got := min(sp.nodes, len(free))
			if got < sp.nodes {
				st.truncated++
				st.lostNodeSeconds += float64(sp.nodes-got) * float64(sp.end-sp.start)
			}
			st.busyNodeSeconds += float64(got) * float64(sp.end-sp.start)
			take := free[len(free)-got:]
			held[k] = slices.Clone(take)
			if onStart != nil {
				onStart(k, held[k])
			}
			free = free[:len(free)-got]
			for _, n := range take {
				d.touch(n, idle[n])
				idle[n] = false
			}
		}
		pi = resolvePlans(t, l, plans, pi, now, free)
		var e Event
		if first {
			// Relative to all-busy: every node idle now joins.
			e.Joined = make([]int32, 0, nodes)
			for i, ok := range idle {
				if ok {
					e.Joined = append(e.Joined, int32(i))
				}
			}
			d.reset()
			first = false
		} else {
			e.Joined, e.Left = d.flush(idle)
			if len(e.Joined) == 0 && len(e.Left) == 0 {
				continue
			}
		}
		e.Time = l.Time(now)
		t.Events = append(t.Events, e)
		last = now
	}
	st.span = last - t0
	return t, st
}

// deltaTracker collects the nodes touched during one instant and, at its end, which of
// them changed state, so that changes undone within the instant produce no event.
type deltaTracker struct {
	stamp   []int32 // instant+1 at which the node was first touched
	before  []bool  // idle state before the instant, for touched nodes
	touched []int32
	instant int32
}

func newDeltaTracker(n int) *deltaTracker {
	return &deltaTracker{stamp: make([]int32, n), before: make([]bool, n), instant: 1}
}

// touch records node i's state before its first change in this instant.
func (d *deltaTracker) touch(i int32, idleBefore bool) {
	if d.stamp[i] != d.instant {
		d.stamp[i] = d.instant
		d.before[i] = idleBefore
		d.touched = append(d.touched, i)
	}
}

// flush returns the nodes that joined and left over the instant (ascending) and starts
// the next instant.
func (d *deltaTracker) flush(idle []bool) (joined, left []int32) {
	add := func(i int32) {
		switch {
		case idle[i] && !d.before[i]:
			joined = append(joined, i)
		case !idle[i] && d.before[i]:
			left = append(left, i)
		}
	}
	if len(d.touched) > len(d.stamp)/32 {
		// Many nodes touched: a scan in index order is cheaper than sorting.
		for i, s := range d.stamp {
			if s == d.instant {
				add(int32(i))
			}
		}
	} else {
		for _, i := range d.touched {
			add(i)
		}
		slices.Sort(joined)
		slices.Sort(left)
	}
	d.reset()
	return joined, left
}

func (d *deltaTracker) reset() {
	d.touched = d.touched[:0]
	d.instant++
}

// ReadSWF reads a Standard Workload Format log as a replay does (readSWF:
// bad lines skipped and counted, gzip detected): for a harness that
// submits the log's jobs to a real scheduler.
func ReadSWF(r io.Reader) (*SWFLog, error) { return readSWF(r) }
