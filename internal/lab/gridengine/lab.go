// Package gridengine starts a real Son of Grid Engine cell on one
// machine, for bftrainer's tests: one sge_qmaster and several sge_execd,
// every host a stock Debian 12 daemon, all of the cell's files in one
// private directory.
//
// Grid Engine knows an execution host by its resolved host name, and the
// qmaster reaches every execd on one cluster-wide port. So each exec host
// gets its own UTS, network and mount namespaces: its own host name, its
// own network stack (a veth on a private /24 bridged to the machine, so
// every execd can listen on the same port) and its own /etc/hosts (a
// bind mount of the cell's hosts file, so every name resolves forwards
// and backwards without touching the machine's /etc). The qmaster stays
// in the machine's network namespace, with its own host name and the
// same hosts file; client commands (qsub, qstat, qhost, qconf) run in
// the qmaster's mount and UTS namespaces (Command), where the cell's
// names resolve.
//
// The cell has one queue whose prolog and epilog run a given command as
// root, one parallel environment with one slot per host (a 2-slot job
// holds 2 hosts, as a main job holds whole nodes), a scheduler that runs
// every second, and reservations enabled (max_reservation, MONITOR=1:
// the scheduler writes its planned starts to the schedule file).
//
// Everything Start starts carries a token in its environment, which Grid
// Engine passes on to shepherds, hooks and jobs; Stop stops the daemons
// by PID and then every process carrying the token, removes the network
// devices and the directory. It needs root, util-linux's unshare and
// nsenter, iproute2 and Debian's gridengine-master, gridengine-exec and
// gridengine-client packages (Install installs them); Need says what is
// missing.
package gridengine

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
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

// sbinPath is the PATH of every command this package runs and of the
// daemons (and so of the hooks and jobs, which inherit the execd's
// environment).
const sbinPath = lab.SbinPath

// Where Debian 12's packages put what the lab runs.
const (
	qmasterBin   = "/usr/sbin/sge_qmaster"
	execdBin     = "/usr/sbin/sge_execd"
	libexecDir   = "/usr/lib/gridengine" // spoolinit, spooldefaults, the client binaries
	shareDir     = "/usr/share/gridengine"
	pkgRoot      = "/var/lib/gridengine" // the packages' SGE_ROOT: bin/, utilbin/, lib/, util/
	defaultConf  = shareDir + "/default-configuration"
	centryDir    = shareDir + "/util/resources/centry"
	usersetsDir  = shareDir + "/util/resources/usersets"
	tokenVar     = "BFTRAINER_GE_TOKEN"
	cellName     = "lab"
	queueName    = "bft.q"
	peName       = "bftpe"
	hostGroup    = "@bfthosts"
	readyTimeout = 60 * time.Second
)

