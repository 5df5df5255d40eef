package sim

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/bftrainer/bftrainer/accounting"
)

// Trace is a node-state history: which nodes are idle (available to us) over time.
type Trace struct {
	Nodes  []string // node names; Event indices refer to this slice; order = the trace's column order
	Events []Event  // sorted by Time; first event is relative to an all-busy state
	Source string   // human description, e.g. "summit csv (23883 events)"
	// Skipped counts the input lines left out (SWF job lines that could not be used),
	// Truncated the jobs of an SWF log that got fewer nodes than they recorded (the log
	// held more nodes busy than the machine has). A replay reports both.
	Skipped, Truncated int
	// Plans is the scheduler's plan over time, when the trace knows it (an
	// EASY re-simulation, EASYTracePlanned); a replay with Options.Plan
	// gives it to the pool as the live reconciler does.
	Plans []TracePlan
	// Starts is the re-simulated schedule's job starts in time order, when the
	// trace knows them (EASYTracePlanned), to explain reclaims
	// (SurpriseExplainer).
	Starts []TraceStart
}

// Event is one instant of a Trace at which nodes changed state.
type Event struct {
	Time   time.Time // UTC (naive timestamps in the files are read as UTC)
	Joined []int32   // node indices that went busy→idle at Time
	Left   []int32   // node indices that went idle→busy at Time
}

// traceHeader is the header line of the trace CSV form; the columns are fixed.
const traceHeader = "event_idx,time,n_idle,joined,left"

// traceTimeLayout is how trace and workload files write times: naive, read as UTC.
// A fractional second after the seconds is accepted on input and written when present.
const traceTimeLayout = "2006-01-02 15:04:05"

// maxTraceNodes bounds the node count of any trace this package builds or reads, so a
// corrupt header or index cannot make it allocate without limit.
const maxTraceNodes = 1 << 24

// ErrTraceFormat reports an input that is neither the trace CSV form nor an SWF log.
var ErrTraceFormat = errors.New("unknown trace format")

// TraceError is a consistency error in a trace: the event (0-based position) and, when
// read from a file, the line where it was found.
type TraceError struct {
	Event int    // event index (position in Trace.Events)
	Line  int    // 1-based line in the file, 0 if not read from a file
	Msg   string // what is wrong
}

// Error formats the error as "event N (line L): what".
func (e *TraceError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("event %d (line %d): %s", e.Event, e.Line, e.Msg)
	}
	return fmt.Sprintf("event %d: %s", e.Event, e.Msg)
}

// readTrace reads the trace CSV form: events as `event_idx,time,n_idle,joined,left` with
// `;`-separated node indices (event_idx must count 0, 1, 2, …; n_idle is the idle count
// after the row), and nodes as `node_idx,node_name`. Either input may be gzip-compressed;
// the magic bytes are detected. nodes may be nil: the node count is then the largest index
// plus one and the nodes are named n0, n1, ….
//
// The history is checked while it is read: times never decrease, indices are in range,
// a node never joins while idle or leaves while busy, no node is listed twice in a row,
// and n_idle matches the replayed state. The first error is returned as a *TraceError
// (wrapped) naming the event and line.
func readTrace(events io.Reader, nodes io.Reader) (*Trace, error) {
	var names []string
	if nodes != nil {
		var err error
		if names, err = readNodes(nodes); err != nil {
			return nil, fmt.Errorf("read nodes: %w", err)
		}
	}
	t, err := readTraceEvents(events, names)
	if err != nil {
		return nil, fmt.Errorf("read trace: %w", err)
	}
	t.Source = fmt.Sprintf("trace csv (%d events)", len(t.Events))
	return t, nil
}

