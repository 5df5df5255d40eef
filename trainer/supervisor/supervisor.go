// Package supervisor is the per-launch supervisor: "bftrainer node-agent
// supervise", started by the node agent as root, in its own session and
// (where there is cgroup containment) already inside the launch's cgroup.
// It starts one Trainer program as its owner, tells the agent the
// program's pid, forwards the signals it gets, and when the program exits
// by itself records the exit in the node's registry. When we kill the
// Trainer, the supervisor dies with it: an entry without an exit was
// killed, not ended.
package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/bftrainer/bftrainer/trainer/registry"
	"github.com/bftrainer/bftrainer/trainer/wire"
	"golang.org/x/sys/unix"
)

// Main is the supervisor. It reads its request on stdin and acknowledges
// on ack (fd 3 of the process) with the program's pid or the reason it
// could not start it; the program's output is the supervisor's stdout
// and stderr (the launch's log).
func Main(stdin io.Reader, ack *os.File, stderr io.Writer) error {
	logger := log.New(stderr, "bftrainer supervisor: ", 0)
	var req wire.SuperviseRequest
	if err := json.NewDecoder(io.LimitReader(stdin, wire.MaxLaunch)).Decode(&req); err != nil {
		writeAck(ack, wire.Ack{Error: "supervisor: read request: " + err.Error()})
		return err
	}
	// Into the v1 hierarchies first: the program and all it forks are
	// born inside their limits.
	if err := join(req.Join); err != nil {
		writeAck(ack, wire.Ack{Error: err.Error()})
		return err
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		writeAck(ack, wire.Ack{Error: err.Error()})
		return err
	}
	cmd := &exec.Cmd{Path: req.Path, Args: req.Argv, Env: req.Env, Dir: req.Dir,
		Stdin: devnull, Stdout: os.Stdout, Stderr: os.Stderr}
	if req.Switch {
		// Dropping to the owner happens in the child before exec, and
		// before the chdir: a workdir the owner may not enter fails.
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{
			Uid: uint32(req.UID), Gid: uint32(req.GID), Groups: req.Groups}}
	}
	// Take the signals before the program exists, so none is lost.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	start := cmd.Start
	if req.Idle {
		start = func() error { return startIdle(cmd) }
	}
	if err := start(); err != nil {
		writeAck(ack, wire.Ack{Error: err.Error()})
		return err
	}
	devnull.Close()
	writeAck(ack, wire.Ack{PID: cmd.Process.Pid})
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var werr error
	for waiting := true; waiting; {
		select {
		case s := <-sigs:
			err := cmd.Process.Signal(s)
			logger.Printf("forwarded %v to pid %d (%s): %v", s, cmd.Process.Pid, req.Trainer, errOrOK(err))
		case werr = <-done:
			waiting = false
		}
	}
	ex := wire.ExitStatus{Code: cmd.ProcessState.ExitCode(), At: time.Now().UTC()}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		ex.Code, ex.Signal = -1, ws.Signal().String()
	}
	logger.Printf("%s on %s: pid %d exited (code %d %s) %v", req.Trainer, req.Node, cmd.Process.Pid, ex.Code, ex.Signal, errOrOK(werr))
	return recordExit(req, ex)
}

// startIdle starts cmd at SCHED_IDLE. The class is a thread's, and a
// child is born with its forking thread's: so the fork happens from a
// thread of ours made idle for it, which ends with its goroutine (never
// unlocked) instead of running the supervisor's other work idle. The
// program is idle from its first instruction, with no window in which it
// or a thread or child of it runs in the normal class.
func startIdle(cmd *exec.Cmd) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_IDLE}
		if err := unix.SchedSetAttr(0, &attr, 0); err != nil {
			errc <- fmt.Errorf("supervisor: SCHED_IDLE: %w", err)
			return
		}
		errc <- cmd.Start()
	}()
	return <-errc
}

// join writes our pid to each cgroup v1 "cgroup.procs" file.
func join(files []string) error {
	pid := []byte(strconv.Itoa(os.Getpid()))
	for _, f := range files {
		if err := os.WriteFile(f, pid, 0); err != nil {
			return fmt.Errorf("supervisor: join %s: %w", f, err)
		}
	}
	return nil
}

// recordExit writes the exit into the launch's entry, if the entry is
// still this launch's.
func recordExit(req wire.SuperviseRequest, ex wire.ExitStatus) error {
	reg := registry.Registry{Dir: req.Registry}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lk, err := reg.Lock(ctx, req.Node)
	if err != nil {
		return err
	}
	defer lk.Unlock()
	e, ok, err := reg.Entry(req.Node, req.Trainer)
	if err != nil || !ok || e.Token != req.Token {
		return err // stopped and removed meanwhile, or replaced: nothing to say
	}
	e.Exit = &ex
	return reg.Write(e)
}

func writeAck(w *os.File, a wire.Ack) {
	if w == nil {
		return
	}
	b, _ := json.Marshal(a)
	w.Write(append(b, '\n'))
	w.Close()
}

func errOrOK(err error) string {
	var ee *exec.ExitError
	switch {
	case err == nil, errors.As(err, &ee):
		return "ok"
	default:
		return fmt.Sprint(err)
	}
}
