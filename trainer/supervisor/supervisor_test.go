package supervisor_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/trainer/registry"
	"github.com/bftrainer/bftrainer/trainer/supervisor"
	"github.com/bftrainer/bftrainer/trainer/wire"
	"golang.org/x/sys/unix"
)

// superviseEnv, set, makes the test binary the supervisor, as the node
// agent runs it ("node-agent supervise" calls Main the same way).
const superviseEnv = "BFTRAINER_SUPERVISOR_TEST"

func TestMain(m *testing.M) {
	if os.Getenv(superviseEnv) != "" {
		if err := supervisor.Main(os.Stdin, os.NewFile(3, "ack"), os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "supervisor:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// run is one supervisor process started the way the node agent starts
// it: the request on stdin, the ack on fd 3, its own session.
type run struct {
	cmd    *exec.Cmd
	ack    wire.Ack
	out    *bufio.Scanner // the program's output
	stderr *strings.Builder
}

func supervise(t *testing.T, request []byte) *run {
	t.Helper()
	ackR, ackW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer ackR.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = []string{superviseEnv + "=1", "PATH=/usr/bin:/bin"}
	cmd.Stdin = strings.NewReader(string(request))
	r := &run{cmd: cmd, stderr: &strings.Builder{}}
	cmd.Stderr = r.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	r.out = bufio.NewScanner(out)
	cmd.ExtraFiles = []*os.File{ackW}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ackW.Close()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // what a reclaim does; nothing left behind
		cmd.Wait()
	})
	line, err := bufio.NewReader(ackR).ReadBytes('\n')
	if err != nil {
		t.Fatalf("no ack: %v; stderr %s", err, r.stderr)
	}
	if err := json.Unmarshal(line, &r.ack); err != nil {
		t.Fatalf("ack %q: %v", line, err)
	}
	return r
}

// wait waits for the supervisor and returns its exit code.
func (r *run) wait(t *testing.T) int {
	t.Helper()
	for r.out.Scan() { // the program's output, to its end
	}
	err := r.cmd.Wait()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return r.cmd.ProcessState.ExitCode()
}

func request(t *testing.T, reg registry.Registry, token, script string) wire.SuperviseRequest {
	return wire.SuperviseRequest{Registry: reg.Dir, Node: "n1", Trainer: "alpha", Token: token,
		Path: "/bin/sh", Argv: []string{"sh", "-c", script}, Env: []string{"PATH=/usr/bin:/bin"}, Dir: "/"}
}

func mustJSON(t *testing.T, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestExitRecorded: the program's exit, by itself, is recorded in the
// launch's entry (code, or -1 and the signal that killed it, and when),
// the ack carries the program's own pid, and its output is the
// supervisor's. An entry that is not this launch's any more (replaced by
// another launch, or removed by a stop) is left as it is.
func TestExitRecorded(t *testing.T) {
	for _, c := range []struct {
		name     string
		script   string
		entry    string // the token of the entry in the registry; "" for none
		wantExit *wire.ExitStatus
	}{
		{"exit 0", "echo $$; exit 0", "tok", &wire.ExitStatus{Code: 0}},
		{"exit 3", "echo $$; exit 3", "tok", &wire.ExitStatus{Code: 3}},
		{"killed by a signal", "echo $$; kill -KILL $$", "tok", &wire.ExitStatus{Code: -1, Signal: "killed"}},
		{"terminated by a signal", "echo $$; kill -TERM $$", "tok", &wire.ExitStatus{Code: -1, Signal: "terminated"}},
		{"entry of another launch", "echo $$; exit 3", "other", nil},
		{"entry removed", "echo $$; exit 3", "", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			reg := registry.Registry{Dir: filepath.Join(t.TempDir(), "nodes")}
			before := time.Now()
			if c.entry != "" {
				if err := reg.Write(wire.Entry{Trainer: "alpha", Node: "n1", Token: c.entry, Started: before.UTC()}); err != nil {
					t.Fatal(err)
				}
			}
			r := supervise(t, mustJSON(t, request(t, reg, "tok", c.script)))
			if r.ack.Error != "" || r.ack.PID <= 0 {
				t.Fatalf("ack %+v", r.ack)
			}
			if !r.out.Scan() || r.out.Text() != strconv.Itoa(r.ack.PID) {
				t.Fatalf("the program says its pid is %q, the ack %d", r.out.Text(), r.ack.PID)
			}
			if code := r.wait(t); code != 0 {
				t.Fatalf("supervisor exit %d; stderr %s", code, r.stderr)
			}
			after := time.Now()
			e, ok, err := reg.Entry("n1", "alpha")
			if err != nil || ok != (c.entry != "") {
				t.Fatalf("entry after: ok %v, %v; want ok %v", ok, err, c.entry != "")
			}
			if c.wantExit == nil {
				if e.Exit != nil {
					t.Fatalf("an entry not this launch's got an exit: %+v", e.Exit)
				}
				return
			}
			if e.Exit == nil || e.Exit.Code != c.wantExit.Code || e.Exit.Signal != c.wantExit.Signal ||
				e.Exit.At.Before(before) || e.Exit.At.After(after) {
				t.Fatalf("exit recorded %+v, want %+v between %v and %v", e.Exit, c.wantExit, before, after)
			}
			if !strings.Contains(r.stderr.String(), fmt.Sprintf("pid %d exited", r.ack.PID)) {
				t.Errorf("the supervisor's log does not say the pid exited: %s", r.stderr)
			}
		})
	}
}

// TestNotStarted: a request the supervisor cannot carry out is refused
// in the ack, with the reason, and no program runs.
func TestNotStarted(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "ran")
	reg := registry.Registry{Dir: filepath.Join(dir, "nodes")}
	script := "touch " + marker
	for _, c := range []struct {
		name string
		req  func() []byte
		want string
	}{
		{"request not JSON", func() []byte { return []byte("{half") }, "read request"},
		{"program missing", func() []byte {
			q := request(t, reg, "tok", script)
			q.Path = filepath.Join(dir, "no-such-program")
			return mustJSON(t, q)
		}, "no such file"},
		{"workdir missing", func() []byte {
			q := request(t, reg, "tok", script)
			q.Dir = filepath.Join(dir, "no-such-dir")
			return mustJSON(t, q)
		}, "no-such-dir"},
		{"cgroup to join missing", func() []byte {
			q := request(t, reg, "tok", script)
			q.Join = []string{filepath.Join(dir, "no-such-cgroup", "cgroup.procs")}
			return mustJSON(t, q)
		}, "join"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := supervise(t, c.req())
			if r.ack.PID != 0 || !strings.Contains(r.ack.Error, c.want) {
				t.Fatalf("ack %+v, want no pid and an error with %q", r.ack, c.want)
			}
			if code := r.wait(t); code == 0 {
				t.Fatalf("supervisor exit 0 after a refused start")
			}
			if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the program ran: %v", err)
			}
		})
	}
}

