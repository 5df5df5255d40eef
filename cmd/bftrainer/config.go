package main

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/urfave/cli/v2"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/trainer"
)

// Config is bftrainer's configuration: defaults, then the TOML file (an
// unknown key is an error), then validation, then flags that were set.
type Config struct {
	Database        string   `toml:"database"`
	DatabaseMode    FileMode `toml:"database_mode"`
	Journal         string   `toml:"journal"`
	JournalFallback string   `toml:"journal_fallback"`
	Spool           string   `toml:"spool"`
	Admins          []string `toml:"admins"`
	AdminGroup      string   `toml:"admin_group"`
	Pool            struct {
		MaxTrainers     int      `toml:"max_trainers"`
		TFwd            float64  `toml:"tfwd"`
		Objective       string   `toml:"objective"`
		Semantics       string   `toml:"semantics"`
		Solver          string   `toml:"solver"`
		SolverTimeLimit Duration `toml:"solver_time_limit"`
		SolverPath      string   `toml:"solver_path"`
		// CurveSettle and CurveSample are the curve learner's Settle and
		// MinSample (alloc.CurveLearner), seconds.
		CurveSettle float64 `toml:"curve_settle"`
		CurveSample float64 `toml:"curve_sample"`
	} `toml:"pool"`
	Hooks struct {
		Deadline        Duration `toml:"deadline"`
		Log             string   `toml:"log"`
		Scheduler       string   `toml:"scheduler"`
		SpawnReconciler string   `toml:"spawn_reconciler"`
	} `toml:"hooks"`
	Reconciler struct {
		IdleWait   Duration `toml:"idle_wait"`
		StartCheck Duration `toml:"start_check"`
		// StartRetries failed starts of a Trainer in a row end it
		// failed; after each it takes no node for StartBackoff, doubled
		// after each further one (pool.Config.StartRetries).
		StartRetries int      `toml:"start_retries"`
		StartBackoff Duration `toml:"start_backoff"`
		Poll         Duration `toml:"poll"`
		MaxRounds    int      `toml:"max_rounds"`
		Interval     Duration `toml:"interval"`
		// The scheduler's plan (squeue --start, Grid Engine's
		// reservations): read at most every plan_every, each read within
		// plan_timeout; Trainers move off planned nodes plan_lead before
		// the start (0: each Trainer's R_down + plan_every + interval).
		PlanEvery   Duration `toml:"plan_every"`
		PlanTimeout Duration `toml:"plan_timeout"`
		PlanLead    Duration `toml:"plan_lead"`
		// PlanHorizon: which planned nodes the allocator also prices with
		// a horizon ending at their planned start (pool.PlanHorizon):
		// none, stable or priced.
		PlanHorizon string `toml:"plan_horizon"`
	} `toml:"reconciler"`
	Metrics struct {
		Textfile string `toml:"textfile"`
	} `toml:"metrics"`
	// Scheduler names each scheduler's node-listing program, under its
	// Listing.Key ("sinfo"), its plan's program or file, under its
	// Plan.Key ("squeue"), and the program doctor reads its configuration
	// with, under its Wiring.Key ("scontrol"), and its accounting reader,
	// under its Accounting.Key ("sacct", for audit); a scheduler's own
	// default when not set, "" turns it off.
	Scheduler map[string]string `toml:"scheduler"`
	Trainer   TrainerConfig     `toml:"trainer"`

	path        string // the file read, "" for defaults only
	fallbackSet bool   // journal_fallback was in the file
}

