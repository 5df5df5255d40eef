package slurm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/store"
)

// ClusterOptions says what to bring up.
type ClusterOptions struct {
	Repo      string   // the bftrainer module's directory
	Nodes     int      // 0 means 6
	Prefix    string   // node names; "" means "slab" (never "n": other tests on this machine use n1, n2, …)
	Scavenger bool     // add Slurm's own scavenger partition
	RootOwner bool     // Trainers run as root (allow_root_owner) instead of as a throwaway user
	SlurmUser string   // SlurmUser; "" means root. Another user needs the database and the hooks' log writable by its group (GrantGroup)
	Extra     []string // slurm.conf lines appended last (CostExtra for the hook cost)
	// Installed: use a bftrainer a package installed, in its own
	// directories, instead of building one (Installed says what stays the
	// lab's). Its configuration file is rewritten by Configure.
	Installed *Installed
	// Accounting starts the lab with slurmdbd on MariaDB (Options.Accounting)
	// and points bftrainer's scheduler.sacct at it.
	Accounting bool
	Logf       func(format string, args ...any)
}

// Cluster is a lab with bftrainer as its hooks, and the throwaway user
// that owns the Trainers.
type Cluster struct {
	Dir      string // /tmp/bfts.*: lab/ (the cluster) and bft/ (bftrainer)
	Lab      *Lab
	In       *Install
	User     *User    // nil when Trainers run as root
	Settings Settings // the configuration now
	// Options is what the lab was started with (CostLab starts its
	// peers alike).
	Options Options
	Logf    func(format string, args ...any)

	downOnce sync.Once
	downErr  error
}

