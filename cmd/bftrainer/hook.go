package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/bftrainer/bftrainer/hooks"
	"github.com/bftrainer/bftrainer/sidecar"
	"github.com/bftrainer/bftrainer/store"
)

func hookCommand() *cli.Command {
	return &cli.Command{
		Name:      "hook",
		Usage:     "handle a scheduler hook call (prolog/epilog); always exits 0",
		ArgsUsage: "[slurm|lsf|pbs] [CONTEXT or PBS arguments…]",
		Description: `Scheduler hooks call bftrainer with the scheduler's environment. The
scheduler is detected from the environment unless named (or set in
hooks.scheduler). One binary serves every hook:

  Slurm (slurm.conf; the binary itself, no arguments, no wrapper needed):
    PrologFlags=Alloc
    Prolog=/usr/sbin/bftrainer            # kills our processes on the node
    Epilog=/usr/sbin/bftrainer            # cleans up on the node
    PrologSlurmctld=/usr/sbin/bftrainer   # records the job's nodes as taken
    EpilogSlurmctld=/usr/sbin/bftrainer   # records them as released
  LSF: bftrainer hook lsf pre_exec|post_exec|host_pre_exec|host_post_exec
  PBS: bftrainer hook pbs "$0" "$@"   (from prologue, epilogue, *.parallel)

A hook never fails the scheduler's job: whatever goes wrong inside
bftrainer (unreadable configuration, unwritable database, a panic), it
logs the error to hooks.log (and to the history when it can) and exits 0
within hooks.deadline. Contrib/ has the wrappers for each scheduler.`,
		SkipFlagParsing: true,
		Action: func(c *cli.Context) error {
			args := c.Args().Slice()
			if len(args) > 0 && (args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
				return cli.ShowCommandHelp(c.Lineage()[1], "hook")
			}
			sched := ""
			if len(args) > 0 {
				switch args[0] {
				case hooks.Slurm, hooks.LSF, hooks.PBS:
					sched, args = args[0], args[1:]
				}
			}
			runHook(append([]string{os.Args[0]}, args...), c.App.Writer, c.App.ErrWriter, sched)
			return nil
		},
	}
}

// runHook handles a hook call and returns 0, always: within the deadline,
// whatever happens inside (errors, a hung database, a panic).
func runHook(args []string, stdout, stderr io.Writer, sched string) int {
	started := time.Now()
	path, explicit := configPath("")
	cfg, cfgErr := loadConfig(path, explicit)
	logger := hookLogger(cfg, stderr)
	killOnly := false
	if cfgErr != nil {
		// Without a trustworthy configuration we do not know the database
		// and record nothing. A node's own prolog still kills what runs
		// there — the built-in registry, and the run tokens in /proc, need
		// no configuration —: a broken file must not leave a Trainer
		// beside the scheduler's job.
		logger.Printf("hook: %v", cfgErr)
		cfg, killOnly = fallbackConfig(), true
	}
	deadline := cfg.Hooks.Deadline.Duration
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- fmt.Errorf("panic: %v\n%s", r, debug.Stack())
			}
		}()
		done <- hookWork(ctx, cfg, sched, args, started, killOnly)
	}()
	select {
	case err := <-done:
		if err != nil {
			logger.Printf("hook %s: %v", hookName(sched, args), err)
		}
	case <-time.After(deadline):
		logger.Printf("hook %s: deadline %v exceeded; exiting 0 to leave the scheduler's job alone", hookName(sched, args), deadline)
	}
	return 0
}

func hookName(sched string, args []string) string {
	if ctx := os.Getenv("SLURM_SCRIPT_CONTEXT"); ctx != "" {
		return ctx
	}
	if len(args) > 1 {
		return sched + " " + args[1]
	}
	return sched
}

// hookLogger writes to hooks.log, or stderr when it cannot be opened. The
// file is opened on the first message: a hook with nothing to say touches
// nothing.
func hookLogger(cfg Config, stderr io.Writer) *log.Logger {
	var w io.Writer = &lazyLog{path: cfg.Hooks.Log, fallback: stderr}
	// Run by hand at a terminal, say it there too (schedulers discard a
	// hook's stderr).
	if f, ok := stderr.(*os.File); ok && cfg.Hooks.Log != "" && term.IsTerminal(int(f.Fd())) {
		w = io.MultiWriter(w, stderr)
	}
	return log.New(w, fmt.Sprintf("bftrainer[%d]: ", os.Getpid()), log.LstdFlags|log.LUTC|log.Lmicroseconds)
}

type lazyLog struct {
	path     string
	fallback io.Writer
	w        io.Writer
}

func (l *lazyLog) Write(b []byte) (int, error) {
	if l.w == nil {
		l.w = l.fallback
		if l.path != "" {
			os.MkdirAll(filepath.Dir(l.path), 0o755)
			if f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640); err == nil {
				l.w = f // closed at exit
			}
		}
	}
	return l.w.Write(b)
}

func hookWork(ctx context.Context, cfg Config, sched string, args []string, started time.Time, killOnly bool) error {
	env := hooks.Env(os.LookupEnv)
	if sched == "" {
		sched = cfg.Hooks.Scheduler
	}
	if sched == "" {
		s, ok := hooks.Detect(env, args)
		if !ok {
			return errors.New("no scheduler hook environment found (SLURM_SCRIPT_CONTEXT, LSB_JOBID or PBS_JOBID)")
		}
		sched = s
	}
	hostname, _ := os.Hostname()
	var call hooks.Call
	var err error
	switch sched {
	case hooks.Slurm:
		call, err = hooks.ParseSlurm(env)
	case hooks.LSF:
		context := ""
		if len(args) > 1 {
			context = args[1]
		}
		call, err = hooks.ParseLSF(env, os.ReadFile, context, hostname)
	case hooks.PBS:
		call, err = hooks.ParsePBS(env, args[1:], os.ReadFile, hostname)
	default:
		err = fmt.Errorf("unknown scheduler %q", sched)
	}
	local := call.Action == hooks.KillLocal || call.Action == hooks.CleanupLocal
	open := hookOpener(cfg)
	switch {
	case killOnly && !local:
		return nil
	case killOnly:
		open = nil
	case local:
		// A node's own hooks record only where the database lives (the
		// controller, or a single machine): they must not create an empty
		// one on every compute node.
		if _, err := os.Stat(cfg.Database); err != nil {
			open = nil
		}
	}
	h := &sidecar.Hook{Open: open, Killer: localKiller(cfg), Started: started}
	if !killOnly {
		h.Trigger = reconcilerTrigger(cfg)
	}
	if err != nil {
		// A partial call may still name this node: kill locally anyway,
		// then record what went wrong.
		if local {
			h.Handle(ctx, call)
		}
		if rerr := sidecar.RecordError(ctx, open, sched, call.Context, started, err); rerr != nil {
			return errors.Join(err, rerr)
		}
		return err
	}
	if call.Action == hooks.Ignore {
		return nil
	}
	return h.Handle(ctx, call)
}

// hookOpener opens the database with a busy timeout inside the hook's
// deadline.
func hookOpener(cfg Config) func(context.Context) (*store.DB, error) {
	return func(ctx context.Context) (*store.DB, error) {
		return store.Open(ctx, cfg.Database, store.Options{BusyTimeout: cfg.Hooks.Deadline.Duration / 2, Mode: cfg.DatabaseMode.FileMode, Ephemeral: true})
	}
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
