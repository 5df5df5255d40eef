package sim

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func writeFile(tb testing.TB, path, text string) {
	tb.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		tb.Fatal(err)
	}
}

// TestPolluxCurveByHand: whole nodes only (placements of 4s, 4 replicas a
// node), the best batch size at each count; samples/s = replicas × bsz /
// step time.
func TestPolluxCurveByHand(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "m", "placements.csv"), `placement,local_bsz,step_time,sync_time
4,10,0.5,0
4,20,0.8,0
44,10,0.5,0
14,10,0.1,0
2,10,0.1,0
`)
	writeFile(t, filepath.Join(dir, "m", "scalability.csv"), `num_nodes,num_replicas,local_bsz,step_time,sync_time
6,6,10,0.1,0
6,24,10,1,0
8,32,10,1,0
8,32,20,1,0
`)
	nodes, tp, err := polluxCurve(filepath.Join(dir, "m"))
	if err != nil {
		t.Fatal(err)
	}
	// 1 node: max(4·10/0.5, 4·20/0.8) = 100; 2 nodes: 8·10/0.5 = 160;
	// "14" and "2" leave GPUs unused; 6 nodes: 24·10/1 = 240 (6 replicas is
	// not every GPU); 8 nodes: 32·20/1 = 640.
	if want := []int{0, 1, 2, 6, 8}; !slices.Equal(nodes, want) {
		t.Fatalf("nodes %v, want %v", nodes, want)
	}
	if want := []float64{0, 100, 160, 240, 640}; !slices.Equal(tp, want) {
		t.Fatalf("throughput %v, want %v", tp, want)
	}

	writeFile(t, filepath.Join(dir, "n", "placements.csv"), "placement,local_bsz,step_time\n4,10,1\n")
	writeFile(t, filepath.Join(dir, "n", "scalability.csv"), "num_nodes,num_replicas,local_bsz,step_time\n2,8,10,2\n")
	start := time.Date(2021, 2, 10, 20, 21, 15, 0, time.UTC)
	jobs, err := PolluxWorkload(dir, 3, start, 10*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// Round robin in name order (m, n, m), 36 s apart; ten single-node
	// hours of work each (as asked); 1 node up to the curve's end; 30 s rescales.
	for i, want := range []struct {
		model   string
		max     int
		samples float64
	}{{"m", 8, 36000 * 100}, {"n", 2, 36000 * 40}, {"m", 8, 36000 * 100}} {
		j := jobs[i]
		if j.Model != want.model || j.Max != want.max || j.Min != 1 || j.Samples != want.samples ||
			!j.Submit.Equal(start.Add(time.Duration(36*i)*time.Second)) || j.RUp != 30 || j.RDown != 30 {
			t.Errorf("job %d = %+v, want model %s, max %d, %v samples", i, j, want.model, want.max, want.samples)
		}
	}
	// The metric is the speedup over one node: 1, 1.6, 2.4, 6.4 for m.
	if want := []float64{0, 1, 1.6, 2.4, 6.4}; !slices.Equal(jobs[0].Metric, want) || workloadObjective(jobs) != "metric" {
		t.Errorf("metric %v (objective %s), want %v (metric)", jobs[0].Metric, workloadObjective(jobs), want)
	}
}

func TestPolluxCurveErrors(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := polluxCurve(dir); err == nil {
		t.Fatal("no files: no error")
	}
	writeFile(t, filepath.Join(dir, "placements.csv"), "placement,local_bsz,step_time\n4,10,0\n")
	writeFile(t, filepath.Join(dir, "scalability.csv"), "num_nodes,num_replicas,local_bsz,step_time\n")
	if _, _, err := polluxCurve(dir); err == nil {
		t.Fatal("a step time of 0: no error")
	}
}

// TestBusyWeek: four weeks idle 10, 4, 2 and 8 nodes on average; the
// lowest quarter of weeks is the 2-node one, the third.
func TestBusyWeek(t *testing.T) {
	w := 7 * 24 * 3600
	tr := handTrace(t, 10,
		handEvent{at: 0, join: []int32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}},
		handEvent{at: w, leave: []int32{0, 1, 2, 3, 4, 5}},
		handEvent{at: 2 * w, leave: []int32{6, 7}},
		handEvent{at: 3 * w, join: []int32{0, 1, 2, 3, 4, 5}},
		handEvent{at: 4 * w, leave: []int32{0}},
	)
	got, ok := BusyWeek(tr)
	if want := handT0.Add(time.Duration(2*w) * time.Second); !ok || !got.Equal(want) {
		t.Fatalf("busy week %v (%v), want %v", got, ok, want)
	}
	if _, ok := BusyWeek(handTrace(t, 1, handEvent{at: 0, join: []int32{0}}, handEvent{at: 100, leave: []int32{0}})); ok {
		t.Fatal("a busy week in a trace of 100 s")
	}
}

func TestShiftWorkload(t *testing.T) {
	a := time.Date(2021, 2, 10, 0, 0, 0, 0, time.UTC)
	jobs := []Job{{ID: "x", Submit: a.Add(time.Hour)}, {ID: "y", Submit: a}}
	to := time.Date(2022, 1, 15, 0, 0, 0, 0, time.UTC)
	got := ShiftWorkload(jobs, to)
	if !got[1].Submit.Equal(to) || !got[0].Submit.Equal(to.Add(time.Hour)) || !jobs[1].Submit.Equal(a) {
		t.Fatalf("shifted %v %v (original %v)", got[0].Submit, got[1].Submit, jobs[1].Submit)
	}
}
