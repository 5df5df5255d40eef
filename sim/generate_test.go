package sim

import (
	"bytes"
	"encoding/csv"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestGenerateTraceDeterministic(t *testing.T) {
	a := GenerateTrace(DefaultTraceModel(), 42)
	b := GenerateTrace(DefaultTraceModel(), 42)
	assertSameTrace(t, a, b)
	if err := a.Validate(); err != nil {
		t.Fatal(err)
	}
	c := GenerateTrace(DefaultTraceModel(), 43)
	if reflect.DeepEqual(a.Events, c.Events) {
		t.Fatal("seeds 42 and 43 give the same trace")
	}
	// Zero fields take the defaults.
	assertSameTrace(t, GenerateTrace(TraceModel{}, 42), a)
	m := DefaultTraceModel()
	if got, want := a.Events[0].Time, m.Start; !got.Equal(want) {
		t.Fatalf("first event at %v, want %v", got, want)
	}
	if got, want := a.Events[len(a.Events)-1].Time, m.Start.Add(m.Duration); got.After(want) {
		t.Fatalf("last event at %v, after %v", got, want)
	}
	if got, want := len(a.Nodes), m.Nodes; got != want {
		t.Fatalf("nodes = %d, want %d", got, want)
	}
}

// TestGenerateTraceFitsSummit checks a long generated trace against the Summit figures
// the model was fitted to (paper.md §4.1): fragments median 475 s, mean ~1,200 s,
// p95 ~4,700 s, min 70 s; idle share 8.3 %; events every 30–60 s.
func TestGenerateTraceFitsSummit(t *testing.T) {
	tests := []struct {
		name             string
		model            TraceModel
		idleLo, idleHi   float64
		wantEpisodeNodes bool
	}{
		{"default model, 30 days", TraceModel{Duration: 30 * 24 * time.Hour}, 0.070, 0.096, true},
		// Without episodes the idle share has little variance: it checks the busy-law solver.
		{"no episodes", TraceModel{Duration: 30 * 24 * time.Hour, EpisodesPerDay: -1}, 0.080, 0.086, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := GenerateTrace(tc.model, 1)
			st := tr.Stats()
			f := durationSummary(tr.IdleFragments())
			t.Logf("%v; mean gap %v", st, st.MeanGap)
			t.Logf("fragments: %v", f)
			if idle := st.IdleFraction(); idle < tc.idleLo || idle > tc.idleHi {
				t.Errorf("idle share %.4f outside [%.3f, %.3f]", idle, tc.idleLo, tc.idleHi)
			}
			if f.min < 70 {
				t.Errorf("shortest fragment %v s < 70 s", f.min)
			}
			if tc.wantEpisodeNodes {
				if f.median < 400 || f.median > 600 {
					t.Errorf("fragment median %v s, want ~475", f.median)
				}
				if f.mean < 1000 || f.mean > 1450 {
					t.Errorf("fragment mean %.0f s, want ~1,200", f.mean)
				}
				if f.p95 < 3800 || f.p95 > 6000 {
					t.Errorf("fragment p95 %v s, want ~4,700", f.p95)
				}
				if st.MaxIdle < len(tr.Nodes)/3 {
					t.Errorf("max idle %d: no mass-idle episode", st.MaxIdle)
				}
			}
			if st.MeanGap < 30*time.Second || st.MeanGap > 60*time.Second {
				t.Errorf("mean gap between events %v, want 30–60 s", st.MeanGap)
			}
		})
	}
}

func TestTruncLogNormal(t *testing.T) {
	d := newTruncLogNormal(475, 1.3, 70, 14400)
	if got := d.quantile(0); math.Abs(got-70) > 1e-9 {
		t.Fatalf("quantile(0) = %v, want 70", got)
	}
	if got := d.quantile(1); math.Abs(got-14400) > 1e-6 {
		t.Fatalf("quantile(1) = %v, want 14400", got)
	}
	// The analytic truncated mean matches quadrature.
	const k = 100000
	sum := 0.0
	for i := range k {
		sum += d.quantile((float64(i) + 0.5) / k)
	}
	if got, want := d.mean(), sum/k; math.Abs(got-want)/want > 1e-3 {
		t.Fatalf("mean = %v, quadrature %v", got, want)
	}
}

