// Package trainertest starts the real parts the Trainer runner's tests
// need: an OpenSSH server on several loopback addresses, each one a
// "node", with throwaway host and user keys and a client configuration
// that maps node names to them.
package trainertest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// SSHClient is the side of test sshds that clients use, and where their
// files are.
type SSHClient struct {
	Dir      string            // the keys, configurations and logs
	Port     int               // the same on every address
	Config   string            // ssh_config mapping node names to addresses (ssh -F)
	Identity string            // the client's private key, authorised for every user
	Nodes    map[string]string // node name → loopback address
}

// SSHD is a running sshd for tests, and the client side of it.
type SSHD struct {
	SSHClient
	tb testing.TB
	d  *daemon
}

// Sshd is Debian's OpenSSH server.
const Sshd = "/usr/sbin/sshd"

// SSHDMissing says why sshd cannot run here (not root, OpenSSH's server,
// client or ssh-keygen not installed); nil when it can.
func SSHDMissing() error {
	if os.Geteuid() != 0 {
		return errors.New("needs root: sshd, and logging in as root to run the node agent")
	}
	for _, p := range []string{Sshd, "ssh", "ssh-keygen"} {
		if _, err := exec.LookPath(p); err != nil {
			return fmt.Errorf("needs OpenSSH (%s not found; apt-get install openssh-server openssh-client)", p)
		}
	}
	return nil
}

// NeedSSHD skips the test unless it runs as root with OpenSSH's server,
// client and ssh-keygen installed.
func NeedSSHD(tb testing.TB) {
	tb.Helper()
	if err := SSHDMissing(); err != nil {
		tb.Skip(err)
	}
}

// Loopback returns n node names ("n1"…) on addresses 127.0.0.2 and up.
func Loopback(n int) map[string]string {
	m := map[string]string{}
	for i := 1; i <= n; i++ {
		m[fmt.Sprintf("n%d", i)] = fmt.Sprintf("127.0.0.%d", i+1)
	}
	return m
}

// StartSSHD starts sshd listening on every node's address at one high
// port, with fresh keys. It is stopped by its pid when the test ends,
// failed or not. Nodes in down are in the client configuration but sshd
// does not listen on their addresses (a node that does not answer).
func StartSSHD(tb testing.TB, nodes map[string]string, down ...string) *SSHD {
	tb.Helper()
	NeedSSHD(tb)
	k, err := newSSHClient(tb.TempDir(), nodes, false)
	if err != nil {
		tb.Fatal(err)
	}
	var listen []string
	for _, n := range k.names() {
		if !slices.Contains(down, n) {
			listen = append(listen, nodes[n])
		}
	}
	d, err := k.daemon("", listen)
	if err != nil {
		tb.Fatal(err)
	}
	s := &SSHD{SSHClient: *k, tb: tb, d: d}
	s.Start()
	tb.Cleanup(s.Stop)
	return s
}

// Start (re)starts sshd and waits until it accepts connections.
func (s *SSHD) Start() {
	s.tb.Helper()
	if err := s.d.start(); err != nil {
		s.tb.Fatal(err)
	}
}

// Stop kills sshd by its pid. Sessions already open finish by themselves.
func (s *SSHD) Stop() {
	s.d.stop()
}

// NodeSSHD is one sshd per node, each listening only on its node's
// address (all at one port), with one client side: a node's sshd stopped
// is that node alone not answering. Unlike StartSSHD it needs no test:
// the Slurm lab's pilot stops one node's sshd as a nemesis.
type NodeSSHD struct {
	SSHClient
	mu sync.Mutex
	ds map[string]*daemon
}