// Up builds bftrainer (or takes the one o.Installed names), writes its
// configuration, creates the Trainers' owner and starts the cluster with
// all four hooks pointing at the binary, then waits until every node is
// exactly idle. On error what was
// started is stopped again.
func Up(ctx context.Context, o ClusterOptions) (c *Cluster, err error) {
	if err := Need(); err != nil {
		return nil, err
	}
	if o.Prefix == "" {
		o.Prefix = "slab"
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	// Short: slurmstepd's unix sockets live below the lab directory.
	dir, err := os.MkdirTemp("/tmp", "bfts.")
	if err != nil {
		return nil, err
	}
	// The lab's SlurmUser and the Trainers' owner pass through it.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	c = &Cluster{Dir: dir, Logf: o.Logf}
	defer func() {
		if err != nil {
			c.Down(context.Background(), false)
			c = nil
		}
	}()
	labDir := filepath.Join(dir, "lab")
	if c.In, err = newInstall(ctx, o.Repo, filepath.Join(dir, "bft"), filepath.Join(labDir, "etc", "slurm.conf"), o.Installed); err != nil {
		return c, err
	}
	if !o.RootOwner {
		if c.User, err = NewUser("bfts"); err != nil {
			return c, err
		}
	}
	c.Settings = Settings{AllowRootOwner: o.RootOwner, Sacct: o.Accounting}
	if err = c.In.Configure(c.Settings); err != nil {
		return c, err
	}
	c.Options = Options{Nodes: o.Nodes, Prefix: o.Prefix, Hook: c.In.Bin, Scavenger: o.Scavenger, SlurmUser: o.SlurmUser, Extra: o.Extra, Accounting: o.Accounting}
	if o.Accounting {
		c.Options.Timeout = 2 * time.Minute
	}
	c.Lab, err = startLab(ctx, LabScript(o.Repo), labDir, c.Options)
	return c, err
}

// Down stops the cluster, kills every process of bftrainer's (reconcilers,
// node agents, Trainers) and of the Trainers' owner by PID, removes the
// user and, unless keep, the directory.
func (c *Cluster) Down(ctx context.Context, keep bool) error {
	c.downOnce.Do(func() { c.downErr = c.down(ctx, keep) })
	return c.downErr
}

func (c *Cluster) down(ctx context.Context, keep bool) error {
	var errs []error
	if c.Lab != nil {
		errs = append(errs, c.Lab.Stop(ctx))
	}
	if c.In != nil {
		errs = append(errs, c.In.Kill(10*time.Second, c.User), c.In.Remove())
	}
	if c.User != nil {
		errs = append(errs, c.User.Remove())
	}
	if !keep {
		errs = append(errs, os.RemoveAll(c.Dir))
	}
	return errors.Join(errs...)
}

// Configure rewrites bftrainer's configuration; hooks read it on their
// next call.
func (c *Cluster) Configure(s Settings) error {
	if err := c.In.Configure(s); err != nil {
		return err
	}
	c.Settings = s
	return nil
}

// Run runs the bftrainer CLI as root.
func (c *Cluster) Run(ctx context.Context, args ...string) (string, error) {
	return c.In.Run(ctx, args...)
}

// Torch is a Trainer running contrib/trainer/train.py on CPU (torchrun
// or the elastic runtime).
type Torch struct {
	Name string
	Dir  string // its working directory: checkpoints, torchrun's logs
	Log  string // train.py's progress log
}

// torchCurve is train.py's measured throughput (contrib/trainer/README.md:
// 157, 307, 460 samples/s on 1-3 nodes, nearly linear), extended
// linearly.
var torchCurve = []string{"1:157", "2:307", "3:460", "4:610", "5:760", "6:910", "7:1060", "8:1210"}

// SubmitTorch submits a torchrun Trainer of min..max nodes as the
// Trainers' owner (through the spool) and runs a reconciler, as the
// site's `bftrainer reconcile --watch` would.
func (c *Cluster) SubmitTorch(ctx context.Context, short string, min, max int) (*Torch, error) {
	return c.submitTrain(ctx, "torchrun", short, min, max, "6", "8")
}

// SubmitElastic submits the same Trainer on bftrainer's elastic runtime
// (--launcher elastic: its workers stay alive across a change; a
// planned shrink leaves at a step boundary). Its rescale costs are
// priors the launcher's measurements replace.
func (c *Cluster) SubmitElastic(ctx context.Context, short string, min, max int) (*Torch, error) {
	return c.submitTrain(ctx, "elastic", short, min, max, "1", "1")
}

func (c *Cluster) submitTrain(ctx context.Context, launcher, short string, min, max int, up, down string) (*Torch, error) {
	name := c.In.Name(short)
	t := &Torch{Name: name, Dir: filepath.Join(c.In.Work, name)}
	t.Log = filepath.Join(t.Dir, "progress.log")
	if err := c.ownedDir(t.Dir); err != nil {
		return nil, err
	}
	err := c.submit(ctx, "trainer", "submit", "--name", name, "--launcher", launcher,
		"--min", strconv.Itoa(min), "--max", strconv.Itoa(max), "--curve", strings.Join(torchCurve[:max], ","),
		"--rescale-up", up, "--rescale-down", down, "--workdir", t.Dir, "--env", "PYTHONDONTWRITEBYTECODE=1", "--",
		"/usr/bin/python3", filepath.Join(c.In.Work, "train.py"), "--ckpt-dir", filepath.Join(t.Dir, "ckpt"),
		"--log", t.Log, "--steps", "1000000", "--sleep", "0.2", "--pg-timeout", "10")
	return t, err
}

// SubmitSleeper submits an exec Trainer of one node whose program is a
// small process tree (a shell and two sleeps, like an agent and its
// worker): cheap to run by the dozen, real to kill.
func (c *Cluster) SubmitSleeper(ctx context.Context, short string) (string, error) {
	name := c.In.Name(short)
	return name, c.submit(ctx, "trainer", "submit", "--name", name, "--launcher", "exec", "--min", "1", "--max", "1",
		"--curve", "1:10", "--workdir", c.In.Work, "--", "/bin/sh", "-c", "sleep 100000 & exec sleep 100000")
}

func (c *Cluster) ownedDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if c.User != nil {
		return os.Chown(dir, c.User.UID, c.User.GID)
	}
	return nil
}

