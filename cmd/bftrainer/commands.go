package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/hooks"
	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/sidecar"
	"github.com/bftrainer/bftrainer/store"
)

func commands() []*cli.Command {
	return []*cli.Command{
		hookCommand(),
		reconcileCommand(),
		nodeCommand(),
		syncCommand(),
		trainerCommand(),
		progressCommand(),
		statusCommand(),
		planCommand(),
		historyCommand(),
		reportCommand(),
		hostsCommand(),
		replayCommand(),
		configCommand(),
		nodeAgentCommand(),
	}
}

// openDB opens the configured database for writing.
func openDB(ctx context.Context, cfg Config) (*store.DB, error) {
	db, err := store.Open(ctx, cfg.Database, store.Options{Mode: cfg.DatabaseMode.FileMode})
	if err != nil {
		if errors.Is(err, os.ErrPermission) || errors.Is(err, unix.EACCES) || errors.Is(err, unix.EROFS) {
			return nil, withHint(err, "only root (or the database's group) may write %s", cfg.Database)
		}
		return nil, err
	}
	return db, nil
}

// openRead opens the database for reading; a missing database is a clear
// error rather than an empty one created on the spot.
func openRead(ctx context.Context, cfg Config) (*store.DB, error) {
	if _, err := os.Stat(cfg.Database); err != nil {
		return nil, withHint(fmt.Errorf("no database at %s: %w", cfg.Database, err),
			"a hook, `bftrainer node join` or `bftrainer sync` creates it; or set database in %s", configFile(cfg))
	}
	if unix.Access(cfg.Database, unix.W_OK) == nil {
		return store.Open(ctx, cfg.Database, store.Options{Mode: cfg.DatabaseMode.FileMode})
	}
	return store.Open(ctx, cfg.Database, store.Options{ReadOnly: true})
}

func configFile(cfg Config) string {
	if cfg.path != "" {
		return cfg.path
	}
	return defaultConfig
}

// canWrite reports whether this process may write the database.
func canWrite(cfg Config) bool {
	if _, err := os.Stat(cfg.Database); err != nil {
		return unix.Access(filepath.Dir(cfg.Database), unix.W_OK) == nil || os.Geteuid() == 0
	}
	return unix.Access(cfg.Database, unix.W_OK) == nil
}

func currentUser() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return fmt.Sprint(os.Getuid())
}

// poolConfig turns the configuration into the pool's.
func poolConfig(cfg Config) pool.Config {
	obj, _ := alloc.ParseObjective(cfg.Pool.Objective)
	sem, _ := alloc.ParseSemantics(cfg.Pool.Semantics)
	return pool.Config{MaxTrainers: cfg.Pool.MaxTrainers, TFwd: cfg.Pool.TFwd, Objective: obj, Semantics: sem}
}

// reconciler builds the serialised re-plan from the configuration.
func reconciler(cfg Config, db *store.DB, withScheduler bool) (*sidecar.Reconciler, error) {
	solver, err := solverByName(cfg.Pool.Solver, cfg.Pool.SolverTimeLimit.Duration, cfg.Pool.SolverPath)
	if err != nil {
		return nil, err
	}
	runner, err := newRunner(cfg)
	if err != nil {
		return nil, err
	}
	r := &sidecar.Reconciler{
		DB:        db,
		Pool:      poolConfig(cfg),
		Solver:    solver,
		Runner:    runner,
		Spool:     &sidecar.Spool{Dir: cfg.Spool},
		Admins:    cfg.isAdmin,
		IdleWait:  cfg.Reconciler.IdleWait.Duration,
		Poll:      cfg.Reconciler.Poll.Duration,
		MaxRounds: cfg.Reconciler.MaxRounds,
		Log:       newLogger(os.Stderr),
	}
	if withScheduler {
		if q, ok := schedulerQuery(cfg); ok {
			r.Scheduler = q
		}
	}
	return r, nil
}

// schedulerQuery returns the configured scheduler's node listing (the
// registry's default when none is configured) when it has one and its
// program is installed.
func schedulerQuery(cfg Config) (sidecar.Scheduler, bool) {
	s, ok := schedulers().Default()
	if cfg.Hooks.Scheduler != "" {
		s, ok = schedulers().Lookup(cfg.Hooks.Scheduler)
	}
	if !ok || s.Listing == nil {
		return nil, false
	}
	cmd := cfg.Scheduler[s.Listing.Key]
	if cmd == "" {
		return nil, false
	}
	if _, err := lookPath(cmd); err != nil {
		return nil, false
	}
	return hooks.Query{Listing: s.Listing, Program: cmd}, true
}

func reconcileCommand() *cli.Command {
	return &cli.Command{
		Name:  "reconcile",
		Usage: "fold recorded events into the pool, re-plan, and apply the plan (one at a time)",
		Description: `Hooks start it detached after each event when they run as root
(hooks.spawn_reconciler); as a service, run "bftrainer reconcile --watch".
Only one reconciler runs at a time (a lock beside the database); a second
one exits at once, and the running one picks up the new events.`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "watch", Usage: "keep running: reconcile whenever events or spooled requests arrive"},
			&cli.DurationFlag{Name: "interval", Usage: "with --watch, how often to look (default reconciler.interval)"},
			&cli.BoolFlag{Name: "no-scheduler", Usage: "do not ask the scheduler whether released nodes are idle"},
		},
		Action: func(c *cli.Context) error {
			cfg, err := configFrom(c)
			if err != nil {
				return err
			}
			db, err := openDB(c.Context, cfg)
			if err != nil {
				return err
			}
			defer db.Close()
			r, err := reconciler(cfg, db, !c.Bool("no-scheduler"))
			if err != nil {
				return err
			}
			if !c.Bool("watch") {
				return r.Run(c.Context)
			}
			every := cfg.Reconciler.Interval.Duration
			if c.IsSet("interval") {
				every = c.Duration("interval")
			}
			return sidecar.Watch(c.Context, r, every)
		},
	}
}

func configCommand() *cli.Command {
	return &cli.Command{
		Name:  "config",
		Usage: "print the effective configuration (defaults, file, flags) as TOML",
		Action: func(c *cli.Context) error {
			cfg, err := configFrom(c)
			if err != nil {
				return err
			}
			return writeTOML(c.App.Writer, cfg)
		},
	}
}

func newLogger(w *os.File) *log.Logger {
	return log.New(w, "bftrainer: ", 0)
}

// lookPath finds a command given by name or absolute path.
func lookPath(cmd string) (string, error) { return exec.LookPath(cmd) }