// StartNodeSSHD writes fresh keys and configurations into dir (created
// if missing) and starts an sshd for every node, waiting until each
// accepts connections. On error what it started is stopped again. With
// multiplex the client configuration shares one connection per node
// (ControlMaster auto, ControlPersist 60 s: what docs/trainers.md tells a
// site to set), so a call costs no handshake.
func StartNodeSSHD(dir string, nodes map[string]string, multiplex bool) (s *NodeSSHD, err error) {
	if err := SSHDMissing(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	k, err := newSSHClient(dir, nodes, multiplex)
	if err != nil {
		return nil, err
	}
	s = &NodeSSHD{SSHClient: *k, ds: map[string]*daemon{}}
	defer func() {
		if err != nil {
			s.Close()
			s = nil
		}
	}()
	for _, n := range k.names() {
		d, err := k.daemon(n, []string{nodes[n]})
		if err != nil {
			return s, err
		}
		s.ds[n] = d
		if err := d.start(); err != nil {
			return s, err
		}
	}
	return s, nil
}

// Stop kills node's sshd by its pid, and the connections it had
// accepted: the node answers no ssh, over a shared connection either (as
// a node whose network went away). What the sessions started in a
// session of its own (a Trainer's supervisor) runs on.
func (s *NodeSSHD) Stop(node string) error {
	return s.node(node, func(d *daemon) error { d.stopWithSessions(); return nil })
}

// Start starts node's sshd again (a no-op while it runs) and waits until
// it accepts connections.
func (s *NodeSSHD) Start(node string) error {
	return s.node(node, (*daemon).start)
}

// node runs f on node's sshd, one at a time.
func (s *NodeSSHD) node(node string, f func(*daemon) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.ds[node]
	if !ok {
		return fmt.Errorf("sshd: no node %q", node)
	}
	return f(d)
}

// Close stops every node's sshd.
func (s *NodeSSHD) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.ds {
		d.stopWithSessions()
	}
}

// newSSHClient writes what every sshd of a test or lab and their clients
// share into dir: the host and user keys, authorized_keys, the client's
// ssh_config (node names to addresses, at one free port) and known_hosts.
func newSSHClient(dir string, nodes map[string]string, multiplex bool) (*SSHClient, error) {
	// sshd needs its privilege-separation directory.
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		return nil, err
	}
	for _, k := range []string{"host_ed25519", "id_ed25519"} {
		if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "bftrainer-test", "-f", filepath.Join(dir, k)).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("ssh-keygen: %w\n%s", err, out)
		}
	}
	pub, err := os.ReadFile(filepath.Join(dir, "id_ed25519.pub"))
	if err != nil {
		return nil, err
	}
	hostPub, err := os.ReadFile(filepath.Join(dir, "host_ed25519.pub"))
	if err != nil {
		return nil, err
	}
	// Readable by every user: sshd reads a user's keys with the user's
	// privileges, and tests log in as throwaway users too.
	if err := os.WriteFile(filepath.Join(dir, "authorized_keys"), pub, 0o644); err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	k := &SSHClient{Dir: dir, Config: filepath.Join(dir, "ssh_config"), Identity: filepath.Join(dir, "id_ed25519"), Nodes: nodes}
	if k.Port, err = freePort(nodes); err != nil {
		return nil, err
	}
	var cc, kh strings.Builder
	for _, n := range k.names() {
		fmt.Fprintf(&cc, "Host %s\n  HostName %s\n", n, nodes[n])
		fmt.Fprintf(&kh, "[%s]:%d %s", nodes[n], k.Port, hostPub)
	}
	fmt.Fprintf(&cc, `Host *
  Port %d
  IdentityFile %s
  IdentitiesOnly yes
  UserKnownHostsFile %s
  GlobalKnownHostsFile /dev/null
  StrictHostKeyChecking yes
  CheckHostIP no
  BatchMode yes
  LogLevel ERROR
`, k.Port, k.Identity, filepath.Join(dir, "known_hosts"))
	if multiplex {
		fmt.Fprintf(&cc, "  ControlMaster auto\n  ControlPath %s\n  ControlPersist 60\n", filepath.Join(dir, "cm-%C"))
	} else {
		cc.WriteString("  ControlMaster no\n")
	}
	for p, b := range map[string]string{k.Config: cc.String(), filepath.Join(dir, "known_hosts"): kh.String()} {
		if err := os.WriteFile(p, []byte(b), 0o644); err != nil {
			return nil, err
		}
	}
	return k, nil
}