// TestJoin: the supervisor writes its own pid into each cgroup.procs
// file it is given before it starts the program (here plain files stand
// for cgroup v1 hierarchies).
func TestJoin(t *testing.T) {
	dir := t.TempDir()
	reg := registry.Registry{Dir: filepath.Join(dir, "nodes")}
	procs := []string{filepath.Join(dir, "cpu.procs"), filepath.Join(dir, "memory.procs")}
	for _, p := range procs {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	q := request(t, reg, "tok", "for f in "+strings.Join(procs, " ")+"; do cat $f; echo; done")
	q.Join = procs
	r := supervise(t, mustJSON(t, q))
	if r.ack.Error != "" {
		t.Fatalf("ack %+v", r.ack)
	}
	sup := strconv.Itoa(r.cmd.Process.Pid)
	// What the program read: the files were written before it started.
	for _, p := range procs {
		if !r.out.Scan() || r.out.Text() != sup {
			t.Fatalf("%s read by the program: %q, want the supervisor's pid %s", p, r.out.Text(), sup)
		}
	}
	if code := r.wait(t); code != 0 {
		t.Fatalf("supervisor exit %d: %s", code, r.stderr)
	}
}

// TestSignalForwarded: a signal sent to the supervisor alone reaches the
// program, which may handle it and exit as it likes; the exit is then
// recorded as the program's own.
func TestSignalForwarded(t *testing.T) {
	for _, c := range []struct {
		name string
		sig  syscall.Signal
		trap string
	}{
		{"TERM", syscall.SIGTERM, "TERM"},
		{"INT", syscall.SIGINT, "INT"},
		{"HUP", syscall.SIGHUP, "HUP"},
	} {
		t.Run(c.name, func(t *testing.T) {
			reg := registry.Registry{Dir: filepath.Join(t.TempDir(), "nodes")}
			if err := reg.Write(wire.Entry{Trainer: "alpha", Node: "n1", Token: "tok"}); err != nil {
				t.Fatal(err)
			}
			// The program says it is ready once its trap is set, then waits
			// for a child that never ends by itself.
			script := fmt.Sprintf(`trap 'kill $child; echo got %s; exit 7' %s; sleep 1000 & child=$!; echo ready; wait $child`, c.trap, c.trap)
			r := supervise(t, mustJSON(t, request(t, reg, "tok", script)))
			if r.ack.Error != "" {
				t.Fatalf("ack %+v", r.ack)
			}
			if !r.out.Scan() || r.out.Text() != "ready" {
				t.Fatalf("program not ready: %q %s", r.out.Text(), r.stderr)
			}
			// Should the signal go nowhere, the program would wait forever:
			// end it then, so that the test fails rather than hangs.
			watchdog := time.AfterFunc(30*time.Second, func() { syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL) })
			defer watchdog.Stop()
			// To the supervisor's pid only, not its process group.
			if err := syscall.Kill(r.cmd.Process.Pid, c.sig); err != nil {
				t.Fatal(err)
			}
			if !r.out.Scan() || r.out.Text() != "got "+c.trap {
				t.Fatalf("the program did not get %s: %q", c.trap, r.out.Text())
			}
			if code := r.wait(t); code != 0 {
				t.Fatalf("supervisor exit %d: %s", code, r.stderr)
			}
			e, _, err := reg.Entry("n1", "alpha")
			if err != nil || e.Exit == nil || e.Exit.Code != 7 {
				t.Fatalf("exit recorded %+v (%v), want code 7", e.Exit, err)
			}
			if !strings.Contains(r.stderr.String(), "forwarded") {
				t.Errorf("the supervisor's log does not say it forwarded the signal: %s", r.stderr)
			}
		})
	}
}

