package hooks

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestSlurmPlan(t *testing.T) {
	out := `
1234|2026-12-01T14:05:00|n[1-3,7]|1:00:00
1235|N/A|(null)|30:00
1236_[1-4]|2026-12-01T15:00:00|(null)|UNLIMITED
1237|2026-12-01T16:00:00|n8|2-00:00:00
1238_2|2026-12-01T16:30:00|n9,n10|INVALID
1239|Unknown|n4|5
`
	plan, err := SlurmPlan([]byte(out), time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := planString(plan), "1234@1796133900+1h0m0s:n1,n2,n3,n7;1237@1796140800+48h0m0s:n8;1238_2@1796142600+0s:n9,n10"; got != want {
		t.Fatalf("plan = %s, want %s", got, want)
	}
	for _, bad := range []string{
		"1234 2026-12-01T14:05:00 n1 1:00:00",       // another format
		"1234|yesterday|n1|1:00:00",                 // a start that is no time
		"1234|2026-12-01T14:05:00|n[1-|1:00:00",     // a broken hostlist
		"1234|2026-12-01T14:05:00|bad/name|1:00:00", // a node name no scheduler gives
		"|2026-12-01T14:05:00|n1|1:00:00",           // no job
	} {
		if _, err := SlurmPlan([]byte(bad+"\n"), time.UTC); err == nil {
			t.Errorf("SlurmPlan(%q): no error", bad)
		}
	}
}

func TestSlurmDuration(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
	}{
		{"5", 5 * time.Minute}, {"5:30", 5*time.Minute + 30*time.Second}, {"1:02:03", time.Hour + 2*time.Minute + 3*time.Second},
		{"2-03", 51 * time.Hour}, {"2-03:04", 51*time.Hour + 4*time.Minute}, {"1-00:00:01", 24*time.Hour + time.Second},
		{"UNLIMITED", 0}, {"INVALID", 0}, {"", 0}, {"1:2:3:4", 0}, {"-1", 0},
	} {
		if got := slurmDuration(c.in); got != c.want {
			t.Errorf("slurmDuration(%q) = %v, want %v", c.in, got, c.want)
		}
	}
}

// TestReadSlurmPlanEnv: squeue is run with the time zone and time format
// fixed, so its times are UTC whatever the caller's environment; a
// program that is not there is an error, not an empty plan.
func TestReadSlurmPlanEnv(t *testing.T) {
	dir := t.TempDir()
	prog := filepath.Join(dir, "squeue")
	script := "#!/bin/sh\necho \"$*\" > " + filepath.Join(dir, "args") + "\necho \"42|2026-12-01T14:05:00|n1|10:00 $TZ $SLURM_TIME_FORMAT\" | cut -d' ' -f1\n[ \"$TZ\" = UTC ] && [ \"$SLURM_TIME_FORMAT\" = standard ]\n"
	if err := os.WriteFile(prog, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TZ", "America/New_York")
	t.Setenv("SLURM_TIME_FORMAT", "relative")
	plan, err := readSlurmPlan(context.Background(), prog)
	if err != nil {
		t.Fatal(err)
	}
	if plan[0].Start.Location() != time.UTC {
		t.Errorf("start %v, want it in UTC", plan[0].Start)
	}
	if got, want := planString(plan), "42@1796133900+10m0s:n1"; got != want {
		t.Fatalf("plan = %s, want %s", got, want)
	}
	args, _ := os.ReadFile(filepath.Join(dir, "args"))
	if got, want := strings.TrimSpace(string(args)), "--start -h -t PD -o "+slurmPlanFormat; got != want {
		t.Errorf("squeue args = %q, want %q", got, want)
	}
	if _, err := readSlurmPlan(context.Background(), filepath.Join(dir, "absent")); err == nil {
		t.Error("an absent squeue gave no error")
	}
}

// TestReadGridEnginePlanDeadline: the schedule file read gives up when
// its context ends (a FIFO no one writes stands for a hung filesystem).
func TestReadGridEnginePlanDeadline(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "schedule")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("no FIFO here to stand for a hung file: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := readGridEnginePlan(ctx, fifo); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the deadline", err)
	}
}
