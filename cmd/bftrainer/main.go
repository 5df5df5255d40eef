// Command bftrainer lends a supercomputer's idle nodes to elastic training
// jobs and takes them back the instant the scheduler wants them.
//
// Output rules (stderr.go writes them down once): stdout carries results;
// stderr carries diagnostics as "bftrainer: message" and optional
// "bftrainer: hint: …" lines. Exit codes are chosen here only: 0 success,
// 1 failure, 2 bad usage. A scheduler hook always exits 0.
package main

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
)

// Set at build time (the Makefile's CONFIG, BINDIR, LOCALSTATEDIR and
// RUNSTATEDIR): go build -ldflags "-X main.defaultConfig=/etc/…". The
// configuration's default paths are below localStateDir and runStateDir.
var (
	defaultConfig = "/etc/bftrainer/bftrainer.toml"
	binDir        = "/usr/local/bin"
	localStateDir = "/var"
	runStateDir   = "/run"
	version       = "dev"
)

// defaultHookLog is hooks.log by default, and where hooks log when the
// configuration does not load; "" is localStateDir's log/bftrainer/hooks.log.
// Tests point it into their temporary directory (-X, or TestMain).
var defaultHookLog = ""

// builtinHookLog is defaultHookLog, resolved.
func builtinHookLog() string {
	if defaultHookLog != "" {
		return defaultHookLog
	}
	return localStateDir + "/log/bftrainer/hooks.log"
}

func main() {
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

// run is main without os.Exit, for tests.
func run(args []string, stdout, stderr io.Writer) int {
	// Schedulers run hooks with no arguments and no PATH: a bare call
	// with a scheduler's hook environment, or through a link named
	// bftrainer-hook, is a hook call.
	if isHookInvocation(args) {
		return runHook(args[1:], "", stderr)
	}
	app := newApp(stdout, stderr)
	err := app.Run(flagsFirst(app, helpWord(app, args)))
	if code, ok := isExitStatus(err); ok {
		return code // a child's status, passed on (mpi-exec, mpi-driver)
	}
	if err != nil {
		report(stderr, err)
	}
	return exitCode(err)
}

func isHookInvocation(args []string) bool {
	if len(args) == 0 {
		return false
	}
	if filepath.Base(args[0]) == "bftrainer-hook" {
		return true
	}
	return len(args) == 1 && schedulers().BareCall(os.LookupEnv)
}

// commands are bftrainer's subcommands, one file each.
func commands() []*cli.Command {
	return append([]*cli.Command{
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
		auditCommand(),
		doctorCommand(),
		configCommand(),
		nodeAgentCommand(),
	}, mpiCommands()...)
}

func newApp(stdout, stderr io.Writer) *cli.App {
	app := &cli.App{
		Name:    "bftrainer",
		Usage:   "train neural networks on the nodes the batch scheduler cannot fill",
		Version: version,
		Description: `bftrainer keeps a pool of the idle nodes a supercomputer's scheduler
cannot fill, gives them to elastic training jobs (Trainers) by solving the
allocation exactly, and kills a Trainer on a node the instant the scheduler
wants the node back. Scheduler hooks call it (see "bftrainer hook"); admins
read its history with plain SQL; staff replay scheduler logs with "bftrainer
replay" to see what the idle pool would yield.

Configuration: ` + defaultConfig + `, or the file in $BFTRAINER_CONFIG,
or --config. "bftrainer config" prints the effective configuration.`,
		Writer:    stdout,
		ErrWriter: stderr,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "config", Usage: "configuration `FILE` (default $BFTRAINER_CONFIG or " + defaultConfig + ")"},
			&cli.StringFlag{Name: "db", Usage: "database `FILE`, overriding the configuration"},
		},
		Commands: commands(),
		// urfave/cli calls os.Exit inside Run for errors with an exit code;
		// we choose exit codes in main, after deferred closes have run.
		ExitErrHandler:  func(*cli.Context, error) {},
		HideHelpCommand: true,
		OnUsageError:    onUsageError,
		Action:          parentAction,
	}
	harden(app.Commands)
	return app
}

// harden makes every command follow the stderr rule: a usage error is
// one "bftrainer: …" line and a hint, never "Incorrect Usage" and the
// whole help on stdout; an unknown subcommand is such an error; help has
// no "help" subcommand of its own ("--help" is everywhere).
func harden(cmds []*cli.Command) {
	for _, c := range cmds {
		c.HideHelpCommand = true
		c.OnUsageError = onUsageError
		if len(c.Subcommands) > 0 && c.Action == nil {
			c.Action = parentAction
		}
		harden(c.Subcommands)
	}
}

// onUsageError turns urfave/cli's parse errors (an unknown flag, a value
// that does not parse) into usage errors that name the help to read.
func onUsageError(c *cli.Context, err error, _ bool) error {
	return withHint(usageError{err}, "%s --help", helpName(c))
}

// helpWord reads "bftrainer [CMD…] help [SUB…]" as "bftrainer [CMD…]
// [SUB…] --help" (the help subcommands harden removes), where a command
// name is expected; "help" followed by an unknown name is that unknown
// command.
func helpWord(app *cli.App, args []string) []string {
	cmds := app.Commands
	for i := 1; i < len(args) && len(cmds) > 0; i++ {
		if args[i] == "help" {
			out := append(slices.Clone(args[:i]), args[i+1:]...)
			for _, name := range args[i+1:] {
				k := slices.IndexFunc(cmds, func(c *cli.Command) bool { return c.HasName(name) })
				if k < 0 {
					return out
				}
				cmds = cmds[k].Subcommands
			}
			return append(out, "--help")
		}
		k := slices.IndexFunc(cmds, func(c *cli.Command) bool { return c.HasName(args[i]) })
		if k < 0 || cmds[k].SkipFlagParsing {
			break
		}
		cmds = cmds[k].Subcommands
	}
	return args
}

// parentAction runs for bftrainer itself, and for a command with
// subcommands, when no subcommand was named: its help on stdout without
// arguments, an unknown command otherwise.
func parentAction(c *cli.Context) error {
	args := c.Args().Slice()
	root := c.Command == nil || c.Command.HelpName == c.App.HelpName
	if len(args) == 0 {
		if root {
			return cli.ShowAppHelp(c)
		}
		return cli.ShowSubcommandHelp(c)
	}
	name := c.App.HelpName
	if !root {
		name = c.Command.HelpName
	}
	return withHint(usagef("unknown command %q", strings.TrimPrefix(name+" "+args[0], c.App.HelpName+" ")),
		"%s --help lists the commands", name)
}
