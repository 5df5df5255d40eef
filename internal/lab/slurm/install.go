package slurm

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/bftrainer/bftrainer/internal/atomicfile"
	"github.com/bftrainer/bftrainer/internal/lab"
	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/store"
	"github.com/bftrainer/bftrainer/trainer/agent"
)

// Install is bftrainer as a site would install it for this lab: the
// binary (the hook of all four Slurm hook points, its configuration path
// compiled in because Slurm gives hooks no arguments), its configuration,
// database, spool, registry and logs, all below Dir.
type Install struct {
	Dir      string
	Bin      string // bftrainer, built with -X main.defaultConfig=Config and main.defaultHookLog=FallbackLog
	Config   string
	DB       string
	HooksLog string
	// FallbackLog is the binary's built-in hooks.log: where hooks log when
	// the configuration does not load (not the system's /var/log).
	FallbackLog string
	Spool       string
	Registry    string
	LogDir      string // Trainer output
	StateDir    string // the runner's state
	Work        string // shared scratch (mode 1777): Trainer programs, checkpoints, progress logs
	Sinfo       string // sinfo with the lab's SLURM_CONF (the controller hooks get none)
	Squeue      string // squeue likewise: the plan's reader (Settings.Plan)
	Sacct       string // sacct likewise: the audit's reader (Settings.Sacct)
	// Journal is the hooks' journal (beside the database); JournalFallback
	// its fallback, on another filesystem (/dev/shm) where there is one.
	Journal, JournalFallback string
	Tag                      string // prefix of every Trainer name: cleanup finds their processes by it
	// CgroupRoot is the lab's own cgroup subtree (trainer.cgroup_root),
	// removed by Remove; "" where there is no cgroup2 mount.
	CgroupRoot string

	labConf string
	ports   [2]int
	shm     string // the registry's tmpfs directory, removed by Remove
	// elasticPath is the elastic runtime's directory when it is not a
	// copy in Work (an installed package's).
	elasticPath string
}

// Installed is a bftrainer that a package (or make install) put on this
// machine, which a lab uses instead of building its own: its binary is the
// hooks, its compiled-in configuration file is the one the lab writes,
// and every path that configuration names — database, journal and its
// fallback, spool, hooks' log, registry, Trainer logs, the runner's
// state, the elastic runtime — is the one its shipped configuration
// gives (read with `Bin config` before the lab writes its own), so that
// the lab runs in the directories, with the modes and the group, that the
// package made. Only Work (Trainer programs), the sinfo and squeue
// wrappers (the lab's slurm.conf is not /etc/slurm's) and the lab's
// cgroup subtree are the lab's own.
type Installed struct {
	Bin    string // e.g. /usr/bin/bftrainer
	Config string // the configuration compiled into Bin, e.g. /etc/bftrainer/bftrainer.toml
}

// installedPaths reads the paths of an installed bftrainer's configuration
// as it stands (the shipped file), with `bftrainer config`.
func (in *Install) installedPaths(ctx context.Context, inst *Installed) error {
	cmd := exec.CommandContext(ctx, inst.Bin, "config")
	cmd.Env = cleanEnv(nil)
	cmd.Dir = "/"
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("%s config: %w: %s", inst.Bin, err, strings.TrimSpace(stderr.String()))
	}
	var c struct {
		Database        string `toml:"database"`
		Journal         string `toml:"journal"`
		JournalFallback string `toml:"journal_fallback"`
		Spool           string `toml:"spool"`
		Hooks           struct {
			Log string `toml:"log"`
		} `toml:"hooks"`
		Trainer struct {
			Registry string `toml:"registry"`
			LogDir   string `toml:"log_dir"`
			StateDir string `toml:"state_dir"`
			Launcher struct {
				Elastic struct {
					PythonPath string `toml:"pythonpath"`
				} `toml:"elastic"`
			} `toml:"launcher"`
		} `toml:"trainer"`
	}
	if _, err := toml.Decode(string(out), &c); err != nil {
		return fmt.Errorf("%s config: %w", inst.Bin, err)
	}
	for k, v := range map[string]string{"database": c.Database, "journal_fallback": c.JournalFallback, "spool": c.Spool,
		"hooks.log": c.Hooks.Log, "trainer.registry": c.Trainer.Registry, "trainer.log_dir": c.Trainer.LogDir,
		"trainer.state_dir": c.Trainer.StateDir, "trainer.launcher.elastic.pythonpath": c.Trainer.Launcher.Elastic.PythonPath} {
		if !filepath.IsAbs(v) {
			return fmt.Errorf("%s config: %s is %q, not an absolute path", inst.Bin, k, v)
		}
	}
	in.Bin, in.Config = inst.Bin, inst.Config
	in.DB, in.JournalFallback, in.Spool, in.HooksLog = c.Database, c.JournalFallback, c.Spool, c.Hooks.Log
	in.Journal = c.Journal
	if in.Journal == "" {
		in.Journal = filepath.Join(filepath.Dir(c.Database), "journal")
	}
	// Its built-in hooks log is not known from outside; the configured one
	// is where a release's goes too.
	in.FallbackLog = c.Hooks.Log
	in.Registry, in.LogDir, in.StateDir = c.Trainer.Registry, c.Trainer.LogDir, c.Trainer.StateDir
	in.elasticPath = c.Trainer.Launcher.Elastic.PythonPath
	return nil
}

