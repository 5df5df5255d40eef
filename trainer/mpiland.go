package trainer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bftrainer/bftrainer/names"
	"github.com/bftrainer/bftrainer/trainer/wire"
)

// The remote side of an MPI Trainer (launcher mpi). The site's launcher
// (mpirun, mpiexec) runs on the controller as the driver; it starts its
// daemons (orted, hydra_pmi_proxy) on the nodes with a remote shell,
// which is bftrainer's own (MPIRsh): ssh as the owner to the node, where
// `bftrainer mpi-exec` hands the daemon's command, with the ssh
// session's standard input, output and error, to the landing (MPILand)
// that the node agent started there for the Trainer, in the Trainer's
// cgroup. The landing starts the daemon as its child: the daemon and the
// ranks it forks are in the cgroup, so a reclaim's kill and a stop reach
// them as they reach every launcher's processes.

// Environment of the remote side: the driver's, inherited by mpirun and
// so by the remote shell.
const (
	// MPISSHEnv is the owner's ssh command (shell words) MPIRsh runs.
	MPISSHEnv = "BFTRAINER_MPI_SSH"
	// MPIRemoteEnv is the bftrainer command on the nodes (shell words).
	MPIRemoteEnv = "BFTRAINER_MPI_REMOTE"
	// MPIExecWaitEnv bounds mpi-exec's wait for its landing (a duration).
	MPIExecWaitEnv = "BFTRAINER_MPI_EXEC_WAIT"
)

// landRequest is what mpi-exec sends the landing, with its standard
// input, output and error as SCM_RIGHTS.
type landRequest struct {
	Argv []string `json:"argv"`
	Env  []string `json:"env"`
}

// landAnswer is the landing's word back: the child's pid once started,
// then its exit status (or an error).
type landAnswer struct {
	PID   int    `json:"pid,omitempty"`
	Exit  *int   `json:"exit,omitempty"`
	Error string `json:"error,omitempty"`
}

// LandSocket is where the landing of trainer on node listens: a
// directory of the owner's alone (0700, checked) below /tmp — never
// $TMPDIR, which the landing (the launch's environment) and mpi-exec (the
// ssh session's) may see differently — one socket per Trainer and node
// (a test's nodes share a host).
func LandSocket(uid int, trainer, node string) string {
	return filepath.Join("/tmp", "bftrainer-mpi-"+strconv.Itoa(uid), trainer+"."+node+".sock")
}

// landDir makes (or checks) the owner's socket directory: a directory,
// not a link, ours, 0700 — another user who made it first would
// otherwise see, or replace, our sockets.
func landDir(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || int(st.Uid) != os.Getuid() || fi.Mode().Perm() != 0o700 {
		return fmt.Errorf("%s: want a directory of uid %d with mode 0700", dir, os.Getuid())
	}
	return nil
}

// MPILand is `bftrainer mpi-land TRAINER NODE`, the node agent's launch
// of an MPI Trainer on a node: it listens on LandSocket and runs each
// daemon command an mpi-exec hands it, as its child (so in its cgroup),
// in its directory, with its environment (the run token first, the
// Trainer's variables) completed by the ssh session's. A daemon whose
// mpi-exec went away (mpirun was killed, its ssh with it) is killed with
// its process group. It runs until it is killed.
func MPILand(ctx context.Context, trainer, node string) error {
	if err := names.ValidateNode(node); err != nil {
		return err
	}
	path := LandSocket(os.Getuid(), trainer, node)
	if len(path) > 107 {
		return fmt.Errorf("mpi landing: socket path %s longer than 107 bytes", path)
	}
	if err := landDir(filepath.Dir(path)); err != nil {
		return fmt.Errorf("mpi landing: %w", err)
	}
	// A socket left by a landing that was killed: nobody answers on it.
	if c, err := net.Dial("unixpacket", path); err == nil {
		c.Close()
		return fmt.Errorf("mpi landing: %s is served already", path)
	}
	os.Remove(path)
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return fmt.Errorf("mpi landing: %w", err)
	}
	defer ln.Close()
	if err := os.Chmod(path, 0o600); err != nil {
		return fmt.Errorf("mpi landing: %w", err)
	}
	fmt.Fprintf(os.Stderr, "bftrainer: mpi landing of %s on %s listens on %s\n", trainer, node, path)
	go func() { <-ctx.Done(); ln.Close() }()
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("mpi landing: %w", err)
		}
		go serveLand(c)
	}
}

