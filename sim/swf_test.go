package sim

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// swfLine formats one SWF job line with the fields this package reads; the rest are -1
// (status 1).
func swfLine(id, submit, wait, run, alloc, reqNodes, reqTime int64) string {
	return fmt.Sprintf("%d %d %d %d %d -1 -1 %d %d -1 1 -1 -1 -1 -1 -1 -1 -1", id, submit, wait, run, alloc, reqNodes, reqTime)
}

// mustReadSWF parses an SWF log from lines.
func mustReadSWF(tb testing.TB, lines ...string) *SWFLog {
	tb.Helper()
	l, err := readSWF(strings.NewReader(strings.Join(lines, "\n") + "\n"))
	if err != nil {
		tb.Fatal(err)
	}
	return l
}

var (
	thetaOnce sync.Once
	thetaLog  *SWFLog
	thetaErr  error
)

// mustTheta reads the Theta 2022 log once per test binary.
func mustTheta(tb testing.TB) *SWFLog {
	tb.Helper()
	f := openData(tb, "theta/theta_2022.swf")
	thetaOnce.Do(func() { thetaLog, thetaErr = readSWF(f) })
	if thetaErr != nil {
		tb.Fatal(thetaErr)
	}
	return thetaLog
}

func TestReadSWF(t *testing.T) {
	l := mustReadSWF(t,
		"; Version: 2.2",
		"; Computer: Test machine",
		"; UnixStartTime: 1600000000",
		"; MaxNodes: 16",
		"; MaxProcs: 64",
		"; free text without a field",
		"",
		swfLine(1, 0, 10, 100, 4, 4, 200),
		swfLine(2, 5, -1, 50, -1, 3, -1), // unknown wait, allocation and request time
		swfLine(3, 6, 0, 7, 2, -1, 10),
		"4 1 2 3",                        // field count
		swfLine(5, 0, 0, -1, 4, 4, 10),   // unknown run
		swfLine(6, 0, 0, -5, 4, 4, 10),   // negative run
		swfLine(7, 0, 0, 10, 0, 0, 10),   // zero nodes
		swfLine(8, -1, 0, 10, 1, 1, 10),  // unknown submit
		swfLine(9, 0, -2, 10, 1, 1, 10),  // negative wait
		swfLine(10, 0, 0, 10, -1, -1, 5), // unknown nodes
		swfLine(11, 0, 0, 10, 1, -7, 5),  // negative request
		strings.Replace(swfLine(12, 0, 0, 10, 1, 1, 10), "10", "ten", 1),
		swfLine(13, 0, 0, 1e13, 1, 1, 10), // out of range
		"14 1.5e1 0 2.4 1 -1 -1 1 10 -1 1 -1 -1 -1 -1 -1 -1 -1",
	)
	if got, want := l.UnixStartTime, int64(1600000000); got != want {
		t.Fatalf("UnixStartTime = %d, want %d", got, want)
	}
	if l.MaxNodes != 16 || l.MaxProcs != 64 || l.MachineNodes() != 16 {
		t.Fatalf("MaxNodes %d MaxProcs %d MachineNodes %d", l.MaxNodes, l.MaxProcs, l.MachineNodes())
	}
	if got, want := l.Header["Computer"], "Test machine"; got != want {
		t.Fatalf("Computer = %q, want %q", got, want)
	}
	want := []SWFJob{
		{ID: 1, Line: 8, Submit: 0, Wait: 10, Run: 100, Nodes: 4, ReqNodes: 4, ReqTime: 200},
		{ID: 2, Line: 9, Submit: 5, Wait: -1, Run: 50, Nodes: 3, ReqNodes: 3, ReqTime: -1},
		{ID: 3, Line: 10, Submit: 6, Wait: 0, Run: 7, Nodes: 2, ReqNodes: -1, ReqTime: 10},
		{ID: 14, Line: 21, Submit: 15, Wait: 0, Run: 2, Nodes: 1, ReqNodes: 1, ReqTime: 10},
	}
	if !slices.Equal(l.Jobs, want) {
		t.Fatalf("jobs =\n%+v\nwant\n%+v", l.Jobs, want)
	}
	wantSkipped := map[string]int{SkipFieldCount: 1, SkipRun: 2, SkipZeroNodes: 1, SkipSubmit: 1,
		SkipWait: 1, SkipNodes: 1, SkipRequest: 1, SkipNotNumber: 1, SkipOutOfRange: 1}
	for reason, n := range wantSkipped {
		if l.Skipped[reason] != n {
			t.Errorf("skipped %q = %d, want %d", reason, l.Skipped[reason], n)
		}
	}
	if got, want := l.SkippedTotal(), 10; got != want {
		t.Errorf("skipped total = %d, want %d (%v)", got, want, l.Skipped)
	}
	if got, want := l.SkippedLines, []int{11, 12, 13, 14, 15, 16, 17, 18, 19, 20}; !slices.Equal(got, want) {
		t.Errorf("skipped lines = %v, want %v", got, want)
	}
	if got, want := l.Time(10), time.Unix(1600000010, 0).UTC(); !got.Equal(want) {
		t.Errorf("Time(10) = %v, want %v", got, want)
	}
}