// OpenTrace reads a trace file, telling the trace CSV form, an SWF job log and Slurm's
// accounting (`sacct --parsable2`, [ReadSacct]) apart by their content, never by their
// name: a first non-blank line equal to the CSV header means the CSV form, one starting
// with `;` or holding 18 numeric fields means SWF, one starting `JobID|` means sacct
// (its times read in this machine's zone, TZ; accounting.ReadSacct). Any may be gzip-compressed.
//
// For sacct, nodesPath names every node of the cluster (the node file's form), so that
// nodes no job used count as idle; "" takes the nodes the jobs held.
//
// For the CSV form nodesPath names the node file ("" for none, see ReadTrace). For SWF
// the trace is the recorded schedule ([SWFLog.RecordedTrace]) on a machine whose size is
// the header's MaxNodes, else its MaxProcs, else the largest job; a non-empty nodesPath
// then names the nodes instead, and its length is the machine size.
func OpenTrace(path, nodesPath string) (*Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open trace: %w", err)
	}
	defer f.Close()
	r, err := maybeGunzip(f)
	if err != nil {
		return nil, fmt.Errorf("open trace %s: %w", path, err)
	}
	br := bufio.NewReaderSize(r, 1<<16)
	kind, err := sniffTrace(br)
	if err != nil {
		return nil, fmt.Errorf("open trace %s: %w", path, err)
	}
	var names []string
	if nodesPath != "" {
		nf, err := os.Open(nodesPath)
		if err != nil {
			return nil, fmt.Errorf("open nodes: %w", err)
		}
		defer nf.Close()
		if names, err = readNodes(nf); err != nil {
			return nil, fmt.Errorf("read nodes %s: %w", nodesPath, err)
		}
	}
	base := filepath.Base(path)
	switch kind {
	case "csv":
		t, err := readTraceEvents(br, names)
		if err != nil {
			return nil, fmt.Errorf("read trace %s: %w", path, err)
		}
		t.Source = fmt.Sprintf("%s: trace csv (%d events)", base, len(t.Events))
		return t, nil
	case "sacct":
		l, err := accounting.ReadSacct(br, nil)
		if err != nil {
			return nil, fmt.Errorf("read sacct %s: %w", path, err)
		}
		t, err := SacctTrace(l, names)
		if err != nil {
			return nil, fmt.Errorf("sacct %s: %w", path, err)
		}
		t.Source = base + ": " + t.Source
		return t, nil
	default:
		swf, err := readSWF(br)
		if err != nil {
			return nil, fmt.Errorf("read swf %s: %w", path, err)
		}
		n := swf.MachineNodes()
		if names != nil {
			n = len(names)
		}
		t, st, err := swf.Recorded(n)
		if err != nil {
			return nil, fmt.Errorf("swf %s: %w", path, err)
		}
		if names != nil {
			t.Nodes = names
		}
		t.Skipped, t.Truncated = swf.SkippedTotal(), st.Truncated
		t.Source = fmt.Sprintf("%s: swf recorded schedule (%d jobs, %d nodes, %d events)",
			base, st.Jobs, n, len(t.Events))
		return t, nil
	}
}

// sniffTrace classifies the input by its first non-blank line, without consuming it.
func sniffTrace(br *bufio.Reader) (string, error) {
	buf, err := br.Peek(br.Size())
	if err != nil && err != io.EOF && err != bufio.ErrBufferFull {
		return "", err
	}
	for len(buf) > 0 {
		line := buf
		if i := bytes.IndexByte(buf, '\n'); i >= 0 {
			line, buf = buf[:i], buf[i+1:]
		} else {
			buf = nil
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		if string(line) == traceHeader {
			return "csv", nil
		}
		if line[0] == ';' || isSWFJobLine(line) {
			return "swf", nil
		}
		if accounting.IsSacctHeader(line) {
			return "sacct", nil
		}
		break
	}
	return "", ErrTraceFormat
}

// isSWFJobLine reports whether line holds 18 whitespace-separated numbers.
func isSWFJobLine(line []byte) bool {
	fields := strings.Fields(string(line))
	if len(fields) != swfFieldCount {
		return false
	}
	for _, f := range fields {
		if _, err := strconv.ParseFloat(f, 64); err != nil {
			return false
		}
	}
	return true
}

// maybeGunzip returns r decompressed if it starts with the gzip magic bytes, else r.
func maybeGunzip(r io.Reader) (io.Reader, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	magic, err := br.Peek(2)
	if err != nil && err != io.EOF {
		return nil, err
	}
	if len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		return zr, nil
	}
	return br, nil
}

