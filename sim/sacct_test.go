package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/accounting"
	"github.com/bftrainer/bftrainer/names"
)

// sacctHand is what `sacct --allusers --allocations --parsable2 --format
// JobID,Submit,Start,End,NNodes,NodeList,State` prints, trimmed to a case
// computed by hand, with the lines sacct prints that a trace must leave
// out: a step, a pending job, a job cancelled before it started.
const sacctHand = `JobID|Submit|Start|End|NNodes|NodeList|State
101|2026-11-30T09:59:00|2026-11-30T10:00:00|2026-11-30T10:30:00|2|c[1-2]|COMPLETED
101.batch|2026-11-30T10:00:00|2026-11-30T10:00:00|2026-11-30T10:30:00|1|c1|COMPLETED
102|2026-11-30T10:05:00|2026-11-30T10:10:00|2026-11-30T10:20:00|1|c3|FAILED
103|2026-11-30T10:15:00|2026-11-30T10:30:00|Unknown|2|c[2-3]|RUNNING
104|2026-11-30T10:16:00|Unknown|Unknown|1|None assigned|PENDING
105|2026-11-30T10:17:00|None|2026-11-30T10:18:00|1|None assigned|CANCELLED by 0
106|2026-11-30T10:40:00|2026-11-30T10:40:00|2026-11-30T10:45:00|1|c1|COMPLETED
`

func TestSacctByHand(t *testing.T) {
	l, err := accounting.ReadSacct(strings.NewReader(sacctHand), time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, j := range l.Jobs {
		ids = append(ids, j.ID)
	}
	if want := []string{"101", "102", "103", "106"}; !slices.Equal(ids, want) {
		t.Fatalf("jobs %v, want %v", ids, want)
	}
	if got, want := l.Skipped[accounting.SkipStep], 1; got != want {
		t.Errorf("steps skipped %d, want %d", got, want)
	}
	if got, want := l.Skipped[accounting.SkipNotRun], 2; got != want {
		t.Errorf("never started skipped %d, want %d", got, want)
	}
	tr, err := SacctTrace(l, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"c1", "c2", "c3"}; !slices.Equal(tr.Nodes, want) {
		t.Fatalf("nodes %v, want %v", tr.Nodes, want)
	}
	// 10:00 c1,c2 busy (c3 idle); 10:10 c3 busy; 10:20 c3 idle;
	// 10:30 101 ends and 103 starts: c1 idle, c2 stays busy, c3 busy;
	// 10:40 c1 busy; 10:45 c1 idle. 103 runs to the listing's last
	// time, 10:45, with no change of its own there.
	type ev struct {
		at           string
		joined, left []int32
	}
	want := []ev{
		{"10:00", []int32{2}, nil},
		{"10:10", nil, []int32{2}},
		{"10:20", []int32{2}, nil},
		{"10:30", []int32{0}, []int32{2}},
		{"10:40", nil, []int32{0}},
		{"10:45", []int32{0}, nil},
	}
	if len(tr.Events) != len(want) {
		t.Fatalf("%d events, want %d: %+v", len(tr.Events), len(want), tr.Events)
	}
	for i, w := range want {
		e := tr.Events[i]
		if got := e.Time.Format("15:04"); got != w.at || !slices.Equal(e.Joined, w.joined) || !slices.Equal(e.Left, w.left) {
			t.Errorf("event %d: %s joined %v left %v, want %s joined %v left %v", i, got, e.Joined, e.Left, w.at, w.joined, w.left)
		}
	}
	if err := tr.Validate(); err != nil {
		t.Fatal(err)
	}
	// Idle node-hours by hand: 10:00-10:10 1 node, 10:20-10:30 1,
	// 10:30-10:40 1, 10:45 is the end: 30 node-minutes.
	if got, want := tr.Stats().IdleNodeHours, 0.5; math.Abs(got-want) > 1e-9 {
		t.Errorf("idle node-hours %v, want %v", got, want)
	}
}

// TestSacctIdleNodeHoursIndependent: random listings (shared nodes,
// back-to-back jobs, running jobs, steps and unusable lines mixed in)
// replay to the idle node-hours a per-node count of busy intervals gives.
func TestSacctIdleNodeHoursIndependent(t *testing.T) {
	for seed := range uint64(30) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 7))
			nodes := make([]string, 3+r.IntN(14))
			for i := range nodes {
				nodes[i] = fmt.Sprintf("nid%03d", i+1)
			}
			t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
			type job struct {
				start, end int // minutes from t0
				nodes      []string
				running    bool
			}
			var jobs []job
			last := 0
			var b strings.Builder
			b.WriteString("JobID|Start|End|NodeList|State\n")
			for k := range 20 + r.IntN(60) {
				start := r.IntN(600)
				end := start + 1 + r.IntN(120)
				if r.IntN(5) == 0 && len(jobs) > 0 { // back to back
					p := jobs[r.IntN(len(jobs))]
					start, end = p.end, p.end+1+r.IntN(60)
				}
				perm := r.Perm(len(nodes))[:1+r.IntN(len(nodes))]
				var ns []string
				for _, i := range perm {
					ns = append(ns, nodes[i])
				}
				j := job{start: start, end: end, nodes: ns, running: r.IntN(10) == 0}
				jobs = append(jobs, j)
				last = max(last, start)
				if !j.running {
					last = max(last, end)
				}
				at := func(m int) string { return t0.Add(time.Duration(m) * time.Minute).Format(accounting.SacctTimeLayout) }
				endS := at(end)
				if j.running {
					endS = "Unknown"
				}
				fmt.Fprintf(&b, "%d|%s|%s|%s|X\n", k, at(start), endS, names.CompressHostlist(ns))
				switch r.IntN(6) {
				case 0:
					fmt.Fprintf(&b, "%d.0|%s|%s|%s|X\n", k, at(start), endS, names.CompressHostlist(ns))
				case 1:
					fmt.Fprintf(&b, "%d9|Unknown|Unknown|None assigned|PENDING\n", k)
				case 2:
					fmt.Fprintf(&b, "%d8|yesterday|%s|%s|X\n", k, endS, ns[0])
				}
			}
			// The independent count: merge each node's busy intervals.
			first := math.MaxInt
			for i := range jobs {
				if jobs[i].running {
					jobs[i].end = last
				}
				if jobs[i].end > jobs[i].start {
					first = min(first, jobs[i].start)
				}
			}
			busy := 0
			for _, n := range nodes {
				var iv [][2]int
				for _, j := range jobs {
					if j.end > j.start && slices.Contains(j.nodes, n) {
						iv = append(iv, [2]int{j.start, j.end})
					}
				}
				slices.SortFunc(iv, func(a, b [2]int) int { return a[0] - b[0] })
				cur := [2]int{-1, -1}
				for _, x := range iv {
					if x[0] > cur[1] {
						busy += cur[1] - cur[0]
						cur = x
					} else {
						cur[1] = max(cur[1], x[1])
					}
				}
				busy += cur[1] - cur[0]
			}
			want := float64(len(nodes)*(last-first)-busy) / 60

			l, err := accounting.ReadSacct(strings.NewReader(b.String()), time.UTC)
			if err != nil {
				t.Fatal(err)
			}
			tr, err := SacctTrace(l, nodes)
			if err != nil {
				t.Fatal(err)
			}
			if err := tr.Validate(); err != nil {
				t.Fatal(err)
			}
			st := tr.Stats()
			if got := st.IdleNodeHours; math.Abs(got-want) > 1e-6 {
				t.Errorf("idle node-hours %v, want %v (independent count)", got, want)
			}
			if got, want := st.End.Sub(st.Start), time.Duration(last-first)*time.Minute; got != want {
				t.Errorf("span %v, want %v", got, want)
			}
		})
	}
}

