package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/alloc/milp"
)

// handT0 is the start of the hand-made traces.
var handT0 = time.Date(2021, 2, 10, 20, 21, 15, 0, time.UTC)

// handEvent is one event of a hand-made trace: seconds after handT0 and the node
// indices that join and leave.
type handEvent struct {
	at          int
	join, leave []int32
}

// handTrace builds a trace of n nodes named n0, n1, … from hand-written events.
func handTrace(tb testing.TB, n int, evs ...handEvent) *Trace {
	tb.Helper()
	tr := &Trace{Source: "hand"}
	for i := range n {
		tr.Nodes = append(tr.Nodes, fmt.Sprintf("n%d", i))
	}
	for _, e := range evs {
		tr.Events = append(tr.Events, Event{Time: handT0.Add(time.Duration(e.at) * time.Second), Joined: e.join, Left: e.leave})
	}
	if err := tr.Validate(); err != nil {
		tb.Fatal(err)
	}
	return tr
}

// linearJob is a Trainer processing perNode samples/s per node up to max nodes.
func linearJob(id string, submit, minN, maxN int, perNode, rup, rdown, samples float64) Job {
	j := Job{ID: id, Model: "linear", Submit: handT0.Add(time.Duration(submit) * time.Second),
		RUp: rup, RDown: rdown, Min: minN, Max: maxN, Samples: samples}
	for k := 0; k <= maxN; k++ {
		j.Nodes = append(j.Nodes, k)
		j.Throughput = append(j.Throughput, perNode*float64(k))
	}
	j.Metric = slices.Clone(j.Throughput)
	return j
}

