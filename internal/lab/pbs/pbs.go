// Package pbs starts a real OpenPBS cell on one machine, for bftrainer's
// tests: pbs_server, pbs_sched and pbs_comm (and the server's data
// service, PostgreSQL) on one host, and one pbs_mom on each of several
// more, every daemon the machine's installed OpenPBS.
//
// It builds nothing: OpenPBS must already be installed, PBS_EXEC being
// /etc/pbs.conf's PBS_EXEC, or /opt/pbs (Exec; BFTRAINER_PBS_EXEC
// overrides both). Need says why a cell cannot run here (not root, no
// OpenPBS, a PBS already listening on the server's port).
//
// OpenPBS knows a MoM by its host name, every MoM listens on the same
// ports, and every daemon reads /etc/pbs.conf and PBS_HOME
// (/var/spool/pbs). So each host gets its own UTS and mount namespaces,
// the MoMs a network namespace too (a veth on a private /24 bridged to
// the machine, the server at .1, pbs1 at .2, …), and each host's own
// hosts file, pbs.conf and PBS_HOME bind-mounted over /etc/hosts,
// /etc/pbs.conf and /var/spool/pbs. The server's host keeps the machine's
// network namespace. Where the machine has no /etc/pbs.conf or
// /var/spool/pbs to mount over, Start creates an empty one and Stop
// removes it again.
//
// Stop stops the daemons (pbs_init.d stop), then kills every process
// left in the cell's mount namespaces, removes the network devices, the
// mount points it created and the cell's directory: nothing of the cell
// outlives it.
package pbs

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/bftrainer/bftrainer/internal/lab"
)

// Fixed names of the cell: each host has its own UTS namespace.
const (
	// Server is the host name of the server's host.
	Server = "pbssrv"
	// ServerPort is pbs_server's port, in the machine's network namespace.
	ServerPort = 15001
	confPath   = "/etc/pbs.conf"
	homePath   = "/var/spool/pbs"
)

// Exec returns the installed OpenPBS's PBS_EXEC: $BFTRAINER_PBS_EXEC,
// else /etc/pbs.conf's PBS_EXEC, else /opt/pbs.
func Exec() string {
	if e := os.Getenv("BFTRAINER_PBS_EXEC"); e != "" {
		return e
	}
	if b, err := os.ReadFile(confPath); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "PBS_EXEC="); ok && v != "" {
				return v
			}
		}
	}
	return "/opt/pbs"
}

// Need returns why a cell cannot run here, or nil.
func Need() error {
	if os.Geteuid() != 0 {
		return errors.New("needs root (the MoMs and their hooks run as root, hosts are namespaces)")
	}
	e := Exec()
	for _, p := range []string{"sbin/pbs_server", "sbin/pbs_mom", "sbin/pbs_sched", "sbin/pbs_comm", "libexec/pbs_init.d", "bin/qmgr", "bin/qsub", "bin/pbsnodes"} {
		if _, err := os.Stat(filepath.Join(e, p)); err != nil {
			return fmt.Errorf("no OpenPBS installed at %s (PBS_EXEC from /etc/pbs.conf, else /opt/pbs; BFTRAINER_PBS_EXEC overrides): %w", e, err)
		}
	}
	for _, p := range []string{"unshare", "nsenter", "ip"} {
		if _, err := lab.LookPath(p); err != nil {
			return err
		}
	}
	if l, err := net.Listen("tcp", ":"+strconv.Itoa(ServerPort)); err != nil {
		return fmt.Errorf("port %d is taken (a PBS server running?): %w", ServerPort, err)
	} else {
		l.Close()
	}
	return nil
}

// Cell is a running OpenPBS cell.
type Cell struct {
	Exec    string   // PBS_EXEC
	Dir     string   // the cell's files: hosts, HOST/pbs.conf, HOST/home (PBS_HOME), jobs/
	Hosts   []string // the MoMs' hosts, pbs1, pbs2, …
	Started time.Duration

	prefix  string // "10.X.Y"
	bridge  string
	addr    map[string]string
	ns      map[string]*exec.Cmd // host → its namespaces' holder
	made    []string             // mount points Start created on the machine
	stopped bool
	jobSeq  int
	jobLock sync.Mutex
}