func TestSacctTraceNodeNotGiven(t *testing.T) {
	l, err := accounting.ReadSacct(strings.NewReader(sacctHand), time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := SacctTrace(l, []string{"c1", "c2"}); err == nil || !strings.Contains(err.Error(), "ran on c3, which is not among the nodes given") {
		t.Fatalf("a job on a node not given: err %v", err)
	}
}

// TestOpenTraceSacct: replay's --trace takes sacct output as it takes SWF,
// by content, with the cluster's nodes from a node file.
func TestOpenTraceSacct(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "month.txt")
	if err := os.WriteFile(p, []byte(sacctHand), 0o644); err != nil {
		t.Fatal(err)
	}
	nodesFile := filepath.Join(dir, "nodes.csv")
	if err := os.WriteFile(nodesFile, []byte("node_idx,node_name\n0,c1\n1,c2\n2,c3\n3,c4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tr, err := OpenTrace(p, nodesFile)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tr.Source, "month.txt: sacct (4 jobs, 4 nodes") {
		t.Errorf("source %q", tr.Source)
	}
	if got, want := tr.Skipped, 3; got != want {
		t.Errorf("skipped %d, want %d", got, want)
	}
	// c4 ran nothing: idle for the whole 45 minutes, on top of the 30
	// node-minutes of the others.
	if got, want := tr.Stats().IdleNodeHours, 0.5+0.75; math.Abs(got-want) > 1e-9 {
		t.Errorf("idle node-hours %v, want %v", got, want)
	}
}

// TestSacctRealListing reads what a real Slurm 22.05 printed (the lab
// with --accounting: slurmdbd on MariaDB; `sacct --allusers --parsable2
// --format JobID,Submit,Start,End,NNodes,NodeList,State`, steps
// included): 1 on dbn[1-2] 46–48 s, 2 on dbn3 46–47, 3 on dbn[1-3]
// 57–61, 4 pending, 6 running on dbn1 since 61. Idle node-seconds over
// 46–61 by hand: 45 − (6 + 6 + 5) = 28.
func TestSacctRealListing(t *testing.T) {
	f, err := os.Open("../accounting/testdata/sacct-slurm-22.05.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	l, err := accounting.ReadSacct(f, time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(l.Jobs), 4; got != want {
		t.Fatalf("%d jobs, want %d", got, want)
	}
	if got, want := l.Skipped[accounting.SkipStep], 5; got != want {
		t.Errorf("%d steps skipped, want %d", got, want)
	}
	if got, want := l.Skipped[accounting.SkipNotRun], 1; got != want {
		t.Errorf("%d never started, want %d", got, want)
	}
	tr, err := SacctTrace(l, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tr.Stats().IdleNodeHours*3600, 28.0; math.Abs(got-want) > 1e-6 {
		t.Errorf("idle node-seconds %v, want %v", got, want)
	}
}