func mustReplay(tb testing.TB, tr *Trace, jobs []Job, opt Options) *Result {
	tb.Helper()
	opt.Check = true
	res, err := Replay(context.Background(), tr, jobs, opt)
	if err != nil {
		tb.Fatal(err)
	}
	return res
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// wantSummary are the hand-computed figures a test checks.
type wantSummary struct {
	makespanS, meanJCTS                         float64
	samples, rescaleLoss, preemptLoss, startup  float64
	overshoot                                   float64
	usedNodeS, idleNodeS                        float64
	rescales, reclaims, events, decisions, done int
	between                                     int
}

func checkSummary(t *testing.T, s Summary, w wantSummary) {
	t.Helper()
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"makespan_h", s.MakespanH, w.makespanS / 3600},
		{"mean_jct_h", s.MeanJCTH, w.meanJCTS / 3600},
		{"samples", s.Samples, w.samples},
		{"rescale_loss", s.RescaleLoss, w.rescaleLoss},
		{"preempt_loss", s.PreemptLoss, w.preemptLoss},
		{"startup_cost", s.StartupCost, w.startup},
		// A completion between events is timed to the nanosecond: less than a
		// nanosecond's samples past the target.
		{"overshoot", math.Round(s.Overshoot*1e6) / 1e6, w.overshoot},
		{"between", float64(s.Between), float64(w.between)},
		{"used_node_h", s.UsedNodeHours, w.usedNodeS / 3600},
		{"idle_node_h", s.IdleNodeHours, w.idleNodeS / 3600},
		// The definitions, from the figures above.
		{"e_ovh", s.EOvh, w.samples / (w.samples + w.rescaleLoss + w.preemptLoss)},
		{"utilisation", s.Utilisation, w.usedNodeS / w.idleNodeS},
		{"rescales", float64(s.Rescales), float64(w.rescales)},
		{"reclaims", float64(s.Reclaims), float64(w.reclaims)},
		{"events", float64(s.Events), float64(w.events)},
		{"decisions", float64(s.Decisions), float64(w.decisions)},
		{"finished", float64(s.Finished), float64(w.done)},
	} {
		if !near(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

// TestReplayByHand replays small traces whose every figure is worked out by hand in
// the comments, under both semantics.
func TestReplayByHand(t *testing.T) {
	// Trace A: 5 nodes; one Trainer (1–4 nodes, 10 samples/s per node, R_up 5 s,
	// R_down 2 s, 1000 samples) submitted at t0; T_fwd 20.
	traceA := []handEvent{
		{at: 0, join: []int32{0, 1, 2}},
		{at: 10, leave: []int32{2}}, // a node the Trainer holds
		{at: 20, join: []int32{2}},
		{at: 30, join: []int32{3}},
		{at: 40, join: []int32{4}}, // beyond its maximum: stays free
		{at: 50, leave: []int32{4}},
	}
	jobsA := []Job{linearJob("J1", 0, 1, 4, 10, 5, 2, 1000)}
	// Trace C: 7 nodes; one Trainer (1–8 nodes, 10/s per node, R 1 s both ways, 2000
	// samples) submitted at t=5, so nothing runs before t=10; T_fwd 10.
	traceC := []handEvent{
		{at: 0, join: []int32{0, 1, 2, 3}},
		{at: 10, join: []int32{4}},
		{at: 20, join: []int32{5}},
		{at: 30, leave: []int32{0}},
		{at: 40, join: []int32{0}},
		{at: 50, join: []int32{6}},
		{at: 60, leave: []int32{6}},
	}
	jobsC := []Job{linearJob("T", 5, 1, 8, 10, 1, 1, 2000)}
	// Trace D: 3 nodes, two Trainers (1–2 nodes, 10/s per node, no rescale cost, 300
	// samples) submitted at t0, one at a time (MaxTrainers 1); n2 comes and goes.
	traceD := []handEvent{
		{at: 0, join: []int32{0, 1}},
		{at: 10, join: []int32{2}},
		{at: 20, leave: []int32{2}},
		{at: 30, join: []int32{2}},
		{at: 40, leave: []int32{2}},
	}
	jobsD := []Job{linearJob("A", 0, 1, 2, 10, 0, 0, 300), linearJob("B", 0, 1, 2, 10, 0, 0, 300)}

	for _, tc := range []struct {
		name string
		sem  alloc.Semantics
		tr   []handEvent
		n    int
		jobs []Job
		tfwd float64
		maxJ int
		want wantSummary
	}{
		{
			// t0: J1 admitted and given all 3 nodes (worth 20·30; growing from 0 costs
			// R_up·P(0) = 0): rate 30.
			// t10: +10·30 = 300; n2 reclaimed: −R_down·30 = 60 → 240; keeps 2: rate 20.
			// t20: +200 → 440; n2 back: 3 nodes worth 20·30 − 5·20 = 500 > 20·20: grows,
			// books R_up·P(2) = 100.
			// t30: +300 − 100 → 640; n3: 20·40 − 5·30 = 650 > 600: grows, books 150.
			// t40: +400 − 150 → 890; n4 joins, J1 is at its maximum.
			// J1 needs 110 more at 40/s: it finishes at t42.75, between events, with
			// nothing to trim, and the replay ends then (the event at t50 is not reached).
			// Node-seconds held 3·10 + 2·10 + 3·10 + 4·10 + 4·2.75 = 131, idle 3·10 + 2·10 +
			// 3·10 + 4·10 + 5·2.75 = 133.75. Rescales 0→3, 2→3, 3→4.
			name: "A default", sem: alloc.Default, tr: traceA, n: 5, jobs: jobsA, tfwd: 20,
			want: wantSummary{makespanS: 42.75, meanJCTS: 42.75, samples: 1000, rescaleLoss: 250, preemptLoss: 60,
				usedNodeS: 131, idleNodeS: 133.75, rescales: 3, reclaims: 1, events: 5, decisions: 5, done: 1, between: 1},
		},
		{
			// t0: the initial map gives J1 all 3 nodes: rate 30 and a start-up cost of
			// R_up·30 = 150, charged next; no decision at t0.
			// t10: +300 − 150 = 150; reclaim −60 → 90; N = 2, step limit 1: keeps 2.
			// t20: +200 → 290; N = 3, limit 2: grows to 3, books 100.
			// t30: +300 − 100 → 490; N = 4, limit 2: grows to 4, books 150.
			// t40: +400 − 150 → 740. t50: +400 → 1140: finished, 140 trimmed.
			// Same node-seconds; the start-up cost is not a booked rescale.
			name: "A reference", sem: alloc.Reference, tr: traceA, n: 5, jobs: jobsA, tfwd: 20,
			want: wantSummary{makespanS: 50, meanJCTS: 50, samples: 1000, rescaleLoss: 250, preemptLoss: 60, startup: 150, overshoot: 140,
				usedNodeS: 160, idleNodeS: 170, rescales: 2, reclaims: 1, events: 6, decisions: 4, done: 1},
		},
		{
			// t5, between events: T is submitted, admitted and takes the 4 idle nodes
			// (rate 40), as the sidecar decides on a submission.
			// t10: +200; n4: 10·50 − 1·40 = 460 > 400: grows, books R_up·P(4) = 40.
			// t20: +500 − 40 → 660; n5: 10·60 − 50 = 550 > 500: grows, books 50.
			// t30: +600 − 50 → 1210; n0 reclaimed: −60 → 1150; keeps 5.
			// t40: +500 → 1650; n0 back: grows to 6, books 50.
			// 2000 − 1650 + 50 = 400 more at 60/s: finished at t46.667, the end.
			// Held 4·5 + 50 + 60 + 50 + 6·6.667 = 220 node-s; idle 40 + 50 + 60 + 50 +
			// 6·6.667 = 240. JCT from its submit (t=5).
			name: "C default", sem: alloc.Default, tr: traceC, n: 7, jobs: jobsC, tfwd: 10,
			want: wantSummary{makespanS: 140.0 / 3, meanJCTS: 140.0/3 - 5, samples: 2000, rescaleLoss: 140, preemptLoss: 60,
				usedNodeS: 220, idleNodeS: 240, rescales: 4, reclaims: 1, events: 5, decisions: 5, done: 1, between: 2},
		},
		{
			// The reference's step limit ⌊(N+1)/2⌋ slows T down:
			// t10: N = 5, limit 3: 0 → 3 (n0–n2), rate 30.
			// t20: +300; N = 6, limit 3: 3 → 6 worth 600 − 30 = 570: books R_up·P(3) = 30.
			// t30: +600 − 30 → 870; n0 reclaimed: −60 → 810; keeps 5.
			// t40: +500 → 1310; grows to 6, books 50. t50: +600 − 50 → 1860; n6: N = 7,
			// limit 4: 6 → 7 worth 700 − 60 > 600, books 60.
			// t60: +700 − 60 → 2500; n6 reclaimed first: −70 → 2430; then finished, 430
			// trimmed. Held 30 + 60 + 50 + 60 + 70 = 270 node-s; idle 40 + 50 + 60 + 50 +
			// 60 + 70 = 330.
			name: "C reference", sem: alloc.Reference, tr: traceC, n: 7, jobs: jobsC, tfwd: 10,
			want: wantSummary{makespanS: 60, meanJCTS: 55, samples: 2000, rescaleLoss: 140, preemptLoss: 130, overshoot: 430,
				usedNodeS: 270, idleNodeS: 330, rescales: 4, reclaims: 2, events: 7, decisions: 5, done: 1},
		},
		{
			// One slot. t0: A takes n0, n1 (rate 20). t10: 200; n2 joins, A is at its
			// maximum. t15: A has its 300 and finishes; B is admitted and takes n0, n1
			// (decided then). t20: B 100; n2 leaves. t30: B 300, finished at the event.
			// JCT A 15 s, B 30 s (it waited from t0). Held 2·15 + 2·15 = 60 node-s;
			// idle 20 + 30 + 20 = 70.
			name: "D default", sem: alloc.Default, tr: traceD, n: 3, jobs: jobsD, tfwd: 10, maxJ: 1,
			want: wantSummary{makespanS: 30, meanJCTS: 22.5, samples: 600,
				usedNodeS: 60, idleNodeS: 70, rescales: 2, reclaims: 0, events: 4, decisions: 4, done: 2, between: 1},
		},
		{
			// Under the reference A starts from the initial map (start-up cost R_up·20 =
			// 0; no decision at t0). At t20 B starts on N = 2 nodes, step limit
			// ⌊3/2⌋ = 1: 0 → 1 node (rate 10). t30: B 100; N = 3, limit 2: 1 → 2.
			// t40: 100 + 200 = 300: finished, just. Held 2·20 + 1·10 + 2·10 = 70 node-s.
			name: "D reference", sem: alloc.Reference, tr: traceD, n: 3, jobs: jobsD, tfwd: 10, maxJ: 1,
			want: wantSummary{makespanS: 40, meanJCTS: 30, samples: 600, overshoot: 100,
				usedNodeS: 70, idleNodeS: 100, rescales: 2, reclaims: 0, events: 5, decisions: 3, done: 2},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := handTrace(t, tc.n, tc.tr...)
			res := mustReplay(t, tr, tc.jobs, Options{Semantics: tc.sem, TFwd: tc.tfwd, MaxTrainers: tc.maxJ})
			checkSummary(t, res.Summary, tc.want)
			// E_1node: every Trainer did its samples at 10/s on one node.
			if got, want := res.Summary.E1Node, tc.want.samples/10/tc.want.usedNodeS; !near(got, want) {
				t.Errorf("e_1node = %v, want %v", got, want)
			}
		})
	}
}

// TestStepLogByHand checks the per-event CSV of trace A (TestReplayByHand).
func TestStepLogByHand(t *testing.T) {
	tr := handTrace(t, 5,
		handEvent{at: 0, join: []int32{0, 1, 2}},
		handEvent{at: 10, leave: []int32{2}},
		handEvent{at: 20, join: []int32{2}},
		handEvent{at: 30, join: []int32{3}},
		handEvent{at: 40, join: []int32{4}},
		handEvent{at: 50, leave: []int32{4}},
	)
	jobs := []Job{linearJob("J1", 0, 1, 4, 10, 5, 2, 1000)}
	for _, tc := range []struct {
		name string
		sem  alloc.Semantics
		want string
	}{
		{"default", alloc.Default, stepLogHeader + `
2021-02-10 20:21:15,0.000000,30.000000,0.000000,0,0,0,3,1,3,1,3,0.000000
2021-02-10 20:21:25,240.000000,20.000000,0.000000,1,1,1,0,1,2,1,2,60.000000
2021-02-10 20:21:35,200.000000,30.000000,100.000000,2,0,0,1,1,3,1,3,0.000000
2021-02-10 20:21:45,200.000000,40.000000,150.000000,3,0,0,1,1,4,1,4,0.000000
2021-02-10 20:21:55,250.000000,40.000000,0.000000,4,0,0,1,1,5,1,4,0.000000
2021-02-10 20:21:57.75,110.000000,0.000000,0.000000,5,0,0,0,0,5,0,0,0.000000
`},
		// No t0 row; the first interval pays the start-up cost 150 and the reclaim 60.
		{"reference", alloc.Reference, stepLogHeader + `
2021-02-10 20:21:25,90.000000,20.000000,0.000000,1,1,1,0,1,2,1,2,60.000000
2021-02-10 20:21:35,200.000000,30.000000,100.000000,2,0,0,1,1,3,1,3,0.000000
2021-02-10 20:21:45,200.000000,40.000000,150.000000,3,0,0,1,1,4,1,4,0.000000
2021-02-10 20:21:55,250.000000,40.000000,0.000000,4,0,0,1,1,5,1,4,0.000000
2021-02-10 20:22:05,260.000000,0.000000,0.000000,5,1,0,0,0,4,0,0,0.000000
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			res := mustReplay(t, tr, jobs, Options{Semantics: tc.sem, TFwd: 20, StepLog: &buf})
			if got := buf.String(); got != tc.want {
				t.Fatalf("step log:\n%s\nwant:\n%s", got, tc.want)
			}
			// The log's sums are the summary's: ΣThr = samples, ΣReScost, ΣPreCost.
			var thr, re, pre float64
			for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n")[1:] {
				var f [13]string
				copy(f[:], strings.Split(line, ","))
				thr += mustFloat(t, f[1])
				re += mustFloat(t, f[3])
				pre += mustFloat(t, f[12])
			}
			s := res.Summary
			if !near(thr, s.Samples) || !near(re, s.RescaleLoss) || !near(pre, s.PreemptLoss) {
				t.Fatalf("log sums Thr %v ReScost %v PreCost %v; summary %v %v %v", thr, re, pre, s.Samples, s.RescaleLoss, s.PreemptLoss)
			}
		})
	}
}

func mustFloat(tb testing.TB, s string) float64 {
	tb.Helper()
	var v float64
	if _, err := fmt.Sscan(s, &v); err != nil {
		tb.Fatal(err)
	}
	return v
}

func TestInitialMap(t *testing.T) {
	seq := func(lo, hi int) []int {
		var out []int
		for i := lo; i < hi; i++ {
			out = append(out, i)
		}
		return out
	}
	for _, tc := range []struct {
		name     string
		n        int
		jobs     []Job
		admitted []int
		want     [][]int
	}{
		{
			// The shipped scenarios: one job at t0, 228 idle nodes, at most 64: its
			// first 164 nodes are cleared, it keeps the last 64.
			name: "one job keeps the last max", n: 228,
			jobs:     []Job{linearJob("J0", 0, 1, 64, 1, 0, 0, 1)},
			admitted: []int{0},
			want:     [][]int{seq(164, 228)},
		},
		{
			// Round robin: A {0,3,6}, B {1,4}, C {2,5}; A is above its maximum 2 and
			// drops its first node; B is below its minimum 3 and is cleared.
			name: "deal, clear, trim", n: 7,
			jobs: []Job{
				linearJob("A", 0, 1, 2, 1, 0, 0, 1),
				linearJob("B", 0, 3, 64, 1, 0, 0, 1),
				linearJob("C", 0, 1, 64, 1, 0, 0, 1),
			},
			admitted: []int{0, 1, 2},
			want:     [][]int{{3, 6}, nil, {2, 5}},
		},
		{
			name: "no node", n: 0,
			jobs:     []Job{linearJob("A", 0, 1, 2, 1, 0, 0, 1)},
			admitted: []int{0},
			want:     [][]int{nil},
		},
		{name: "no job", n: 5, want: [][]int{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := initialMap(tc.n, tc.jobs, tc.admitted)
			if len(got) != len(tc.want) {
				t.Fatalf("%d jobs mapped, want %d", len(got), len(tc.want))
			}
			for k := range got {
				if !slices.Equal(got[k], tc.want[k]) {
					t.Errorf("job %d holds %v, want %v", k, got[k], tc.want[k])
				}
			}
		})
	}
}

// TestReferenceInitialMapSummit checks the reference start on the real data: from
// row 1000 the first event joins 228 nodes, and J00000 keeps the last 64 of them, in
// column order.
func TestReferenceInitialMapSummit(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	w := mustSummit(t).Window(1000)
	jobs := mustWorkload(t, "hps-shufflenet-10J")
	first := slices.Clone(w.Events[0].Joined)
	slices.Sort(first)
	if got, want := len(first), 228; got != want {
		t.Fatalf("first event joins %d nodes, want %d", got, want)
	}
	r, err := newReplayer(w, jobs, Options{Semantics: alloc.Reference}.withDefaults(jobs))
	if err != nil {
		t.Fatal(err)
	}
	st, err := r.initialState()
	if err != nil {
		t.Fatal(err)
	}
	j0 := st.Trainers[0]
	if j0.ID != "J00000" || j0.Status != "running" {
		t.Fatalf("first trainer %s %s, want J00000 running", j0.ID, j0.Status)
	}
	var got, want []string
	for _, n := range j0.Nodes {
		got = append(got, n.Name)
	}
	for _, i := range first[228-64:] {
		want = append(want, w.Nodes[i])
	}
	if !slices.Equal(got, want) {
		t.Fatalf("J00000 holds %v, want the last 64 idle nodes %v", got, want)
	}
	if got, want := j0.PendingCost, 145081.5*18; !near(got, want) {
		t.Fatalf("start-up cost %v, want P(64)·Tcup = %v", got, want)
	}
	for _, tr := range st.Trainers[1:] {
		if tr.Status != "queued" {
			t.Fatalf("%s is %s at t0, want queued", tr.ID, tr.Status)
		}
	}
}

func TestStartEvent(t *testing.T) {
	tr := handTrace(t, 2,
		handEvent{at: 0, join: []int32{0}},
		handEvent{at: 10, join: []int32{1}},
		handEvent{at: 20, leave: []int32{0}},
	)
	for _, tc := range []struct {
		name   string
		submit []int
		want   int
	}{
		{"before the trace", []int{-5}, 0},
		{"on an event", []int{10}, 1},
		{"between events", []int{30, 15}, 1},
		{"after the trace", []int{99}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var jobs []Job
			for i, s := range tc.submit {
				jobs = append(jobs, linearJob(fmt.Sprint(i), s, 1, 1, 1, 0, 0, 1))
			}
			if got := StartEvent(tr, jobs); got != tc.want {
				t.Fatalf("StartEvent = %d, want %d", got, tc.want)
			}
		})
	}
	if testing.Short() {
		return
	}
	// The reference replayer's fixed row 1000 is where the paper's workloads begin.
	if got := StartEvent(mustSummit(t), mustWorkload(t, "hps-shufflenet-1000J")); got != 1000 {
		t.Fatalf("Summit start event %d, want 1000", got)
	}
}

func TestWorkloadObjective(t *testing.T) {
	thr := linearJob("a", 0, 1, 4, 10, 0, 0, 1)
	spd := thr
	spd.Metric = []float64{0, 1, 2, 3, 4}
	for _, tc := range []struct {
		name string
		jobs []Job
		want alloc.Objective
	}{
		{"throughput", []Job{thr}, alloc.Throughput},
		{"speedup column", []Job{thr, spd}, alloc.Metric},
		{"none", nil, alloc.Throughput},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := workloadObjective(tc.jobs); got != tc.want {
				t.Fatalf("WorkloadObjective = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestReplayEveryPlanChecked replays the built-in demo with every in-process solver
// under both semantics, checking every plan with alloc.Check, and checks that the
// books balance.
func TestReplayEveryPlanChecked(t *testing.T) {
	m := DefaultTraceModel()
	m.Nodes, m.Duration = 256, 12*time.Hour
	tr := GenerateTrace(m, 7)
	jobs := DefaultWorkload(20, tr.Events[0].Time, 7)
	for _, solver := range []alloc.Solver{alloc.Exact{}, alloc.EqualShare{}, alloc.Greedy{}} {
		for _, sem := range []alloc.Semantics{alloc.Default, alloc.Reference} {
			t.Run(solver.Name()+" "+sem.String(), func(t *testing.T) {
				res := mustReplay(t, tr, jobs, Options{Solver: solver, Semantics: sem, Timeline: 100})
				s := res.Summary
				var samples, node float64
				for _, tr := range res.Trainers {
					samples += tr.Samples
					node += tr.NodeHours
					if tr.Finished && (tr.Ended.Before(tr.Admitted) || tr.Samples != 1.3e8) {
						t.Fatalf("trainer %+v", tr)
					}
				}
				if !near(samples, s.Samples) || !near(node, s.UsedNodeHours) {
					t.Fatalf("trainers sum to %v samples, %v node-h; summary %v, %v", samples, node, s.Samples, s.UsedNodeHours)
				}
				if s.Utilisation <= 0 || s.Utilisation > 1 || s.EOvh <= 0 || s.EOvh > 1 {
					t.Fatalf("utilisation %v, e_ovh %v", s.Utilisation, s.EOvh)
				}
				for i, u := range res.Timeline.Used {
					if u > res.Timeline.Idle[i] {
						t.Fatalf("sample %d uses %d of %d idle nodes", i, u, res.Timeline.Idle[i])
					}
				}
			})
		}
	}
}

func TestReplayDeterministic(t *testing.T) {
	tr := GenerateTrace(DefaultTraceModel(), 3)
	jobs := DefaultWorkload(30, tr.Events[0].Time, 3)
	run := func() (Summary, string) {
		var buf bytes.Buffer
		res := mustReplay(t, tr, jobs, Options{StepLog: &buf})
		s := res.Summary
		s.SolveMsP50, s.SolveMsP99, s.WallS = 0, 0, 0
		return s, buf.String()
	}
	s1, log1 := run()
	s2, log2 := run()
	if s1 != s2 || log1 != log2 {
		t.Fatalf("two replays differ:\n%+v\n%+v", s1, s2)
	}
}

func TestReplayErrors(t *testing.T) {
	tr := handTrace(t, 2, handEvent{at: 0, join: []int32{0, 1}}, handEvent{at: 10, leave: []int32{1}})
	job := linearJob("J", 0, 1, 2, 1, 0, 0, 1e6)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		tr   *Trace
		jobs []Job
		want error
	}{
		{"empty trace", context.Background(), &Trace{}, []Job{job}, errEmptyTrace},
		{"cancelled", ctx, tr, []Job{job}, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Replay(tc.ctx, tc.tr, tc.jobs, Options{})
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := Replay(context.Background(), tr, []Job{job, job}, Options{}); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("duplicate job: err = %v", err)
	}
}

func TestTimelineSample(t *testing.T) {
	rec := &timelineRecorder{}
	for i := range 10 {
		rec.times = append(rec.times, handT0.Add(time.Duration(i*i)*time.Second)) // 0, 1, 4, …, 81
		rec.idle = append(rec.idle, int32(i))
		rec.used = append(rec.used, int32(i/2))
		rec.shares = append(rec.shares, Share{Trainer: 0, Nodes: int32(i / 2)})
		rec.off = append(rec.off, int32(len(rec.shares)))
	}
	all := rec.sample(10)
	if got := len(all.Times); got != 10 || all.Idle[9] != 9 || len(all.Shares[3]) != 1 {
		t.Fatalf("all records: %d samples %v", got, all.Idle)
	}
	// 4 samples at 0, 27, 54, 81 s: the records of 0, 25, 49 and 81 s are in force.
	s := rec.sample(4)
	if got, want := s.Idle, []int{0, 5, 7, 9}; !slices.Equal(got, want) {
		t.Fatalf("sampled idle %v, want %v", got, want)
	}
	if got, want := s.Times[1].Sub(handT0), 27*time.Second; got != want {
		t.Fatalf("second sample at %v, want %v", got, want)
	}
}

func TestOutputs(t *testing.T) {
	tr := handTrace(t, 5,
		handEvent{at: 0, join: []int32{0, 1, 2}},
		handEvent{at: 10, leave: []int32{2}},
		handEvent{at: 20, join: []int32{2, 3}},
		handEvent{at: 3600, join: []int32{4}},
	)
	jobs := []Job{linearJob("J1", 0, 1, 2, 10, 5, 2, 1e4), linearJob("J2", 0, 1, 2, 10, 5, 2, 1e9)}
	res := mustReplay(t, tr, jobs, Options{Timeline: 50})

	var svg bytes.Buffer
	if err := WriteTimelineSVG(&svg, res, "hand"); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(svg.Bytes(), []byte("<svg")) || !bytes.Contains(svg.Bytes(), []byte("idle nodes")) {
		t.Fatalf("not an SVG timeline: %.200s", svg.String())
	}
	// The title's second line is the x-range drawn: the trace ran an hour, the replay
	// until the end of it (J2 never finishes).
	if want := "hours 0–1.0 from "; !bytes.Contains(svg.Bytes(), []byte(want)) || !bytes.Contains(svg.Bytes(), []byte("until the trace ended")) {
		t.Fatalf("no subtitle %q…: %.600s", want, svg.String())
	}
	if err := xml.Unmarshal(svg.Bytes(), new(struct{})); err != nil {
		t.Fatalf("the SVG is not well-formed XML: %v", err)
	}

	var js bytes.Buffer
	if err := WriteSummaryJSON(&js, []Summary{res.Summary}); err != nil {
		t.Fatal(err)
	}
	var back []map[string]any
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"makespan_h", "mean_jct_h", "e_ovh", "e_1node", "utilisation", "rescales", "reclaims", "events", "solve_ms_p50", "solve_ms_p99", "wall_s"} {
		if _, ok := back[0][k]; !ok {
			t.Errorf("summary JSON has no %q", k)
		}
	}
	// J2 does not finish: the table says so.
	var tab bytes.Buffer
	if err := WriteSummaryTable(&tab, []Summary{res.Summary}); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(tab.String()), "\n"); len(lines) != 2 || !strings.Contains(lines[1], "1/2") {
		t.Fatalf("table:\n%s", tab.String())
	}

	var csvb bytes.Buffer
	if err := WriteTrainersCSV(&csvb, res.Trainers); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(csvb.String()), "\n")
	if len(lines) != 3 || lines[0] != trainersHeader || !strings.Contains(lines[1], ",true,") || !strings.Contains(lines[2], ",false,") {
		t.Fatalf("trainers CSV:\n%s", csvb.String())
	}
}

func TestProgressBar(t *testing.T) {
	var buf bytes.Buffer
	bar := ProgressBar(&buf, "replay")
	for i := 1; i <= 1000; i++ {
		bar(i, 1000)
	}
	if got := strings.Count(buf.String(), "\r"); got != 101 {
		t.Fatalf("%d redraws for 1000 steps, want 101 (one per percent)", got)
	}
	if !strings.HasSuffix(buf.String(), "100% 1000/1000 events\n") {
		t.Fatalf("bar ends %q", buf.String()[buf.Len()-40:])
	}
}

// failingSolver fails every decision, as a missing MILP program does.
type failingSolver struct{}

func (failingSolver) Name() string { return "failing" }
func (failingSolver) Solve(context.Context, *alloc.Problem) (*alloc.Plan, error) {
	return nil, errors.New("no such program")
}

// TestReplaySolverErrorKeeps: a failing solver keeps the allocation at each
// decision, as the live reconciler does, and the replay goes on and counts
// them; with Check set it stops at the first.
func TestReplaySolverErrorKeeps(t *testing.T) {
	tr := handTrace(t, 2, handEvent{at: 0, join: []int32{0, 1}}, handEvent{at: 10, leave: []int32{1}}, handEvent{at: 20, join: []int32{1}})
	job := linearJob("J", 0, 1, 2, 1, 0, 0, 1e6)
	res, err := Replay(context.Background(), tr, []Job{job}, Options{Solver: failingSolver{}})
	if err != nil {
		t.Fatal(err)
	}
	s := res.Summary
	if s.SolverErrors != s.Decisions || s.Decisions != 3 || s.Kept != 3 {
		t.Fatalf("decisions %d, solver errors %d, kept %d; want 3 each", s.Decisions, s.SolverErrors, s.Kept)
	}
	if !strings.Contains(s.FirstSolverError, "no such program") || s.Samples != 0 {
		t.Fatalf("first error %q, samples %v; want the solver's error and no progress", s.FirstSolverError, s.Samples)
	}
	if _, err := Replay(context.Background(), tr, []Job{job}, Options{Solver: failingSolver{}, Check: true}); err == nil {
		t.Fatal("with Check, a solver error should end the replay")
	}
}

// TestReplayAbsentSolverEnds: a MILP solver whose program is not installed
// is no passing failure: the replay ends at the first decision with the
// backend's error (milp.ErrBackendAbsent), instead of finishing with zeros.
func TestReplayAbsentSolverEnds(t *testing.T) {
	tr := handTrace(t, 2, handEvent{at: 0, join: []int32{0, 1}}, handEvent{at: 10, leave: []int32{1}}, handEvent{at: 20, join: []int32{1}})
	job := linearJob("J", 0, 1, 2, 1, 0, 0, 1e6)
	absent := milp.Solver{Backend: milp.CBC{Path: filepath.Join(t.TempDir(), "no-cbc")}}
	res, err := Replay(context.Background(), tr, []Job{job}, Options{Solver: absent})
	if !errors.Is(err, milp.ErrBackendAbsent) || res != nil {
		t.Fatalf("replay with an absent cbc: %v, %v; want ErrBackendAbsent and no result", res, err)
	}
	if !strings.Contains(err.Error(), "event 0: ") {
		t.Fatalf("error %q does not say at which event", err)
	}
}

// TestHourTicks: the time axis has enough labelled ticks to read hours, on a
// short, a day-long, a two-day and a two-week plot.
func TestHourTicks(t *testing.T) {
	for _, tc := range []struct {
		span           float64
		minLab, maxLab int
		minorEvery     float64 // the largest gap between ticks, in hours
	}{
		{0.5, 3, 16, 1.0 / 6}, {19.3, 6, 16, 1}, {48, 6, 16, 1}, {336, 6, 16, 6},
	} {
		ts := hourTicks(tc.span)
		labels := 0
		for i, tk := range ts {
			if tk.label != "" {
				labels++
			}
			if tk.v > tc.span*(1+1e-9) {
				t.Fatalf("span %v: tick at %v past the end", tc.span, tk.v)
			}
			if i > 0 && tk.v-ts[i-1].v > tc.minorEvery+1e-9 {
				t.Fatalf("span %v: ticks %v and %v are more than %v h apart", tc.span, ts[i-1].v, tk.v, tc.minorEvery)
			}
		}
		if labels < tc.minLab || labels > tc.maxLab || ts[0].label != "0" {
			t.Fatalf("span %v: %d labels (first %q), want %d to %d from 0", tc.span, labels, ts[0].label, tc.minLab, tc.maxLab)
		}
	}
}