// phillyFixture is a tiny Philly trace and curve file.
const (
	phillyFixture = `timestamp,duration,num_gpus,gpu_time,cluster
2017-10-01 00:00:00,100.0,8,800.0,c1
2017-10-01 00:01:00,60.0,1,60.0,c1
2017-10-01 00:03:00,10.0,0,0.0,c1
`
	curvesFixture = `model,nodes,throughput_samples_per_s
M,1,600.0
M,2,1100.0
M,4,2000.0
M,8,3600.0
M,16,6000.0
`
)

func TestGeneratePhillyRules(t *testing.T) {
	start := time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC)
	jobs, err := generatePhillyWorkload(strings.NewReader(phillyFixture), strings.NewReader(curvesFixture), 50, 1, phillyOptions{Start: start})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 50 {
		t.Fatalf("jobs = %d, want 50", len(jobs))
	}
	if !jobs[0].Submit.Equal(start) {
		t.Fatalf("first submit %v, want %v", jobs[0].Submit, start)
	}
	for i, j := range jobs {
		// Gaps in the fixture: 60 s and 120 s (the GPU-less row still counts as an arrival).
		if i > 0 {
			if gap := j.Submit.Sub(jobs[i-1].Submit); gap != 60*time.Second && gap != 120*time.Second {
				t.Fatalf("job %d gap %v", i, gap)
			}
		}
		if got, want := j.ID, "P"+strconv.Itoa(100000 + i)[1:]+"-M"; got != want {
			t.Fatalf("id %q, want %q", got, want)
		}
		// 8 GPUs → 2 nodes → Max 8 (4 × 2); 1 GPU → 1 node → Max 4. Samples: GPU-seconds ×
		// 600/6 per GPU-second.
		switch j.Samples {
		case 800 * 100:
			if j.Max != 8 {
				t.Fatalf("8-GPU job: Max %d, want 8", j.Max)
			}
		case 60 * 100:
			if j.Max != 4 {
				t.Fatalf("1-GPU job: Max %d, want 4", j.Max)
			}
		default:
			t.Fatalf("job %d samples %v", i, j.Samples)
		}
		if j.Min != 1 || j.RUp < 17 || j.RUp > 19 || j.RDown < 11 || j.RDown > 13 {
			t.Fatalf("job %d = %+v", i, j)
		}
		if want := []int{0, 1, 2, 4, 8, 16}; !reflect.DeepEqual(j.Nodes, want) {
			t.Fatalf("nodes %v, want %v", j.Nodes, want)
		}
	}
	// Speedup metric, a cap from MaxNodes and from the curve.
	jobs, err = generatePhillyWorkload(strings.NewReader(phillyFixture), strings.NewReader(curvesFixture), 20, 1,
		phillyOptions{Speedup: true, Scale: 64, MaxNodes: 128})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if j.MetricAt(1) != 1 || j.Max != 16 {
			t.Fatalf("speedup job: metric at 1 = %v, Max %d", j.MetricAt(1), j.Max)
		}
	}
}

func TestGeneratePhillyErrors(t *testing.T) {
	tests := []struct {
		name, philly, curves, want string
	}{
		{"bad gpus", "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-01 00:00:00,1,x,1,c\n", curvesFixture, `line 2, column "num_gpus"`},
		{"bad time", "timestamp,duration,num_gpus,gpu_time,cluster\nnever,1,1,1,c\n", curvesFixture, `line 2, column "timestamp"`},
		{"no usable job", "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-01 00:00:00,1,0,0,c\n", curvesFixture, "no usable job"},
		{"missing column", "timestamp,duration\n", curvesFixture, `no column "num_gpus"`},
		{"curve order", phillyFixture, "model,nodes,throughput_samples_per_s\nM,2,1\nM,1,1\n", `line 3, column "nodes"`},
		{"curve throughput", phillyFixture, "model,nodes,throughput_samples_per_s\nM,1,-1\n", `column "throughput_samples_per_s"`},
		{"no one-node throughput", phillyFixture, "model,nodes,throughput_samples_per_s\nM,1,0\n", "no throughput on one node"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := generatePhillyWorkload(strings.NewReader(tc.philly), strings.NewReader(tc.curves), 5, 1, phillyOptions{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want one with %q", err, tc.want)
			}
		})
	}
}