// TrainerConfig is how Trainer processes are started, contained and
// killed: the [trainer] section, with each launcher's own settings in
// [trainer.launcher.NAME] (decoded by the launcher: trainer.Kind).
type TrainerConfig struct {
	Transport      string   `toml:"transport"` // none, local, ssh
	SSH            string   `toml:"ssh"`
	SSHConfig      string   `toml:"ssh_config"`
	SSHIdentity    string   `toml:"ssh_identity"`
	SSHUser        string   `toml:"ssh_user"`
	ConnectTimeout Duration `toml:"connect_timeout"`
	CommandTimeout Duration `toml:"command_timeout"`
	// ProgressLogEvery and ProgressLogTimeout: how often a Trainer's
	// declared progress log is read at most, and the bound on one round's
	// reads.
	ProgressLogEvery   Duration `toml:"progress_log_every"`
	ProgressLogTimeout Duration `toml:"progress_log_timeout"`
	RemoteBftrainer    string   `toml:"remote_bftrainer"`
	RemoteConfig       string   `toml:"remote_config"`
	Registry           string   `toml:"registry"`
	LogDir             string   `toml:"log_dir"`
	StateDir           string   `toml:"state_dir"`
	Controller         string   `toml:"controller"`
	Parallel           int      `toml:"parallel"`
	KillWait           Duration `toml:"kill_wait"`
	Containment        string   `toml:"containment"` // auto, cgroup, off
	CgroupRoot         string   `toml:"cgroup_root"`
	PidsMax            int64    `toml:"pids_max"`
	MemoryMax          string   `toml:"memory_max"`
	CPUPriority        string   `toml:"cpu_priority"` // normal, idle
	DeviceGlob         string   `toml:"device_glob"`
	AllowRootOwner     bool     `toml:"allow_root_owner"`
	// Launcher holds the [trainer.launcher.NAME] tables until each
	// launcher decodes its own.
	Launcher map[string]toml.Primitive `toml:"launcher"`

	memoryMax int64                       // MemoryMax in bytes
	launchers map[string]trainer.Launcher // built from their settings
	sweep     bool                        // kill without a configuration (fallbackConfig)
}

// Values of trainer.cpu_priority: the scheduling class Trainer programs
// start in.
const (
	cpuNormal = "normal" // the node's default class
	cpuIdle   = "idle"   // SCHED_IDLE: only CPU time nothing else wants
)

// FileMode is a permission written as an octal string ("0644") in TOML.
type FileMode struct{ os.FileMode }

// UnmarshalText parses an octal mode.
func (m *FileMode) UnmarshalText(b []byte) error {
	v, err := strconv.ParseUint(string(b), 8, 32)
	if err != nil || v > 0o777 {
		return fmt.Errorf("mode %q: want octal permission bits like \"0644\"", b)
	}
	m.FileMode = os.FileMode(v)
	return nil
}

// MarshalText writes the mode in octal.
func (m FileMode) MarshalText() ([]byte, error) {
	return []byte(fmt.Sprintf("%04o", uint32(m.FileMode))), nil
}

// Duration is a time.Duration written as "10s" in TOML.
type Duration struct{ time.Duration }

// UnmarshalText parses a Go duration.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

// MarshalText writes a Go duration.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// The default database and the journal fallback that goes with it, below
// the build's LOCALSTATEDIR and RUNSTATEDIR.
func defaultDatabase() string        { return localStateDir + "/lib/bftrainer/bftrainer.db" }
func defaultJournalFallback() string { return runStateDir + "/bftrainer/journal" }