// Settings are the configuration keys the scenarios change; the rest is
// fixed by configText.
type Settings struct {
	Transport      string   // "local" (default) or "ssh"
	SSHConfig      string   // ssh transport: its ssh_config
	Solver         string   // pool.solver; "" means exact
	Spawn          string   // hooks.spawn_reconciler; "" means auto (the hooks run as root here)
	AllowRootOwner bool     // Trainers may run as root (the bench; tests use a throwaway user)
	Torchrun       []string // "" means the keep-alive shim in Work
	Extra          string   // appended verbatim at the end (inside [trainer])
	Sinfo          string   // the listing program; "" means Install.Sinfo
	// Plan reads the scheduler's plan (scheduler.squeue = Install.Squeue,
	// every second) and moves Trainers off planned nodes PlanLead ahead
	// (0: the reconciler's default, from the Trainer's R_down); off, the
	// plan is not read at all.
	Plan     bool
	PlanLead time.Duration
	Raw      string // when set, the whole file (a corrupt configuration)
	// Sacct sets scheduler.sacct to Install.Sacct (a lab started with
	// accounting): bftrainer audit asks the lab's slurmdbd.
	Sacct bool
	// Metrics is metrics.textfile (a path ending in .prom); "" is off.
	Metrics string
}

// newInstall builds bftrainer from the module at repo into dir/bin and
// lays out its directories. labConf is the slurm.conf of the lab the
// hooks will serve (the sinfo wrapper points at it); the configuration
// itself is written by Configure, which must run before the lab starts
// (a hook without its configuration would fall back to the system
// paths). With inst, nothing is built: the install is inst's, in the
// directories its package made (Installed).
func newInstall(ctx context.Context, repo, dir, labConf string, inst *Installed) (_ *Install, err error) {
	tag := make([]byte, 2)
	rand.Read(tag)
	in := &Install{
		Dir:             dir,
		Bin:             filepath.Join(dir, "bin", "bftrainer"),
		Config:          filepath.Join(dir, "etc", "bftrainer.toml"),
		DB:              filepath.Join(dir, "db", "bftrainer.db"),
		HooksLog:        filepath.Join(dir, "log", "hooks.log"),
		FallbackLog:     filepath.Join(dir, "log", "fallback-hooks.log"),
		Spool:           filepath.Join(dir, "spool"),
		Registry:        filepath.Join(dir, "registry"),
		LogDir:          filepath.Join(dir, "log", "trainers"),
		StateDir:        filepath.Join(dir, "runner"),
		Work:            filepath.Join(dir, "work"),
		Sinfo:           filepath.Join(dir, "bin", "sinfo"),
		Squeue:          filepath.Join(dir, "bin", "squeue"),
		Sacct:           filepath.Join(dir, "bin", "sacct"),
		Journal:         filepath.Join(dir, "db", "journal"),
		JournalFallback: filepath.Join(dir, "journal-fallback"),
		Tag:             "s" + hex.EncodeToString(tag),
		labConf:         labConf,
	}
	if m, err := agent.CgroupMount(); err == nil {
		in.CgroupRoot = filepath.Join(m, "bftrainer-lab-"+in.Tag)
	}
	// Below the lab's automatic port ranges (20000-32699) and clear of the
	// other tests' stores (29400 and up).
	lo := 19000 + mrand.IntN(45)*20
	in.ports = [2]int{lo, lo + 19}
	if inst != nil {
		if err := in.installed(ctx, inst, repo); err != nil {
			return nil, err
		}
		return in, nil
	}
	// The registry lives on tmpfs, as its default /run/bftrainer does on
	// a site: the node prolog's kill writes a fence and removes entries,
	// and on a disk each of those waits for an fsync.
	if shm, err := tmpfsDir(); err == nil {
		in.shm = shm
		in.Registry = filepath.Join(shm, "registry")
		in.JournalFallback = filepath.Join(shm, "journal")
		defer func() {
			if err != nil {
				in.Remove()
			}
		}()
	}
	// Trainer processes run as a throwaway user: they must reach the
	// binary (progress reports), the configuration and Work.
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{
		{filepath.Dir(in.Bin), 0o755}, {filepath.Dir(in.Config), 0o755}, {filepath.Dir(in.DB), 0o755},
		{filepath.Dir(in.HooksLog), 0o755}, {in.Registry, 0o755}, {in.LogDir, 0o755}, {in.StateDir, 0o755},
		// As `make install` creates them: the spool sticky and
		// unlistable, Work open to every user like /tmp.
		{in.Spool, os.ModeSticky | 0o733}, {in.Work, os.ModeSticky | 0o777},
	} {
		if err := os.MkdirAll(d.path, 0o755); err != nil {
			return nil, err
		}
		if err := os.Chmod(d.path, d.mode); err != nil {
			return nil, err
		}
	}
	if err := build(ctx, repo, in.Bin, in.Config, in.FallbackLog); err != nil {
		return nil, err
	}
	if err := in.writeWork(repo); err != nil {
		return nil, err
	}
	// The elastic runtime, where the elastic launcher's pythonpath says
	// (as make install puts it below PREFIX/lib): readable by the owner.
	if err := copyPython(filepath.Join(repo, "python", "bftrainer_elastic"), filepath.Join(in.ElasticPath(), "bftrainer_elastic")); err != nil {
		return nil, err
	}
	return in, nil
}

