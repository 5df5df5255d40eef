package main

import (
	"errors"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/user"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/hooks"
	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/sidecar"
	"github.com/bftrainer/bftrainer/trainer"
)

// This file is the wiring: the registries this binary is built with, and
// the application core built from the configuration. Commands call the
// core (coreAction) and print what it returns; no policy lives in cmd.

// schedulers is the registry of schedulers this binary is built with: the
// one place cmd names it.
func schedulers() hooks.Registry { return hooks.Builtin() }

// solvers is the registry of allocators this binary is built with.
func solvers() sidecar.Solvers { return sidecar.BuiltinSolvers() }

// launchers is the registry of launchers this binary is built with.
func launchers() trainer.Kinds { return trainer.Builtin() }

// options turns the configuration into the core's options; log is where
// the rounds' and commands' diagnostics go.
func options(cfg Config, log *log.Logger) sidecar.Options {
	obj, _ := alloc.ParseObjective(cfg.Pool.Objective) // validated with the configuration
	sem, _ := alloc.ParseSemantics(cfg.Pool.Semantics)
	return sidecar.Options{
		Database:        cfg.Database,
		DatabaseMode:    cfg.DatabaseMode.FileMode,
		Journal:         cfg.journalDir(),
		JournalFallback: cfg.JournalFallback,
		Spool:           cfg.Spool,
		RunnerState:     cfg.Trainer.StateDir,
		Pool: pool.Config{MaxTrainers: cfg.Pool.MaxTrainers, TFwd: cfg.Pool.TFwd, Objective: obj, Semantics: sem, Learner: cfg.learner(),
			PlanHorizon: planHorizon(cfg.Reconciler.PlanHorizon), StartRetries: cfg.Reconciler.StartRetries, StartBackoff: cfg.Reconciler.StartBackoff.Duration},
		Solvers:   solvers(),
		Launchers: launchers(),
		Solver:    cfg.Pool.Solver,
		SolverSettings: sidecar.SolverSettings{
			TimeLimit: cfg.Pool.SolverTimeLimit.Duration, Path: cfg.Pool.SolverPath},
		Schedulers: schedulers(),
		Scheduler:  cfg.Hooks.Scheduler,
		Listings:   cfg.Scheduler,
		Admins:     cfg.isAdmin,
		Runner:     func() (sidecar.Runner, error) { return newRunner(cfg) },
		Start:      startOptions(cfg),
		Trigger:    reconcilerTrigger(cfg),
		Hook: sidecar.HookOptions{
			Killer:       localKiller(cfg),
			RemoteKiller: remoteKiller(cfg),
			Deadline:     cfg.Hooks.Deadline.Duration,
		},
		IdleWait:    cfg.Reconciler.IdleWait.Duration,
		StartCheck:  cfg.Reconciler.StartCheck.Duration,
		Poll:        cfg.Reconciler.Poll.Duration,
		Interval:    cfg.Reconciler.Interval.Duration,
		PlanEvery:   cfg.Reconciler.PlanEvery.Duration,
		PlanTimeout: cfg.Reconciler.PlanTimeout.Duration,
		PlanLead:    cfg.Reconciler.PlanLead.Duration,
		MaxRounds:   cfg.Reconciler.MaxRounds,
		MetricsFile: cfg.Metrics.Textfile,
		User:        currentUser,
		Log:         log,
	}
}

// coreAction is a command's Action: it loads the configuration, builds the
// core, runs fn, and turns the core's errors into the messages, hints and
// exit statuses the user sees (explain).
func coreAction(fn func(c *cli.Context, core *sidecar.Core, cfg Config) error) cli.ActionFunc {
	return func(c *cli.Context) error {
		cfg, err := configFrom(c)
		if err != nil {
			return err
		}
		core, err := sidecar.New(options(cfg, newLogger(c.App.ErrWriter)))
		if err != nil {
			return err
		}
		return explain(cfg, fn(c, core, cfg))
	}
}

