package sim

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// easyStarts runs the EASY re-simulation and returns each job's start (by file order) as
// read back from the scheduler state.
func easyStarts(tb testing.TB, l *SWFLog, nodes int) ([]int64, *Trace, EASYStats) {
	tb.Helper()
	tr, st, err := l.EASYTrace(nodes)
	if err != nil {
		tb.Fatal(err)
	}
	if err := tr.Validate(); err != nil {
		tb.Fatal(err)
	}
	s, _, err := l.easySchedule(nodes, 0, 0)
	if err != nil {
		tb.Fatal(err)
	}
	starts := make([]int64, len(l.Jobs))
	for i := range starts {
		starts[i] = -1
	}
	for _, j := range s.jobs {
		starts[j.order] = j.start
	}
	return starts, tr, st
}

func TestEASYByHand(t *testing.T) {
	tests := []struct {
		name       string
		nodes      int
		jobs       []string
		starts     []int64
		backfilled int
		idle       map[int64]int // idle count at a time
	}{
		{
			// J2 (8 nodes) waits for J1; its shadow time is 100 with 2 extra nodes.
			// J3 fits now but would end at 152 > 100 on 4 > 2 nodes: not backfilled.
			// J4 ends by 93 ≤ 100: backfilled at 3. At 93, J5 fits the 2 extra nodes.
			name:  "backfill only when the head is not delayed",
			nodes: 10,
			jobs: []string{
				swfLine(1, 0, 0, 100, 6, 6, 100),
				swfLine(2, 1, 0, 50, 8, 8, 50),
				swfLine(3, 2, 0, 150, 4, 4, 150),
				swfLine(4, 3, 0, 90, 4, 4, 90),
				swfLine(5, 4, 0, 500, 2, 2, 500),
			},
			starts:     []int64{0, 100, 150, 3, 93},
			backfilled: 2,
			idle:       map[int64]int{0: 4, 2: 4, 3: 0, 93: 2, 100: 0, 150: 4, 300: 8, 593: 10},
		},
		{
			// A asked for 50 s but runs 100. At 60 it has outrun its request: the head B's
			// reservation is recomputed with A expected to end now (shadow 60, 2 extra
			// nodes). D (4 nodes, 10 s) would fit before A really ends, but it would take
			// nodes B is waiting for: not backfilled. E fits in the 2 extra nodes.
			name:  "overrun job: reservation recomputed at now",
			nodes: 10,
			jobs: []string{
				swfLine(1, 0, 0, 100, 6, 6, 50),
				swfLine(2, 1, 0, 50, 8, 8, 50),
				swfLine(3, 60, 0, 10, 4, 4, 10),
				swfLine(4, 61, 0, 1000, 2, 2, 1000),
			},
			starts:     []int64{0, 100, 150, 61},
			backfilled: 1,
			idle:       map[int64]int{1: 4, 60: 4, 61: 2, 100: 0, 150: 4, 160: 8},
		},
		{
			// Equal submit times keep file order; a job ending frees nodes for a start at
			// the same instant; the wall-time estimate is the request, not the run.
			name:  "fcfs at one instant",
			nodes: 4,
			jobs: []string{
				swfLine(1, 0, 0, 10, 4, 4, 10),
				swfLine(2, 0, 0, 10, 2, 2, 10),
				swfLine(3, 0, 0, 5, 2, 2, 20),
				swfLine(4, 0, 0, 5, 3, 3, 5),
			},
			starts:     []int64{0, 10, 10, 20},
			backfilled: 0,
			idle:       map[int64]int{0: 0, 10: 0, 15: 2, 20: 1, 25: 4},
		},
		{
			// Backfill by time: the head needs all 4 nodes at 100; a 1-node job of 50 s
			// backfills, one of 150 s does not.
			name:  "backfill by shadow time",
			nodes: 4,
			jobs: []string{
				swfLine(1, 0, 0, 100, 2, 2, 100),
				swfLine(2, 1, 0, 10, 4, 4, 10),
				swfLine(3, 2, 0, 150, 1, 1, 150),
				swfLine(4, 3, 0, 50, 1, 1, 50),
			},
			starts:     []int64{0, 100, 110, 3},
			backfilled: 1,
			idle:       map[int64]int{2: 2, 3: 1, 53: 2, 100: 0, 110: 3, 260: 4},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := mustReadSWF(t, tc.jobs...)
			starts, tr, st := easyStarts(t, l, tc.nodes)
			if !slices.Equal(starts, tc.starts) {
				t.Fatalf("starts = %v, want %v", starts, tc.starts)
			}
			if st.Backfilled != tc.backfilled {
				t.Fatalf("backfilled = %d, want %d", st.Backfilled, tc.backfilled)
			}
			for s, want := range tc.idle {
				if got := tr.IdleAt(l.Time(s)); got != want {
					t.Errorf("idle at %d s = %d, want %d", s, got, want)
				}
			}
		})
	}
}

