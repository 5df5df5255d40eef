package trainer

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
	"syscall"
	"time"
)

// Supervise is the supervisor: "bftrainer node-agent supervise", started
// by Start as root in its own session. It reads its request on stdin,
// starts the program as the owner (in its process group), acknowledges
// on ack (fd 3) with the program's pid, forwards SIGTERM, SIGINT and
// SIGHUP to the program, and when the program exits by itself records
// its exit status in the registry. When we kill the Trainer, the
// supervisor dies with it (same group): an entry without an exit was
// killed, not ended.
func Supervise(stdin io.Reader, ackw *os.File, stderr io.Writer) error {
	logger := log.New(stderr, "bftrainer supervisor: ", 0)
	var req superviseRequest
	if err := json.NewDecoder(io.LimitReader(stdin, maxLaunch)).Decode(&req); err != nil {
		writeAck(ackw, ack{Error: "supervisor: read request: " + err.Error()})
		return err
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		writeAck(ackw, ack{Error: err.Error()})
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
	if err := cmd.Start(); err != nil {
		writeAck(ackw, ack{Error: err.Error()})
		return err
	}
	devnull.Close()
	writeAck(ackw, ack{PID: cmd.Process.Pid})
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
	ex := ExitStatus{Code: cmd.ProcessState.ExitCode(), At: time.Now().UTC()}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		ex.Code, ex.Signal = -1, ws.Signal().String()
	}
	logger.Printf("%s on %s: pid %d exited (code %d %s) %v", req.Trainer, req.Node, cmd.Process.Pid, ex.Code, ex.Signal, errOrOK(werr))
	return recordExit(req, ex)
}

// recordExit writes the exit into the launch's entry, if the entry is
// still this launch's.
func recordExit(req superviseRequest, ex ExitStatus) error {
	reg := Registry{Dir: req.Registry}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lk, err := reg.lock(ctx, req.Node)
	if err != nil {
		return err
	}
	defer lk.unlock()
	e, ok, err := reg.Entry(req.Node, req.Trainer)
	if err != nil || !ok || e.Token != req.Token {
		return err // stopped and removed meanwhile, or replaced: nothing to say
	}
	e.Exit = &ex
	return reg.write(e)
}

func writeAck(w *os.File, a ack) {
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
