package sim

import (
	"bytes"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// mustReadWorkloadFile reads one of the paper's workload files.
func mustReadWorkloadFile(tb testing.TB, name string) []Job {
	tb.Helper()
	jobs, err := ReadWorkload(openData(tb, "workloads/"+name))
	if err != nil {
		tb.Fatal(err)
	}
	return jobs
}

func TestPaperWorkloads(t *testing.T) {
	tests := []struct {
		name    string
		file    string
		jobs    int
		spacing time.Duration
		models  int
		speedup bool
	}{
		{"hps 10", "jobs-hps-shufflenet-10J.csv", 10, 4000 * time.Second, 1, false},
		{"hps 1000", "jobs-hps-shufflenet-1000J.csv", 1000, 36 * time.Second, 1, false},
		{"imagenet imgps", "jobs-ImageNet-imgps-1001J.csv", 1001, 36 * time.Second, 7, false},
		{"imagenet spdup", "jobs-ImageNet-spdup-1001J.csv", 1001, 36 * time.Second, 7, true},
	}
	first := time.Date(2021, 2, 10, 20, 21, 15, 0, time.UTC)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			jobs := mustReadWorkloadFile(t, tc.file)
			if len(jobs) != tc.jobs {
				t.Fatalf("jobs = %d, want %d", len(jobs), tc.jobs)
			}
			models := map[string]bool{}
			for i, j := range jobs {
				models[j.Model] = true
				// Submits are spread evenly over 10 h and rounded to the second: the
				// 1000-job file's gaps are 36 or 37 s (10 h / 999), the 1001-job files' 36 s.
				want := first.Add(time.Duration(i) * 10 * time.Hour / time.Duration(tc.jobs-1))
				if d := j.Submit.Sub(want); d < -time.Second || d > time.Second {
					t.Fatalf("job %d submit = %v, want %v", i, j.Submit, want)
				}
				if i > 0 {
					if gap := j.Submit.Sub(jobs[i-1].Submit); gap < tc.spacing || gap > tc.spacing+time.Second {
						t.Fatalf("job %d gap %v, want %v", i, gap, tc.spacing)
					}
				}
				if j.Min != 1 || j.Max != 64 || j.Samples != 1.3e8 || !slices.Equal(j.Nodes, paperBreakpoints[:]) {
					t.Fatalf("job %d = %+v", i, j)
				}
				if j.RUp < 17 || j.RUp > 19 || j.RDown < 11 || j.RDown > 13 {
					t.Fatalf("job %d rescale costs %v / %v", i, j.RUp, j.RDown)
				}
				if tc.speedup {
					if got := j.MetricAt(1); math.Abs(got-1) > 1e-12 {
						t.Fatalf("job %d speedup at 1 node = %v", i, got)
					}
				} else if !slices.Equal(j.Metric, j.Throughput) {
					t.Fatalf("job %d metric differs from throughput", i)
				}
			}
			if len(models) != tc.models {
				t.Fatalf("models = %v, want %d", models, tc.models)
			}
		})
	}
}

func TestImageNetFirstJob(t *testing.T) {
	jobs := mustReadWorkloadFile(t, "jobs-ImageNet-imgps-1001J.csv")
	tp := []float64{0, 7115.3, 13071.7, 21066.1, 40484.9, 74002.9, 130762.0, 202135.4}
	want := Job{
		ID: "J00000-AlexNet", Model: "AlexNet", Submit: time.Date(2021, 2, 10, 20, 21, 15, 0, time.UTC),
		RUp: 17.78804344238519, RDown: 11.273139936708727, Min: 1, Max: 64, Samples: 1.3e8,
		Nodes: []int{0, 1, 2, 4, 8, 16, 32, 64}, Throughput: tp, Metric: tp,
	}
	if !reflect.DeepEqual(jobs[0], want) {
		t.Fatalf("first job =\n%+v\nwant\n%+v", jobs[0], want)
	}
	// Round robin of the seven models, 143 each.
	count := map[string]int{}
	for _, j := range jobs {
		count[j.Model]++
	}
	for m, n := range count {
		if n != 143 {
			t.Errorf("%s: %d jobs, want 143", m, n)
		}
	}
}