func TestEASYStats(t *testing.T) {
	l := mustReadSWF(t,
		swfLine(1, 0, 0, 100, 2, 2, -1),  // no estimate: uses its run time
		swfLine(2, 0, 0, 100, 9, 9, 100), // too large for 4 nodes
		swfLine(3, 0, 0, 50, 2, 2, 40),   // overruns
		swfLine(4, 10, 0, 0, 4, 4, 10),   // zero length, waits for 4 nodes until 100
	)
	starts, _, st := easyStarts(t, l, 4)
	if want := []int64{0, -1, 0, 100}; !slices.Equal(starts, want) {
		t.Fatalf("starts = %v, want %v", starts, want)
	}
	if st.Jobs != 3 || st.TooLarge != 1 || st.NoEstimate != 1 || st.Overran != 1 || st.ZeroLength != 1 {
		t.Fatalf("stats = %+v", st)
	}
	if st.MeanWait != 30*time.Second || st.MaxWait != 90*time.Second {
		t.Fatalf("wait mean %v max %v", st.MeanWait, st.MaxWait)
	}
	// Busy: 2×100 + 2×50 = 300 node-seconds over 4 nodes × 100 s.
	if st.Utilisation != 0.75 {
		t.Fatalf("utilisation = %v, want 0.75", st.Utilisation)
	}
	if _, _, err := mustReadSWF(t, swfLine(1, 0, 0, 1, 9, 9, 1)).EASYTrace(4); err == nil || !strings.Contains(err.Error(), "no job fits") {
		t.Fatalf("error = %v", err)
	}
}

// TestEASYRandom checks invariants on random logs: every job starts at or after its
// submit, the machine is never over-committed (EASYTrace fails if it is, and the trace
// validates), and only backfilled jobs overtake an earlier-submitted job.
func TestEASYRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		nodes := 1 + r.IntN(16)
		var lines []string
		submit := int64(0)
		for id := range 1 + r.IntN(40) {
			submit += int64(r.IntN(30))
			run := int64(r.IntN(100))
			req := run + int64(r.IntN(50)) - 20
			size := int64(1 + r.IntN(nodes))
			lines = append(lines, swfLine(int64(id+1), submit, 0, run, size, size, req))
		}
		l := mustReadSWF(t, lines...)
		starts, _, st := easyStarts(t, l, nodes)
		outOfOrder := 0
		for i, j := range l.Jobs {
			if starts[i] < j.Submit {
				t.Fatalf("trial %d: job %d starts %d before submit %d", trial, i, starts[i], j.Submit)
			}
			for k := range i {
				if starts[i] < starts[k] {
					outOfOrder++
					break
				}
			}
		}
		if outOfOrder > st.Backfilled {
			t.Fatalf("trial %d: %d jobs overtook an earlier one, only %d backfilled", trial, outOfOrder, st.Backfilled)
		}
	}
}

func TestThetaEASY(t *testing.T) {
	l := mustTheta(t)
	start := time.Now()
	tr, st, err := l.EASYTrace(l.MachineNodes())
	elapsed := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	ts := tr.Stats()
	t.Logf("easy: %d jobs, %d backfilled, %d overran, utilisation %.3f, mean wait %v, max wait %v, mean bounded slowdown %.1f (%v)",
		st.Jobs, st.Backfilled, st.Overran, st.Utilisation, st.MeanWait.Round(time.Second), st.MaxWait.Round(time.Second),
		st.MeanBoundedSlowdown, elapsed.Round(time.Millisecond))
	t.Logf("trace: %v", ts)
	if err := tr.Validate(); err != nil {
		t.Fatal(err)
	}
	if st.Jobs != len(l.Jobs) || st.TooLarge != 0 {
		t.Fatalf("scheduled %d of %d jobs (%d too large)", st.Jobs, len(l.Jobs), st.TooLarge)
	}
	if st.Backfilled == 0 {
		t.Fatal("no job backfilled in a year")
	}
	if u := st.Utilisation + ts.IdleFraction(); u < 0.99 || u > 1.01 {
		t.Fatalf("utilisation %.4f + idle %.4f ≠ 1", st.Utilisation, ts.IdleFraction())
	}
}

func BenchmarkThetaEASY(b *testing.B) {
	l := mustTheta(b)
	for b.Loop() {
		if _, _, err := l.EASYTrace(l.MachineNodes()); err != nil {
			b.Fatal(err)
		}
	}
}
