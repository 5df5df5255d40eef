package hooks

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestListingsParse reads each scheduler's node listing as its documentation
// (Slurm: observed) prints it; "idle" is exactly idle.
func TestListingsParse(t *testing.T) {
	tests := []struct {
		name  string
		sched string
		out   string
		want  map[string]string
	}{
		{"sinfo, a node in two partitions", Slurm, "n1 idle\nn2 comp\nn1 idle\nn3 idle*\nn4 mix\nn4 idle\n",
			map[string]string{"n1": "idle", "n2": "comp", "n3": "idle*", "n4": "mix"}},
		{"bhosts -w", nameLSF, "HOST_NAME STATUS JL/U MAX NJOBS RUN SSUSP USUSP RSV\nc1 ok - 4 0 0 0 0 0\nc2 ok - 4 2 2 0 0 0\nc3 closed_Adm - 4 0 0 0 0 0\n",
			map[string]string{"c1": "idle", "c2": "ok", "c3": "closed_Adm"}},
		{"pbsnodes -a", namePBS, "p1\n     state = free\n     np = 4\n\np2\n     state = free\n     jobs = 0/12.s\n\np3\n     state = down\n",
			map[string]string{"p1": "idle", "p2": "free", "p3": "down"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, ok := Builtin().Lookup(tt.sched)
			if !ok || s.Listing == nil {
				t.Fatalf("no listing for %s", tt.sched)
			}
			got, err := s.Listing.Parse([]byte(tt.out))
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, tt.want) {
				t.Fatalf("Parse = %v, want %v", got, tt.want)
			}
		})
	}
	s, _ := Builtin().Lookup(Slurm)
	if _, err := s.Listing.Parse([]byte("n1;reboot idle\n")); err == nil {
		t.Fatal("a node name that could reach a shell was accepted")
	}
}

// TestQueryRunsTheProgram runs a real program as the listing and keeps the
// nodes asked for.
func TestQueryRunsTheProgram(t *testing.T) {
	l := &Listing{Key: "k", Program: "/bin/sh",
		Args:  func([]string) []string { return []string{"-c", `printf 'n1 idle\nn2 comp\nn3 idle\n'`} },
		Parse: parseSinfo}
	got, err := Query{Listing: l}.NodeStates(context.Background(), []string{"n1", "n2"})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"n1": "idle", "n2": "comp"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("NodeStates = %v, want %v", got, want)
	}
	if _, err := (Query{Listing: l, Program: "/nonexistent/sinfo"}).NodeStates(context.Background(), nil); err == nil {
		t.Fatal("a missing program gave no error")
	}
}

// TestQueryBoundedByItsContext: a listing program that hangs while a child
// of it holds its output open (a wrapper script's background job) returns
// an error soon after ctx ends, instead of waiting for the child: the
// reconciler's idle and start checks bound every call by a context, and a
// round must not outlive it.
func TestQueryBoundedByItsContext(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	// The child inherits stdout and outlives its killed parent.
	l := &Listing{Key: "k", Program: "/bin/sh",
		Args:  func([]string) []string { return []string{"-c", `sleep 600 & echo $! > "$0"; sleep 600`, pidFile} },
		Parse: parseSinfo}
	t.Cleanup(func() {
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := Query{Listing: l}.NodeStates(ctx, nil)
		done <- err
	}()
	// A bound on liveness only, far above the 300 ms context and the 1 s
	// pipe delay: without the delay the call lasts the child's 600 s.
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a listing killed at its deadline gave no error")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("NodeStates still waits 30 s after its context ended (a child holds the listing's output)")
	}
}

// TestRegistry: lookups, validation and the choice between a named and a
// detected scheduler all go through the registry's own list.
func TestRegistry(t *testing.T) {
	// A registry of its own, so that adding a scheduler to Builtin changes
	// nothing here; Builtin's order is checked below.
	r := Registry{slurm, lsf, pbs}
	if got, want := r.Names(), []string{Slurm, nameLSF, namePBS}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Names = %v, want %v", got, want)
	}
	if b, ok := Builtin().Default(); !ok || b.Name != Slurm {
		t.Fatalf("Builtin's first scheduler is %q, want Slurm (detected first; sync's default)", b.Name)
	}
	if err := r.Validate(""); err != nil {
		t.Fatal(err)
	}
	if err := r.Validate("sge"); err == nil || err.Error() != `unknown scheduler "sge" (want slurm, lsf or pbs)` {
		t.Fatalf("Validate(sge) = %v", err)
	}
	if _, err := r.Choose("sge", Input{}); err == nil {
		t.Fatal("an unknown scheduler was chosen")
	}
	s, err := r.Choose("", Input{Env: MapEnv(map[string]string{"LSB_JOBID": "1"})})
	if err != nil || s.Name != nameLSF {
		t.Fatalf("Choose detected %q, %v; want lsf", s.Name, err)
	}
	if !r.BareCall(MapEnv(map[string]string{"SLURM_SCRIPT_CONTEXT": "prolog_slurmctld"})) {
		t.Fatal("a bare Slurm hook call was not recognised")
	}
	if r.BareCall(MapEnv(map[string]string{"SLURM_JOB_ID": "4", "LSB_JOBID": "5"})) {
		t.Fatal("a bare call inside a job, not a hook, was taken for a hook")
	}
	// The node agent's markers are the registry's, each once, whoever
	// declares them.
	r = append(r, Scheduler{Name: "toy", JobMarkers: []string{"TOY_JOB", "PBS_JOBID"}})
	if got, want := r.JobMarkers(), []string{"LSB_JOBID", "PBS_JOBID", "SLURM_JOBID", "SLURM_JOB_ID", "TOY_JOB"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("JobMarkers = %v, want %v", got, want)
	}
}

// TestBuiltinSchedulersComplete: every shipped scheduler says how it is
// wired, names the variables that mark its jobs' processes, has its
// contrib directory, and can be detected and parsed.
func TestBuiltinSchedulersComplete(t *testing.T) {
	for _, s := range Builtin() {
		if s.Name == "" || s.Usage == "" || s.Detect == nil || s.Parse == nil || s.Listing == nil || len(s.JobMarkers) == 0 {
			t.Fatalf("scheduler %+v is incomplete", s)
		}
		if fi, err := os.Stat(filepath.Join("..", s.Contrib)); err != nil || !fi.IsDir() {
			t.Fatalf("%s: contrib directory %s: %v", s.Name, s.Contrib, err)
		}
	}
}
