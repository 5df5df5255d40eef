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
	"sync"
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
// input, output and error as SCM_RIGHTS; or what mpi-rank sends a
// worker landing (Detach, no descriptors): a rank's program to run as
// the landing's own child, out of the MPI job.
type landRequest struct {
	Argv   []string `json:"argv"`
	Env    []string `json:"env"`
	Detach bool     `json:"detach,omitempty"`
	Dir    string   `json:"dir,omitempty"`
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

// MPILand is `bftrainer mpi-land [--worker-wait D] TRAINER NODE`, the
// node agent's launch of an MPI Trainer on a node: it listens on
// LandSocket and runs each daemon command an mpi-exec hands it, as its
// child (so in its cgroup), in its directory, with its environment (the
// run token first, the Trainer's variables) completed by the ssh
// session's. A daemon whose mpi-exec went away (mpirun was killed, its
// ssh with it) is killed with its process group. It runs until it is
// killed.
//
// With worker > 0 it is a worker landing (launcher mpi-elastic): it also
// takes one rank's program from mpi-rank and runs it as its own child
// (Detach), out of the MPI job, and returns that worker's exit status
// when it ends — the node's launch is then the worker, as for the
// elastic launcher. It gives up (status 1) when no rank was handed over
// within worker. (Its daemon's session ending says nothing: Open MPI's
// orted daemonizes, and its ssh session ends at once.)
func MPILand(ctx context.Context, trainer, node string, worker time.Duration) (int, error) {
	if err := names.ValidateNode(node); err != nil {
		return 0, err
	}
	path := LandSocket(os.Getuid(), trainer, node)
	if len(path) > 107 {
		return 0, fmt.Errorf("mpi landing: socket path %s longer than 107 bytes", path)
	}
	if err := landDir(filepath.Dir(path)); err != nil {
		return 0, fmt.Errorf("mpi landing: %w", err)
	}
	// A socket left by a landing that was killed: nobody answers on it.
	if c, err := net.Dial("unixpacket", path); err == nil {
		c.Close()
		return 0, fmt.Errorf("mpi landing: %s is served already", path)
	}
	os.Remove(path)
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return 0, fmt.Errorf("mpi landing: %w", err)
	}
	defer ln.Close()
	if err := os.Chmod(path, 0o600); err != nil {
		return 0, fmt.Errorf("mpi landing: %w", err)
	}
	fmt.Fprintf(os.Stderr, "bftrainer: mpi landing of %s on %s listens on %s\n", trainer, node, path)
	// The daemons' session directory: a killed landing's is left, so it
	// is made afresh (no other landing of this Trainer and node runs:
	// the socket above was not served).
	tmp := strings.TrimSuffix(path, ".sock") + ".session"
	if err := os.RemoveAll(tmp); err != nil {
		return 0, fmt.Errorf("mpi landing: %w", err)
	}
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return 0, fmt.Errorf("mpi landing: %w", err)
	}
	l := &landing{worker: worker > 0, done: make(chan int, 1), session: tmp}
	accepted := make(chan error, 1)
	go func() {
		for {
			c, err := ln.AcceptUnix()
			if err != nil {
				accepted <- err
				return
			}
			go l.serve(c)
		}
	}()
	var giveUp <-chan time.Time
	if worker > 0 {
		giveUp = time.After(worker)
	}
	for {
		select {
		case err := <-accepted:
			if ctx.Err() != nil {
				return 0, nil
			}
			return 0, fmt.Errorf("mpi landing: %w", err)
		case <-ctx.Done():
			if worker > 0 {
				// Stopped (SIGTERM): the worker with it, and never an
				// exit 0, which says the worker finished or left.
				if l.kill() {
					<-l.done
				}
				return 128 + int(syscall.SIGTERM), nil
			}
			return 0, nil
		case code := <-l.done:
			fmt.Fprintf(os.Stderr, "bftrainer: mpi landing: the worker exited %d\n", code)
			return code, nil
		case <-giveUp:
			if !l.adopted() {
				return 1, fmt.Errorf("mpi landing: no rank handed over within %v (see the driver's log: did mpirun start?)", worker)
			}
		}
	}
}

// landing is what a landing's connections share: in a worker landing,
// the worker it adopted.
type landing struct {
	worker  bool
	session string // the daemons' session directory (daemonEnv)
	mu      sync.Mutex
	cmd     *exec.Cmd // the adopted worker
	done    chan int  // its exit status
}

func (l *landing) adopted() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cmd != nil
}

// kill kills the adopted worker's process group; false when there is
// none.
func (l *landing) kill() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cmd == nil {
		return false
	}
	syscall.Kill(-l.cmd.Process.Pid, syscall.SIGKILL)
	return true
}

