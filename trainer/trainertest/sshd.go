// Package trainertest starts the real parts the Trainer runner's tests
// need: an OpenSSH server on several loopback addresses, each one a
// "node", with throwaway host and user keys and a client configuration
// that maps node names to them.
package trainertest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// SSHD is a running sshd for tests, and the client side of it.
type SSHD struct {
	Dir      string            // its keys, configurations and log
	Port     int               // the same on every address
	Config   string            // ssh_config mapping node names to addresses (ssh -F)
	Identity string            // the client's private key, authorised for every user
	Nodes    map[string]string // node name → loopback address
	tb       testing.TB
	cmd      *exec.Cmd
	conf     string
}

// Sshd is Debian's OpenSSH server.
const Sshd = "/usr/sbin/sshd"

// NeedSSHD skips the test unless it runs as root with OpenSSH's server,
// client and ssh-keygen installed.
func NeedSSHD(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root: sshd, and logging in as root to run the node agent")
	}
	for _, p := range []string{Sshd, "ssh", "ssh-keygen"} {
		if _, err := exec.LookPath(p); err != nil {
			tb.Skipf("needs OpenSSH (%s not found; apt-get install openssh-server openssh-client)", p)
		}
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
	dir := tb.TempDir()
	// sshd needs its privilege-separation directory.
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		tb.Fatal(err)
	}
	for _, k := range []string{"host_ed25519", "id_ed25519"} {
		if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "bftrainer-test", "-f", filepath.Join(dir, k)).CombinedOutput(); err != nil {
			tb.Fatalf("ssh-keygen: %v\n%s", err, out)
		}
	}
	pub, err := os.ReadFile(filepath.Join(dir, "id_ed25519.pub"))
	if err != nil {
		tb.Fatal(err)
	}
	hostPub, err := os.ReadFile(filepath.Join(dir, "host_ed25519.pub"))
	if err != nil {
		tb.Fatal(err)
	}
	// Readable by every user: sshd reads a user's keys with the user's
	// privileges, and tests log in as throwaway users too.
	if err := os.WriteFile(filepath.Join(dir, "authorized_keys"), pub, 0o644); err != nil {
		tb.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	port := freePort(tb)
	s := &SSHD{Dir: dir, Port: port, Config: filepath.Join(dir, "ssh_config"), Identity: filepath.Join(dir, "id_ed25519"),
		Nodes: nodes, tb: tb, conf: filepath.Join(dir, "sshd_config")}
	names := make([]string, 0, len(nodes))
	for n := range nodes {
		names = append(names, n)
	}
	slices.Sort(names)
	var sc, cc, kh strings.Builder
	for _, n := range names {
		if !slices.Contains(down, n) {
			fmt.Fprintf(&sc, "ListenAddress %s:%d\n", nodes[n], port)
		}
		fmt.Fprintf(&cc, "Host %s\n  HostName %s\n", n, nodes[n])
		fmt.Fprintf(&kh, "[%s]:%d %s", nodes[n], port, hostPub)
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
`, filepath.Join(dir, "host_ed25519"), filepath.Join(dir, "sshd.pid"), filepath.Join(dir, "authorized_keys"))
	fmt.Fprintf(&cc, `Host *
  Port %d
  IdentityFile %s
  IdentitiesOnly yes
  UserKnownHostsFile %s
  GlobalKnownHostsFile /dev/null
  StrictHostKeyChecking yes
  CheckHostIP no
  BatchMode yes
  ControlMaster no
  LogLevel ERROR
`, port, s.Identity, filepath.Join(dir, "known_hosts"))
	for p, b := range map[string]string{s.conf: sc.String(), s.Config: cc.String(), filepath.Join(dir, "known_hosts"): kh.String()} {
		if err := os.WriteFile(p, []byte(b), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	s.Start()
	tb.Cleanup(s.Stop)
	return s
}

// Start (re)starts sshd and waits until it accepts connections.
func (s *SSHD) Start() {
	s.tb.Helper()
	if s.cmd != nil {
		return
	}
	logf, err := os.OpenFile(filepath.Join(s.Dir, "sshd.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		s.tb.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(Sshd, "-D", "-e", "-f", s.conf)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		s.tb.Fatalf("start sshd: %v", err)
	}
	s.cmd = cmd
	deadline := time.Now().Add(10 * time.Second)
	for _, addr := range s.listening() {
		for {
			c, err := net.DialTimeout("tcp", net.JoinHostPort(addr, strconv.Itoa(s.Port)), time.Second)
			if err == nil {
				c.Close()
				break
			}
			if time.Now().After(deadline) {
				log, _ := os.ReadFile(filepath.Join(s.Dir, "sshd.log"))
				s.Stop()
				s.tb.Fatalf("sshd does not listen on %s:%d: %v\n%s", addr, s.Port, err, log)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// Stop kills sshd by its pid. Sessions already open finish by themselves.
func (s *SSHD) Stop() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	s.cmd.Wait()
	s.cmd = nil
}

// listening returns the addresses in sshd's configuration.
func (s *SSHD) listening() []string {
	b, _ := os.ReadFile(s.conf)
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if a, ok := strings.CutPrefix(line, "ListenAddress "); ok {
			host, _, _ := net.SplitHostPort(a)
			out = append(out, host)
		}
	}
	return out
}

// freePort returns a port free on every loopback address now.
func freePort(tb testing.TB) int {
	tb.Helper()
	for i := 0; i < 50; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if ok := func() bool {
			for k := 2; k < 12; k++ {
				l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.%d:%d", k, p))
				if err != nil {
					return false
				}
				l.Close()
			}
			return true
		}(); ok {
			return p
		}
	}
	tb.Fatal("no free port")
	return 0
}
