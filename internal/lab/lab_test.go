package lab

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/pool"
)

// TestMainJob runs the main script for real, with a launch that runs the
// check script here as node "labnode1", while a process carrying a run
// token naming that node lives: the report names it, and Abnormal says
// so; once it is gone, the report is normal.
func TestMainJob(t *testing.T) {
	dir := t.TempDir()
	main, check := filepath.Join(dir, "main.sh"), filepath.Join(dir, "check.sh")
	if err := WriteOnce(main, MainScript(`"$BFT_CHECK"`)); err != nil {
		t.Fatal(err)
	}
	if err := WriteOnce(check, CheckScript("labnode1")); err != nil {
		t.Fatal(err)
	}
	if err := WriteOnce(check, CheckScript("labnode1")); err != nil { // unchanged: left alone
		t.Fatal(err)
	}
	trainer := exec.Command("sleep", "60")
	trainer.Env = append(os.Environ(), "BFTRAINER_RUN=t1/labnode1/abc")
	if err := trainer.Start(); err != nil {
		t.Fatal(err)
	}
	defer trainer.Process.Kill()

	// run runs the job with its output going to out as it is written.
	run := func(out string, env ...string) (Report, error) {
		f, err := os.Create(out)
		if err != nil {
			return Report{}, err
		}
		defer f.Close()
		cmd := exec.Command("/bin/sh", main)
		cmd.Env = append(os.Environ(), append([]string{"BFT_CHECK=" + check}, env...)...)
		cmd.Stdout = f
		if err := cmd.Run(); err != nil {
			return Report{}, err
		}
		return ReadReport(out)
	}
	r, err := run(filepath.Join(dir, "1.out"), "BFT_HOLD=0")
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	if r.Host != host || r.First.IsZero() || r.Checked.Before(r.First) || r.End.Before(r.Checked) {
		t.Errorf("report %+v, want host %s and first <= checked <= end", r, host)
	}
	if got, want := r.Procs["labnode1"], strconv.Itoa(trainer.Process.Pid); got != want {
		t.Errorf("procs on labnode1 = %q, want %q", got, want)
	}
	if bad := r.Abnormal([]string{"labnode1"}); len(bad) != 1 {
		t.Errorf("Abnormal = %q, want the Trainer process", bad)
	}
	if bad := r.Abnormal([]string{"labnode1", "labnode2"}); len(bad) != 2 {
		t.Errorf("Abnormal = %q, want the Trainer process and labnode2 not checked", bad)
	}
	trainer.Process.Kill()
	trainer.Wait()

	// Held: the job has checked its node and holds it until its release
	// file exists.
	release, out := ReleaseFile(dir), filepath.Join(dir, "2.out")
	type result struct {
		r   Report
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := run(out, "BFT_RELEASE="+release)
		done <- result{r, err}
	}()
	err = Poll(context.Background(), 30*time.Second, func() (bool, error) {
		r, err := ReadReport(out)
		return err == nil && !r.Checked.IsZero(), nil
	})
	if err != nil {
		t.Fatalf("the held job did not check its node: %v", err)
	}
	select {
	case res := <-done:
		t.Fatalf("a held job ended before its release: %+v %v", res.r, res.err)
	default:
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	r = res.r
	if bad := r.Abnormal([]string{"labnode1"}); len(bad) != 0 || r.Procs["labnode1"] != "none" {
		t.Errorf("after the Trainer ended: %q, %+v", bad, r)
	}
	if !slices.Equal(r.Abnormal(nil), []string{"checked labnode1, which the job does not hold"}) {
		t.Errorf("Abnormal(nil) = %q", r.Abnormal(nil))
	}
}

func TestLookPath(t *testing.T) {
	if p, err := LookPath("sh"); err != nil || !filepath.IsAbs(p) {
		t.Errorf("LookPath(sh) = %q, %v", p, err)
	}
	if _, err := LookPath("no-such-program-bft"); err == nil {
		t.Error("LookPath found a program that does not exist")
	}
}

// TestMismatch: agreement is ""; each kind of disagreement is named.
func TestMismatch(t *testing.T) {
	nodes := map[string]pool.Node{"a": {State: pool.Idle, Trainer: "t1"}, "b": {State: pool.Busy}}
	if got := Mismatch([]string{"a", "b"}, nodes, []string{"a"}, map[string]map[string][]int{"a": {"t1": {10}}}, "qhost"); got != "" {
		t.Errorf("agreeing: %q", got)
	}
	for _, c := range []struct {
		idle  []string
		procs map[string]map[string][]int
		want  string
	}{
		{[]string{"a", "b"}, map[string]map[string][]int{"a": {"t1": {10}}}, `b: pool "busy", qhost idle true`},
		{[]string{"a"}, map[string]map[string][]int{"a": {"t1": {10}}, "b": {"t2": {11}}}, `b runs t2, the pool says ""`},
		{[]string{"a"}, nil, "a should run t1"},
	} {
		if got := Mismatch([]string{"a", "b"}, nodes, c.idle, c.procs, "qhost"); got != c.want {
			t.Errorf("got %q, want %q", got, c.want)
		}
	}
}
