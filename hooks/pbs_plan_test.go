package hooks

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPBSPlanReal reads `qstat -f -F json` as a real OpenPBS cell printed
// it (internal/lab/pbs, TestBftrainer/plan with -update): a job running
// exclusively on one node with walltime 3 minutes, a 3-node exclusive job
// queued behind it under strict_ordering. Its one planned start is checked against what
// the same cell's `qstat -T` printed (estimated start time, nodes,
// requested time) and against the running job's end (stime + walltime).
func TestPBSPlanReal(t *testing.T) {
	out := pbsFixture(t, "planned.qstat-f.json")
	plan, err := PBSPlan(out, time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan) != 1 {
		t.Fatalf("plan %+v, want the one queued job", plan)
	}
	p := plan[0]
	// qstat -T's line of the queued job: ID … NDS TSK Memory Time S EstStart.
	var row []string
	for _, l := range strings.Split(string(pbsFixture(t, "planned.qstat-T.txt")), "\n") {
		if f := strings.Fields(l); len(f) == 11 && f[9] == "Q" {
			row = f
		}
	}
	if row == nil {
		t.Fatal("qstat -T lists no queued job")
	}
	if p.Job != row[0] {
		t.Errorf("planned job %s, qstat -T's queued job %s", p.Job, row[0])
	}
	if got := p.Start.UTC().Format("15:04"); got != row[10] {
		t.Errorf("planned start %s, qstat -T's estimate %s", got, row[10])
	}
	if got := (time.Time{}).Add(p.Duration).Format("15:04"); got != row[8] {
		t.Errorf("duration %v, qstat -T's requested time %s", p.Duration, row[8])
	}
	if n := len(p.Nodes); row[5] != string(rune('0'+n)) || p.Nodes[0] == p.Nodes[1] {
		t.Errorf("planned nodes %v, qstat -T's NDS %s", p.Nodes, row[5])
	}
	// The running job's end is when its nodes free up.
	var doc struct {
		Jobs map[string]struct {
			State string `json:"job_state"`
			Stime string `json:"stime"`
			RL    struct {
				Walltime string `json:"walltime"`
			} `json:"Resource_List"`
		}
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	for id, j := range doc.Jobs {
		if j.State != "R" {
			continue
		}
		st, err := time.ParseInLocation(pbsTimeLayout, j.Stime, time.UTC)
		if err != nil {
			t.Fatal(err)
		}
		end := st.Add(pbsDuration(json.RawMessage(`"` + j.RL.Walltime + `"`)))
		if d := p.Start.Sub(end); d < 0 || d > 30*time.Second {
			t.Errorf("planned start %s, running job %s ends %s", p.Start, id, end)
		}
	}
	// A cell with a running job and nothing queued plans nothing.
	if plan, err := PBSPlan(pbsFixture(t, "running.qstat-f.json"), time.UTC); err != nil || len(plan) != 0 {
		t.Errorf("running.qstat-f.json: plan %+v, %v; want none", plan, err)
	}
}

// TestPBSPlanForms: times as ctime strings in the given zone or as epoch
// seconds, walltimes in their forms, jobs not queued or not estimated left
// out, order by start, and a changed format an error.
func TestPBSPlanForms(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Skip(err)
	}
	doc := `{"Jobs":{
	"9.s":{"job_state":"Q","estimated":{"start_time":"Wed Dec  2 06:05:42 2026","exec_vnode":"(a:ncpus=1)+(b:ncpus=2)+(a:ncpus=1)"},"Resource_List":{"walltime":"01:00:00"}},
	"8.s":{"job_state":"Q","estimated":{"start_time":1796188000,"exec_vnode":"(c:ncpus=1)"},"Resource_List":{"walltime":90}},
	"7.s":{"job_state":"Q","estimated":{"start_time":"1796189000","exec_vnode":"(d:ncpus=1)"}},
	"6.s":{"job_state":"R","estimated":{"start_time":"Wed Dec  2 06:05:42 2026","exec_vnode":"(e:ncpus=1)"}},
	"5.s":{"job_state":"Q"},
	"4.s":{"job_state":"H","estimated":{"start_time":"Wed Dec  2 06:05:42 2026","exec_vnode":"(f:ncpus=1)"}}}}`
	plan, err := PBSPlan([]byte(doc), ny)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range plan {
		got = append(got, p.Job+"@"+p.Start.UTC().Format(time.RFC3339)+"+"+p.Duration.String()+":"+strings.Join(p.Nodes, ","))
	}
	want := "8.s@2026-12-02T05:06:40Z+1m30s:c 7.s@2026-12-02T05:23:20Z+0s:d 9.s@2026-12-02T11:05:42Z+1h0m0s:a,b"
	if strings.Join(got, " ") != want {
		t.Errorf("plan\n%s\nwant\n%s", strings.Join(got, " "), want)
	}
	for _, bad := range []string{
		`not json`,
		`{"Jobs":{"1.s":{"job_state":"Q","estimated":{"start_time":"tomorrow","exec_vnode":"(a:ncpus=1)"}}}}`,
		`{"Jobs":{"1.s":{"job_state":"Q","estimated":{"start_time":1,"exec_vnode":"a"}}}}`,
		`{"Jobs":{"1.s":{"job_state":"Q","estimated":{"start_time":1,"exec_vnode":"(a b:ncpus=1)"}}}}`,
	} {
		if p, err := PBSPlan([]byte(bad), time.UTC); err == nil {
			t.Errorf("PBSPlan(%s) = %+v, want an error", bad, p)
		}
	}
}

// TestReadPBSPlanEnv: qstat is run with -f -F json and TZ=UTC, whatever
// the caller's zone; a qstat that is not there is an error.
func TestReadPBSPlanEnv(t *testing.T) {
	dir := t.TempDir()
	prog := filepath.Join(dir, "qstat")
	script := "#!/bin/sh\necho \"$* $TZ\" > " + filepath.Join(dir, "args") + "\n" +
		`echo '{"Jobs":{"3.s":{"job_state":"Q","estimated":{"start_time":"Wed Dec  2 06:05:42 2026","exec_vnode":"(n1:ncpus=1)"}}}}'` + "\n"
	if err := os.WriteFile(prog, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TZ", "America/New_York")
	plan, err := readPBSPlan(context.Background(), prog)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan) != 1 || !plan[0].Start.Equal(time.Date(2026, 12, 2, 6, 5, 42, 0, time.UTC)) {
		t.Errorf("plan %+v, want 3.s at 06:05:42 UTC", plan)
	}
	args, _ := os.ReadFile(filepath.Join(dir, "args"))
	if got, want := strings.TrimSpace(string(args)), "-f -F json UTC"; got != want {
		t.Errorf("qstat args and TZ = %q, want %q", got, want)
	}
	if _, err := readPBSPlan(context.Background(), filepath.Join(dir, "absent")); err == nil {
		t.Error("an absent qstat gave no error")
	}
}