// TestSwitchToOwner: as root, the supervisor starts the program as its
// owner (uid, gid, groups), and a workdir the owner may not enter stops
// the start.
func TestSwitchToOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch users")
	}
	dir := t.TempDir() // 0700, root's: nobody may not enter it
	reg := registry.Registry{Dir: filepath.Join(dir, "nodes")}
	q := request(t, reg, "tok", "id -u; id -g; id -G")
	q.Switch, q.UID, q.GID, q.Groups = true, 65534, 65534, []uint32{65534, 100}
	r := supervise(t, mustJSON(t, q))
	if r.ack.Error != "" {
		t.Fatalf("ack %+v", r.ack)
	}
	var got []string
	for r.out.Scan() {
		got = append(got, r.out.Text())
	}
	if strings.Join(got, ",") != "65534,65534,65534 100" {
		t.Fatalf("the program ran as %q, want uid 65534, gid 65534, groups 65534 100", got)
	}
	if code := r.wait(t); code != 0 {
		t.Fatalf("supervisor exit %d: %s", code, r.stderr)
	}
	q.Dir = dir
	r = supervise(t, mustJSON(t, q))
	if r.ack.PID != 0 || !strings.Contains(r.ack.Error, "permission denied") {
		t.Fatalf("a workdir the owner may not enter: ack %+v, want permission denied", r.ack)
	}
	r.wait(t)
}

// TestIdle: with Idle, the program and a child it forks run at
// SCHED_IDLE from their start; without, in the normal class.
func TestIdle(t *testing.T) {
	for _, idle := range []bool{true, false} {
		t.Run(fmt.Sprintf("idle=%v", idle), func(t *testing.T) {
			reg := registry.Registry{Dir: filepath.Join(t.TempDir(), "nodes")}
			req := request(t, reg, "tok", "sleep 1000 & echo $$ $!; wait")
			req.Idle = idle
			r := supervise(t, mustJSON(t, req))
			if r.ack.Error != "" {
				t.Fatalf("ack %+v; stderr %s", r.ack, r.stderr)
			}
			if !r.out.Scan() {
				t.Fatalf("no pids from the program; stderr %s", r.stderr)
			}
			want := uint32(unix.SCHED_NORMAL)
			if idle {
				want = unix.SCHED_IDLE
			}
			for _, f := range strings.Fields(r.out.Text()) {
				pid, err := strconv.Atoi(f)
				if err != nil {
					t.Fatalf("pid %q: %v", f, err)
				}
				attr, err := unix.SchedGetAttr(pid, 0)
				if err != nil {
					t.Fatal(err)
				}
				if attr.Policy != want {
					t.Errorf("pid %d runs in scheduling class %d, want %d", pid, attr.Policy, want)
				}
			}
		})
	}
}
