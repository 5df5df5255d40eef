package main

import (
	"errors"
	"fmt"
	"io"
	"log"
)

// The stderr rule, written once. stdout carries results only (tables,
// JSON, CSV, host lists, help), so that a script can read it. Every line
// on stderr is
//
//	bftrainer: <lowercase message>
//
// optionally followed by one line that tells the user what to do:
//
//	bftrainer: hint: <a command to run, a key to set, a file to read>
//
// A hint names a real command or key. The functions below are the only
// writers of those lines; commands return errors (wrapped in usageError
// for bad usage, given a hint with withHint) and main reports them here
// and picks the exit status: 0 success, 1 failure, 2 bad usage. A
// scheduler hook always exits 0; its diagnostics go to hooks.log.

// prefix begins every diagnostic line.
const prefix = "bftrainer: "

// say writes one diagnostic line.
func say(w io.Writer, format string, args ...any) {
	fmt.Fprintf(w, prefix+format+"\n", args...)
}

// report writes an error and its hint, if it has one.
func report(w io.Writer, err error) {
	say(w, "%s", err)
	var he hintError
	if errors.As(err, &he) && he.hint != "" {
		say(w, "hint: %s", he.hint)
	}
}

// newLogger writes diagnostics by the rule (the core's log of rounds and
// commands).
func newLogger(w io.Writer) *log.Logger { return log.New(w, prefix, 0) }

// usageError marks errors in how the command was called (exit 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// hintError carries the line telling the user what to do.
type hintError struct {
	err  error
	hint string
}

func (e hintError) Error() string { return e.err.Error() }
func (e hintError) Unwrap() error { return e.err }

func withHint(err error, format string, args ...any) error {
	return hintError{err: err, hint: fmt.Sprintf(format, args...)}
}

// exitCode is the status for err: 0, 1, or 2 for bad usage.
func exitCode(err error) int {
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue):
		return 2
	}
	return 1
}