// submit runs a CLI command as the Trainers' owner (spooled) and then a
// reconciler as root.
func (c *Cluster) submit(ctx context.Context, args ...string) error {
	var err error
	if c.User != nil {
		_, err = c.In.RunAs(ctx, c.User, args...)
	} else {
		_, err = c.In.Run(ctx, args...)
	}
	if err != nil {
		return err
	}
	_, err = c.In.Run(ctx, "reconcile")
	return err
}

// Active returns the Trainers not ended.
func (c *Cluster) Active(ctx context.Context) ([]string, error) {
	db, err := c.In.OpenDB(ctx)
	if err != nil {
		if _, serr := os.Stat(c.In.DB); os.IsNotExist(serr) {
			return nil, nil
		}
		return nil, err
	}
	defer db.Close()
	ts, err := db.Trainers(ctx, pool.Queued, pool.Running)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, t := range ts {
		out = append(out, t.ID)
	}
	return out, nil
}

// Cancel cancels Trainers as root and waits, at most a minute, until
// none of their processes is left.
func (c *Cluster) Cancel(ctx context.Context, names ...string) error {
	for _, n := range names {
		if _, err := c.In.Run(ctx, "trainer", "cancel", n); err != nil {
			return err
		}
	}
	return Poll(ctx, time.Minute, func() (bool, error) {
		ps, err := c.In.TrainerProcs()
		if err != nil {
			return false, err
		}
		for _, p := range ps {
			if t, ok := p.Token(); ok && slices.Contains(names, t.Trainer) {
				// Nudge: the reconciler that took the cancel may have been
				// killed by a scenario.
				c.In.Run(ctx, "reconcile")
				return false, nil
			}
		}
		return true, nil
	})
}

// Reset brings the cluster back to a known state between scenarios: the
// default configuration, hooks on, no Trainer, no job, every node exactly
// idle, the pool in line with sinfo (by `bftrainer sync`).
func (c *Cluster) Reset(ctx context.Context) error {
	if err := c.Configure(Settings{AllowRootOwner: c.Settings.AllowRootOwner, Sacct: c.Settings.Sacct, Metrics: c.Settings.Metrics}); err != nil {
		return err
	}
	if c.Lab.Hook != c.In.Bin {
		if err := c.In.SetHooks(ctx, c.Lab, true); err != nil {
			return err
		}
	}
	act, err := c.Active(ctx)
	if err != nil {
		return err
	}
	if len(act) > 0 {
		if err := c.Cancel(ctx, act...); err != nil {
			return fmt.Errorf("cancel %v: %w", act, err)
		}
	}
	if err := c.Lab.CancelAll(ctx, time.Minute); err != nil {
		return err
	}
	if err := c.Lab.WaitIdle(ctx, time.Minute); err != nil {
		return err
	}
	if _, err := c.In.Run(ctx, "sync"); err != nil {
		return err
	}
	return c.In.WaitPoolMatches(ctx, c.Lab, time.Minute)
}

// HookEvents returns the hook calls recorded for a job, by context.
func (c *Cluster) HookEvents(ctx context.Context, job string) (map[string][]store.Event, error) {
	evs, err := c.In.Events(ctx, store.Filter{Job: job, Kinds: []store.Kind{store.KindHook}})
	if err != nil {
		return nil, err
	}
	out := map[string][]store.Event{}
	for _, e := range evs {
		out[e.Context] = append(out[e.Context], e)
	}
	return out, nil
}

