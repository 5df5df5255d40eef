package sim

import (
	"bytes"
	"compress/gzip"
	"encoding/csv"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// sharedData is where the project's third-party data lives, relative to this package.
const sharedData = "../../shared/data/"

// dataFile returns the path of a shared data file, skipping the test if it is absent.
func dataFile(tb testing.TB, rel string) string {
	tb.Helper()
	p := filepath.Join(sharedData, rel)
	if _, err := os.Stat(p); err != nil {
		tb.Skipf("shared data absent: %v", err)
	}
	return p
}

// openData opens a shared data file, skipping the test if it is absent.
func openData(tb testing.TB, rel string) *os.File {
	tb.Helper()
	f, err := os.Open(dataFile(tb, rel))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { f.Close() })
	return f
}

var (
	summitOnce  sync.Once
	summitTrace *Trace
	summitErr   error
)

// mustSummit loads the Summit trace once per test binary.
func mustSummit(tb testing.TB) *Trace {
	tb.Helper()
	ev := dataFile(tb, "summit/summit-trace-events.csv.gz")
	nodes := dataFile(tb, "summit/summit-trace-nodes.csv")
	summitOnce.Do(func() { summitTrace, summitErr = OpenTrace(ev, nodes) })
	if summitErr != nil {
		tb.Fatal(summitErr)
	}
	return summitTrace
}

// mustReadTrace reads a trace from strings.
func mustReadTrace(tb testing.TB, events, nodes string) *Trace {
	tb.Helper()
	var nr io.Reader
	if nodes != "" {
		nr = strings.NewReader(nodes)
	}
	t, err := readTrace(strings.NewReader(events), nr)
	if err != nil {
		tb.Fatal(err)
	}
	return t
}

const tinyNodes = "node_idx,node_name\n0,a\n1,b\n2,c\n3,d\n"

const tinyEvents = `event_idx,time,n_idle,joined,left
0,2021-02-10 00:00:00,0,,
1,2021-02-10 00:01:00,2,0;2,
2,2021-02-10 00:02:00,3,1;3,2
3,2021-02-10 00:04:00,1,,0;1
4,2021-02-10 00:05:00,1,2,3
`

func TestReadTraceTiny(t *testing.T) {
	tr := mustReadTrace(t, tinyEvents, tinyNodes)
	if got, want := tr.Nodes, []string{"a", "b", "c", "d"}; !slices.Equal(got, want) {
		t.Fatalf("nodes = %v, want %v", got, want)
	}
	if got, want := len(tr.Events), 5; got != want {
		t.Fatalf("events = %d, want %d", got, want)
	}
	e := tr.Events[2]
	if !slices.Equal(e.Joined, []int32{1, 3}) || !slices.Equal(e.Left, []int32{2}) {
		t.Fatalf("event 2 = %+v", e)
	}
	if got, want := e.Time, time.Date(2021, 2, 10, 0, 2, 0, 0, time.UTC); !got.Equal(want) || got.Location() != time.UTC {
		t.Fatalf("time = %v, want %v UTC", got, want)
	}
	if got, want := tr.Counts(), []int{0, 2, 3, 1, 1}; !slices.Equal(got, want) {
		t.Fatalf("counts = %v, want %v", got, want)
	}
	for _, tc := range []struct {
		name string
		at   time.Time
		want int
		set  []int32
	}{
		{"before", time.Date(2021, 2, 9, 0, 0, 0, 0, time.UTC), 0, nil},
		{"on event", time.Date(2021, 2, 10, 0, 2, 0, 0, time.UTC), 3, []int32{0, 1, 3}},
		{"between", time.Date(2021, 2, 10, 0, 3, 0, 0, time.UTC), 3, []int32{0, 1, 3}},
		{"after", time.Date(2021, 3, 1, 0, 0, 0, 0, time.UTC), 1, []int32{2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tr.IdleAt(tc.at); got != tc.want {
				t.Fatalf("IdleAt = %d, want %d", got, tc.want)
			}
			if got := tr.IdleSetAt(tc.at); !slices.Equal(got, tc.set) {
				t.Fatalf("IdleSetAt = %v, want %v", got, tc.set)
			}
		})
	}
	// Idle time: 2 nodes × 60 s + 3 × 120 s + 1 × 60 s = 540 node-seconds over 300 s.
	st := tr.Stats()
	if got, want := st.IdleNodeHours, 540.0/3600; math.Abs(got-want) > 1e-12 {
		t.Fatalf("idle node-hours = %v, want %v", got, want)
	}
	if got, want := st.MeanIdle, 540.0/300; math.Abs(got-want) > 1e-12 {
		t.Fatalf("mean idle = %v, want %v", got, want)
	}
	// Time at counts: 0 for 60 s, 2 for 60 s, 3 for 120 s, 1 for 60 s → median 2.
	if st.MedianIdle != 2 || st.MaxIdle != 3 || st.ZeroIdle != 0.2 || st.Transitions != 9 {
		t.Fatalf("stats = %+v", st)
	}
	// Node 0 idle 00:01→00:04, node 2 idle 00:01→00:02, node 1 00:02→00:04, node 3 00:02→00:05.
	frags := tr.IdleFragments()
	slices.Sort(frags)
	if want := []time.Duration{time.Minute, 2 * time.Minute, 3 * time.Minute, 3 * time.Minute}; !slices.Equal(frags, want) {
		t.Fatalf("fragments = %v, want %v", frags, want)
	}
	// Node 2 busy 00:02→00:05.
	if got := tr.BusyGaps(); !slices.Equal(got, []time.Duration{3 * time.Minute}) {
		t.Fatalf("busy gaps = %v", got)
	}
}

