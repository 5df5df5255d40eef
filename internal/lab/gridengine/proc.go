package gridengine

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proc is a process the lab started and waits for.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error // cmd.Wait's, once done is closed
}

// startProc starts cmd in a session of its own (so that no terminal
// signal reaches it) and reaps it when it exits.
func startProc(name string, cmd *exec.Cmd) (*proc, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends sig, waits at most grace, then sends SIGKILL and waits for
// the exit. Stopping an exited process is fine.
func (p *proc) stop(sig syscall.Signal, grace time.Duration) error {
	if p == nil || p.exited() {
		return nil
	}
	p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	p.cmd.Process.Kill()
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) survived SIGKILL", p.name, p.pid())
	}
}

// tokenProcs returns the PIDs of live processes whose environment
// carries the cell's token (zombies have no environment left, and count
// as dead).
func tokenProcs(token string) ([]int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	needle := []byte(tokenVar + "=" + token + "\x00")
	self := os.Getpid()
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !bytes.Contains(append(env, 0), needle) {
			continue
		}
		if zombie(pid) {
			continue
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// zombie reports whether pid has exited and waits for its parent (this
// VM's PID 1 reaps orphans only every second or two).
func zombie(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return true
	}
	// pid (comm) S …: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z' || b[i+2] == 'X'
}

// killToken SIGKILLs every process carrying the token until none is
// left, at most timeout.
func killToken(token string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		pids, err := tokenProcs(token)
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			var left []string
			for _, p := range pids {
				comm, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p), "comm"))
				left = append(left, fmt.Sprintf("%d(%s)", p, strings.TrimSpace(string(comm))))
			}
			return fmt.Errorf("processes of the cell survived SIGKILL: %s", strings.Join(left, " "))
		}
		for _, p := range pids {
			syscall.Kill(p, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// run runs a command to completion; the error carries its output.
func run(name string, args ...string) error {
	return runIn(nil, name, args...)
}

// runIn is run with the given standard input.
func runIn(stdin []byte, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "PATH="+sbinPath)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}
