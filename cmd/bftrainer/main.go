// Command bftrainer lends a supercomputer's idle nodes to elastic training
// jobs and takes them back the instant the scheduler wants them.
//
// Output rules, written once: stdout carries results (tables, JSON, CSV,
// host lists); stderr carries diagnostics as "bftrainer: message" and
// optional "bftrainer: hint: …" lines. Exit codes are chosen here only:
// 0 success, 1 failure, 2 bad usage. A scheduler hook always exits 0.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"
)

// Set at build time: go build -ldflags "-X main.defaultConfig=/etc/…".
// defaultHookLog is hooks.log by default, and where hooks log when the
// configuration does not load (tests build it into their temporary
// directory).
var (
	defaultConfig  = "/etc/bftrainer/bftrainer.toml"
	defaultHookLog = "/var/log/bftrainer/hooks.log"
	version        = "dev"
)

func main() {
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

// usageError marks errors in how the command was called (exit 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// hintError carries an extra line telling the user what to do.
type hintError struct {
	err  error
	hint string
}

func (e hintError) Error() string { return e.err.Error() }
func (e hintError) Unwrap() error { return e.err }

func withHint(err error, format string, args ...any) error {
	return hintError{err: err, hint: fmt.Sprintf(format, args...)}
}

// run is main without os.Exit, for tests.
func run(args []string, stdout, stderr io.Writer) int {
	// Schedulers run hooks with no arguments and no PATH: a bare call
	// with a scheduler's hook environment, or through a link named
	// bftrainer-hook, is a hook call.
	if isHookInvocation(args) {
		return runHook(args[1:], stderr)
	}
	app := newApp(stdout, stderr)
	err := app.Run(flagsFirst(app, args))
	if err == nil {
		return 0
	}
	report(stderr, err)
	var ue usageError
	if errors.As(err, &ue) || isCLIUsage(err) {
		return 2
	}
	return 1
}

func report(w io.Writer, err error) {
	fmt.Fprintf(w, "bftrainer: %s\n", err)
	var he hintError
	if errors.As(err, &he) && he.hint != "" {
		fmt.Fprintf(w, "bftrainer: hint: %s\n", he.hint)
	}
}

// isCLIUsage recognises urfave/cli's own usage errors (unknown flag,
// missing required flag, unknown command).
func isCLIUsage(err error) bool {
	s := err.Error()
	for _, p := range []string{"flag provided but not defined", "Required flag", "invalid value", "No help topic", "flag needs an argument"} {
		if strings.Contains(s, p) {
			return true
		}
	}
	return false
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
		OnUsageError: func(_ *cli.Context, err error, _ bool) error {
			return usageError{err}
		},
	}
	return app
}