// installed lays out what a lab on an installed bftrainer needs of its
// own: dir, the sinfo and squeue wrappers and Work (mode 1777, as /tmp).
func (in *Install) installed(ctx context.Context, inst *Installed, repo string) error {
	if err := in.installedPaths(ctx, inst); err != nil {
		return err
	}
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{{in.Dir, 0o755}, {filepath.Dir(in.Sinfo), 0o755}, {in.Work, os.ModeSticky | 0o777}} {
		if err := os.MkdirAll(d.path, 0o755); err != nil {
			return err
		}
		if err := os.Chmod(d.path, d.mode); err != nil {
			return err
		}
	}
	return in.writeWork(repo)
}

// writeWork writes the sinfo and squeue wrappers and the Trainer
// programs (contrib/trainer) into Work.
func (in *Install) writeWork(repo string) error {
	// The controller hooks get no SLURM_CONF (notes/slurm.md); a site's
	// sinfo reads /etc/slurm/slurm.conf, the lab's lives in its directory.
	for _, w := range []string{in.Sinfo, in.Squeue, in.Sacct} {
		wrapper := fmt.Sprintf("#!/bin/sh\nSLURM_CONF=%s exec /usr/bin/%s \"$@\"\n", in.labConf, filepath.Base(w))
		if err := os.WriteFile(w, []byte(wrapper), 0o755); err != nil {
			return err
		}
	}
	for _, f := range []string{"train.py", "bftrainer_progress.py", "fast_torchrun.py", "store.py"} {
		b, err := os.ReadFile(filepath.Join(repo, "contrib", "trainer", f))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(in.Work, f), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// ElasticPath is the elastic launcher's pythonpath: the directory holding
// a copy of python/bftrainer_elastic, or an installed package's.
func (in *Install) ElasticPath() string {
	if in.elasticPath != "" {
		return in.elasticPath
	}
	return filepath.Join(in.Work, "python")
}

// copyPython copies the .py files of the package directory src to dst.
func copyPython(src, dst string) error {
	files, err := filepath.Glob(filepath.Join(src, "*.py"))
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("no Python files in %s", src)
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, filepath.Base(f)), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// tmpfsDir makes a directory on /dev/shm when that is a tmpfs.
func tmpfsDir() (string, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs("/dev/shm", &st); err != nil {
		return "", err
	}
	const tmpfsMagic = 0x01021994
	if st.Type != tmpfsMagic {
		return "", errors.New("/dev/shm is not a tmpfs")
	}
	d, err := os.MkdirTemp("/dev/shm", "bfts.")
	if err != nil {
		return "", err
	}
	return d, os.Chmod(d, 0o755)
}

// Remove deletes what the install keeps outside its directory (the
// registry on tmpfs, its cgroups).
func (in *Install) Remove() error {
	var errs []error
	if in.CgroupRoot != "" {
		if _, err := os.Stat(in.CgroupRoot); err == nil {
			cg, err := agent.OpenCgroups(in.CgroupRoot)
			if err == nil {
				err = cg.RemoveAll(10 * time.Second)
			}
			errs = append(errs, err)
		}
	}
	if in.shm != "" {
		errs = append(errs, os.RemoveAll(in.shm))
	}
	return errors.Join(errs...)
}

// build builds bftrainer from the module at repo with its default
// configuration path set to config: Slurm runs hooks with no arguments
// and no environment of ours, so the path has to be in the binary (or at
// the system default). hookLog is its built-in hooks.log, where hooks log
// when the configuration does not load.
// Every other path compiled in (the configuration's defaults) is below
// out's directory: nothing of a test goes to /var or /run.
func build(ctx context.Context, repo, out, config, hookLog string) error {
	// The Makefile's tags: what a site installs, and what its hooks cost.
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", "urfave_cli_no_docs",
		"-ldflags", lab.BuildFlags(filepath.Join(filepath.Dir(out), "builtin"), config, hookLog), "-o", out, "./cmd/bftrainer")
	cmd.Dir = repo
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %w\n%s", err, b)
	}
	return os.Chmod(out, 0o755)
}

