package accounting

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// gridEngineFixture reads what a real Son of Grid Engine 8.1.9 printed (the
// Grid Engine lab's cell: go test ./internal/lab/gridengine -run
// 'TestSerialJob|TestParallelJob' -args -update).
func gridEngineFixture(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("../hooks/testdata/gridengine/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestReadQacctReal: a serial job (one record) and a 2-host parallel job
// (three records: the master task, and one task started with qrsh
// -inherit on each host) as qacct -j printed them: two jobs, the parallel
// one on both hosts from its earliest start to its latest end.
func TestReadQacctReal(t *testing.T) {
	in := gridEngineFixture(t, "serial.qacct-j.txt") + gridEngineFixture(t, "parallel.qacct-j.txt")
	l, err := ReadQacct(strings.NewReader(in), time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	at := func(s string) time.Time {
		return time.Date(2026, 12, 4, 20, 50, 0, 0, time.UTC).Add(mustDuration(t, s))
	}
	want := []Job{
		{ID: "1", Line: 1, Start: at("25s"), End: at("25s"), Nodes: []string{"gel2"}},
		{ID: "2", Line: 46, Start: at("27s"), End: at("28s"), Nodes: []string{"gel1", "gel2"}},
	}
	if !slices.EqualFunc(l.Jobs, want, jobEqual) {
		t.Fatalf("jobs\n%+v\nwant\n%+v", l.Jobs, want)
	}
	if l.SkippedTotal() != 0 || !l.End.Equal(at("28s")) {
		t.Errorf("skipped %v, end %v", l.Skipped, l.End)
	}
}

func mustDuration(t *testing.T, s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func jobEqual(a, b Job) bool {
	return a.ID == b.ID && a.Line == b.Line && a.Start.Equal(b.Start) && a.End.Equal(b.End) &&
		a.Running == b.Running && slices.Equal(a.Nodes, b.Nodes)
}

func qacctRecord(job, task, host, start, end string) string {
	return "==============================================================\n" +
		"qname        all.q\nhostname     " + host + "\njobnumber    " + job + "\ntaskid       " + task +
		"\nqsub_time    Tue Dec  1 09:00:00 2026\nstart_time   " + start + "\nend_time     " + end + "\nfailed       0\n"
}

// TestReadQacctRuns: records of one job number that overlap in time are one
// run, whatever their order and their own qsub_time; records that do not
// are separate runs (a reused number, a rescheduled job); array tasks are
// JOB.TASK; unusable records are counted out by reason.
func TestReadQacctRuns(t *testing.T) {
	task := strings.Replace(qacctRecord("5", "undefined", "n2", "Tue Dec  1 10:00:05 2026", "Tue Dec  1 10:00:30 2026"),
		"Tue Dec  1 09:00:00 2026", "Tue Dec  1 10:00:04 2026", 1) // qrsh -inherit: its own qsub_time
	in := task +
		qacctRecord("5", "undefined", "n1", "Tue Dec  1 10:00:00 2026", "Tue Dec  1 10:01:00 2026") + // its master
		qacctRecord("5", "undefined", "n3", "Tue Dec  1 12:00:00 2026", "Tue Dec  1 12:30:00 2026") + // the number again
		qacctRecord("6", "3", "n1", "Tue Dec  1 11:00:00 2026", "Tue Dec  1 11:10:00 2026") +
		qacctRecord("7", "undefined", "n1", "-/-", "-/-") +
		qacctRecord("8", "undefined", "n1", "yesterday", "Tue Dec  1 11:10:00 2026") +
		qacctRecord("9", "undefined", "", "Tue Dec  1 11:00:00 2026", "Tue Dec  1 11:10:00 2026") +
		qacctRecord("10", "undefined", "n1", "Tue Dec  1 11:00:00 2026", "Tue Dec  1 10:10:00 2026")
	l, err := ReadQacct(strings.NewReader(in), time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	at := func(h, m int) time.Time { return time.Date(2026, 12, 1, h, m, 0, 0, time.UTC) }
	want := []Job{
		{ID: "5", Line: 1, Start: at(10, 0), End: at(10, 1), Nodes: []string{"n1", "n2"}},
		{ID: "5", Line: 19, Start: at(12, 0), End: at(12, 30), Nodes: []string{"n3"}},
		{ID: "6.3", Line: 28, Start: at(11, 0), End: at(11, 10), Nodes: []string{"n1"}},
	}
	if !slices.EqualFunc(l.Jobs, want, jobEqual) {
		t.Fatalf("jobs\n%+v\nwant\n%+v", l.Jobs, want)
	}
	wantSkipped := map[string]int{SkipNotRun: 1, SkipTime: 1, SkipNoNodes: 1, SkipEndBefore: 1}
	if len(l.Skipped) != len(wantSkipped) {
		t.Errorf("skipped %v, want %v", l.Skipped, wantSkipped)
	}
	for k, n := range wantSkipped {
		if l.Skipped[k] != n {
			t.Errorf("skipped %v, want %v", l.Skipped, wantSkipped)
		}
	}
}

func TestReadQacctRefused(t *testing.T) {
	for _, in := range []string{"JobID|Start|End|NodeList\n", "error: job id 3 not found\n"} {
		if _, err := ReadQacct(strings.NewReader(in), time.UTC); !errors.Is(err, ErrQacct) {
			t.Errorf("%q: err %v, want %v", in, err, ErrQacct)
		}
	}
	l, err := ReadQacct(strings.NewReader(""), time.UTC)
	if err != nil || len(l.Jobs) != 0 {
		t.Errorf("no records: %+v, %v; want no jobs, no error", l, err)
	}
}

// TestReadQstatRunning reads what qstat -g t -xml printed of a running
// 2-host job (its master's queue instance, and a slave's on each host):
// one running job on both hosts, held until now.
func TestReadQstatRunning(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	jobs, err := ReadQstatRunning(strings.NewReader(gridEngineFixture(t, "running.qstat-gt.xml")), time.UTC, now)
	if err != nil {
		t.Fatal(err)
	}
	want := []Job{{ID: "1", Start: time.Date(2026, 12, 1, 11, 42, 48, 0, time.UTC), End: now, Running: true, Nodes: []string{"gel1", "gel2"}}}
	if !slices.EqualFunc(jobs, want, jobEqual) {
		t.Fatalf("jobs %+v, want %+v", jobs, want)
	}
	if _, err := ReadQstatRunning(strings.NewReader("<job_info><queue_info><job_list><JB_job_number>3</JB_job_number></job_list></queue_info></job_info>"), time.UTC, now); err == nil {
		t.Error("a running job with no queue instance: no error")
	}
}