// defaults returns the configuration etc/bftrainer.toml documents.
func defaults() Config {
	var c Config
	c.Database = defaultDatabase()
	c.JournalFallback = defaultJournalFallback()
	c.Spool = localStateDir + "/spool/bftrainer"
	c.Admins = []string{}
	c.Pool.MaxTrainers = 10
	c.Pool.TFwd = 10
	c.Pool.CurveSettle = 30
	c.Pool.CurveSample = 60
	c.Pool.Objective = "throughput"
	c.Pool.Semantics = "default"
	c.Pool.Solver = "adaptive"
	c.Pool.SolverTimeLimit = Duration{10 * time.Second}
	c.Hooks.Deadline = Duration{2 * time.Second}
	c.Hooks.Log = builtinHookLog()
	c.Hooks.SpawnReconciler = "auto"
	c.Reconciler.IdleWait = Duration{60 * time.Second}
	c.Reconciler.StartRetries = pool.DefaultStartRetries
	c.Reconciler.StartBackoff = Duration{pool.DefaultStartBackoff}
	c.Reconciler.Poll = Duration{time.Second}
	c.Reconciler.MaxRounds = 100
	c.Reconciler.Interval = Duration{5 * time.Second}
	c.Reconciler.PlanEvery = Duration{5 * time.Second}
	c.Reconciler.PlanTimeout = Duration{3 * time.Second}
	c.Reconciler.PlanHorizon = "none"
	c.Scheduler = map[string]string{}
	for _, s := range schedulers() {
		if s.Listing != nil {
			c.Scheduler[s.Listing.Key] = s.Listing.Program
		}
		if s.Plan != nil {
			c.Scheduler[s.Plan.Key] = s.Plan.Program
		}
		if s.Wiring != nil {
			c.Scheduler[s.Wiring.Key] = s.Wiring.Program
		}
		if s.Accounting != nil {
			c.Scheduler[s.Accounting.Key] = s.Accounting.Program
		}
	}
	c.DatabaseMode = FileMode{0o644}
	t := &c.Trainer
	t.Transport = "none"
	t.SSH = "/usr/bin/ssh"
	t.SSHUser = "root"
	t.ConnectTimeout = Duration{10 * time.Second}
	t.CommandTimeout = Duration{60 * time.Second}
	t.ProgressLogEvery = Duration{5 * time.Second}
	t.ProgressLogTimeout = Duration{5 * time.Second}
	t.Registry = runStateDir + "/bftrainer/nodes"
	t.LogDir = localStateDir + "/log/bftrainer/trainers"
	t.StateDir = localStateDir + "/lib/bftrainer/runner"
	t.Parallel = 16
	t.KillWait = Duration{5 * time.Second}
	t.Containment = "auto"
	t.CPUPriority = cpuNormal
	t.DeviceGlob = "/dev/nvidia*"
	t.launchers, _ = t.buildLaunchers(nil) // the defaults build
	return c
}

// configPath picks the file: --config, then $BFTRAINER_CONFIG, then the
// built-in default. explicit is false for the built-in default, whose
// absence is not an error.
func configPath(flag string) (path string, explicit bool) {
	if flag != "" {
		return flag, true
	}
	if v := os.Getenv("BFTRAINER_CONFIG"); v != "" {
		return v, true
	}
	return defaultConfig, false
}