// serveLand runs one daemon command.
func serveLand(c *net.UnixConn) {
	defer c.Close()
	answer := func(a landAnswer) {
		b, _ := json.Marshal(a)
		c.Write(b)
	}
	if err := samePeer(c); err != nil {
		answer(landAnswer{Error: err.Error()})
		return
	}
	buf := make([]byte, 1<<20)
	oob := make([]byte, syscall.CmsgSpace(3*4))
	n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return
	}
	files, err := receivedFiles(oob[:oobn])
	if err != nil || len(files) != 3 {
		for _, f := range files {
			f.Close()
		}
		answer(landAnswer{Error: fmt.Sprintf("want standard input, output and error (got %d): %v", len(files), err)})
		return
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	var req landRequest
	if err := json.Unmarshal(buf[:n], &req); err != nil || len(req.Argv) == 0 {
		answer(landAnswer{Error: fmt.Sprintf("unreadable request: %v", err)})
		return
	}
	cmd := exec.Command(req.Argv[0], req.Argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = files[0], files[1], files[2]
	cmd.Env = landEnv(os.Environ(), req.Env)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		answer(landAnswer{Error: err.Error()})
		return
	}
	answer(landAnswer{PID: cmd.Process.Pid})
	gone := make(chan struct{})
	go func() {
		// The client says nothing more: a read returns when it went away.
		c.Read(make([]byte, 1))
		close(gone)
	}()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		code := exitStatus(cmd.ProcessState, err)
		answer(landAnswer{Exit: &code})
	case <-gone:
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

// samePeer refuses a client of another user (the socket's mode already
// does; root may always connect).
func samePeer(c *net.UnixConn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var cred *syscall.Ucred
	var cerr error
	raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	})
	if cerr != nil {
		return cerr
	}
	if int(cred.Uid) != os.Getuid() && cred.Uid != 0 {
		return fmt.Errorf("uid %d may not use this landing", cred.Uid)
	}
	return nil
}

// receivedFiles reads the descriptors of an SCM_RIGHTS message.
func receivedFiles(oob []byte) ([]*os.File, error) {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var out []*os.File
	for _, m := range msgs {
		fds, err := syscall.ParseUnixRights(&m)
		if err != nil {
			return out, err
		}
		for _, fd := range fds {
			out = append(out, os.NewFile(uintptr(fd), "fd"+strconv.Itoa(fd)))
		}
	}
	return out, nil
}

// landEnv is a daemon's environment: the landing's (the node agent's
// launch: the run token first, the Trainer's variables, BFTRAINER_NODE),
// then the ssh session's for the names the landing does not set.
func landEnv(own, session []string) []string {
	out := slices.Clone(own)
	have := map[string]bool{}
	for _, kv := range own {
		k, _, _ := strings.Cut(kv, "=")
		have[k] = true
	}
	for _, kv := range session {
		k, _, ok := strings.Cut(kv, "=")
		if ok && !have[k] && k != wire.RunEnv {
			out = append(out, kv)
			have[k] = true
		}
	}
	return out
}

// exitStatus is a process's exit code, 128+signal for a signal.
func exitStatus(ps *os.ProcessState, err error) int {
	if ps == nil {
		return 127
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	if err != nil && ps.ExitCode() == 0 {
		return 1
	}
	return ps.ExitCode()
}

// MPIExec is `bftrainer mpi-exec TRAINER NODE -- ARGV…`, run by the ssh
// of MPIRsh on the node: it hands argv and its standard input, output
// and error to the Trainer's landing there and returns the daemon's exit
// status. The landing may not listen yet (the node agent started it a
// moment ago): it is tried again for up to wait. Killed (its ssh went
// away), it leaves the landing to kill the daemon.
func MPIExec(ctx context.Context, trainer, node string, argv []string, wait time.Duration) (int, error) {
	path := LandSocket(os.Getuid(), trainer, node)
	deadline := time.Now().Add(wait)
	var c *net.UnixConn
	for {
		var err error
		c, err = net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("mpi-exec: no landing of %s on %s at %s after %v: %w", trainer, node, path, wait, err)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	defer c.Close()
	b, err := json.Marshal(landRequest{Argv: argv, Env: os.Environ()})
	if err != nil {
		return 0, err
	}
	if _, _, err := c.WriteMsgUnix(b, syscall.UnixRights(0, 1, 2), nil); err != nil {
		return 0, fmt.Errorf("mpi-exec: %w", err)
	}
	// Signals kill us, which is how the landing learns that ssh went.
	signal.Reset(syscall.SIGTERM, syscall.SIGHUP, syscall.SIGINT)
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return 0, fmt.Errorf("mpi-exec: the landing of %s on %s went away: %w", trainer, node, err)
		}
		var a landAnswer
		if err := json.Unmarshal(buf[:n], &a); err != nil {
			return 0, fmt.Errorf("mpi-exec: unreadable answer %q", buf[:n])
		}
		switch {
		case a.Error != "":
			return 0, fmt.Errorf("mpi-exec on %s: %s", node, a.Error)
		case a.Exit != nil:
			return *a.Exit, nil
		}
	}
}