// readNodes reads `node_idx,node_name` rows; indices must be a permutation of 0..n-1.
func readNodes(r io.Reader) ([]string, error) {
	r, err := maybeGunzip(r)
	if err != nil {
		return nil, err
	}
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = 2
	cr.ReuseRecord = true
	head, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	if head[0] != "node_idx" || head[1] != "node_name" {
		return nil, fmt.Errorf("header %q: want node_idx,node_name", strings.Join(head, ","))
	}
	var names []string
	seen := map[int]bool{}
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		line, _ := cr.FieldPos(0)
		i, err := strconv.Atoi(rec[0])
		if err != nil || i < 0 || i >= maxTraceNodes {
			return nil, fmt.Errorf("line %d: bad node_idx %q", line, rec[0])
		}
		if seen[i] {
			return nil, fmt.Errorf("line %d: node_idx %d repeated", line, i)
		}
		seen[i] = true
		for len(names) <= i {
			names = append(names, "")
		}
		names[i] = rec[1]
	}
	if len(seen) != len(names) {
		return nil, fmt.Errorf("node_idx not 0..%d: %d missing", len(names)-1, len(names)-len(seen))
	}
	return names, nil
}

// readTraceEvents parses the events CSV. It is hand-written rather than encoding/csv
// because the Summit file holds 846,856 indices and must load in well under a second:
// indices go into one shared backing array, and the checks run on a per-node state array.
func readTraceEvents(r io.Reader, names []string) (*Trace, error) {
	r, err := maybeGunzip(r)
	if err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<16), 1<<28)
	lineNo := 0
	for sc.Scan() {
		lineNo++
		if len(bytes.TrimSpace(sc.Bytes())) > 0 {
			break
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if head := strings.TrimSpace(sc.Text()); head != traceHeader {
		return nil, fmt.Errorf("line %d: header %q: want %q", lineNo, head, traceHeader)
	}

	v := newTraceChecker(len(names), names == nil)
	type span struct{ j0, j1, l1 int }
	var (
		times []time.Time
		spans []span
		arena []int32
	)
	for sc.Scan() {
		lineNo++
		line := bytes.TrimRight(sc.Bytes(), "\r")
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		ev := len(times)
		bad := func(format string, args ...any) error {
			return &TraceError{Event: ev, Line: lineNo, Msg: fmt.Sprintf(format, args...)}
		}
		var f [5][]byte
		rest := line
		for k := 0; k < 4; k++ {
			i := bytes.IndexByte(rest, ',')
			if i < 0 {
				return nil, bad("%d fields, want 5", k+1)
			}
			f[k], rest = rest[:i], rest[i+1:]
		}
		if bytes.IndexByte(rest, ',') >= 0 {
			return nil, bad("more than 5 fields")
		}
		f[4] = rest
		idx, err := strconv.Atoi(string(f[0]))
		if err != nil || idx != ev {
			return nil, bad("event_idx %q, want %d", f[0], ev)
		}
		at, err := parseTraceTime(string(f[1]))
		if err != nil {
			return nil, bad("time: %v", err)
		}
		if ev > 0 && at.Before(times[ev-1]) {
			return nil, bad("time %s before previous event's %s", f[1], times[ev-1].Format(traceTimeLayout))
		}
		nIdle, err := strconv.Atoi(string(f[2]))
		if err != nil {
			return nil, bad("n_idle %q: not an integer", f[2])
		}
		j0 := len(arena)
		if arena, err = appendIndices(arena, f[3]); err != nil {
			return nil, bad("joined: %v", err)
		}
		j1 := len(arena)
		if arena, err = appendIndices(arena, f[4]); err != nil {
			return nil, bad("left: %v", err)
		}
		if msg := v.apply(arena[j0:j1], arena[j1:]); msg != "" {
			return nil, bad("%s", msg)
		}
		if nIdle != v.idle {
			return nil, bad("n_idle %d, but %d nodes are idle", nIdle, v.idle)
		}
		times = append(times, at)
		spans = append(spans, span{j0, j1, len(arena)})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %w", lineNo+1, err)
	}
	if names == nil {
		names = make([]string, len(v.state))
		for i := range names {
			names[i] = "n" + strconv.Itoa(i)
		}
	}
	t := &Trace{Nodes: names, Events: make([]Event, len(times))}
	for i, s := range spans {
		t.Events[i] = Event{Time: times[i]}
		if s.j1 > s.j0 {
			t.Events[i].Joined = arena[s.j0:s.j1:s.j1]
		}
		if s.l1 > s.j1 {
			t.Events[i].Left = arena[s.j1:s.l1:s.l1]
		}
	}
	return t, nil
}

// appendIndices parses a `;`-separated list of non-negative integers.
func appendIndices(dst []int32, b []byte) ([]int32, error) {
	if len(b) == 0 {
		return dst, nil
	}
	var v int64
	digits := 0
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			v = v*10 + int64(c-'0')
			digits++
			if v >= maxTraceNodes {
				return dst, fmt.Errorf("node index too large")
			}
		case c == ';':
			if digits == 0 {
				return dst, fmt.Errorf("empty node index")
			}
			dst = append(dst, int32(v))
			v, digits = 0, 0
		default:
			return dst, fmt.Errorf("unexpected %q in node list", c)
		}
	}
	if digits == 0 {
		return dst, fmt.Errorf("empty node index")
	}
	return append(dst, int32(v)), nil
}