// Name is a Trainer name unique to this install.
func (in *Install) Name(short string) string { return in.Tag + "-" + short }

// Configure writes the configuration.
func (in *Install) Configure(s Settings) error {
	return atomicfile.WriteFile(in.Config, []byte(in.configText(s)), 0o644, false)
}

func (in *Install) configText(s Settings) string {
	if s.Raw != "" {
		return s.Raw
	}
	if s.Transport == "" {
		s.Transport = "local"
	}
	if s.Solver == "" {
		s.Solver = "exact"
	}
	if s.Spawn == "" {
		s.Spawn = "auto"
	}
	sinfo := s.Sinfo
	if sinfo == "" {
		sinfo = in.Sinfo
	}
	if len(s.Torchrun) == 0 {
		s.Torchrun = []string{"/usr/bin/python3", filepath.Join(in.Work, "fast_torchrun.py")}
	}
	var torchrun []string
	for _, a := range s.Torchrun {
		torchrun = append(torchrun, strconv.Quote(a))
	}
	squeue, plan := "", ""
	if s.Plan {
		squeue, plan = in.Squeue, "plan_every = \"1s\"\n"
		if s.PlanLead > 0 {
			plan += fmt.Sprintf("plan_lead = %q\n", s.PlanLead.String())
		}
	}
	sacct := ""
	if s.Sacct {
		sacct = in.Sacct
	}
	ssh := ""
	if s.SSHConfig != "" {
		ssh = fmt.Sprintf("ssh_config = %q\nconnect_timeout = \"3s\"\n", s.SSHConfig)
	}
	return fmt.Sprintf(`# Written by internal/lab/slurm for a test cluster.
database = %q
journal_fallback = %q
spool = %q

[pool]
solver = %q
# Idle periods here last minutes: an allocation is worth its rescale cost
# over 60 s (a regrowth from 3 to 4 nodes pays for itself; at the default
# 10 s it does not).
tfwd = 60.0

[hooks]
deadline = "2s"
log = %q
spawn_reconciler = %q

[reconciler]
idle_wait = "60s"
poll = "500ms"
interval = "2s"
%s
[scheduler]
sinfo = %q
# The plan (squeue --start) is off unless a scenario turns it on (Settings.Plan).
squeue = %q
# The audit's accounting: off unless the lab has slurmdbd (Settings.Sacct).
sacct = %q

[metrics]
textfile = %q

[trainer]
transport = %q
%sremote_bftrainer = %q
remote_config = %q
registry = %q
log_dir = %q
state_dir = %q
controller = "127.0.0.1"
command_timeout = "30s"
kill_wait = "5s"
cgroup_root = %q
allow_root_owner = %t
%s

[trainer.launcher.torchrun]
command = [%s]
store_ports = "%d-%d"
join_timeout = "120s"

# The same ports: the launchers take only ports nobody listens on.
[trainer.launcher.elastic]
pythonpath = %q
store_ports = "%d-%d"

[trainer.launcher.mpi-elastic]
pythonpath = %q
store_ports = "%d-%d"
`, in.DB, in.JournalFallback, in.Spool, s.Solver, in.HooksLog, s.Spawn, plan, sinfo, squeue, sacct, s.Metrics, s.Transport, ssh, in.Bin, in.Config,
		in.Registry, in.LogDir, in.StateDir, in.CgroupRoot, s.AllowRootOwner, s.Extra,
		strings.Join(torchrun, ", "), in.ports[0], in.ports[1], in.ElasticPath(), in.ports[0], in.ports[1], in.ElasticPath(), in.ports[0], in.ports[1])
}