func TestReadTraceErrors(t *testing.T) {
	const head = "event_idx,time,n_idle,joined,left\n"
	tests := []struct {
		name   string
		events string
		event  int // -1: not a *TraceError
		want   string
	}{
		{"header", "idx,time\n", -1, "header"},
		{"event_idx", head + "0,2021-02-10 00:00:00,0,,\n2,2021-02-10 00:00:00,0,,\n", 1, "event_idx"},
		{"fields", head + "0,2021-02-10 00:00:00,0,\n", 0, "fields"},
		{"extra field", head + "0,2021-02-10 00:00:00,0,,,\n", 0, "more than 5"},
		{"time", head + "0,yesterday,0,,\n", 0, "time"},
		{"time decreases", head + "0,2021-02-10 00:00:10,0,,\n1,2021-02-10 00:00:09,0,,\n", 1, "before previous"},
		{"out of range", head + "0,2021-02-10 00:00:00,1,4,\n", 0, "out of range"},
		{"not a number", head + "0,2021-02-10 00:00:00,1,x,\n", 0, "unexpected"},
		{"empty index", head + "0,2021-02-10 00:00:00,1,1;;2,\n", 0, "empty node index"},
		{"join while idle", head + "0,2021-02-10 00:00:00,1,1,\n1,2021-02-10 00:01:00,2,1,\n", 1, "joins while idle"},
		{"leave while busy", head + "0,2021-02-10 00:00:00,1,1,\n1,2021-02-10 00:01:00,0,,2\n", 1, "leaves while busy"},
		{"listed twice", head + "0,2021-02-10 00:00:00,0,1,1\n", 0, "listed twice"},
		{"n_idle", head + "0,2021-02-10 00:00:00,1,1,\n1,2021-02-10 00:01:00,3,2,\n", 1, "n_idle 3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readTrace(strings.NewReader(tc.events), strings.NewReader(tinyNodes))
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not mention %q", err, tc.want)
			}
			var te *TraceError
			if got := errors.As(err, &te); got != (tc.event >= 0) {
				t.Fatalf("errors.As TraceError = %v for %v", got, err)
			}
			if te != nil && te.Event != tc.event {
				t.Fatalf("error at event %d, want %d: %v", te.Event, tc.event, err)
			}
		})
	}
}

