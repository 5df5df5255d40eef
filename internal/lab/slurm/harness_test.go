package slurm

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
	"time"
)

// at is t0 plus s seconds.
func at(s float64) time.Time {
	return time.Unix(1_800_000_000, 0).Add(time.Duration(s * float64(time.Second)))
}

func writeFile(tb testing.TB, body string) string {
	tb.Helper()
	p := filepath.Join(tb.TempDir(), "f")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		tb.Fatal(err)
	}
	return p
}

// progressLog is train.py's log: 2 ranks on a and b, a rescale (a gap),
// then a alone, restored from a checkpoint two steps back; the last line
// is cut short.
const progressLog = `1800000000.0 node=a pid=1 rank=0 world=2 restart=0 step=1 samples=64 loss=1
1800000000.0 node=b pid=2 rank=1 world=2 restart=0 step=1 samples=64 loss=1
1800000000.2 node=a pid=1 rank=0 world=2 restart=0 step=2 samples=128 loss=1
1800000000.2 node=b pid=2 rank=1 world=2 restart=0 step=2 samples=128 loss=1
1800000000.4 node=a pid=1 rank=0 world=2 restart=0 step=3 samples=192 loss=1
1800000010.0 node=a pid=3 rank=0 world=1 restart=1 step=1 samples=64 loss=1
1800000010.2 node=a pid=3 rank=0 world=1 restart=1 step=2 samples=96 loss=1
1800000010.4 node=a pid=3 rank=0 world=1 restart=1 step=3 samples=128 done
1800000010.5 node=a pi
`

func TestRounds(t *testing.T) {
	steps, err := ReadSteps(writeFile(t, progressLog))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		since time.Time
		want  []string // "step/world/nodes"
	}{
		// Step 3 at world 2 is missing b's line: not a complete round;
		// step 3 at world 1 is the done line.
		{name: "all", since: at(0), want: []string{"1/2/[a b]", "2/2/[a b]", "1/1/[a]", "2/1/[a]"}},
		{name: "after the rescale", since: at(5), want: []string{"1/1/[a]", "2/1/[a]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, r := range rounds(steps, tc.since) {
				got = append(got, fmtRound(r))
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("Rounds = %v, want %v", got, tc.want)
			}
		})
	}
	if !OnNodes("b", "a")(Round{Nodes: []string{"a", "b"}}) || OnNodes("a")(Round{Nodes: []string{"a", "b"}}) {
		t.Fatal("OnNodes matches the wrong node sets")
	}
}

func fmtRound(r Round) string { return fmt.Sprintf("%d/%d/%v", r.Step, r.World, r.Nodes) }

func TestNodeSecondsAndSamples(t *testing.T) {
	steps, err := ReadSteps(writeFile(t, progressLog))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name         string
		from, to     time.Time
		nodeSeconds  float64
		samplesGains float64
	}{
		// Two steps of 0.2 s at world 2, the 9.6 s rescale gap left out,
		// two steps of 0.2 s at world 1 (the done line is no step).
		{name: "everything", from: at(-1), to: at(20), nodeSeconds: 2*0.4 + 1*0.2, samplesGains: 128},
		{name: "clipped", from: at(0.1), to: at(0.3), nodeSeconds: 2 * 0.2, samplesGains: 128 - 64},
		{name: "the gap", from: at(1), to: at(9), nodeSeconds: 0, samplesGains: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := NodeSeconds(steps, tc.from, tc.to); math.Abs(got-tc.nodeSeconds) > 1e-6 {
				t.Errorf("NodeSeconds = %v, want %v", got, tc.nodeSeconds)
			}
			if got := samplesGained(steps, tc.from, tc.to); math.Abs(got-tc.samplesGains) > 1e-6 {
				t.Errorf("SamplesGained = %v, want %v", got, tc.samplesGains)
			}
		})
	}
}

func TestQuantile(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3}
	for _, tc := range []struct {
		name string
		q    float64
		want float64
	}{
		{name: "min", q: 0, want: 1},
		{name: "median", q: 0.5, want: 3},
		{name: "p99", q: 0.99, want: 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Quantile(xs, tc.q); got != tc.want {
				t.Fatalf("Quantile(%v) = %v, want %v", tc.q, got, tc.want)
			}
		})
	}
	if got := Quantile(nil, 0.5); got != 0 {
		t.Fatalf("Quantile of nothing = %v", got)
	}
}

func TestReportAndNormal(t *testing.T) {
	out := writeFile(t, `first 1800000000.100000000
check node=s2 procs=none
check node=s1 procs=4242,4243
checked 1800000000.300000000
end 1800000001.300000000
`)
	j := &Job{ID: "7", Out: out, Submitted: at(0)}
	r, err := j.Report()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := j.StartDelay(r), 100*time.Millisecond; got != want {
		t.Errorf("StartDelay = %v, want %v", got, want)
	}
	for _, tc := range []struct {
		name string
		info JobInfo
		want string
	}{
		{name: "fine on s2", info: JobInfo{"JobState": "COMPLETED", "ExitCode": "0:0", "Restarts": "0", "NodeList": "s2"}, want: ""},
		{name: "a Trainer on s1", info: JobInfo{"JobState": "COMPLETED", "ExitCode": "0:0", "Restarts": "0", "NodeList": "s[1-2]"},
			want: "Trainer processes on s1: 4242,4243"},
		{name: "requeued, s3 unchecked", info: JobInfo{"JobState": "COMPLETED", "ExitCode": "0:0", "Restarts": "1", "NodeList": "s[2-3]"},
			want: "restarts 1; s3 not checked"},
		{name: "failed", info: JobInfo{"JobState": "FAILED", "ExitCode": "1:0", "Restarts": "0", "NodeList": "s2", "Reason": "NonZeroExitCode"},
			want: "state FAILED exit 1:0 (NonZeroExitCode)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Normal(tc.info, r); got != tc.want {
				t.Fatalf("Normal = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestCtldEvent(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "log"), 0o755); err != nil {
		t.Fatal(err)
	}
	log := `[2026-11-29T21:30:08.957] preempted JobId=4 has been requeued to reclaim resources for JobId=5
[2026-11-29T21:30:09.014] sched: Allocate JobId=5 NodeList=n[1-2] #CPUs=2 Partition=main
[2026-11-29T21:30:10.100] sched/backfill: _start_job: Started JobId=51 in main on n3
[2026-11-29T21:30:11.200] sched/backfill: _start_job: Started JobId=6 in main on n3
`
	if err := os.WriteFile(filepath.Join(dir, "log", "slurmctld.log"), []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	l := &Lab{Dir: dir}
	for _, tc := range []struct {
		name string
		get  func() (time.Time, error)
		want string
	}{
		{name: "allocate", get: func() (time.Time, error) { return l.Allocated("5") }, want: "21:30:09.014"},
		{name: "backfill start, not a longer id", get: func() (time.Time, error) { return l.Allocated("6") }, want: "21:30:11.200"},
		{name: "preemption", get: func() (time.Time, error) {
			return l.CtldEvent(regexp.MustCompile(`preempted JobId=4 .*JobId=5\b`))
		}, want: "21:30:08.957"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.get()
			if err != nil {
				t.Fatal(err)
			}
			if s := got.Format("15:04:05.000"); s != tc.want {
				t.Fatalf("got %s, want %s", s, tc.want)
			}
		})
	}
	if _, err := l.Allocated("9"); err == nil {
		t.Fatal("a job that was never allocated has a time")
	}
}