// env is the environment of a bftrainer command: no BFTRAINER_CONFIG (the
// compiled-in path is the one under test), the lab's SLURM_CONF.
func (in *Install) env(extra ...string) []string {
	return cleanEnv(append([]string{"SLURM_CONF=" + in.labConf}, extra...))
}

// Run runs the bftrainer CLI as root and returns its standard output; the
// error carries its standard error.
func (in *Install) Run(ctx context.Context, args ...string) (string, error) {
	return in.run(ctx, nil, nil, args...)
}

// RunEnv is Run with extra environment (e.g. a PATH without a solver).
func (in *Install) RunEnv(ctx context.Context, env []string, args ...string) (string, error) {
	return in.run(ctx, nil, env, args...)
}

// RunAs runs the CLI as u (the kernel's uid, as a login gives).
func (in *Install) RunAs(ctx context.Context, u *User, args ...string) (string, error) {
	return in.run(ctx, u, []string{"HOME=/", "USER=" + u.Name, "LOGNAME=" + u.Name}, args...)
}

func (in *Install) run(ctx context.Context, u *User, env []string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, in.Bin, args...)
	cmd.Env = in.env(env...)
	cmd.Dir = "/"
	if u != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(u.UID), Gid: uint32(u.GID)}}
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("bftrainer %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// GrantGroup does what contrib/slurm/README.md tells a site whose
// SlurmUser is not root: the database's directory root's with SlurmUser's
// group, setgid, so that the database gets the group and, from it, the
// journal the hooks write (2770); the hooks' log and its directory
// group-writable.
func (in *Install) GrantGroup(group string) error {
	gid, err := groupID(group)
	if err != nil {
		return err
	}
	for _, d := range []struct {
		dir  string
		mode os.FileMode
	}{{filepath.Dir(in.DB), 0o755}, {filepath.Dir(in.HooksLog), 0o775}} {
		if err := os.Chown(d.dir, 0, gid); err != nil {
			return err
		}
		if err := os.Chmod(d.dir, os.ModeSetgid|d.mode); err != nil {
			return err
		}
	}
	// The hooks' log: created now, so that it is the group's.
	f, err := os.OpenFile(in.HooksLog, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o660)
	if err != nil {
		return err
	}
	f.Close()
	if err := os.Chown(in.HooksLog, 0, gid); err != nil {
		return err
	}
	return os.Chmod(in.HooksLog, 0o660)
}

// GrantExisting does what the guide tells a site whose database exists
// already, made with another group (root's): the database's files and the
// journal and its fallback (which a reconciler made with that group) given
// SlurmUser's group; the database's group write taken away (hooks do not
// write it).
func (in *Install) GrantExisting(group string) error {
	gid, err := groupID(group)
	if err != nil {
		return err
	}
	files, err := filepath.Glob(in.DB + "*")
	if err != nil {
		return err
	}
	for _, f := range files {
		if strings.HasSuffix(f, ".lock") {
			continue
		}
		if err := os.Chown(f, 0, gid); err != nil {
			return err
		}
		fi, err := os.Stat(f)
		if err != nil {
			return err
		}
		if err := os.Chmod(f, fi.Mode().Perm()&^0o020); err != nil {
			return err
		}
	}
	for _, d := range []string{in.Journal, in.JournalFallback} {
		if err := os.Chown(d, -1, gid); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	return nil
}

func groupID(group string) (int, error) {
	g, err := user.LookupGroup(group)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(g.Gid)
}

// OpenDB opens the database read-only (the scenarios only look).
func (in *Install) OpenDB(ctx context.Context) (*store.DB, error) {
	return store.Open(ctx, in.DB, store.Options{ReadOnly: true})
}

// Events returns history rows.
func (in *Install) Events(ctx context.Context, f store.Filter) ([]store.Event, error) {
	return lab.Events(ctx, in.DB, f, in.JournalFallback)
}

// PoolNodes returns the pool's nodes as the last reconciler round saved
// them.
func (in *Install) PoolNodes(ctx context.Context) (map[string]pool.Node, error) {
	return lab.PoolNodes(ctx, in.DB)
}

// Held returns the nodes each Trainer holds now (saved state).
func (in *Install) Held(ctx context.Context) (map[string][]string, error) {
	nodes, err := in.PoolNodes(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, n := range nodes {
		if n.State == pool.Idle && n.Trainer != "" {
			out[n.Trainer] = append(out[n.Trainer], n.Name)
		}
	}
	for _, v := range out {
		slices.Sort(v)
	}
	return out, nil
}

// PoolMismatch compares the pool's idle nodes with sinfo's exactly idle
// ones over the lab's nodes and describes every difference; "" when they
// agree. Released nodes waiting to be idle count as not idle.
func (in *Install) PoolMismatch(ctx context.Context, l *Lab) (string, error) {
	nodes, err := in.PoolNodes(ctx)
	if err != nil {
		return "", err
	}
	states, err := l.NodeStates(ctx)
	if err != nil {
		return "", err
	}
	var diff []string
	for _, n := range l.Nodes {
		p, known := nodes[n]
		inPool := known && p.State == pool.Idle
		if idle := states[n] == "idle"; idle != inPool {
			ps := "unknown"
			if known {
				ps = string(p.State)
			}
			diff = append(diff, fmt.Sprintf("%s: sinfo %q, pool %s", n, states[n], ps))
		}
	}
	return strings.Join(diff, "; "), nil
}

// WaitPoolMatches waits, at most timeout, until PoolMismatch is empty.
func (in *Install) WaitPoolMatches(ctx context.Context, l *Lab, timeout time.Duration) error {
	var last string
	err := Poll(ctx, timeout, func() (bool, error) {
		d, err := in.PoolMismatch(ctx, l)
		last = d
		return d == "", err
	})
	if err != nil {
		return fmt.Errorf("pool and sinfo differ (%s): %w", last, err)
	}
	return nil
}

// Proc is a process of this install.
type Proc struct {
	agent.Proc
	Exe string
}

// TrainerProcs returns the live processes carrying a run token of one of
// this install's Trainers whose node is in nodes (all nodes when empty).
func (in *Install) TrainerProcs(nodes ...string) ([]Proc, error) {
	ps, err := agent.Procs()
	if err != nil {
		return nil, err
	}
	var out []Proc
	for _, p := range ps {
		t, ok := p.Token()
		if !ok || p.Dead() || !strings.HasPrefix(t.Trainer, in.Tag+"-") {
			continue
		}
		if len(nodes) == 0 || slices.Contains(nodes, t.Node) {
			out = append(out, Proc{Proc: p})
		}
	}
	return out, nil
}

// Procs returns every live process of this install: its binary
// (reconcilers, node agents, supervisors), its Trainers' processes (by run
// token) and those of the given users.
func (in *Install) Procs(users ...*User) ([]Proc, error) {
	ps, err := agent.Procs()
	if err != nil {
		return nil, err
	}
	me := os.Getpid()
	var out []Proc
	for _, p := range ps {
		if p.Dead() || p.PID == me || p.PID == 1 {
			continue
		}
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", p.PID))
		t, ok := p.Token()
		mine := exe == in.Bin || (ok && strings.HasPrefix(t.Trainer, in.Tag+"-"))
		for _, u := range users {
			mine = mine || (u != nil && procUID(p.PID) == u.UID)
		}
		if mine {
			out = append(out, Proc{Proc: p, Exe: exe})
		}
	}
	return out, nil
}

// procUID returns a process's real uid, or -1.
func procUID(pid int) int {
	st, err := agent.ProcStatus(pid)
	if err != nil {
		return -1
	}
	f := strings.Fields(st["Uid"])
	if len(f) == 0 {
		return -1
	}
	uid, err := strconv.Atoi(f[0])
	if err != nil {
		return -1
	}
	return uid
}

// Kill SIGKILLs every process of this install (see Procs), by PID,
// until none is left or timeout passes; it returns what survived.
func (in *Install) Kill(timeout time.Duration, users ...*User) error {
	deadline := time.Now().Add(timeout)
	for {
		ps, err := in.Procs(users...)
		if err != nil {
			return err
		}
		if len(ps) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			var left []string
			for _, p := range ps {
				left = append(left, fmt.Sprintf("%d(%s)", p.PID, p.Comm))
			}
			return fmt.Errorf("processes survived SIGKILL: %s", strings.Join(left, " "))
		}
		for _, p := range ps {
			syscall.Kill(p.PID, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// SetHooks switches the lab's hooks to this binary (on) or off and
// checks with a job on every node that the slurmds have the change: with
// the hooks on, the job's node prologs are in the history; off, they are
// not.
func (in *Install) SetHooks(ctx context.Context, l *Lab, on bool) error {
	path := ""
	if on {
		path = in.Bin
	}
	return in.SetHookPath(ctx, l, path)
}

// SetHookPath is SetHooks with another program as the hook (a wrapper
// that runs the binary; "": none), checked the same way.
func (in *Install) SetHookPath(ctx context.Context, l *Lab, path string) error {
	on := path != ""
	if err := l.SetHooks(ctx, path); err != nil {
		return err
	}
	var last string
	err := Poll(ctx, 60*time.Second, func() (bool, error) {
		out, err := l.Output(ctx, "srun", "-N", strconv.Itoa(len(l.Nodes)), "-J", "hooks-probe", "/usr/bin/printenv", "SLURM_JOB_ID")
		if err != nil {
			return false, err
		}
		f := strings.Fields(out)
		if len(f) == 0 {
			return false, fmt.Errorf("srun printed no job id")
		}
		id := f[0]
		evs, err := in.Events(ctx, store.Filter{Kinds: []store.Kind{store.KindHook}, Job: id})
		if err != nil && on {
			return false, err
		}
		n := 0
		for _, e := range evs {
			if e.Context == "prolog_slurmd" {
				n++
			}
		}
		last = fmt.Sprintf("job %s: %d node prologs recorded", id, n)
		if on {
			return n == len(l.Nodes), nil
		}
		return n == 0, nil
	})
	if err != nil {
		return fmt.Errorf("hooks %s: %s: %w", map[bool]string{true: "on", false: "off"}[on], last, err)
	}
	return nil
}
