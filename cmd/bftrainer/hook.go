package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/bftrainer/bftrainer/sidecar"
)

func hookCommand() *cli.Command {
	return &cli.Command{
		Name:      "hook",
		Usage:     "handle a scheduler hook call (prolog/epilog); always exits 0",
		ArgsUsage: "[SCHEDULER] [CONTEXT or PBS arguments…]",
		Description: `Scheduler hooks call bftrainer with the scheduler's environment. The
scheduler is detected from the environment unless named (or set in
hooks.scheduler). One binary serves every hook:
` + schedulerUsage() + `
A hook never opens the database: it leaves its events, as one record, in
the journal (or journal_fallback) and the reconciler records them. It
never fails the scheduler's job: whatever goes wrong inside bftrainer
(unreadable configuration, full or read-only journal, a panic), it logs
the error to hooks.log (and to the history through the journal when it
can; a record no directory took is logged whole) and exits 0 within
hooks.deadline (twice it at most, when the journal has not taken the
record by the deadline and it goes to journal_fallback then). Each scheduler's directory in contrib/ has its wrappers
and configuration lines. Run by hand at a terminal, a hook says where it
logged. To try one:

  SLURM_SCRIPT_CONTEXT=prolog_slurmctld SLURM_JOB_ID=42 \
      SLURM_JOB_NODELIST=n[1-2] bftrainer hook slurm
  bftrainer reconcile --no-scheduler
  bftrainer history --job 42`,
		SkipFlagParsing: true,
		Action: func(c *cli.Context) error {
			args := c.Args().Slice()
			if len(args) > 0 && (args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
				return cli.ShowCommandHelp(c.Lineage()[1], "hook")
			}
			// bftrainer --config FILE hook …: the global flag (else
			// $BFTRAINER_CONFIG, else the built-in path).
			runHook(args, c.String("config"), c.App.ErrWriter)
			return nil
		},
	}
}

// schedulerUsage lists how each registered scheduler's hooks call
// bftrainer, and where its snippets are, with the path this binary is
// installed at (make install's BINDIR) wherever a snippet names one.
func schedulerUsage() string {
	// An absolute path of the binary in a snippet: /usr/sbin/bftrainer,
	// /usr/local/bin/bftrainer, … (not bftrainer-hook). Compiled here, not
	// at package initialisation, which every hook call pays.
	installedPath := regexp.MustCompile(`(/usr(?:/[\w.-]+)*/s?bin/bftrainer)(?:[^-.\w]|$)`)
	var b strings.Builder
	for _, s := range schedulers() {
		usage := installedPath.ReplaceAllStringFunc(s.Usage, func(m string) string {
			return binDir + "/bftrainer" + strings.TrimPrefix(m, installedPath.FindStringSubmatch(m)[1])
		})
		fmt.Fprintf(&b, "\n  %s (%s): %s\n", s.Name, s.Contrib, usage)
	}
	return b.String()
}

// runHook hands a hook call to the core, which holds the whole fail-open
// policy, and returns 0, always. args are the hook's arguments after
// bftrainer's own; configFlag is --config ("" when not given: then
// $BFTRAINER_CONFIG, else the built-in path). A configuration that does
// not load still reaches the core, with the defaults and the error: the
// node's own prolog must kill even then.
func runHook(args []string, configFlag string, stderr io.Writer) int {
	started := time.Now()
	cfg, cfgErr := loadConfig(configPath(configFlag))
	// The log is the one the file names when it was read that far (a key
	// that does not validate), else the built-in one.
	logger, hookLog := hookLogger(cfg, stderr)
	defer sayWhereLogged(stderr, hookLog)
	if cfgErr != nil {
		// The defaults, with a sweep of /proc for run tokens: without a
		// trustworthy configuration we cannot know where the launches'
		// cgroups are, and a broken file must not leave a Trainer beside
		// the scheduler's job.
		cfg = fallbackConfig()
	}
	o := options(cfg, logger)
	o.Hook.Started, o.Hook.ConfigErr, o.Hook.Log = started, cfgErr, o.Log
	o.Hook.Configured = time.Now()
	core, err := sidecar.New(o)
	if err != nil {
		o.Log.Printf("hook: %v", err)
		return 0
	}
	core.Hook(context.Background(), os.LookupEnv, args)
	return 0
}

// hookLogger writes to hooks.log, or stderr when it cannot be opened. The
// file is opened on the first message: a hook with nothing to say touches
// nothing.
func hookLogger(cfg Config, stderr io.Writer) (*log.Logger, *lazyLog) {
	ll := &lazyLog{path: cfg.Hooks.Log, fallback: stderr}
	var w io.Writer = ll
	// Run by hand at a terminal, say it there too (schedulers discard a
	// hook's stderr).
	if cfg.Hooks.Log != "" && isTerminal(stderr) {
		w = io.MultiWriter(w, stderr)
	}
	return log.New(w, fmt.Sprintf("bftrainer[%d]: ", os.Getpid()), log.LstdFlags|log.LUTC|log.Lmicroseconds), ll
}

// sayWhereLogged tells someone who runs a hook by hand at a terminal
// where its messages went: schedulers discard a hook's stderr, so the
// hook log is where an admin looks later.
func sayWhereLogged(stderr io.Writer, l *lazyLog) {
	if !isTerminal(stderr) {
		return
	}
	switch {
	case l.w == nil && l.path == "":
		say(stderr, "hook: done, nothing to log (hooks.log is not set: a hook logs to standard error)")
	case l.w == nil:
		say(stderr, "hook: done, nothing to log (a hook logs what goes wrong to %s)", l.path)
	case l.path == "":
		say(stderr, "hook: logged to standard error only (hooks.log is not set)")
	case l.w == l.fallback:
		say(stderr, "hook: logged to standard error only: %s could not be opened", l.path)
	default:
		say(stderr, "hook: logged to %s", l.path)
	}
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