func TestWorkloadRoundTrip(t *testing.T) {
	for _, file := range []string{"jobs-ImageNet-spdup-1001J.csv", "jobs-hps-shufflenet-10J.csv"} {
		t.Run(file, func(t *testing.T) {
			jobs := mustReadWorkloadFile(t, file)
			var buf bytes.Buffer
			if err := writeWorkload(&buf, jobs); err != nil {
				t.Fatal(err)
			}
			back, err := ReadWorkload(&buf)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back, jobs) {
				t.Fatal("round trip changed the jobs")
			}
		})
	}
}

func TestJobCurves(t *testing.T) {
	j := Job{Nodes: []int{0, 1, 2, 4}, Throughput: []float64{0, 10, 18, 30}, Metric: []float64{0, 1, 1.8, 3}}
	tests := []struct {
		name string
		n    float64
		tp   float64
	}{
		{"zero", 0, 0},
		{"negative", -1, 0},
		{"breakpoint", 2, 18},
		{"between", 3, 24},
		{"below first", 0.5, 5},
		{"beyond last", 8, 30},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := j.ThroughputAt(tc.n); math.Abs(got-tc.tp) > 1e-12 {
				t.Fatalf("ThroughputAt(%v) = %v, want %v", tc.n, got, tc.tp)
			}
			if got := j.MetricAt(tc.n); math.Abs(got-tc.tp/10) > 1e-12 {
				t.Fatalf("MetricAt(%v) = %v, want %v", tc.n, got, tc.tp/10)
			}
		})
	}
}

func TestReadWorkloadErrors(t *testing.T) {
	const head = "job,model,tsub,tcup_s,tcdw_s,jmin,jmax,pmax_samples,ns,ps,os\n"
	const good = "J1,m,2021-02-10 20:21:15,18,12,1,4,100,0;1;4,0;1;3,0;1;3"
	if _, err := ReadWorkload(strings.NewReader(head + good + "\n")); err != nil {
		t.Fatalf("good row: %v", err)
	}
	tests := []struct {
		name, row, want string
	}{
		{"empty job", strings.Replace(good, "J1", "", 1), `line 2, column "job"`},
		{"bad time", strings.Replace(good, "2021-02-10 20:21:15", "soon", 1), `line 2, column "tsub"`},
		{"cost not a number", strings.Replace(good, ",18,", ",x,", 1), `line 2, column "tcup_s"`},
		{"negative cost", strings.Replace(good, ",12,", ",-1,", 1), `line 2, column "tcdw_s"`},
		{"jmin 0", strings.Replace(good, ",1,4,", ",0,4,", 1), `line 2, column "jmin"`},
		{"jmax below jmin", strings.Replace(good, ",1,4,", ",3,2,", 1), `line 2, column "jmax"`},
		{"jmin float", strings.Replace(good, ",1,4,", ",1.5,4,", 1), `line 2, column "jmin"`},
		{"no samples", strings.Replace(good, ",100,", ",0,", 1), `line 2, column "pmax_samples"`},
		{"ns not increasing", strings.Replace(good, "0;1;4,", "0;4;1,", 1), `line 2, column "ns"`},
		{"ns fraction", strings.Replace(good, "0;1;4,", "0;1.5;4,", 1), `line 2, column "ns"`},
		{"ns below jmax", strings.Replace(good, "0;1;4,", "0;1;3,", 1), `line 2, column "ns"`},
		{"ps length", strings.Replace(good, ",0;1;3,0;1;3", ",0;1,0;1;3", 1), `line 2, column "ps"`},
		{"os length", strings.Replace(good, ",0;1;3,0;1;3", ",0;1;3,0;1", 1), `line 2, column "os"`},
		{"ps negative", strings.Replace(good, ",0;1;3,0;1;3", ",0;-1;3,0;1;3", 1), `line 2, column "ps"`},
		{"os NaN", strings.Replace(good, ",0;1;3,0;1;3", ",0;1;3,0;NaN;3", 1), `line 2, column "os"`},
		{"empty list", strings.Replace(good, ",0;1;3,0;1;3", ",,0;1;3", 1), `line 2, column "ps"`},
		{"duplicate", good + "\n" + good, `line 3, column "job"`},
		{"field count", "J1,m", "line 2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadWorkload(strings.NewReader(head + tc.row + "\n"))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want one with %q", err, tc.want)
			}
		})
	}
	if _, err := ReadWorkload(strings.NewReader("job,model\nJ1,m\n")); err == nil || !strings.Contains(err.Error(), `no column "tsub"`) {
		t.Fatalf("missing column: error = %v", err)
	}
}