// explain adds what the user can do about a core error: the hint, and
// exit status 2 for a request refused as given.
func explain(cfg Config, err error) error {
	var cannot *sidecar.CannotStart
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sidecar.ErrInvalid):
		return usageError{err}
	case errors.Is(err, sidecar.ErrNoDatabase):
		return withHint(err, "the reconciler (`bftrainer reconcile` or its service), `bftrainer sync` or `bftrainer node join` creates it; or set database in %s", configFile(cfg))
	case errors.Is(err, sidecar.ErrDenied):
		return withHint(err, "only its owner, root, or an admin (admins, admin_group in %s) may", configFile(cfg))
	case errors.Is(err, sidecar.ErrNotWritable) && errors.Is(err, syscall.EROFS):
		// Root is refused too: the pilot's read-only fault had the hint below.
		return withHint(err, "the filesystem holding %s is read-only (mount); hooks go on writing their journal's fallback, recorded once it is writable again", cfg.Database)
	case errors.Is(err, sidecar.ErrNotWritable):
		return withHint(err, "only root (or the database's group) may write %s", cfg.Database)
	case errors.Is(err, sidecar.ErrSpool):
		return withHint(err, "%s", spoolHint(cfg, err))
	case errors.As(err, &cannot):
		return withHint(err, "%s", cannot.Hint)
	case errors.Is(err, sidecar.ErrNoListing):
		return withHint(err, "set its program in the [scheduler] table of %s", configFile(cfg))
	}
	return err
}

// spoolHint names what kept a request out of the spool.
func spoolHint(cfg Config, err error) string {
	switch {
	case errors.Is(err, syscall.ENOSPC):
		return fmt.Sprintf("the filesystem holding the spool %s is full (df %s); the request was not taken", cfg.Spool, cfg.Spool)
	case errors.Is(err, syscall.EDQUOT):
		return fmt.Sprintf("your disk quota on the filesystem holding the spool %s is used up; the request was not taken", cfg.Spool)
	case errors.Is(err, syscall.EROFS):
		return fmt.Sprintf("the spool %s is on a read-only filesystem; the request was not taken", cfg.Spool)
	}
	return fmt.Sprintf("the spool %s must exist, root's, with mode 1733: make install creates it (or: install -d -m 1733 %s)", cfg.Spool, cfg.Spool)
}

// done reports a request's receipt on stderr.
func done(c *cli.Context, cfg Config, rc sidecar.Receipt, what string) {
	if rc.Unchecked != nil {
		fmt.Fprintf(c.App.ErrWriter, "bftrainer: could not check that the Trainer is yours (%v); the reconciler checks and refuses the request if it is not\n", rc.Unchecked)
	}
	if rc.Spooled {
		say(c.App.ErrWriter, "%s (spooled; the reconciler takes it within %v)", what, cfg.Reconciler.Interval.Duration)
		return
	}
	say(c.App.ErrWriter, "%s", what)
}

func configFile(cfg Config) string {
	if cfg.path != "" {
		return cfg.path
	}
	return defaultConfig
}

func currentUser() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return fmt.Sprint(os.Getuid())
}

// startOptions is what a submission is checked against, that its Trainer
// could ever start with this configuration; nil where nothing starts
// (trainer.transport = "none").
func startOptions(cfg Config) *sidecar.StartOptions {
	t := cfg.Trainer
	if t.Transport == "none" {
		return nil
	}
	built := t.launchers
	if built == nil { // a Config not from loadConfig
		built, _ = t.buildLaunchers(nil)
	}
	return &sidecar.StartOptions{AllowRootOwner: t.AllowRootOwner, Local: t.Transport != "ssh", Launchers: built}
}

// reconcilerTrigger starts a detached reconciler when allowed: it runs
// as root (it starts processes as their owners) and outlives the hook.
func reconcilerTrigger(cfg Config) func() error {
	spawn := cfg.Hooks.SpawnReconciler == "always" || (cfg.Hooks.SpawnReconciler == "auto" && os.Geteuid() == 0)
	if !spawn {
		return nil
	}
	return func() error { return spawnReconciler(cfg) }
}

func spawnReconciler(cfg Config) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	args := []string{"--db", cfg.Database, "reconcile"}
	if cfg.path != "" {
		args = append([]string{"--config", cfg.path}, args...)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer devnull.Close()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = devnull, devnull, devnull
	if cfg.Hooks.Log != "" {
		if f, err := os.OpenFile(cfg.Hooks.Log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640); err == nil {
			defer f.Close()
			cmd.Stderr = f
		}
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	return cmd.Process.Release()
}