func TestReadNodesErrors(t *testing.T) {
	tests := []struct{ name, nodes, want string }{
		{"header", "idx,name\n0,a\n", "header"},
		{"bad index", "node_idx,node_name\nx,a\n", "bad node_idx"},
		{"repeated", "node_idx,node_name\n0,a\n0,b\n", "repeated"},
		{"gap", "node_idx,node_name\n0,a\n2,c\n", "missing"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readTrace(strings.NewReader(tinyEvents), strings.NewReader(tc.nodes))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

func TestReadTraceNoNodesAndGzip(t *testing.T) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(tinyEvents))
	zw.Close()
	tr, err := readTrace(&gz, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tr.Nodes, []string{"n0", "n1", "n2", "n3"}; !slices.Equal(got, want) {
		t.Fatalf("nodes = %v, want %v", got, want)
	}
	if got, want := len(tr.Events), 5; got != want {
		t.Fatalf("events = %d, want %d", got, want)
	}
}

func TestWindow(t *testing.T) {
	tr := mustReadTrace(t, tinyEvents, tinyNodes)
	tests := []struct {
		name   string
		from   int
		first  []int32
		events int
	}{
		{"start", 0, nil, 5},
		{"from 2", 2, []int32{0, 1, 3}, 3},
		{"last", 4, []int32{2}, 1},
		{"clamped", 99, []int32{2}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := tr.Window(tc.from)
			if got := w.Events[0].Joined; !slices.Equal(got, tc.first) || len(w.Events[0].Left) != 0 {
				t.Fatalf("first event = %+v, want joins %v", w.Events[0], tc.first)
			}
			if got := len(w.Events); got != tc.events {
				t.Fatalf("events = %d, want %d", got, tc.events)
			}
			if err := w.Validate(); err != nil {
				t.Fatal(err)
			}
			// The state at the end is the same as the full trace's.
			end := tr.Events[len(tr.Events)-1].Time
			if got, want := w.IdleSetAt(end), tr.IdleSetAt(end); !slices.Equal(got, want) {
				t.Fatalf("final idle set = %v, want %v", got, want)
			}
		})
	}
	// Dropping no-change events: a node subset leaves event 2 with only node 2 changing.
	sub := tr.SubsetNodes(0, 2) // nodes a, b
	if got, want := len(sub.Events), 4; got != want {
		t.Fatalf("subset events = %d, want %d: %+v", got, want, sub.Events)
	}
	if err := sub.Validate(); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2021, 2, 10, 0, 3, 0, 0, time.UTC)
	wa := tr.WindowAt(at)
	if !wa.Events[0].Time.Equal(at) || !slices.Equal(wa.Events[0].Joined, []int32{0, 1, 3}) || len(wa.Events) != 3 {
		t.Fatalf("WindowAt = %+v", wa.Events)
	}
}

func TestWriteTraceRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		tr   *Trace
	}{
		{"tiny", mustReadTrace(t, tinyEvents, tinyNodes)},
		{"generated", GenerateTrace(TraceModel{Nodes: 64, Duration: 12 * time.Hour, Start: time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)}.withDefaults(), 7)},
		{"fractional seconds", &Trace{Nodes: []string{"x,y", "z"}, Events: []Event{
			{Time: time.Date(2024, 1, 1, 0, 0, 0, 500_000_000, time.UTC), Joined: []int32{1}},
			{Time: time.Date(2024, 1, 1, 0, 0, 1, 0, time.UTC), Joined: []int32{0}, Left: []int32{1}},
		}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var ev, nodes bytes.Buffer
			if err := writeTrace(&ev, tc.tr); err != nil {
				t.Fatal(err)
			}
			if err := writeNodes(&nodes, tc.tr); err != nil {
				t.Fatal(err)
			}
			back, err := readTrace(&ev, &nodes)
			if err != nil {
				t.Fatal(err)
			}
			assertSameTrace(t, back, tc.tr)
		})
	}
}