// Start builds a cell of n MoMs, starts its daemons and configures the
// server: the MoMs as nodes, root may run jobs, job history kept, the
// scheduler every 2 seconds. On error it stops what it started.
func Start(ctx context.Context, n int) (c *Cell, err error) {
	if err := Need(); err != nil {
		return nil, err
	}
	t0 := time.Now()
	dir, err := os.MkdirTemp("", "bftpbs.")
	if err != nil {
		return nil, err
	}
	// PostgreSQL (the data service) runs as its own user below PBS_HOME.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	c = &Cell{Exec: Exec(), Dir: dir, addr: map[string]string{}, ns: map[string]*exec.Cmd{}}
	for i := range n {
		c.Hosts = append(c.Hosts, fmt.Sprintf("pbs%d", i+1))
	}
	defer func() {
		if err != nil {
			if serr := c.Stop(context.Background()); serr != nil {
				err = fmt.Errorf("%w (and stopping: %v)", err, serr)
			}
			c = nil
		}
	}()
	if err := c.mountPoints(); err != nil {
		return c, err
	}
	if err := c.makeNetwork(); err != nil {
		return c, fmt.Errorf("pbs cell network: %w", err)
	}
	if err := c.makeHosts(ctx); err != nil {
		return c, fmt.Errorf("pbs cell hosts: %w", err)
	}
	if _, err := c.On(ctx, Server, filepath.Join(c.Exec, "libexec", "pbs_init.d"), "start"); err != nil {
		return c, fmt.Errorf("pbs server: %w", err)
	}
	errs := make([]error, len(c.Hosts))
	var wg sync.WaitGroup
	for i, h := range c.Hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = c.On(ctx, h, filepath.Join(c.Exec, "libexec", "pbs_init.d"), "start")
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return c, fmt.Errorf("pbs moms: %w", err)
	}
	if err := c.useCP(); err != nil {
		return c, err
	}
	cmds := []string{"set server acl_roots = root", "set server flatuid = true", "set server job_history_enable = true",
		"set server scheduler_iteration = 2", "set server node_fail_requeue = 0"}
	for _, h := range c.Hosts {
		cmds = append(cmds, "create node "+h)
	}
	for _, q := range cmds {
		if err := c.Qmgr(ctx, q); err != nil {
			return c, err
		}
	}
	if err := lab.Poll(ctx, 60*time.Second, func() (bool, error) {
		idle, err := c.IdleHosts(ctx)
		return len(idle) == len(c.Hosts), err
	}); err != nil {
		return c, fmt.Errorf("the MoMs never all came up free: %w", err)
	}
	c.Started = time.Since(t0)
	return c, nil
}

// mountPoints creates an empty /etc/pbs.conf and /var/spool/pbs where the
// machine has none, for the hosts' bind mounts.
func (c *Cell) mountPoints() error {
	if _, err := os.Lstat(confPath); errors.Is(err, os.ErrNotExist) {
		if err := os.WriteFile(confPath, nil, 0o644); err != nil {
			return err
		}
		c.made = append(c.made, confPath)
	}
	if _, err := os.Lstat(homePath); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(homePath, 0o755); err != nil {
			return err
		}
		c.made = append(c.made, homePath)
	}
	return nil
}

// makeNetwork chooses a free /24 in 10.123.0.0/16 and a free bridge name,
// and creates the bridge holding the server's address (.1).
func (c *Cell) makeNetwork() error {
	used := map[string]bool{}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
				ip := n.IP.To4()
				used[fmt.Sprintf("%d.%d.%d", ip[0], ip[1], ip[2])] = true
			}
		}
	}
	for range 100 {
		p := fmt.Sprintf("10.123.%d", mrand.IntN(256))
		if !used[p] {
			c.prefix = p
			break
		}
	}
	b := make([]byte, 2)
	rand.Read(b)
	c.bridge = "bpbs" + hex.EncodeToString(b)
	if c.prefix == "" {
		return errors.New("no free /24 in 10.123.0.0/16")
	}
	if err := run(nil, "ip", "link", "add", c.bridge, "type", "bridge"); err != nil {
		c.bridge = ""
		return err
	}
	c.addr[Server] = c.prefix + ".1"
	for i, h := range c.Hosts {
		c.addr[h] = fmt.Sprintf("%s.%d", c.prefix, i+2)
	}
	return run([]byte(fmt.Sprintf("addr add %s/24 dev %s\nlink set %s up\n", c.addr[Server], c.bridge, c.bridge)), "ip", "-batch", "-")
}