func TestReadSWFMachineNodes(t *testing.T) {
	tests := []struct {
		name   string
		header string
		want   int
	}{
		{"MaxNodes", "; MaxNodes: 8", 8},
		{"MaxProcs", "; MaxProcs: 9", 9},
		{"largest job", "; Note: none", 5},
		{"bad header ignored", "; MaxNodes: lots", 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := mustReadSWF(t, tc.header, swfLine(1, 0, 0, 10, 5, 5, 10), swfLine(2, 0, 0, 10, 2, 2, 10))
			if got := l.MachineNodes(); got != tc.want {
				t.Fatalf("MachineNodes = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestReadSWFLongLine(t *testing.T) {
	long := strings.Repeat("1 ", swfMaxLine)
	l := mustReadSWF(t, swfLine(1, 0, 0, 10, 1, 1, 10), long, swfLine(2, 0, 0, 10, 1, 1, 10))
	if len(l.Jobs) != 2 || l.Skipped[SkipLineTooLong] != 1 || l.SkippedLines[0] != 2 {
		t.Fatalf("jobs %d, skipped %v at %v", len(l.Jobs), l.Skipped, l.SkippedLines)
	}
}

func FuzzReadSWF(f *testing.F) {
	f.Add([]byte("; MaxNodes: 4\n" + swfLine(1, 0, 0, 10, 2, 2, 10) + "\n" + swfLine(2, 1, 3, 10, 3, 3, 5) + "\n"))
	f.Add([]byte("; UnixStartTime: -5\n1 2 3\n\n;;\n" + swfLine(1, 0, -1, 0, -1, 4, -1)))
	f.Add([]byte("1 0 0 1e11 1 -1 -1 1 1e11 -1 0 -1 -1 -1 -1 -1 -1 0\n" + swfLine(2, 1e11, 1e11, 1e11, 9, 9, 1)))
	f.Add([]byte("\x1f\x8b\x08garbage"))
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := readSWF(strings.NewReader(string(data)))
		if err != nil {
			return // only I/O (here: gzip) errors
		}
		n := 0
		for _, c := range l.Skipped {
			n += c
		}
		if len(l.Jobs)+n > l.Lines {
			t.Fatalf("%d jobs + %d skipped > %d lines", len(l.Jobs), n, l.Lines)
		}
		if len(l.Jobs) == 0 {
			return
		}
		nodes := min(max(l.MachineNodes(), 1), 64)
		if tr, err := l.RecordedTrace(nodes); err != nil {
			t.Fatal(err)
		} else if err := tr.Validate(); err != nil {
			t.Fatal(err)
		}
		if tr, _, err := l.EASYTrace(nodes); err == nil {
			if err := tr.Validate(); err != nil {
				t.Fatal(err)
			}
		}
	})
}

func TestRecordedTraceByHand(t *testing.T) {
	l := mustReadSWF(t,
		"; UnixStartTime: 1000",
		swfLine(1, 0, 0, 10, 2, 2, 10), // 0–10 on 2 nodes
		swfLine(2, 0, 5, 10, 1, 1, 10), // 5–15 on 1
		swfLine(3, 1, 9, 5, 2, 2, 5),   // 10–15 on 2: reuses job 1's nodes at the same instant
		swfLine(4, 0, 20, 5, 1, 1, 5),  // 20–25 on 1: takes the node freed most recently
		swfLine(5, 0, 30, 0, 1, 1, 5),  // zero length: left out
		swfLine(6, 0, -1, 5, 1, 1, 5),  // unknown start: left out
	)
	tr, st, err := l.Recorded(4)
	if err != nil {
		t.Fatal(err)
	}
	at := func(s int64) time.Time { return time.Unix(1000+s, 0).UTC() }
	// Free stack at 0: node 0 on top. Job 1 takes 0 and 1; job 2 takes 2 at 5; at 10 job 1
	// frees 0, 1 and job 3 takes them back (no event); at 15 nodes 0, 1, 2 are freed;
	// at 20 job 4 takes node 0 (freed at 15, lowest index), not node 3 (idle since 0).
	want := []Event{
		{Time: at(0), Joined: []int32{2, 3}},
		{Time: at(5), Left: []int32{2}},
		{Time: at(15), Joined: []int32{0, 1, 2}},
		{Time: at(20), Left: []int32{0}},
		{Time: at(25), Joined: []int32{0}},
	}
	assertSameTrace(t, tr, &Trace{Nodes: []string{"nid00000", "nid00001", "nid00002", "nid00003"}, Events: want})
	if st.Jobs != 4 || st.ZeroLength != 1 || st.UnknownStart != 1 || st.Truncated != 0 {
		t.Fatalf("stats = %+v", st)
	}
	// Busy node-seconds: 20 + 10 + 10 + 5 = 45 over 4 nodes × 25 s.
	if math.Abs(st.Utilisation-45.0/100) > 1e-12 || math.Abs(st.BusyNodeHours-45.0/3600) > 1e-12 {
		t.Fatalf("utilisation %v, busy %v", st.Utilisation, st.BusyNodeHours)
	}
}

func TestRecordedTraceOversubscribed(t *testing.T) {
	l := mustReadSWF(t,
		swfLine(1, 0, 0, 100, 3, 3, 100),
		swfLine(2, 0, 10, 50, 3, 3, 50), // only 1 node free: truncated to 1
		swfLine(3, 0, 20, 10, 9, 9, 10), // larger than the machine (with 0 free): gets 0
	)
	tr, st, err := l.Recorded(4)
	if err != nil {
		t.Fatal(err)
	}
	if st.Truncated != 2 {
		t.Fatalf("truncated = %d, want 2", st.Truncated)
	}
	// Missing: 2 nodes × 50 s + 9 × 10 s = 190 node-seconds.
	if math.Abs(st.LostNodeHours-190.0/3600) > 1e-12 {
		t.Fatalf("lost node-hours = %v", st.LostNodeHours)
	}
	if err := tr.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := tr.IdleAt(tr.Events[0].Time.Add(30 * time.Second)); got != 0 {
		t.Fatalf("idle at 30 s = %d, want 0", got)
	}
}

func TestRecordedTraceErrors(t *testing.T) {
	l := mustReadSWF(t, swfLine(1, 0, 0, 10, 1, 1, 10))
	for _, n := range []int{0, -1, maxTraceNodes + 1} {
		if _, err := l.RecordedTrace(n); err == nil {
			t.Errorf("RecordedTrace(%d): no error", n)
		}
	}
	if _, err := (&SWFLog{}).RecordedTrace(4); err == nil {
		t.Error("empty log: no error")
	}
}

func TestThetaSWF(t *testing.T) {
	l := mustTheta(t)
	if got, want := len(l.Jobs), 23911; got != want {
		t.Fatalf("jobs = %d, want %d", got, want)
	}
	if got := l.SkippedTotal(); got != 0 {
		t.Fatalf("skipped %v at lines %v", l.Skipped, l.SkippedLines)
	}
	if got, want := l.MachineNodes(), 4360; got != want {
		t.Fatalf("machine nodes = %d, want %d", got, want)
	}
	first := l.Jobs[0]
	if want := (SWFJob{ID: 1, Line: 4, Submit: 1641021254, Wait: 52645, Run: 10849, Nodes: 128, ReqNodes: 128, ReqTime: 10800}); first != want {
		t.Fatalf("first job = %+v, want %+v", first, want)
	}
	overran := 0
	for _, j := range l.Jobs {
		if j.Run > j.ReqTime {
			overran++
		}
	}
	// data/README.md: run time exceeds the request in 26 % of jobs.
	if share := float64(overran) / float64(len(l.Jobs)); math.Abs(share-0.26) > 0.01 {
		t.Fatalf("overrun share = %.3f, want 0.26", share)
	}
}

func TestThetaRecordedTrace(t *testing.T) {
	l := mustTheta(t)
	start := time.Now()
	tr, st, err := l.Recorded(l.MachineNodes())
	elapsed := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	ts := tr.Stats()
	t.Logf("recorded: %+v (%v)", st, elapsed)
	t.Logf("trace: %v", ts)
	if err := tr.Validate(); err != nil {
		t.Fatal(err)
	}
	if st.Jobs != len(l.Jobs) {
		t.Fatalf("placed %d jobs, want %d", st.Jobs, len(l.Jobs))
	}
	// data/README.md: replaying the recorded schedule gives a mean 24 % idle.
	if f := ts.IdleFraction(); math.Abs(f-0.24) > 0.01 {
		t.Fatalf("idle fraction = %.3f, want 0.24", f)
	}
	if math.Abs(st.Utilisation+ts.IdleFraction()-1) > 0.01 {
		t.Fatalf("utilisation %.4f + idle %.4f ≠ 1", st.Utilisation, ts.IdleFraction())
	}
	if got, want := ts.Start, time.Unix(1641021254, 0).UTC(); !got.Equal(want) {
		t.Fatalf("start = %v, want the first submit %v", got, want)
	}
}