// MPIRsh is `bftrainer mpi-rsh [-x…] HOST COMMAND…`: the remote shell
// Open MPI (plm_rsh_agent) and MPICH's Hydra (-launcher-exec) call as
// they would call ssh, as the Trainer's owner on the controller. It runs
// the owner's ssh (MPISSHEnv) to HOST with `bftrainer mpi-exec` there
// (MPIRemoteEnv), which hands the command — the words joined as ssh
// joins them, for the remote shell to read: Open MPI quotes orted's
// arguments for it — to the Trainer's landing on HOST. It returns the
// ssh command to exec.
func MPIRsh(args []string, getenv func(string) string) ([]string, error) {
	i := 0
	for i < len(args) && strings.HasPrefix(args[i], "-") {
		i++ // ssh options the MPI adds (-x: no X11)
	}
	if len(args)-i < 2 {
		return nil, fmt.Errorf("mpi-rsh: want HOST COMMAND, got %q", args)
	}
	host, command := args[i], strings.Join(args[i+1:], " ")
	if err := names.ValidateNode(host); err != nil {
		return nil, fmt.Errorf("mpi-rsh: %w", err)
	}
	trainer := getenv("BFTRAINER_TRAINER")
	if trainer == "" {
		return nil, errors.New("mpi-rsh: BFTRAINER_TRAINER is not set (run by an MPI Trainer's driver only)")
	}
	remote, err := splitWords(getenv(MPIRemoteEnv), "bftrainer")
	if err != nil {
		return nil, fmt.Errorf("mpi-rsh: %s: %w", MPIRemoteEnv, err)
	}
	remote = append(remote, "mpi-exec")
	if w := getenv(MPIExecWaitEnv); w != "" {
		remote = append(remote, "--wait", w)
	}
	remote = append(remote, trainer, host, "--", "/bin/sh", "-c", command)
	if strings.TrimSpace(getenv(MPISSHEnv)) == "[]" {
		// ssh = []: the nodes are this machine (transport local).
		return remote, nil
	}
	sshWords, err := splitWords(getenv(MPISSHEnv), "ssh")
	if err != nil {
		return nil, fmt.Errorf("mpi-rsh: %s: %w", MPISSHEnv, err)
	}
	return append(sshWords, "-o", "BatchMode=yes", "-T", host, "--", wire.ShellJoin(remote)), nil
}

// splitWords reads a command kept in the environment as a JSON list of
// words; "" is def.
func splitWords(s, def string) ([]string, error) {
	if s == "" {
		return []string{def}, nil
	}
	var w []string
	if err := json.Unmarshal([]byte(s), &w); err != nil || len(w) == 0 {
		return nil, fmt.Errorf("%q: want a JSON list of words", s)
	}
	return w, nil
}

// MPIDriver is `bftrainer mpi-driver STOPFILE GEN -- MPIRUN…`, an MPI
// Trainer's driver on the controller: it runs mpirun (or mpiexec) and,
// once the runner writes GEN to STOPFILE (a change of the Trainer's
// nodes), sends it SIGUSR1, which Open MPI's mpirun and Hydra's mpiexec
// forward to every rank: the ranks' cue to checkpoint at the next step
// boundary and exit. SIGTERM, SIGINT and SIGHUP are passed on. It returns
// mpirun's exit status.
func MPIDriver(ctx context.Context, stopFile, gen string, argv []string, poll time.Duration) (int, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
	fmt.Fprintf(os.Stderr, "bftrainer: mpi driver runs %s\n", wire.ShellJoin(argv))
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("mpi-driver: %w", err)
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	tick := time.NewTicker(poll)
	defer tick.Stop()
	told := false
	for {
		select {
		case err := <-done:
			return exitStatus(cmd.ProcessState, err), nil
		case s := <-sigs:
			cmd.Process.Signal(s)
		case <-tick.C:
			if told {
				continue
			}
			if b, err := os.ReadFile(stopFile); err == nil && strings.TrimSpace(string(b)) == gen {
				told = true
				fmt.Fprintf(os.Stderr, "bftrainer: mpi driver: nodes change (generation %s): SIGUSR1 to pid %d\n", gen, cmd.Process.Pid)
				cmd.Process.Signal(syscall.SIGUSR1)
			}
		case <-ctx.Done():
			cmd.Process.Signal(syscall.SIGTERM)
		}
	}
}