// holderScript sets the host's name, mounts its files and holds its
// namespaces open; it says "ready" first.
const holderScript = `hostname "$0" && mount --bind "$1" /etc/hosts && mount --bind "$2" /etc/pbs.conf && mount --bind "$3" /var/spool/pbs && echo ready && exec sleep infinity`

// makeHosts writes the hosts file and each host's pbs.conf, starts each
// host's namespaces and wires the MoMs' veths to the bridge.
func (c *Cell) makeHosts(ctx context.Context) error {
	var hosts strings.Builder
	hosts.WriteString("127.0.0.1 localhost\n")
	for _, h := range append([]string{Server}, c.Hosts...) {
		fmt.Fprintf(&hosts, "%s %s\n", c.addr[h], h)
	}
	if err := os.WriteFile(filepath.Join(c.Dir, "hosts"), []byte(hosts.String()), 0o644); err != nil {
		return err
	}
	if err := os.MkdirAll(c.JobsDir(), 0o777); err != nil {
		return err
	}
	os.Chmod(c.JobsDir(), 0o777)
	for i, h := range append([]string{Server}, c.Hosts...) {
		srv, mom := "1", "0"
		flags := []string{"--mount", "--uts"}
		if h != Server {
			srv, mom = "0", "1"
			flags = append(flags, "--net")
		}
		if err := os.MkdirAll(c.Home(h), 0o755); err != nil {
			return err
		}
		conf := fmt.Sprintf("PBS_EXEC=%s\nPBS_SERVER=%s\nPBS_START_SERVER=%s\nPBS_START_SCHED=%s\nPBS_START_COMM=%s\nPBS_START_MOM=%s\nPBS_HOME=%s\nPBS_CORE_LIMIT=unlimited\nPBS_SCP=/usr/bin/scp\n",
			c.Exec, Server, srv, srv, srv, mom, homePath)
		confFile := filepath.Join(c.Dir, h, "pbs.conf")
		if err := os.WriteFile(confFile, []byte(conf), 0o644); err != nil {
			return err
		}
		args := append(flags, "--propagation", "private", "--", "/bin/sh", "-c", holderScript, h, filepath.Join(c.Dir, "hosts"), confFile, c.Home(h))
		cmd := exec.Command("unshare", args...)
		cmd.Env = []string{"PATH=" + lab.SbinPath}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			return err
		}
		c.ns[h] = cmd
		line, _ := bufio.NewReader(out).ReadString('\n')
		if strings.TrimSpace(line) != "ready" {
			cmd.Process.Kill()
			cmd.Wait()
			return fmt.Errorf("namespaces of %s: %s", h, strings.TrimSpace(stderr.String()))
		}
		if h == Server {
			continue
		}
		pid := strconv.Itoa(cmd.Process.Pid)
		outer, inner := fmt.Sprintf("%sv%d", c.bridge, i), fmt.Sprintf("%sp%d", c.bridge, i)
		if err := run([]byte(fmt.Sprintf("link add %s type veth peer name %s\nlink set %s master %s up\nlink set %s netns %s\n",
			outer, inner, outer, c.bridge, inner, pid)), "ip", "-batch", "-"); err != nil {
			return err
		}
		if err := run([]byte(fmt.Sprintf("link set lo up\nlink set %s name eth0\naddr add %s/24 dev eth0\nlink set eth0 up\n", inner, c.addr[h])),
			"nsenter", "-t", pid, "-n", "ip", "-batch", "-"); err != nil {
			return err
		}
	}
	return nil
}

// Home returns a host's PBS_HOME as the machine sees it (its
// /var/spool/pbs inside the host).
func (c *Cell) Home(host string) string { return filepath.Join(c.Dir, host, "home") }

// JobsDir is where the tests' jobs write (every host sees it).
func (c *Cell) JobsDir() string { return filepath.Join(c.Dir, "jobs") }