// names returns the node names, sorted.
func (k *SSHClient) names() []string {
	names := make([]string, 0, len(k.Nodes))
	for n := range k.Nodes {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// daemon writes the configuration of an sshd listening on listen at the
// keys' port; name ("" for the only one) tells its files from the
// others'.
func (k *SSHClient) daemon(name string, listen []string) (*daemon, error) {
	suffix := ""
	if name != "" {
		suffix = "-" + name
	}
	d := &daemon{conf: filepath.Join(k.Dir, "sshd_config"+suffix), log: filepath.Join(k.Dir, "sshd"+suffix+".log"), listen: listen, port: k.Port}
	// SetEnv SHLVL=1: bash, started by sshd to run a command, reads
	// ~/.bashrc only as a top-level shell (SHLVL unset or 0). This
	// machine's root has a .bashrc that runs `pyenv init` (about 100
	// processes: 0.36 s a command on a quiet machine, more under load),
	// which a compute node's root does not; every ssh action of a test
	// or the pilot paid it (a multiplexed command: 0.36 s, with this
	// 0.02 s).
	var sc strings.Builder
	for _, a := range listen {
		fmt.Fprintf(&sc, "ListenAddress %s:%d\n", a, k.Port)
	}
	fmt.Fprintf(&sc, `HostKey %s
PidFile %s
AuthorizedKeysFile %s
StrictModes no
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
X11Forwarding no
AllowTcpForwarding no
PrintMotd no
PrintLastLog no
MaxStartups 200
MaxSessions 100
LogLevel ERROR
SetEnv SHLVL=1
`, filepath.Join(k.Dir, "host_ed25519"), filepath.Join(k.Dir, "sshd"+suffix+".pid"), filepath.Join(k.Dir, "authorized_keys"))
	if err := os.WriteFile(d.conf, []byte(sc.String()), 0o644); err != nil {
		return nil, err
	}
	return d, nil
}

// daemon is one sshd process: its configuration, its log, the addresses
// it listens on.
type daemon struct {
	conf, log string
	listen    []string
	port      int
	cmd       *exec.Cmd
}

// start starts sshd unless it runs, and waits until it accepts
// connections on every address, bounded; on failure it is stopped and
// the error carries its log.
func (d *daemon) start() error {
	if d.cmd != nil {
		return nil
	}
	logf, err := os.OpenFile(d.log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(Sshd, "-D", "-e", "-f", d.conf)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start sshd: %w", err)
	}
	d.cmd = cmd
	deadline := time.Now().Add(10 * time.Second)
	for _, addr := range d.listen {
		for {
			c, err := net.DialTimeout("tcp", net.JoinHostPort(addr, strconv.Itoa(d.port)), time.Second)
			if err == nil {
				c.Close()
				break
			}
			if time.Now().After(deadline) {
				log, _ := os.ReadFile(d.log)
				d.stop()
				return fmt.Errorf("sshd does not listen on %s:%d: %w\n%s", addr, d.port, err, log)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}

// stop kills sshd by its pid and reaps it.
func (d *daemon) stop() {
	if d.cmd == nil {
		return
	}
	d.cmd.Process.Kill()
	d.cmd.Wait()
	d.cmd = nil
}

// stopWithSessions stops sshd and then kills the sessions it had
// accepted (its children when it was stopped; each session's own
// processes end with its connection).
func (d *daemon) stopWithSessions() {
	if d.cmd == nil {
		return
	}
	kids := children(d.cmd.Process.Pid)
	d.stop()
	for _, pid := range kids {
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

// children returns the pids of the processes whose parent is pid.
func children(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// "pid (comm) state ppid …": comm may hold spaces and parentheses.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, p)
		}
	}
	return out
}

// freePort returns a port free on every node's address now.
func freePort(nodes map[string]string) (int, error) {
	for i := 0; i < 50; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if ok := func() bool {
			for _, a := range nodes {
				l, err := net.Listen("tcp", net.JoinHostPort(a, strconv.Itoa(p)))
				if err != nil {
					return false
				}
				l.Close()
			}
			return true
		}(); ok {
			return p, nil
		}
	}
	return 0, errors.New("no port free on every node's address")
}