func TestWriteTraceInvalid(t *testing.T) {
	tr := &Trace{Nodes: []string{"a"}, Events: []Event{{Time: time.Unix(0, 0), Left: []int32{0}}}}
	var te *TraceError
	if err := writeTrace(io.Discard, tr); !errors.As(err, &te) || te.Event != 0 {
		t.Fatalf("error = %v, want a TraceError at event 0", err)
	}
}

// assertSameTrace compares nodes and events (nil and empty index lists are equal).
func assertSameTrace(tb testing.TB, got, want *Trace) {
	tb.Helper()
	if !slices.Equal(got.Nodes, want.Nodes) {
		tb.Fatalf("nodes differ: %d vs %d", len(got.Nodes), len(want.Nodes))
	}
	if len(got.Events) != len(want.Events) {
		tb.Fatalf("events = %d, want %d", len(got.Events), len(want.Events))
	}
	for i := range got.Events {
		g, w := got.Events[i], want.Events[i]
		if !g.Time.Equal(w.Time) || !slices.Equal(g.Joined, w.Joined) || !slices.Equal(g.Left, w.Left) {
			tb.Fatalf("event %d = %+v, want %+v", i, g, w)
		}
	}
}

func TestOpenTraceSniffsContent(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, gz bool) string {
		p := filepath.Join(dir, name)
		var b bytes.Buffer
		if gz {
			zw := gzip.NewWriter(&b)
			zw.Write([]byte(content))
			zw.Close()
		} else {
			b.WriteString(content)
		}
		if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const swf = "; UnixStartTime: 1000\n; MaxNodes: 4\n1 0 0 10 2 -1 -1 2 10 -1 0 -1 -1 -1 -1 -1 -1 0\n"
	const swfNoHeader = "\n1 0 5 10 3 -1 -1 3 10 -1 0 -1 -1 -1 -1 -1 -1 0\n"
	nodes := write("nodes.txt", tinyNodes, false)
	tests := []struct {
		name, file, nodes string
		content           string
		gz                bool
		wantNodes         int
		wantEvents        int
		wantErr           bool
	}{
		{"csv named swf", "trace.swf", nodes, tinyEvents, false, 4, 5, false},
		{"csv gzip named txt", "trace.txt", "", tinyEvents, true, 4, 5, false},
		{"swf named csv", "log.csv", "", swf, false, 4, 2, false},
		{"swf gzip, max allocated", "log.gz", "", swfNoHeader, true, 3, 3, false},
		{"swf with nodes file", "log", nodes, swf, false, 4, 2, false},
		{"neither", "x.csv", "", "a,b,c\n1,2,3\n", false, 0, 0, true},
		{"empty", "empty", "", "", false, 0, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := write(tc.file, tc.content, tc.gz)
			tr, err := OpenTrace(p, tc.nodes)
			if tc.wantErr {
				if !errors.Is(err, ErrTraceFormat) {
					t.Fatalf("error = %v, want ErrTraceFormat", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(tr.Nodes) != tc.wantNodes || len(tr.Events) != tc.wantEvents {
				t.Fatalf("%d nodes, %d events, want %d, %d (%s)", len(tr.Nodes), len(tr.Events), tc.wantNodes, tc.wantEvents, tr.Source)
			}
			if err := tr.Validate(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestSummitTrace(t *testing.T) {
	tr := mustSummit(t)
	if got, want := len(tr.Nodes), 4734; got != want {
		t.Fatalf("nodes = %d, want %d", got, want)
	}
	if got, want := tr.Nodes[1], "a02n02"; got != want {
		t.Fatalf("node 1 = %q, want %q", got, want)
	}
	t.Logf("source: %s", tr.Source)
	// Numbers from paper.md §4.1 and data/README.md.
	tests := []struct {
		name          string
		tr            *Trace
		events        int
		transitions   int // -1: not checked
		mean          float64
		median, max   int // -1: not checked
		nodeHours     float64
		zeroIdleShare float64
		start         time.Time
	}{
		{"full", tr, 23883, 846856, 391.4, 81, 4654, 140182, 0.0324, time.Date(2021, 2, 10, 0, 8, 52, 0, time.UTC)},
		{"replay window from row 1000", tr.Window(1000), 22883, -1, 407.3, -1, 4654, 137639, 0.0307, time.Date(2021, 2, 10, 20, 21, 15, 0, time.UTC)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := tc.tr.Stats()
			t.Logf("%v; zero-idle %.2f%%, mean gap %v", st, 100*st.ZeroIdle, st.MeanGap)
			if st.Events != tc.events {
				t.Errorf("events = %d, want %d", st.Events, tc.events)
			}
			if tc.transitions >= 0 && st.Transitions != tc.transitions {
				t.Errorf("transitions = %d, want %d", st.Transitions, tc.transitions)
			}
			if math.Abs(st.MeanIdle-tc.mean) > 0.1 {
				t.Errorf("mean idle = %.2f, want %.1f", st.MeanIdle, tc.mean)
			}
			if tc.median >= 0 && st.MedianIdle != tc.median {
				t.Errorf("median idle = %d, want %d", st.MedianIdle, tc.median)
			}
			if st.MaxIdle != tc.max {
				t.Errorf("max idle = %d, want %d", st.MaxIdle, tc.max)
			}
			if math.Abs(st.IdleNodeHours-tc.nodeHours) > 1 {
				t.Errorf("idle node-hours = %.1f, want %.0f", st.IdleNodeHours, tc.nodeHours)
			}
			if math.Abs(st.ZeroIdle-tc.zeroIdleShare) > 0.0005 {
				t.Errorf("zero-idle share = %.4f, want %.4f", st.ZeroIdle, tc.zeroIdleShare)
			}
			if !st.Start.Equal(tc.start) {
				t.Errorf("start = %v, want %v", st.Start, tc.start)
			}
			if err := tc.tr.Validate(); err != nil {
				t.Error(err)
			}
		})
	}
	// paper.md §3.1: the replay starts from the 228 nodes idle at row 1000.
	if got, want := len(tr.Window(1000).Events[0].Joined), 228; got != want {
		t.Errorf("idle at row 1000 = %d, want %d", got, want)
	}
	// Time-weighted idle-count percentiles of the full file (paper.md §4.1).
	for _, q := range []struct {
		q    float64
		want int
	}{{0.05, 1}, {0.25, 13}, {0.5, 81}, {0.75, 502}, {0.9, 1161}, {0.95, 1732}, {0.99, 3469}} {
		if got := tr.IdleQuantile(q.q); got != q.want {
			t.Errorf("idle p%.0f = %d, want %d", 100*q.q, got, q.want)
		}
	}
}

func TestSummitFragments(t *testing.T) {
	tr := mustSummit(t)
	frags := tr.IdleFragments()
	s := durationSummary(frags)
	t.Logf("idle fragments: %v", s)
	// paper.md §4.1: 423,354 fragments, mean 1,191.9 s, median 475 s, p95 4,723 s, min 70 s.
	if got, want := len(frags), 423354; got != want {
		t.Errorf("fragments = %d, want %d", got, want)
	}
	if math.Abs(s.mean-1191.9) > 0.1 || s.median != 475 || s.p95 != 4723 || s.min != 70 {
		t.Errorf("fragments %v, want mean 1191.9 median 475 p95 4723 min 70", s)
	}
}

// TestSummitMatchesCounts cross-checks the events file against the counts file.
func TestSummitMatchesCounts(t *testing.T) {
	tr := mustSummit(t)
	cr := csv.NewReader(openData(t, "summit/summit-trace-counts.csv"))
	recs, err := cr.ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	recs = recs[1:]
	if len(recs) != len(tr.Events) {
		t.Fatalf("counts rows = %d, events = %d", len(recs), len(tr.Events))
	}
	counts := tr.Counts()
	for i, r := range recs {
		e := tr.Events[i]
		if r[1] != e.Time.Format(traceTimeLayout) || r[2] != strconv.Itoa(counts[i]) ||
			r[3] != strconv.Itoa(len(e.Joined)) || r[4] != strconv.Itoa(len(e.Left)) {
			t.Fatalf("row %d: counts %v, events %s %d %d %d", i, r, e.Time, counts[i], len(e.Joined), len(e.Left))
		}
	}
}

func TestSummitRoundTrip(t *testing.T) {
	tr := mustSummit(t).Window(1000)
	var ev, nodes bytes.Buffer
	if err := writeTrace(&ev, tr); err != nil {
		t.Fatal(err)
	}
	if err := writeNodes(&nodes, tr); err != nil {
		t.Fatal(err)
	}
	back, err := readTrace(&ev, &nodes)
	if err != nil {
		t.Fatal(err)
	}
	assertSameTrace(t, back, tr)
}

func BenchmarkReadSummit(b *testing.B) {
	ev, err := os.ReadFile(dataFile(b, "summit/summit-trace-events.csv.gz"))
	if err != nil {
		b.Fatal(err)
	}
	nodes, err := os.ReadFile(dataFile(b, "summit/summit-trace-nodes.csv"))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(ev)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := readTrace(bytes.NewReader(ev), bytes.NewReader(nodes)); err != nil {
			b.Fatal(err)
		}
	}
}

// durSummary is a few order statistics of durations, in seconds.
type durSummary struct {
	n                          int
	min, median, p95, max, p10 float64
	mean                       float64
}

func durationSummary(d []time.Duration) durSummary {
	s := make([]float64, len(d))
	sum := 0.0
	for i, x := range d {
		s[i] = x.Seconds()
		sum += s[i]
	}
	slices.Sort(s)
	if len(s) == 0 {
		return durSummary{}
	}
	q := func(p float64) float64 { return s[int(p*float64(len(s)-1)+0.5)] }
	return durSummary{n: len(s), min: s[0], p10: q(0.10), median: q(0.5), p95: q(0.95), max: s[len(s)-1], mean: sum / float64(len(s))}
}

func (s durSummary) String() string {
	return "n " + strconv.Itoa(s.n) + ", min " + strconv.FormatFloat(s.min, 'f', 0, 64) +
		", p10 " + strconv.FormatFloat(s.p10, 'f', 0, 64) +
		", median " + strconv.FormatFloat(s.median, 'f', 0, 64) +
		", mean " + strconv.FormatFloat(s.mean, 'f', 1, 64) +
		", p95 " + strconv.FormatFloat(s.p95, 'f', 0, 64) +
		", max " + strconv.FormatFloat(s.max, 'f', 0, 64)
}

func TestReflectEqualSafe(t *testing.T) {
	// Window shares no slices with its source: mutating one leaves the other intact.
	tr := mustReadTrace(t, tinyEvents, tinyNodes)
	w := tr.Window(1)
	w.Events[1].Joined[0] = 99
	w.Nodes[0] = "zz"
	if !reflect.DeepEqual(tr.Events[2].Joined, []int32{1, 3}) || tr.Nodes[0] != "a" {
		t.Fatal("Window shares storage with its source")
	}
}

func FuzzReadTrace(f *testing.F) {
	f.Add([]byte(tinyEvents))
	f.Add([]byte("event_idx,time,n_idle,joined,left\n0,2021-02-10 00:00:00,2,0;3,\n1,2021-02-10T00:00:01Z,1,,3\n"))
	f.Add([]byte("event_idx,time,n_idle,joined,left\r\n0,2021-02-10 00:00:00.5,1,99999999999,\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		tr, err := readTrace(bytes.NewReader(data), strings.NewReader(tinyNodes))
		if err != nil {
			return
		}
		if err := tr.Validate(); err != nil {
			t.Fatalf("read a trace that does not validate: %v", err)
		}
		var buf bytes.Buffer
		if err := writeTrace(&buf, tr); err != nil {
			t.Fatal(err)
		}
		back, err := readTrace(&buf, strings.NewReader(tinyNodes))
		if err != nil {
			t.Fatal(err)
		}
		assertSameTrace(t, back, tr)
		tr.Stats()
		tr.Window(len(tr.Events) / 2).Stats()
	})
}
