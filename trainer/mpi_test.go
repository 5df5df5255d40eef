package trainer

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/trainer/wire"
)

// TestMPIArgs: ranks fill each host's slots in the order of the hosts,
// with bftrainer's remote shell, for both flavours.
func TestMPIArgs(t *testing.T) {
	for _, tc := range []struct {
		name, flavor string
		want         []string
	}{
		{"openmpi", FlavorOpenMPI, []string{"mpirun", "--mca", "plm_rsh_agent", "/s/rsh", "--mca", "plm_rsh_no_tree_spawn", "1",
			"--host", "n2:2,n1:2", "-np", "4", "--map-by", "slot", "--bind-to", "none", "python3", "t.py"}},
		{"hydra", FlavorHydra, []string{"mpirun", "-launcher", "ssh", "-launcher-exec", "/s/rsh", "-genvnone",
			"-hosts", "n2:2,n1:2", "-n", "4", "--bind-to", "none", "python3", "t.py"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := MPIArgs(tc.flavor, []string{"mpirun"}, []string{"/s/rsh"}, []string{"--bind-to", "none"}, []string{"n2", "n1"}, 2, []string{"python3", "t.py"})
			if !slices.Equal(got, tc.want) {
				t.Fatalf("MPIArgs:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestMPIRsh: the remote shell turns what Open MPI and Hydra pass to ssh
// into the owner's ssh running mpi-exec on the node, the command joined
// as ssh joins it (for the remote shell to read).
func TestMPIRsh(t *testing.T) {
	env := map[string]string{"BFTRAINER_TRAINER": "tr1", MPISSHEnv: `["ssh","-F","/c"]`, MPIRemoteEnv: `["/usr/bin/bftrainer"]`, MPIExecWaitEnv: "30s"}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"openmpi", []string{"n2", "orted", "-mca", "ess", `"env"`}},
		{"hydra", []string{"-x", "n2", `"/usr/bin/hydra_pmi_proxy" --control-port vm:1 --proxy-id 0`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := MPIRsh(tc.args, func(k string) string { return env[k] })
			if err != nil {
				t.Fatal(err)
			}
			cmd := strings.Join(tc.args[slices.Index(tc.args, "n2")+1:], " ")
			want := []string{"ssh", "-F", "/c", "-o", "BatchMode=yes", "-T", "n2", "--",
				wire.ShellJoin([]string{"/usr/bin/bftrainer", "mpi-exec", "--wait", "30s", "tr1", "n2", "--", "/bin/sh", "-c", cmd})}
			if !slices.Equal(got, want) {
				t.Fatalf("MPIRsh:\n got %q\nwant %q", got, want)
			}
		})
	}
	local := map[string]string{"BFTRAINER_TRAINER": "tr1", MPISSHEnv: "[]", MPIRemoteEnv: `["/b"]`}
	if got, err := MPIRsh([]string{"n2", "orted"}, func(k string) string { return local[k] }); err != nil || !slices.Equal(got, []string{"/b", "mpi-exec", "tr1", "n2", "--", "/bin/sh", "-c", "orted"}) {
		t.Errorf("MPIRsh with ssh = []: %q, %v", got, err)
	}
	for _, bad := range [][]string{{"n2"}, {"-x"}, {"-bad host", "cmd"}, {"--", "cmd"}} {
		if _, err := MPIRsh(bad, func(k string) string { return env[k] }); err == nil {
			t.Errorf("MPIRsh(%q): no error", bad)
		}
	}
}

// TestMPIDirection: a host of the job that is gone or taken makes a
// reclaim; otherwise the size says up or down.
func TestMPIDirection(t *testing.T) {
	l := map[string]*Launched{"n1": {}, "n2": {}, "n3": {}}
	for _, tc := range []struct {
		name               string
		hosts, want, taken []string
		launched           map[string]*Launched
		direction          string
	}{
		{"first start", nil, []string{"n1"}, nil, nil, ""},
		{"grow", []string{"n1"}, []string{"n1", "n2"}, nil, l, Up},
		{"planned shrink", []string{"n1", "n2", "n3"}, []string{"n1", "n2"}, nil, l, Down},
		{"taken", []string{"n1", "n2", "n3"}, []string{"n1", "n2"}, []string{"n3"}, l, Reclaim},
		{"killed by a prolog", []string{"n1", "n2", "n4"}, []string{"n1", "n2"}, nil, l, Reclaim},
	} {
		if got := mpiDirection(tc.hosts, tc.want, tc.taken, tc.launched); got != tc.direction {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.direction)
		}
	}
}

// TestMPIProgram: the installed launchers are found and told apart by
// their --version.
func TestMPIProgram(t *testing.T) {
	for _, tc := range []struct{ cmd, flavor string }{{"mpirun.openmpi", FlavorOpenMPI}, {"mpiexec.hydra", FlavorHydra}} {
		t.Run(tc.cmd, func(t *testing.T) {
			if _, err := exec.LookPath(tc.cmd); err != nil {
				t.Skipf("needs %s (apt-get install openmpi-bin mpich)", tc.cmd)
			}
			cmd, fl, ver, err := MPIProgram(context.Background(), []string{tc.cmd}, FlavorAuto)
			if err != nil {
				t.Fatal(err)
			}
			if fl != tc.flavor || !filepath.IsAbs(cmd[0]) || ver == "" {
				t.Fatalf("MPIProgram(%s) = %q %q %q", tc.cmd, cmd, fl, ver)
			}
			t.Logf("%s: %s", cmd[0], ver)
		})
	}
	if _, _, _, err := MPIProgram(context.Background(), []string{"/bin/true"}, FlavorAuto); err == nil {
		t.Error("/bin/true taken for an MPI launcher")
	}
}

// TestMPILanding: mpi-exec hands a command with its standard streams to
// the landing, which runs it as its child and returns its status; a
// client that goes away takes its command with it.
func TestMPILanding(t *testing.T) {
	trainer, node := "land-"+wire.NewRun()[:8], "n1"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// What a killed landing of the Trainer on the node left.
	session := strings.TrimSuffix(LandSocket(os.Getuid(), trainer, node), ".sock") + ".session"
	if err := landDir(filepath.Dir(session)); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(session, "jf.1", "0"), 0o700); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := MPILand(ctx, trainer, node, 0)
		done <- err
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		os.Remove(LandSocket(os.Getuid(), trainer, node))
		os.RemoveAll(session)
	})
	out := filepath.Join(t.TempDir(), "out")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	// MPIExec passes its own 0, 1, 2: run it in a child whose stdout is f.
	if os.Getenv("BFTRAINER_TEST_MPIEXEC") != "" {
		t.Skip("child")
	}
	code, err := runExecChild(t, f, trainer, node, "echo hello from $BFTRAINER_NODE_X; exit 3")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(out); code != 3 || strings.TrimSpace(string(b)) != "hello from" {
		t.Fatalf("exit %d, output %q", code, b)
	}
	// The daemon's Open MPI session directories are the landing's, made
	// afresh: what the killed landing left is gone.
	f.Truncate(0)
	f.Seek(0, 0)
	if code, err := runExecChild(t, f, trainer, node, "echo $"+ompiSessionEnv+"; ls -A $"+ompiSessionEnv); err != nil || code != 0 {
		t.Fatalf("exit %d, %v", code, err)
	}
	if b, _ := os.ReadFile(out); strings.TrimSpace(string(b)) != session {
		t.Fatalf("the daemon's %s and its content: %q, want %s, empty", ompiSessionEnv, b, session)
	}
	if fi, err := os.Stat(session); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the session directory: %v %v", fi, err)
	}
	// A second landing on the same socket refuses.
	if _, err := MPILand(context.Background(), trainer, node, 0); err == nil || !strings.Contains(err.Error(), "served already") {
		t.Fatalf("a second landing: %v", err)
	}
}