// loadConfig reads and validates the configuration.
func loadConfig(path string, explicit bool) (Config, error) {
	c := defaults()
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist) && !explicit:
		return c, c.validate()
	case err != nil:
		return c, fmt.Errorf("config: %w", err)
	}
	c.path = path
	md, err := toml.Decode(string(b), &c)
	if err != nil {
		return c, fmt.Errorf("config %s: %w", path, err)
	}
	c.fallbackSet = md.IsDefined("journal_fallback")
	c.ownFallback()
	// Each launcher decodes its own table: its keys are decoded (or
	// unknown) only then.
	if c.Trainer.launchers, err = c.Trainer.buildLaunchers(&md); err != nil {
		return c, fmt.Errorf("config %s: %w", path, err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		keys := make([]string, len(und))
		for i, k := range und {
			keys[i] = k.String()
		}
		return c, withHint(fmt.Errorf("config %s: unknown key %s", path, strings.Join(keys, ", ")),
			"bftrainer --config /dev/null config prints the keys with their defaults; etc/bftrainer.toml in the source documents every one")
	}
	if err := c.validate(); err != nil {
		return c, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// ownFallback keeps the default journal fallback for the default
// database only: another install's hooks must not write into it.
func (c *Config) ownFallback() {
	if !c.fallbackSet {
		c.JournalFallback = ""
		if c.Database == defaultDatabase() {
			c.JournalFallback = defaultJournalFallback()
		}
	}
}

// journalDir is the journal: the key, or "journal" beside the database.
func (c *Config) journalDir() string {
	if c.Journal != "" {
		return c.Journal
	}
	return filepath.Join(filepath.Dir(c.Database), "journal")
}

func (c *Config) validate() error {
	var errs []error
	if c.Database == "" {
		errs = append(errs, errors.New("database: empty"))
	}
	for _, d := range []struct{ key, dir string }{{"journal", c.Journal}, {"journal_fallback", c.JournalFallback}} {
		if d.dir != "" && !filepath.IsAbs(d.dir) {
			errs = append(errs, fmt.Errorf("%s: %q, want an absolute path", d.key, d.dir))
		}
	}
	if c.JournalFallback != "" && filepath.Clean(c.JournalFallback) == filepath.Clean(c.journalDir()) {
		errs = append(errs, errors.New("journal_fallback: the journal itself; name a directory on another filesystem, or \"\""))
	}
	if c.Pool.MaxTrainers < 1 {
		errs = append(errs, fmt.Errorf("pool.max_trainers: %d, want ≥ 1", c.Pool.MaxTrainers))
	}
	if c.Pool.TFwd < 0 || c.Pool.TFwd != c.Pool.TFwd {
		errs = append(errs, fmt.Errorf("pool.tfwd: %v, want ≥ 0 seconds", c.Pool.TFwd))
	}
	if !(c.Pool.CurveSettle >= 0) || !(c.Pool.CurveSample > 0) {
		errs = append(errs, fmt.Errorf("pool.curve_settle %v, pool.curve_sample %v: want seconds ≥ 0 and > 0", c.Pool.CurveSettle, c.Pool.CurveSample))
	}
	if _, err := alloc.ParseObjective(c.Pool.Objective); err != nil {
		errs = append(errs, fmt.Errorf("pool.objective: %w", err))
	}
	if _, err := alloc.ParseSemantics(c.Pool.Semantics); err != nil {
		errs = append(errs, fmt.Errorf("pool.semantics: %w", err))
	}
	if !slices.Contains(solvers().Names(), c.Pool.Solver) {
		errs = append(errs, fmt.Errorf("pool.solver: %q, want %s", c.Pool.Solver, solvers().Want()))
	}
	if c.Pool.SolverTimeLimit.Duration <= 0 {
		errs = append(errs, errors.New("pool.solver_time_limit: want > 0"))
	}
	if d := c.Hooks.Deadline.Duration; d <= 0 || d > 10*time.Minute {
		errs = append(errs, fmt.Errorf("hooks.deadline: %v, want between 0 and 10m (schedulers wait for hooks)", d))
	}
	if err := schedulers().Validate(c.Hooks.Scheduler); err != nil {
		errs = append(errs, fmt.Errorf("hooks.scheduler: %w", err))
	}
	keys := map[string]bool{}
	for _, s := range schedulers() {
		if s.Listing != nil {
			keys[s.Listing.Key] = true
		}
		if s.Plan != nil {
			keys[s.Plan.Key] = true
		}
		if s.Wiring != nil {
			keys[s.Wiring.Key] = true
		}
		if s.Accounting != nil {
			keys[s.Accounting.Key] = true
		}
	}
	for k := range c.Scheduler {
		if !keys[k] {
			errs = append(errs, withHint(fmt.Errorf("unknown key scheduler.%s", k), "bftrainer --config /dev/null config prints the keys with their defaults; etc/bftrainer.toml in the source documents every one"))
		}
	}
	switch c.Hooks.SpawnReconciler {
	case "auto", "always", "never":
	default:
		errs = append(errs, fmt.Errorf("hooks.spawn_reconciler: %q, want auto, always or never", c.Hooks.SpawnReconciler))
	}
	if f := c.Metrics.Textfile; f != "" && (!filepath.IsAbs(f) || !strings.HasSuffix(f, ".prom")) {
		errs = append(errs, fmt.Errorf("metrics.textfile: %q, want an absolute path ending in .prom (node_exporter's textfile collector reads only those)", f))
	}
	if c.Reconciler.PlanEvery.Duration < 0 || c.Reconciler.PlanTimeout.Duration <= 0 || c.Reconciler.PlanLead.Duration < 0 {
		errs = append(errs, errors.New("reconciler.plan_every and plan_lead: want ≥ 0; plan_timeout: want > 0"))
	}
	if h := c.Reconciler.PlanHorizon; h != "none" && h != string(pool.PlanStable) && h != string(pool.PlanPriced) {
		errs = append(errs, fmt.Errorf("reconciler.plan_horizon: %q, want none, stable or priced", h))
	}
	if c.Reconciler.MaxRounds < 1 {
		errs = append(errs, errors.New("reconciler.max_rounds: want ≥ 1"))
	}
	if c.Reconciler.Interval.Duration <= 0 || c.Reconciler.Poll.Duration < 0 || c.Reconciler.IdleWait.Duration < 0 {
		errs = append(errs, errors.New("reconciler: interval must be > 0, poll and idle_wait ≥ 0"))
	}
	if c.Reconciler.StartRetries < 1 || c.Reconciler.StartBackoff.Duration <= 0 {
		errs = append(errs, errors.New("reconciler: start_retries must be ≥ 1 and start_backoff > 0"))
	}
	if c.DatabaseMode.FileMode&0o200 == 0 || c.DatabaseMode.FileMode&0o022 != 0 {
		errs = append(errs, fmt.Errorf("database_mode: %04o: the owner must write it, group and others must not", uint32(c.DatabaseMode.FileMode)))
	}
	errs = append(errs, c.Trainer.validate()...)
	return errors.Join(errs...)
}

func (t *TrainerConfig) validate() []error {
	var errs []error
	switch t.Transport {
	case "none", "local", "ssh":
	default:
		errs = append(errs, fmt.Errorf("trainer.transport: %q, want none, local or ssh", t.Transport))
	}
	for _, d := range []struct {
		key string
		dir string
	}{{"registry", t.Registry}, {"log_dir", t.LogDir}, {"state_dir", t.StateDir}} {
		if !filepath.IsAbs(d.dir) {
			errs = append(errs, fmt.Errorf("trainer.%s: %q, want an absolute path", d.key, d.dir))
		}
	}
	if t.SSHUser == "" || strings.HasPrefix(t.SSHUser, "-") || strings.ContainsAny(t.SSHUser, "@ \t\n'\"") {
		errs = append(errs, fmt.Errorf("trainer.ssh_user: %q is not a user name", t.SSHUser))
	}
	if t.ConnectTimeout.Duration < time.Second || t.CommandTimeout.Duration < time.Second {
		errs = append(errs, errors.New("trainer: connect_timeout and command_timeout must be at least 1s"))
	}
	if t.ProgressLogEvery.Duration < 0 || t.ProgressLogTimeout.Duration < time.Second {
		errs = append(errs, errors.New("trainer: progress_log_every must be ≥ 0 (0: never read), progress_log_timeout at least 1s"))
	}
	if t.Parallel < 1 || t.KillWait.Duration <= 0 {
		errs = append(errs, errors.New("trainer: parallel must be ≥ 1, kill_wait > 0"))
	}
	if err := trainer.CheckContainment(t.Containment); err != nil {
		errs = append(errs, fmt.Errorf("trainer.containment: %w", err))
	}
	if t.CgroupRoot != "" && !filepath.IsAbs(t.CgroupRoot) {
		errs = append(errs, fmt.Errorf("trainer.cgroup_root: %q, want an absolute path (or empty: bftrainer in the cgroup2 mount)", t.CgroupRoot))
	}
	if t.PidsMax < 0 {
		errs = append(errs, errors.New("trainer.pids_max: want ≥ 0 (0: no limit)"))
	}
	if t.CPUPriority != cpuNormal && t.CPUPriority != cpuIdle {
		errs = append(errs, fmt.Errorf("trainer.cpu_priority: %q, want %q or %q", t.CPUPriority, cpuNormal, cpuIdle))
	}
	var err error
	if t.memoryMax, err = parseBytes(t.MemoryMax); err != nil {
		errs = append(errs, fmt.Errorf("trainer.memory_max: %w", err))
	}
	if t.DeviceGlob != "" {
		if _, err := filepath.Match(t.DeviceGlob, "/dev/x"); err != nil || !filepath.IsAbs(t.DeviceGlob) {
			errs = append(errs, fmt.Errorf("trainer.device_glob: %q, want an absolute glob like /dev/nvidia*", t.DeviceGlob))
		}
	}
	return errs
}

// buildLaunchers builds every registered launcher from its
// [trainer.launcher.NAME] table (md nil: the defaults); a table for no
// launcher is an error.
func (t *TrainerConfig) buildLaunchers(md *toml.MetaData) (map[string]trainer.Launcher, error) {
	kinds := launchers()
	for name := range t.Launcher {
		if !slices.Contains(kinds.Names(), name) {
			return nil, fmt.Errorf("trainer.launcher.%s: no such launcher (have %s)", name, strings.Join(kinds.Names(), ", "))
		}
	}
	ls, err := kinds.Build(func(name string, settings any) error {
		prim, ok := t.Launcher[name]
		if !ok || md == nil {
			return nil
		}
		return md.PrimitiveDecode(prim, settings)
	})
	if err != nil {
		return nil, fmt.Errorf("trainer.%w", err)
	}
	return ls, nil
}

// parseBytes reads a size: bytes, or a number with a K, M, G or T suffix
// (powers of 1024); "" is 0 (no limit).
func parseBytes(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	num, mult := s, int64(1)
	if i := strings.IndexByte("KMGT", strings.ToUpper(s[len(s)-1:])[0]); i >= 0 {
		num, mult = s[:len(s)-1], int64(1)<<(10*(i+1))
	}
	v, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
	if err != nil || v < 0 || v > (1<<62)/mult {
		return 0, fmt.Errorf("%q: want bytes, or a number with K, M, G or T", s)
	}
	return v * mult, nil
}

// isAdmin reports whether user may act on any Trainer.
func (c *Config) isAdmin(name string) bool {
	if name == "root" || slices.Contains(c.Admins, name) {
		return true
	}
	if c.AdminGroup == "" {
		return false
	}
	u, err := user.Lookup(name)
	if err != nil {
		return false
	}
	g, err := user.LookupGroup(c.AdminGroup)
	if err != nil {
		return false
	}
	ids, err := u.GroupIds()
	return err == nil && slices.Contains(ids, g.Gid)
}

// configFrom loads the configuration for a command and applies global
// flags.
func configFrom(c *cli.Context) (Config, error) {
	path, explicit := configPath(c.String("config"))
	cfg, err := loadConfig(path, explicit)
	if err != nil {
		return cfg, err
	}
	if c.IsSet("db") {
		cfg.Database = c.String("db")
		cfg.ownFallback()
	}
	return cfg, nil
}

func configCommand() *cli.Command {
	return &cli.Command{
		Name:  "config",
		Usage: "print the effective configuration (defaults, file, flags) as TOML",
		Description: `The defaults, then the file (` + defaultConfig + `, $BFTRAINER_CONFIG or
--config), then the flags that were set; etc/bftrainer.toml documents
every key. An unknown key, or a value that does not validate, is an error.

  bftrainer config
  bftrainer --config /tmp/test.toml config`,
		Action: func(c *cli.Context) error {
			cfg, err := configFrom(c)
			if err != nil {
				return err
			}
			return writeTOML(c.App.Writer, cfg)
		},
	}
}

// learner is the curve learner's settings from [pool] (a setting of 0
// seconds is none: alloc.CurveLearner reads a negative one as 0).
func (c Config) learner() alloc.CurveLearner {
	l := alloc.CurveLearner{Settle: c.Pool.CurveSettle, MinSample: c.Pool.CurveSample}
	if l.Settle == 0 {
		l.Settle = -1
	}
	return l
}
