package accounting

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestReadSacctRefused(t *testing.T) {
	for _, tc := range []struct {
		name, in string
	}{
		{"no header", "101|2026-11-30T10:00:00|2026-11-30T10:30:00|c1\n"},
		{"no node list", "JobID|Start|End\n101|2026-11-30T10:00:00|2026-11-30T10:30:00\n"},
		{"empty", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ReadSacct(strings.NewReader(tc.in), time.UTC); !errors.Is(err, ErrSacctHeader) {
				t.Fatalf("err %v, want %v", err, ErrSacctHeader)
			}
		})
	}
}

// TestReadSacctReal reads what a real Slurm 22.05 printed (the Slurm lab
// with --accounting, steps included): the allocations with their times
// and expanded node lists; steps, and the job that never started, counted
// out by reason; the running job held to the listing's last time.
func TestReadSacctReal(t *testing.T) {
	f, err := os.Open("testdata/sacct-slurm-22.05.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	l, err := ReadSacct(f, time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	at := func(s string) time.Time {
		v, err := time.Parse(SacctTimeLayout, "2026-12-02T01:"+s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	want := []Job{
		{ID: "1", Line: 2, Start: at("40:46"), End: at("40:48"), Nodes: []string{"dbn1", "dbn2"}, StepStart: at("40:46")},
		{ID: "2", Line: 4, Start: at("40:46"), End: at("40:47"), Nodes: []string{"dbn3"}, StepStart: at("40:46")},
		{ID: "3", Line: 6, Start: at("40:57"), End: at("41:01"), Nodes: []string{"dbn1", "dbn2", "dbn3"}, StepStart: at("40:57")},
		{ID: "6", Line: 10, Start: at("41:01"), End: at("41:01"), Running: true, Nodes: []string{"dbn1"}, StepStart: at("41:01")},
	}
	if len(l.Jobs) != len(want) {
		t.Fatalf("%d jobs, want %d: %+v", len(l.Jobs), len(want), l.Jobs)
	}
	for i, w := range want {
		g := l.Jobs[i]
		if g.ID != w.ID || g.Line != w.Line || !g.Start.Equal(w.Start) || !g.End.Equal(w.End) || !g.StepStart.Equal(w.StepStart) || g.Running != w.Running || !slices.Equal(g.Nodes, w.Nodes) {
			t.Errorf("job %d: %+v, want %+v", i, g, w)
		}
	}
	if got, want := l.Skipped[SkipStep], 5; got != want {
		t.Errorf("%d steps skipped, want %d", got, want)
	}
	if got, want := l.Skipped[SkipNotRun], 1; got != want {
		t.Errorf("%d never started, want %d", got, want)
	}
	if !l.End.Equal(at("41:01")) {
		t.Errorf("listing ends %v", l.End)
	}
}