// TestDaemonEnv: a daemon's Open MPI session directories are below the
// landing's directory unless the landing's own environment (the
// Trainer's) or the remote shell's (the site's) names them.
func TestDaemonEnv(t *testing.T) {
	get := func(env []string) []string {
		var vs []string
		for _, kv := range env {
			if k, v, _ := strings.Cut(kv, "="); k == ompiSessionEnv {
				vs = append(vs, v)
			}
		}
		return vs
	}
	for _, tc := range []struct {
		name         string
		own, session []string
		want         string
	}{
		{"neither", []string{"A=1"}, []string{"B=2"}, "/l/t.n.session"},
		{"the Trainer's", []string{ompiSessionEnv + "=/own"}, []string{ompiSessionEnv + "=/site"}, "/own"},
		{"the site's", []string{"A=1"}, []string{ompiSessionEnv + "=/site"}, "/site"},
	} {
		if got := get(daemonEnv(tc.own, tc.session, "/l/t.n.session")); len(got) != 1 || got[0] != tc.want {
			t.Errorf("%s: %s %q, want once %q", tc.name, ompiSessionEnv, got, tc.want)
		}
	}
}

// TestMPIWorkerLanding: a worker landing (launcher mpi-elastic) runs the
// program mpi-rank hands it as its own child, with the rank's
// environment, refuses a second one, and returns the worker's exit
// status; one that no rank reached in time gives up.
func TestMPIWorkerLanding(t *testing.T) {
	if os.Getenv("BFTRAINER_TEST_MPIEXEC") != "" {
		t.Skip("child")
	}
	type result struct {
		code int
		err  error
	}
	land := func(trainer string) chan result {
		done := make(chan result, 1)
		go func() {
			code, err := MPILand(context.Background(), trainer, "n1", time.Minute)
			done <- result{code, err}
		}()
		t.Cleanup(func() { os.Remove(LandSocket(os.Getuid(), trainer, "n1")) })
		return done
	}
	trainer := "wland-" + wire.NewRun()[:8]
	done := land(trainer)
	dir := t.TempDir()
	gate := filepath.Join(dir, "gate")
	if err := syscall.Mkfifo(gate, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("OMPI_COMM_WORLD_RANK", "2")
	env := func(k string) string {
		return map[string]string{"BFTRAINER_TRAINER": trainer, "BFTRAINER_NODE": "n1"}[k]
	}
	script := `echo "rank $OMPI_COMM_WORLD_RANK in $(pwd)" > out; read x < gate; exit 7`
	t.Chdir(dir)
	pid, err := MPIRank(context.Background(), []string{"/bin/sh", "-c", script}, env, 10*time.Second)
	if err != nil || pid <= 0 {
		t.Fatalf("MPIRank: pid %d, %v", pid, err)
	}
	if _, err := MPIRank(context.Background(), []string{"/bin/true"}, env, 10*time.Second); err == nil || !strings.Contains(err.Error(), "runs a worker already") {
		t.Fatalf("a second rank on the node: %v", err)
	}
	if err := os.WriteFile(gate, []byte("go\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.code != 7 || r.err != nil {
		t.Fatalf("the landing returned %d, %v; want the worker's 7", r.code, r.err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "out")); strings.TrimSpace(string(b)) != "rank 2 in "+dir {
		t.Fatalf("the worker wrote %q", b)
	}
	// Stopped (its context ends: SIGTERM), it kills its worker and never
	// exits 0 (which would say the worker finished).
	trainer = "wland-" + wire.NewRun()[:8]
	t.Cleanup(func() { os.Remove(LandSocket(os.Getuid(), trainer, "n1")) })
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan result, 1)
	go func() {
		code, err := MPILand(ctx, trainer, "n1", time.Minute)
		stopped <- result{code, err}
	}()
	pid, err = MPIRank(context.Background(), []string{"/bin/sleep", "300"}, func(k string) string {
		return map[string]string{"BFTRAINER_TRAINER": trainer, "BFTRAINER_NODE": "n1"}[k]
	}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if r := <-stopped; r.code == 0 || r.err != nil {
		t.Fatalf("the stopped landing returned %d, %v; want a non-zero status", r.code, r.err)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Fatalf("the worker %d survives its stopped landing", pid)
	}
	// No rank handed over in time: the landing gives up.
	trainer = "wland-" + wire.NewRun()[:8]
	t.Cleanup(func() { os.Remove(LandSocket(os.Getuid(), trainer, "n1")) })
	if code, err := MPILand(context.Background(), trainer, "n1", 100*time.Millisecond); code == 0 || err == nil || !strings.Contains(err.Error(), "no rank handed over") {
		t.Fatalf("the landing returned %d, %v; want a failure", code, err)
	}
}

// runExecChild runs MPIExec in this test binary's child (TestMPIExecChild)
// with stdout f, and returns its exit status.
func runExecChild(t *testing.T, f *os.File, trainer, node, script string) (int, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestMPIExecChild$")
	cmd.Env = append(os.Environ(), "BFTRAINER_TEST_MPIEXEC="+trainer+" "+node, "BFTRAINER_TEST_SCRIPT="+script)
	cmd.Stdout = f
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return 0, err
	}
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ws.ExitStatus(), nil
}

// TestMPIExecChild is MPIExec in a child process (runExecChild).
func TestMPIExecChild(t *testing.T) {
	v := os.Getenv("BFTRAINER_TEST_MPIEXEC")
	if v == "" {
		t.Skip("run by TestMPILanding")
	}
	tr, node, _ := strings.Cut(v, " ")
	code, err := MPIExec(context.Background(), tr, node, []string{"/bin/sh", "-c", os.Getenv("BFTRAINER_TEST_SCRIPT")}, 10*time.Second)
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(125)
	}
	os.Exit(code)
}
