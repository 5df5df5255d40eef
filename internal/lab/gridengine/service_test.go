package gridengine

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// service is a long-running bftrainer command of the test install (the
// reconciler's `reconcile --watch`), its standard output and error in a
// log file and its exit watched, so that a test that fails because it
// stopped working can say why: it exited (how, and its last lines), or it
// still runs and is blocked (its goroutines, dumped by SIGQUIT).
type service struct {
	*proc
	log     string
	started time.Time
	gone    chan struct{} // closed once exited is set, after done
	exited  time.Time
}

// startService starts cmd with its standard output and error appended to
// log (a file, so no copying goroutine can hold its Wait).
func startService(cmd *exec.Cmd, log string) (*service, error) {
	if err := os.MkdirAll(filepath.Dir(log), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close() // the child has its own copy
	cmd.Stdout, cmd.Stderr = f, f
	p, err := startProc(strings.Join(cmd.Args, " "), cmd)
	if err != nil {
		return nil, err
	}
	s := &service{proc: p, log: log, started: time.Now(), gone: make(chan struct{})}
	go func() {
		<-p.done
		s.exited = time.Now()
		close(s.gone)
	}()
	return s, nil
}

// running reports whether the service has not exited.
func (s *service) running() bool {
	select {
	case <-s.gone:
		return false
	default:
		return true
	}
}

// kill stops the service with SIGKILL and waits for its exit.
func (s *service) kill() error { return s.stop(syscall.SIGKILL, 0) }

// report says how the service ended and prints its log. One still running
// gets SIGQUIT first: the Go runtime prints every goroutine's stack and
// exits, which shows where a round blocked. Call it only when the service
// is no longer needed.
func (s *service) report() string {
	var b strings.Builder
	if s.running() {
		fmt.Fprintf(&b, "==> service %s (pid %d): still running after %v; SIGQUIT for its goroutines <==\n",
			s.name, s.pid(), time.Since(s.started).Round(time.Millisecond))
		s.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-s.gone:
			fmt.Fprintf(&b, "(it exited: %v)\n", s.err)
		case <-time.After(10 * time.Second):
			b.WriteString("(no exit 10 s after SIGQUIT)\n")
		}
	} else {
		fmt.Fprintf(&b, "==> service %s (pid %d): EXITED at %s (%v after its start): %v <==\n",
			s.name, s.pid(), s.exited.UTC().Format(time.RFC3339Nano), s.exited.Sub(s.started).Round(time.Millisecond), s.err)
	}
	out, err := os.ReadFile(s.log)
	if err != nil {
		fmt.Fprintf(&b, "(its log: %v)\n", err)
		return b.String()
	}
	const most = 256 << 10
	if len(out) > most {
		fmt.Fprintf(&b, "(its log's last %d of %d bytes)\n", most, len(out))
		out = out[len(out)-most:]
	}
	fmt.Fprintf(&b, "==> %s <==\n%s\n", s.log, out)
	return b.String()
}