func TestGeneratePhillyReal(t *testing.T) {
	gen := func(seed uint64) []Job {
		t.Helper()
		jobs, err := generatePhillyWorkload(openData(t, "philly/philly.csv"), openData(t, "workloads/model-scalability.csv"), 500, seed, phillyOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return jobs
	}
	a, b, c := gen(7), gen(7), gen(8)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same seed, different workloads")
	}
	if reflect.DeepEqual(a, c) {
		t.Fatal("seeds 7 and 8 give the same workload")
	}
	// Every job is valid: it survives a write and a validating read.
	var buf bytes.Buffer
	if err := writeWorkload(&buf, a); err != nil {
		t.Fatal(err)
	}
	back, err := ReadWorkload(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, a) {
		t.Fatal("round trip changed the workload")
	}
	models := map[string]int{}
	maxes := map[int]int{}
	for i, j := range a {
		models[j.Model]++
		maxes[j.Max]++
		if i > 0 && j.Submit.Before(a[i-1].Submit) {
			t.Fatalf("job %d submitted before job %d", i, i-1)
		}
		if j.Max&(j.Max-1) != 0 || j.Max > 64 || j.Samples <= 0 {
			t.Fatalf("job %d = %+v", i, j)
		}
	}
	if len(models) != 7 {
		t.Fatalf("models %v, want all 7", models)
	}
	span := a[len(a)-1].Submit.Sub(a[0].Submit)
	t.Logf("500 jobs over %v (Philly mean gap 114 s); Max histogram %v", span.Round(time.Minute), maxes)
	// Philly's mean inter-arrival time is 114 s: 499 gaps should span roughly 16 h.
	if span < 8*time.Hour || span > 32*time.Hour {
		t.Fatalf("500 jobs span %v", span)
	}
}

func TestDefaultWorkload(t *testing.T) {
	start := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	jobs := DefaultWorkload(30, start, 1)
	if len(jobs) != 30 {
		t.Fatalf("jobs = %d, want 30", len(jobs))
	}
	if !reflect.DeepEqual(jobs, DefaultWorkload(30, start, 1)) {
		t.Fatal("not deterministic")
	}
	if reflect.DeepEqual(jobs, DefaultWorkload(30, start, 2)) {
		t.Fatal("seeds 1 and 2 give the same workload")
	}
	for i, j := range jobs {
		if got, want := j.Submit, start.Add(time.Duration(i)*36*time.Second); !got.Equal(want) {
			t.Fatalf("job %d submit %v, want %v", i, got, want)
		}
	}
	var buf bytes.Buffer
	if err := writeWorkload(&buf, jobs); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadWorkload(&buf); err != nil {
		t.Fatalf("default workload does not validate: %v", err)
	}
	// Mutating one job's curve must not change the embedded table.
	jobs[0].Throughput[1] = -1
	if DefaultWorkload(1, start, 1)[0].Throughput[1] < 0 {
		t.Fatal("jobs share the embedded curves")
	}
}

// TestPaperCurvesMatchData checks the embedded table against model-scalability.csv.
func TestPaperCurvesMatchData(t *testing.T) {
	recs, err := csv.NewReader(openData(t, "workloads/model-scalability.csv")).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]float64{}
	for _, r := range recs[1:] {
		v, err := strconv.ParseFloat(r[2], 64)
		if err != nil {
			t.Fatal(err)
		}
		got[r[0]] = append(got[r[0]], v)
	}
	if len(got) != len(paperCurves) {
		t.Fatalf("%d models in the file, %d embedded", len(got), len(paperCurves))
	}
	for _, c := range paperCurves {
		if !reflect.DeepEqual(got[c.name], c.throughput[:]) {
			t.Errorf("%s: file %v, embedded %v", c.name, got[c.name], c.throughput)
		}
	}
}