// parseTraceTime reads a naive `2006-01-02 15:04:05[.frac]` as UTC, or RFC 3339.
func parseTraceTime(s string) (time.Time, error) {
	t, err := time.Parse(traceTimeLayout, s)
	if err != nil {
		t, err = time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return time.Time{}, fmt.Errorf("%q: want %q", s, traceTimeLayout)
		}
	}
	return t.UTC(), nil
}

// traceChecker replays joins and leaves and reports the first inconsistency.
type traceChecker struct {
	state []bool  // idle?
	stamp []int32 // event+1 that last touched the node, to catch a node listed twice
	grow  bool    // node count unknown: grow state on demand
	ev    int32
	idle  int
}

func newTraceChecker(n int, grow bool) *traceChecker {
	return &traceChecker{state: make([]bool, n), stamp: make([]int32, n), grow: grow}
}

func (c *traceChecker) touch(i int32) string {
	if int(i) >= len(c.state) {
		if !c.grow {
			return fmt.Sprintf("node %d out of range (%d nodes)", i, len(c.state))
		}
		n := int(i) + 1
		c.state = append(c.state, make([]bool, n-len(c.state))...)
		c.stamp = append(c.stamp, make([]int32, n-len(c.stamp))...)
	}
	if i < 0 {
		return fmt.Sprintf("node %d out of range", i)
	}
	if c.stamp[i] == c.ev {
		return fmt.Sprintf("node %d listed twice", i)
	}
	c.stamp[i] = c.ev
	return ""
}

// apply applies one event and returns "" or what is wrong with it.
func (c *traceChecker) apply(joined, left []int32) string {
	c.ev++
	for _, i := range joined {
		if msg := c.touch(i); msg != "" {
			return msg
		}
		if c.state[i] {
			return fmt.Sprintf("node %d joins while idle", i)
		}
		c.state[i] = true
		c.idle++
	}
	for _, i := range left {
		if msg := c.touch(i); msg != "" {
			return msg
		}
		if !c.state[i] {
			return fmt.Sprintf("node %d leaves while busy", i)
		}
		c.state[i] = false
		c.idle--
	}
	return ""
}