// adopt starts a rank's program as the landing's child: its process
// group of its own, standard input from /dev/null, output and error the
// landing's (the node agent's log of the launch: the MPI daemon, whose
// pipes these would otherwise be, goes once the ranks are handed over),
// the environment the landing's completed by the rank's (the MPI rank
// and world). It is recorded before the rank hears back, so before the
// daemon can end.
func (l *landing) adopt(req landRequest) (int, error) {
	if !l.worker {
		return 0, errors.New("not a worker landing (launcher mpi-elastic only)")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cmd != nil {
		return 0, fmt.Errorf("this landing runs a worker already (pid %d): one worker per node", l.cmd.Process.Pid)
	}
	cmd := exec.Command(req.Argv[0], req.Argv[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.Env = landEnv(os.Environ(), req.Env)
	cmd.Dir = req.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	l.cmd = cmd
	go func() {
		err := cmd.Wait()
		l.done <- exitStatus(cmd.ProcessState, err)
	}()
	return cmd.Process.Pid, nil
}

// serve runs one daemon command, or adopts one rank's program.
func (l *landing) serve(c *net.UnixConn) {
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
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	var req landRequest
	if jerr := json.Unmarshal(buf[:n], &req); jerr != nil || len(req.Argv) == 0 {
		answer(landAnswer{Error: fmt.Sprintf("unreadable request: %v", jerr)})
		return
	}
	if req.Detach {
		pid, err := l.adopt(req)
		if err != nil {
			answer(landAnswer{Error: err.Error()})
			return
		}
		answer(landAnswer{PID: pid})
		return
	}
	if err != nil || len(files) != 3 {
		answer(landAnswer{Error: fmt.Sprintf("want standard input, output and error (got %d): %v", len(files), err)})
		return
	}
	cmd := exec.Command(req.Argv[0], req.Argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = files[0], files[1], files[2]
	cmd.Env = daemonEnv(os.Environ(), req.Env, l.session)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		answer(landAnswer{Error: err.Error()})
		return
	}
	pid := cmd.Process.Pid
	answer(landAnswer{PID: pid})
	fmt.Fprintf(os.Stderr, "bftrainer: mpi landing: daemon %d started\n", pid)
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
		fmt.Fprintf(os.Stderr, "bftrainer: mpi landing: daemon %d exited %d\n", pid, code)
		answer(landAnswer{Exit: &code})
	case <-gone:
		fmt.Fprintf(os.Stderr, "bftrainer: mpi landing: the remote shell of daemon %d went away: its process group killed\n", pid)
		syscall.Kill(-pid, syscall.SIGKILL)
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

// ompiSessionEnv is Open MPI's (ORTE's) base of its session directories.
const ompiSessionEnv = "OMPI_MCA_orte_tmpdir_base"

// daemonEnv is a daemon's environment: landEnv's, with Open MPI's
// session directories below the landing's own directory (session)
// unless the Trainer or the site chose theirs. A daemon and its ranks
// keep their session files there (the job family's directory, shared by
// every daemon of the job on a host). In the lab every node is one host:
// two orteds of a job on "two nodes" shared /tmp/ompi.HOST.UID/jf.N
// (its hwloc.sm and the daemons' directories), and at times one of them
// ended before reporting to mpirun, which waited for it for ever — the
// MPI job hung at its start (TestSlurmMPI: 4 of 25 runs with both cores
// busy, and the fresh-clone CI once; 0 of 60 with a directory per
// landing). On a cluster it also keeps what a killed job leaves (a
// reclaim's SIGKILL, no cleanup) in one place that the next landing of
// the Trainer on the node removes, instead of piling up in /tmp.
func daemonEnv(own, session []string, dir string) []string {
	out := landEnv(own, session)
	for _, kv := range out {
		if k, _, _ := strings.Cut(kv, "="); k == ompiSessionEnv {
			return out
		}
	}
	return append(out, ompiSessionEnv+"="+dir)
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
	c, err := dialLanding(ctx, trainer, node, wait)
	if err != nil {
		return 0, fmt.Errorf("mpi-exec: %w", err)
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

// MPIRank is `bftrainer mpi-rank -- ARGV…`, the program mpirun starts as
// each rank of a mpi-elastic Trainer's first generation: it hands ARGV,
// with the rank's environment (the MPI rank and world size the runtime
// reads) and directory, to the worker landing of its node
// (BFTRAINER_TRAINER, BFTRAINER_NODE), which runs it as its own child;
// then it exits 0. So the MPI job ends once every rank was handed over,
// and no MPI daemon's fate — mpirun aborts the whole job when one
// daemon dies — reaches a worker afterwards. It returns the worker's pid.
func MPIRank(ctx context.Context, argv []string, getenv func(string) string, wait time.Duration) (int, error) {
	trainer, node := getenv("BFTRAINER_TRAINER"), getenv("BFTRAINER_NODE")
	if trainer == "" || node == "" {
		return 0, errors.New("mpi-rank: BFTRAINER_TRAINER or BFTRAINER_NODE not set (run by an mpi-elastic Trainer's mpirun only)")
	}
	if len(argv) == 0 {
		return 0, errors.New("mpi-rank: no program")
	}
	c, err := dialLanding(ctx, trainer, node, wait)
	if err != nil {
		return 0, fmt.Errorf("mpi-rank: %w", err)
	}
	defer c.Close()
	dir, _ := os.Getwd()
	b, err := json.Marshal(landRequest{Argv: argv, Env: os.Environ(), Detach: true, Dir: dir})
	if err != nil {
		return 0, err
	}
	if _, err := c.Write(b); err != nil {
		return 0, fmt.Errorf("mpi-rank: %w", err)
	}
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		return 0, fmt.Errorf("mpi-rank: the landing of %s on %s went away: %w", trainer, node, err)
	}
	var a landAnswer
	if err := json.Unmarshal(buf[:n], &a); err != nil {
		return 0, fmt.Errorf("mpi-rank: unreadable answer %q", buf[:n])
	}
	if a.Error != "" {
		return 0, fmt.Errorf("mpi-rank on %s: %s", node, a.Error)
	}
	return a.PID, nil
}

// dialLanding connects to the landing of trainer on node, trying again
// for up to wait (the node agent may have started it a moment ago).
func dialLanding(ctx context.Context, trainer, node string, wait time.Duration) (*net.UnixConn, error) {
	path := LandSocket(os.Getuid(), trainer, node)
	deadline := time.Now().Add(wait)
	for {
		c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
		if err == nil {
			return c, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no landing of %s on %s at %s after %v: %w", trainer, node, path, wait, err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// MPIStart is what the runner asks of a mpi-elastic Trainer's driver
// (MPIStartFile): start generation Gen's mpirun, Argv.
type MPIStart struct {
	Gen  int      `json:"gen"`
	Argv []string `json:"argv"`
}

// MPIElasticDriver is `bftrainer mpi-elastic-driver STARTFILE --
// STORE…`, a mpi-elastic Trainer's one process on the controller (the
// node agent keeps one launch per Trainer there): it runs the elastic
// store process (STORE…) and, each time the runner writes a new
// generation to STARTFILE (an MPIStart), that generation's mpirun. It
// returns when the store process ends (its status), killing a mpirun
// still running; SIGTERM, SIGINT and SIGHUP are passed on to both.
// mpirun gets the driver's environment without the run secret.
func MPIElasticDriver(ctx context.Context, startFile string, storeArgv []string, poll time.Duration) (int, error) {
	store := exec.Command(storeArgv[0], storeArgv[1:]...)
	store.Stdout, store.Stderr = os.Stdout, os.Stderr
	if err := store.Start(); err != nil {
		return 0, fmt.Errorf("mpi-elastic-driver: %w", err)
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	storeDone := make(chan error, 1)
	go func() { storeDone <- store.Wait() }()
	var mpirun *exec.Cmd
	mpiDone := make(chan error, 1)
	started := 0
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, secretEnv+"=") {
			env = append(env, kv)
		}
	}
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		select {
		case err := <-storeDone:
			if mpirun != nil {
				syscall.Kill(-mpirun.Process.Pid, syscall.SIGKILL)
			}
			return exitStatus(store.ProcessState, err), nil
		case err := <-mpiDone:
			fmt.Fprintf(os.Stderr, "bftrainer: mpi-elastic driver: generation %d: mpirun exited %d\n", started, exitStatus(mpirun.ProcessState, err))
			mpirun = nil
		case s := <-sigs:
			store.Process.Signal(s)
			if mpirun != nil {
				mpirun.Process.Signal(s)
			}
		case <-ctx.Done():
			store.Process.Signal(syscall.SIGTERM)
		case <-tick.C:
			b, err := os.ReadFile(startFile)
			var req MPIStart
			if err != nil || json.Unmarshal(b, &req) != nil || req.Gen <= started || len(req.Argv) == 0 {
				continue
			}
			if mpirun != nil { // an older generation's: its ranks were handed over, or never will be
				syscall.Kill(-mpirun.Process.Pid, syscall.SIGKILL)
				<-mpiDone
			}
			started = req.Gen
			mpirun = exec.Command(req.Argv[0], req.Argv[1:]...)
			mpirun.Stdout, mpirun.Stderr, mpirun.Env = os.Stdout, os.Stderr, env
			mpirun.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			fmt.Fprintf(os.Stderr, "bftrainer: mpi-elastic driver: generation %d runs %s\n", req.Gen, wire.ShellJoin(req.Argv))
			if err := mpirun.Start(); err != nil {
				fmt.Fprintf(os.Stderr, "bftrainer: mpi-elastic driver: generation %d: %v\n", req.Gen, err)
				mpirun = nil
				continue
			}
			go func(c *exec.Cmd) { mpiDone <- c.Wait() }(mpirun)
		}
	}
}