// Bin returns the path of an OpenPBS client command.
func (c *Cell) Bin(name string) string { return filepath.Join(c.Exec, "bin", name) }

// Command is a command run as root in host's namespaces, with a clean
// environment whose PATH starts with PBS_EXEC's bin and sbin.
func (c *Cell) Command(ctx context.Context, host, name string, args ...string) *exec.Cmd {
	flags := []string{"-t", strconv.Itoa(c.ns[host].Process.Pid), "-m", "-u"}
	if host != Server {
		flags = append(flags, "-n")
	}
	flags = append(flags, "--", "env", "-i", "PATH="+filepath.Join(c.Exec, "bin")+":"+filepath.Join(c.Exec, "sbin")+":"+lab.SbinPath,
		"HOME=/root", "LANG=C.UTF-8", name)
	return exec.CommandContext(ctx, "nsenter", append(flags, args...)...)
}

// On runs a command in host's namespaces and returns its standard
// output; the error carries its standard error.
func (c *Cell) On(ctx context.Context, host, name string, args ...string) (string, error) {
	cmd := c.Command(ctx, host, name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%s %s on %s: %w: %s", name, strings.Join(args, " "), host, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return string(out), nil
}

// Qmgr runs one qmgr command on the server's host.
func (c *Cell) Qmgr(ctx context.Context, cmd string) error {
	_, err := c.On(ctx, Server, c.Bin("qmgr"), "-c", cmd)
	return err
}

// Node is one node of `pbsnodes -a -F json`.
type Node struct {
	State string   `json:"state"`
	Jobs  []string `json:"jobs"`
}

// Nodes returns the server's nodes.
func (c *Cell) Nodes(ctx context.Context) (map[string]Node, error) {
	out, err := c.On(ctx, Server, c.Bin("pbsnodes"), "-a", "-F", "json")
	if err != nil {
		return nil, err
	}
	var doc struct {
		Nodes map[string]Node `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		return nil, fmt.Errorf("pbsnodes -a -F json: %w", err)
	}
	return doc.Nodes, nil
}

// IdleHosts returns the MoMs' hosts that are free with no job.
func (c *Cell) IdleHosts(ctx context.Context) ([]string, error) {
	nodes, err := c.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	var idle []string
	for _, h := range c.Hosts {
		if n, ok := nodes[h]; ok && n.State == "free" && len(n.Jobs) == 0 {
			idle = append(idle, h)
		}
	}
	return idle, nil
}

// Stop stops the daemons and removes everything Start made. It may be
// called on a partly started cell, and more than once (the later calls do
// nothing).
func (c *Cell) Stop(ctx context.Context) error {
	if c.stopped {
		return nil
	}
	c.stopped = true
	var errs []error
	if c.ns[Server] != nil {
		var wg sync.WaitGroup
		for h := range c.ns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
				defer cancel()
				c.On(sctx, h, filepath.Join(c.Exec, "libexec", "pbs_init.d"), "stop")
			}()
		}
		wg.Wait()
	}
	for h, cmd := range c.ns {
		if err := killNamespace(cmd.Process.Pid); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", h, err))
		}
		cmd.Process.Kill()
		cmd.Wait()
	}
	if c.bridge != "" {
		if err := run(nil, "ip", "link", "del", c.bridge); err != nil {
			errs = append(errs, err)
		}
	}
	for _, p := range c.made {
		if err := os.Remove(p); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(c.Dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// killNamespace SIGKILLs every process but holder that shares holder's
// mount namespace, until none is left (10 s at most).
func killNamespace(holder int) error {
	mine, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", holder))
	if err != nil {
		return nil // gone already
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var left []int
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == holder {
				continue
			}
			if ns, err := os.Readlink("/proc/" + e.Name() + "/ns/mnt"); err == nil && ns == mine && !zombie(pid) {
				left = append(left, pid)
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes survived SIGKILL: %v", left)
		}
		for _, p := range left {
			syscall.Kill(p, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// zombie reports whether pid has exited and waits for its parent.
func zombie(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z' || b[i+2] == 'X'
}

// run runs a command of the machine to completion; the error carries its
// output.
func run(stdin []byte, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "PATH="+lab.SbinPath)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}