// Need returns why a cell cannot run here, or nil: it needs root, the
// Grid Engine packages, util-linux and iproute2, and namespaces.
func Need() error {
	if os.Geteuid() != 0 {
		return errors.New("needs root (the execds and the hooks run as root, hosts are network namespaces)")
	}
	var missing []string
	for _, p := range []string{qmasterBin, execdBin, libexecDir + "/spoolinit", libexecDir + "/spooldefaults",
		libexecDir + "/qconf", pkgRoot + "/util/arch"} {
		if _, err := os.Stat(p); err != nil {
			missing = append(missing, p)
		}
	}
	for _, p := range []string{"qconf", "qsub", "qstat", "qhost", "qacct", "qdel", "qmod", "qrsh",
		"unshare", "nsenter", "ip", "mount", "hostname", "sleep"} {
		if _, err := lab.LookPath(p); err != nil {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("needs %s (Debian: apt-get install gridengine-master gridengine-exec gridengine-client util-linux iproute2, or gridengine.Install)",
			strings.Join(missing, ", "))
	}
	if out, err := exec.Command("unshare", "-n", "-u", "-m", "--propagation", "private", "true").CombinedOutput(); err != nil {
		return fmt.Errorf("needs network, UTS and mount namespaces: unshare: %w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// Options says what cell to start.
type Options struct {
	// Dir is the cell's private directory, created if missing; "" makes
	// one below os.TempDir().
	Dir string
	// Hosts is the number of exec hosts; 0 means 2.
	Hosts int
	// Prefix names the hosts Prefix1..PrefixN and the qmaster's host
	// PrefixMaster; "" means "ge". bftrainer finds a node's Trainer
	// processes by node name, and every lab's nodes are this one machine:
	// a cell running beside another lab needs names of its own.
	Prefix string
	// Prolog and Epilog are the queue's prolog and epilog command lines
	// (an absolute path and arguments, which may use Grid Engine's
	// pseudo-variables such as $host and $job_id); the cell runs them as
	// root. "" means none.
	Prolog, Epilog string
	// PEStart and PEStop are the parallel environment's start_proc_args
	// and stop_proc_args, run as root; "" means none.
	PEStart, PEStop string
	// Timeout bounds each readiness wait; 0 means 60 s.
	Timeout time.Duration
	// Logf, when set, receives progress lines.
	Logf func(format string, args ...any)
}

// Cell is a running Grid Engine cell.
type Cell struct {
	Dir     string   // the private directory
	Root    string   // SGE_ROOT
	Master  string   // the qmaster's host name
	Hosts   []string // exec host names, in order
	Queue   string   // the cluster queue every host serves
	PE      string   // the parallel environment: one slot per host
	Started time.Duration

	addr   map[string]string // host (and Master) → IPv4 address
	qport  int
	eport  int
	token  string
	net    *network
	ns     map[string]*proc // host (and Master) → its namespace holder
	execds map[string]*proc
	qm     *proc
	logf   func(format string, args ...any)

	mu       sync.Mutex // guards execds
	stopOnce sync.Once
	stopErr  error
}

// Start starts a cell: it lays out the directory, creates the network
// and the hosts' namespaces, initialises the spool, starts the qmaster,
// configures hosts, queue, parallel environment and scheduler, starts the
// execds and waits until every host's queue instance is exactly idle. On
// error it stops what it started.
func Start(ctx context.Context, o Options) (c *Cell, err error) {
	t0 := time.Now()
	if err := Need(); err != nil {
		return nil, err
	}
	if o.Hosts <= 0 {
		o.Hosts = 2
	}
	if o.Prefix == "" {
		o.Prefix = "ge"
	}
	if o.Timeout <= 0 {
		o.Timeout = readyTimeout
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if o.Dir == "" {
		if o.Dir, err = os.MkdirTemp("", "bftge."); err != nil {
			return nil, fmt.Errorf("start cell: %w", err)
		}
	}
	tok := make([]byte, 8)
	rand.Read(tok)
	c = &Cell{
		Dir: o.Dir, Root: filepath.Join(o.Dir, "root"), Master: o.Prefix + "master",
		Queue: queueName, PE: peName, token: hex.EncodeToString(tok),
		addr: map[string]string{}, ns: map[string]*proc{}, execds: map[string]*proc{}, logf: o.Logf,
	}
	for i := 1; i <= o.Hosts; i++ {
		c.Hosts = append(c.Hosts, o.Prefix+strconv.Itoa(i))
	}
	defer func() {
		if err != nil {
			if serr := c.Stop(context.Background(), false); serr != nil {
				err = errors.Join(err, serr)
			}
			c = nil
		}
	}()
	steps := []struct {
		name string
		run  func(context.Context) error
	}{
		{"lay out", c.layout},
		{"network", c.makeNetwork},
		{"write cell", c.writeCell},
		{"namespaces", c.makeNamespaces},
		{"qmaster", func(ctx context.Context) error { return c.startQmaster(ctx, o.Timeout) }},
		{"configure", func(ctx context.Context) error { return c.configure(ctx, o) }},
		{"execds", func(ctx context.Context) error { return c.startExecds(ctx, o.Timeout) }},
	}
	for _, s := range steps {
		t := time.Now()
		if err := s.run(ctx); err != nil {
			return c, fmt.Errorf("start cell: %s: %w%s", s.name, err, c.logTails())
		}
		c.logf("gridengine: %s: %v", s.name, time.Since(t).Round(time.Millisecond))
	}
	c.Started = time.Since(t0)
	return c, nil
}

// layout creates the directory tree: SGE_ROOT (the packages' binaries
// linked in, the cell's common directory), the qmaster's and execds'
// spools, jobs/ (job scripts and output, mode 1777: jobs may run as any
// user), tmp/ (the queue's tmpdir) and log/.
func (c *Cell) layout(context.Context) error {
	for _, d := range []string{c.common(), c.path("qmaster"), c.path("spool"), c.path("log")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	for _, d := range []string{c.JobsDir(), c.path("tmp")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		if err := os.Chmod(d, 0o1777); err != nil {
			return err
		}
	}
	// Jobs of other users pass through the directory.
	if err := os.Chmod(c.Dir, 0o755); err != nil {
		return err
	}
	for _, d := range []string{"bin", "utilbin", "lib", "util"} {
		if err := os.Symlink(filepath.Join(pkgRoot, d), filepath.Join(c.Root, d)); err != nil && !os.IsExist(err) {
			return err
		}
	}
	return nil
}

func (c *Cell) path(elem ...string) string { return filepath.Join(append([]string{c.Dir}, elem...)...) }

// common is $SGE_ROOT/$SGE_CELL/common: bootstrap, act_qmaster, the
// accounting file and the scheduler's schedule file.
func (c *Cell) common() string { return filepath.Join(c.Root, cellName, "common") }

// JobsDir is where job scripts and job output go.
func (c *Cell) JobsDir() string { return c.path("jobs") }

// ScheduleFile is the scheduler's monitoring file (sge_schedule(5)):
// what ran and what was reserved, with start times, at every
// scheduling interval.
func (c *Cell) ScheduleFile() string { return filepath.Join(c.common(), "schedule") }

// Env is the environment of a Grid Engine command for this cell.
func (c *Cell) Env() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "PATH" || strings.HasPrefix(k, "SGE_") || strings.HasPrefix(k, "BFTRAINER_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, c.sgeEnv()...)
}

// sgeEnv is what every Grid Engine program of the cell needs.
func (c *Cell) sgeEnv() []string {
	return []string{"PATH=" + sbinPath, "SGE_ROOT=" + c.Root, "SGE_CELL=" + cellName,
		"SGE_QMASTER_PORT=" + strconv.Itoa(c.qport), "SGE_EXECD_PORT=" + strconv.Itoa(c.eport)}
}

// daemonEnv is the daemons' whole environment, kept small because every
// hook and job inherits it: sgeEnv, a locale, the token Stop finds
// leftovers by, and SGE_ND (stay in the foreground, so that the lab owns
// the daemon's PID; jobs see SGE_ND=1, which a site's would not).
func (c *Cell) daemonEnv() []string {
	return append(c.sgeEnv(), "LANG=C.UTF-8", "SGE_ND=1", tokenVar+"="+c.token)
}

// Command returns a Grid Engine client command run as root on the
// qmaster's host (its mount and UTS namespaces, where the cell's host
// names resolve), in the jobs directory.
func (c *Cell) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return c.commandAs(ctx, nil, name, args...)
}

// commandAs is Command run as another user (nil: root).
func (c *Cell) commandAs(ctx context.Context, cred *syscall.Credential, name string, args ...string) *exec.Cmd {
	ns := []string{"-t", strconv.Itoa(c.ns[c.Master].pid()), "-m", "-u", "--wd=" + c.JobsDir()}
	if cred != nil {
		ns = append(ns, "-S", strconv.Itoa(int(cred.Uid)), "-G", strconv.Itoa(int(cred.Gid)))
	}
	cmd := exec.CommandContext(ctx, "nsenter", append(append(ns, "--", name), args...)...)
	cmd.Env = c.Env()
	return cmd
}

// Output runs a client command (Command) and returns its standard
// output; the error carries its standard error. Each call is bounded by
// 30 s.
func (c *Cell) Output(ctx context.Context, name string, args ...string) (string, error) {
	return c.output(ctx, nil, name, args...)
}

func (c *Cell) output(ctx context.Context, cred *syscall.Credential, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := c.commandAs(ctx, cred, name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// OnHost returns a command run as root on an exec host: in its network,
// UTS and mount namespaces, as the host's hooks and jobs run.
func (c *Cell) OnHost(ctx context.Context, host, name string, args ...string) (*exec.Cmd, error) {
	h, ok := c.ns[host]
	if !ok {
		return nil, fmt.Errorf("no host %q in the cell", host)
	}
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"-t", strconv.Itoa(h.pid()), "-n", "-u", "-m",
		"--wd=" + c.JobsDir(), "--", name}, args...)...)
	cmd.Env = c.Env()
	return cmd, nil
}

// Addr returns a host's IPv4 address on the cell's network.
func (c *Cell) Addr(host string) string { return c.addr[host] }

// Logs returns the tails of the qmaster's and execds' message files and
// of the daemons' own output, for a failed test's report.
func (c *Cell) Logs(lines int) string {
	files := []string{c.path("qmaster", "messages"), c.path("log", "qmaster.out")}
	for _, h := range c.Hosts {
		files = append(files, c.path("spool", h, "messages"), c.path("log", "execd-"+h+".out"))
	}
	var b strings.Builder
	for _, f := range files {
		body, err := os.ReadFile(f)
		if err != nil || len(body) == 0 {
			continue
		}
		ls := strings.Split(strings.TrimRight(string(body), "\n"), "\n")
		if len(ls) > lines {
			ls = ls[len(ls)-lines:]
		}
		fmt.Fprintf(&b, "==> %s <==\n%s\n", f, strings.Join(ls, "\n"))
	}
	return b.String()
}

func (c *Cell) logTails() string {
	if l := c.Logs(15); l != "" {
		return "\n" + l
	}
	return ""
}