// Validate checks the history: times non-decreasing, indices in range, no node joining
// while idle, leaving while busy or listed twice in one event. Errors are *TraceError.
func (t *Trace) Validate() error {
	c := newTraceChecker(len(t.Nodes), false)
	for i, e := range t.Events {
		if i > 0 && e.Time.Before(t.Events[i-1].Time) {
			return &TraceError{Event: i, Msg: "time before previous event's"}
		}
		if msg := c.apply(e.Joined, e.Left); msg != "" {
			return &TraceError{Event: i, Msg: msg}
		}
	}
	return nil
}

// writeTrace writes t in the CSV form ReadTrace reads (times as naive UTC, with a
// fractional second only when there is one). It validates t as it goes and returns the
// first inconsistency instead of writing a file that cannot be read back.
func writeTrace(w io.Writer, t *Trace) error {
	bw := bufio.NewWriterSize(w, 1<<16)
	bw.WriteString(traceHeader + "\n")
	c := newTraceChecker(len(t.Nodes), false)
	var buf []byte
	for i, e := range t.Events {
		if i > 0 && e.Time.Before(t.Events[i-1].Time) {
			return fmt.Errorf("write trace: %w", &TraceError{Event: i, Msg: "time before previous event's"})
		}
		if msg := c.apply(e.Joined, e.Left); msg != "" {
			return fmt.Errorf("write trace: %w", &TraceError{Event: i, Msg: msg})
		}
		buf = strconv.AppendInt(buf[:0], int64(i), 10)
		buf = append(buf, ',')
		buf = e.Time.UTC().AppendFormat(buf, traceTimeLayout+".999999999")
		buf = append(buf, ',')
		buf = strconv.AppendInt(buf, int64(c.idle), 10)
		buf = append(buf, ',')
		buf = appendIndexList(buf, e.Joined)
		buf = append(buf, ',')
		buf = appendIndexList(buf, e.Left)
		buf = append(buf, '\n')
		if _, err := bw.Write(buf); err != nil {
			return fmt.Errorf("write trace: %w", err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write trace: %w", err)
	}
	return nil
}

func appendIndexList(buf []byte, idx []int32) []byte {
	for k, i := range idx {
		if k > 0 {
			buf = append(buf, ';')
		}
		buf = strconv.AppendInt(buf, int64(i), 10)
	}
	return buf
}

// writeNodes writes t's node names as `node_idx,node_name` rows (CSV-quoted if needed).
func writeNodes(w io.Writer, t *Trace) error {
	cw := csv.NewWriter(w)
	cw.Write([]string{"node_idx", "node_name"})
	for i, name := range t.Nodes {
		cw.Write([]string{strconv.Itoa(i), name})
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("write nodes: %w", err)
	}
	return nil
}

// Window returns the trace from event index from on, as the reference replayer does when
// it starts at a row: the first event of the result is at Events[from].Time and joins every
// node idle after that event (so it is again relative to an all-busy state); later events
// are copied, and events where nothing changes are dropped. from is clamped to the trace.
// The result shares no slices with t.
func (t *Trace) Window(from int) *Trace {
	out := &Trace{Nodes: slices.Clone(t.Nodes), Source: t.Source, Skipped: t.Skipped, Truncated: t.Truncated, Plans: t.Plans, Starts: t.Starts}
	if len(t.Events) == 0 {
		return out
	}
	from = max(0, min(from, len(t.Events)-1))
	idle := make([]bool, len(t.Nodes))
	for _, e := range t.Events[:from+1] {
		applyEvent(idle, e)
	}
	first := Event{Time: t.Events[from].Time}
	for i, ok := range idle {
		if ok {
			first.Joined = append(first.Joined, int32(i))
		}
	}
	out.Events = append(out.Events, first)
	for _, e := range t.Events[from+1:] {
		if len(e.Joined) == 0 && len(e.Left) == 0 {
			continue
		}
		out.Events = append(out.Events, Event{Time: e.Time, Joined: cloneIdx(e.Joined), Left: cloneIdx(e.Left)})
	}
	if from > 0 {
		out.Source = fmt.Sprintf("%s, from event %d", t.Source, from)
	}
	return out
}

// WindowAt is Window from the state at time at: the first event is at max(at, first event
// time) and joins every node idle then; events up to at are folded into it.
func (t *Trace) WindowAt(at time.Time) *Trace {
	i := sort.Search(len(t.Events), func(i int) bool { return t.Events[i].Time.After(at) }) - 1
	w := t.Window(max(i, 0))
	if i >= 0 && len(w.Events) > 0 {
		w.Events[0].Time = at.UTC()
	}
	return w
}

// SubsetNodes keeps only nodes [first, first+n) (the reference replayer's -nis / -nN),
// renumbered from 0, and drops events where none of them changes (the first is kept).
func (t *Trace) SubsetNodes(first, n int) *Trace {
	first = max(0, min(first, len(t.Nodes)))
	n = max(0, min(n, len(t.Nodes)-first))
	out := &Trace{Nodes: slices.Clone(t.Nodes[first : first+n]),
		Source: fmt.Sprintf("%s, nodes %d..%d", t.Source, first, first+n-1)}
	keep := func(idx []int32) []int32 {
		var r []int32
		for _, i := range idx {
			if int(i) >= first && int(i) < first+n {
				r = append(r, i-int32(first))
			}
		}
		return r
	}
	for k, e := range t.Events {
		ne := Event{Time: e.Time, Joined: keep(e.Joined), Left: keep(e.Left)}
		if k > 0 && len(ne.Joined) == 0 && len(ne.Left) == 0 {
			continue
		}
		out.Events = append(out.Events, ne)
	}
	return out
}

func cloneIdx(s []int32) []int32 {
	if len(s) == 0 {
		return nil
	}
	return slices.Clone(s)
}

// applyEvent applies e to a per-node idle state, trusting it to be valid.
func applyEvent(idle []bool, e Event) {
	for _, i := range e.Joined {
		idle[i] = true
	}
	for _, i := range e.Left {
		idle[i] = false
	}
}

// Counts returns the idle node count after each event.
func (t *Trace) Counts() []int {
	out := make([]int, len(t.Events))
	n := 0
	for i, e := range t.Events {
		n += len(e.Joined) - len(e.Left)
		out[i] = n
	}
	return out
}

// IdleAt returns how many nodes are idle at time at: the count after the last event at or
// before at (0 before the first event).
func (t *Trace) IdleAt(at time.Time) int {
	k := sort.Search(len(t.Events), func(i int) bool { return t.Events[i].Time.After(at) })
	n := 0
	for _, e := range t.Events[:k] {
		n += len(e.Joined) - len(e.Left)
	}
	return n
}

// IdleSetAt returns the indices of the nodes idle at time at, ascending.
func (t *Trace) IdleSetAt(at time.Time) []int32 {
	idle := make([]bool, len(t.Nodes))
	for _, e := range t.Events {
		if e.Time.After(at) {
			break
		}
		applyEvent(idle, e)
	}
	var out []int32
	for i, ok := range idle {
		if ok {
			out = append(out, int32(i))
		}
	}
	return out
}

// TraceStats summarises a trace. Time-weighted figures weigh each state by how long it
// lasts, over [Start, End] (the first to the last event).
type TraceStats struct {
	Nodes         int           // nodes in the trace
	Events        int           // events (rows)
	Transitions   int           // joins plus leaves over all events
	Start, End    time.Time     // first and last event times
	MeanIdle      float64       // time-weighted mean idle node count
	MedianIdle    int           // time-weighted median idle node count
	P95Idle       int           // time-weighted 95th percentile of the idle count
	MaxIdle       int           // largest idle count after any event
	ZeroIdle      float64       // share of the time with no idle node
	IdleNodeHours float64       // ∫ idle count dt, in node-hours
	MeanGap       time.Duration // mean time between consecutive events
}

// IdleFraction is the time-weighted mean share of the nodes that is idle.
func (s TraceStats) IdleFraction() float64 {
	if s.Nodes == 0 {
		return 0
	}
	return s.MeanIdle / float64(s.Nodes)
}

// String is a one-line summary.
func (s TraceStats) String() string {
	return fmt.Sprintf("%d nodes, %d events over %s: idle mean %.1f (%.1f%%), median %d, p95 %d, max %d; %.0f idle node-hours",
		s.Nodes, s.Events, s.End.Sub(s.Start).Round(time.Second), s.MeanIdle, 100*s.IdleFraction(),
		s.MedianIdle, s.P95Idle, s.MaxIdle, s.IdleNodeHours)
}

// Stats computes the trace's summary statistics.
func (t *Trace) Stats() TraceStats {
	s := TraceStats{Nodes: len(t.Nodes), Events: len(t.Events)}
	if len(t.Events) == 0 {
		return s
	}
	s.Start, s.End = t.Events[0].Time, t.Events[len(t.Events)-1].Time
	hist := t.idleHistogram()
	var total, area float64
	for n, secs := range hist {
		total += secs
		area += float64(n) * secs
	}
	n := 0
	for _, e := range t.Events {
		s.Transitions += len(e.Joined) + len(e.Left)
		n += len(e.Joined) - len(e.Left)
		s.MaxIdle = max(s.MaxIdle, n)
	}
	if total > 0 {
		s.MeanIdle = area / total
		s.ZeroIdle = hist[0] / total
	}
	s.IdleNodeHours = area / 3600
	s.MedianIdle = histQuantile(hist, total, 0.5)
	s.P95Idle = histQuantile(hist, total, 0.95)
	if len(t.Events) > 1 {
		s.MeanGap = s.End.Sub(s.Start) / time.Duration(len(t.Events)-1)
	}
	return s
}

// IdleQuantile returns the time-weighted q-quantile (0 ≤ q ≤ 1) of the idle node count.
func (t *Trace) IdleQuantile(q float64) int {
	hist := t.idleHistogram()
	var total float64
	for _, secs := range hist {
		total += secs
	}
	return histQuantile(hist, total, q)
}

// idleHistogram returns seconds spent at each idle count, indexed by count.
func (t *Trace) idleHistogram() []float64 {
	hist := make([]float64, len(t.Nodes)+1)
	n := 0
	for i, e := range t.Events {
		n += len(e.Joined) - len(e.Left)
		if i+1 < len(t.Events) && n >= 0 && n < len(hist) {
			hist[n] += t.Events[i+1].Time.Sub(e.Time).Seconds()
		}
	}
	return hist
}

// histQuantile returns the smallest count whose cumulative weight reaches q of total.
func histQuantile(hist []float64, total, q float64) int {
	if total <= 0 {
		return 0
	}
	acc := 0.0
	for n, secs := range hist {
		acc += secs
		if acc >= q*total {
			return n
		}
	}
	return len(hist) - 1
}

// IdleFragments returns the lengths of all idle periods whose both ends are observed: a
// node joining at one event and leaving at a later one. Periods under way at the first
// event (its joins are the initial state) or still open at the last are left out.
func (t *Trace) IdleFragments() []time.Duration {
	return t.runs(true)
}

// BusyGaps returns the lengths of all busy periods whose both ends are observed: a node
// leaving at one event and joining again at a later one.
func (t *Trace) BusyGaps() []time.Duration {
	return t.runs(false)
}

func (t *Trace) runs(idle bool) []time.Duration {
	since := make([]time.Time, len(t.Nodes)) // zero = not in an observed run
	var out []time.Duration
	open, close := func(e Event) []int32 { return e.Joined }, func(e Event) []int32 { return e.Left }
	if !idle {
		open, close = close, open
	}
	for k, e := range t.Events {
		for _, i := range close(e) {
			if !since[i].IsZero() {
				out = append(out, e.Time.Sub(since[i]))
				since[i] = time.Time{}
			}
		}
		if k == 0 {
			continue
		}
		for _, i := range open(e) {
			since[i] = e.Time
		}
	}
	return out
}