// Debug returns what a failed scenario needs: the daemons' logs, the
// hooks' log, the history's errors and the last events.
func (c *Cluster) Debug(ctx context.Context) string {
	var b strings.Builder
	if c.Lab != nil {
		b.WriteString(c.Lab.Logs(30))
		if st, err := c.Lab.Output(ctx, "sinfo", "-N", "-o", "%N %T %E"); err == nil {
			fmt.Fprintf(&b, "==> sinfo <==\n%s", st)
		}
		if q, err := c.Lab.Output(ctx, "squeue"); err == nil {
			fmt.Fprintf(&b, "==> squeue <==\n%s", q)
		}
	}
	if c.In != nil {
		if l, err := os.ReadFile(c.In.HooksLog); err == nil {
			fmt.Fprintf(&b, "==> %s (last 4000 bytes) <==\n%s\n", c.In.HooksLog, tail(l, 4000))
		}
		if out, err := c.In.Run(ctx, "history", "--limit", "80", "--format", "csv"); err == nil {
			fmt.Fprintf(&b, "==> bftrainer history --limit 80 <==\n%s", out)
		}
		if out, err := c.In.Run(ctx, "history", "--kind", "error", "--limit", "30", "--format", "csv"); err == nil {
			fmt.Fprintf(&b, "==> bftrainer history --kind error <==\n%s", out)
		}
		if out, err := c.In.Run(ctx, "history", "--kind", "end,exit,cancel,admit", "--limit", "30", "--format", "csv"); err == nil {
			fmt.Fprintf(&b, "==> bftrainer history --kind end,exit,cancel,admit <==\n%s", out)
		}
		if out, err := c.In.Run(ctx, "status"); err == nil {
			fmt.Fprintf(&b, "==> bftrainer status <==\n%s", out)
		}
		// The Trainers' output: LOGDIR/TRAINER/RUN/NODE.log (the agent's
		// openLog; NODE is _controller for a driver, an MPI job's mpirun).
		logs, _ := filepath.Glob(filepath.Join(c.In.LogDir, "*", "*", "*.log"))
		for _, l := range logs {
			if body, err := os.ReadFile(l); err == nil {
				fmt.Fprintf(&b, "==> %s (last 1500 bytes) <==\n%s\n", l, tail(body, 1500))
			}
		}
	}
	return b.String()
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// Service is `bftrainer reconcile --watch`, as the systemd unit runs it.
type Service struct {
	cmd *exec.Cmd
	log *os.File
}

// stamped writes each line it is given with the time it came, as the
// journal shows a unit's lines (the service's own logger has no time:
// systemd adds it).
type stamped struct {
	mu  sync.Mutex
	w   io.Writer
	bol bool // the next byte begins a line
}

func (s *stamped) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b []byte
	now := time.Now().UTC().Format("2006-01-02T15:04:05.000000Z ")
	for _, c := range p {
		if s.bol {
			b = append(b, now...)
		}
		b = append(b, c)
		s.bol = c == '\n'
	}
	if _, err := s.w.Write(b); err != nil {
		return 0, err
	}
	return len(p), nil
}

// StartService starts the reconciler service (every interval) at Nice 5,
// as contrib/slurm/bftrainer-reconcile.service does (nice execs it: the
// process is the service's own). What it prints goes to reconcile.log in
// the hooks' log directory, appended across restarts, as systemd's
// journal keeps a unit's output.
func (c *Cluster) StartService(interval time.Duration) (*Service, error) {
	cmd := exec.Command("nice", "-n", strconv.Itoa(ServiceNice), c.In.Bin, "reconcile", "--watch", "--interval", interval.String())
	cmd.Env = c.In.env()
	cmd.Dir = "/"
	f, err := os.OpenFile(filepath.Join(filepath.Dir(c.In.HooksLog), "reconcile.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("the service's log: %w", err)
	}
	w := &stamped{w: f, bol: true}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	return &Service{cmd: cmd, log: f}, nil
}

// Kill stops the service with SIGKILL (as a crash would) and reaps it.
func (s *Service) Kill() error {
	if s == nil || s.cmd.Process == nil {
		return nil
	}
	err := s.cmd.Process.Kill()
	s.cmd.Wait()
	s.log.Close()
	if errors.Is(err, os.ErrProcessDone) {
		return nil
	}
	return err
}
