// Command testsum runs the suite's test commands (`make test`) and says
// what they found: the usual output of `go test` (a line per package, the
// whole output of every failed test), then the counts — passed, failed and
// skipped tests per package and in total, subtests included — and every
// skipped test with the reason it gave. It exits with the first non-zero
// status of the commands, after running them all.
//
//	testsum -go 'go test -race ./...' [-go 'go test …']... [-unittest 'python3 -m unittest discover -v -s DIR']
//
// Each go command must be a `go test` without -json or -v (testsum adds
// -json and prints the output as go test would without it); several run
// one after the other, in the order given (a test that must not share the
// machine with the others runs alone after them); the unittest one runs
// verbose (-v: it names each skipped test and its reason).
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	var goCmds []string
	flag.Func("go", "a go test command, run through sh (repeatable: run in order)", func(v string) error {
		goCmds = append(goCmds, v)
		return nil
	})
	pyCmd := flag.String("unittest", "", "a python -m unittest -v command, run through sh")
	save := flag.String("save", "", "also write go test's -json events to this `FILE` (every test's result and output)")
	flag.Parse()
	if len(goCmds) == 0 && *pyCmd == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: testsum -go 'go test …' [-unittest 'python3 -m unittest discover -v …']")
		os.Exit(2)
	}
	var s Summary
	code := 0
	first := func(c int, err error) {
		if err != nil {
			fmt.Fprintf(os.Stderr, "testsum: %v\n", err)
		}
		if code == 0 {
			code = c
		}
	}
	// ^C reaches the commands (same process group); testsum stays to say
	// what ran.
	signal.Ignore(syscall.SIGINT)
	if len(goCmds) > 0 {
		read := func(r io.Reader) error { return s.ReadGo(r, os.Stdout) }
		if *save != "" {
			f, err := os.Create(*save)
			if err != nil {
				fmt.Fprintf(os.Stderr, "testsum: %v\n", err)
				os.Exit(2)
			}
			defer f.Close()
			read = func(r io.Reader) error { return s.ReadGo(io.TeeReader(r, f), os.Stdout) }
		}
		for _, cmd := range goCmds {
			first(run(addJSON(cmd), read, nil))
		}
	}
	if *pyCmd != "" {
		first(run(*pyCmd, nil, func(r io.Reader) error { return s.ReadUnittest(r, os.Stderr) }))
	}
	s.Print(os.Stdout)
	os.Exit(code)
}

// addJSON makes `go test ARGS` `go test -json ARGS`.
func addJSON(cmd string) string {
	if i := strings.Index(cmd, " test "); i >= 0 {
		return cmd[:i] + " test -json " + cmd[i+len(" test "):]
	}
	return cmd + " -json"
}

// run runs cmd through sh, its stdout (or stderr) read by the given
// reader, the other passed through; it returns the exit status.
func run(cmd string, stdout, stderr func(io.Reader) error) (int, error) {
	c := exec.Command("/bin/sh", "-c", cmd)
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
	var pipe io.ReadCloser
	var err error
	var read func(io.Reader) error
	switch {
	case stdout != nil:
		c.Stdout = nil
		pipe, err = c.StdoutPipe()
		read = stdout
	case stderr != nil:
		c.Stderr = nil
		pipe, err = c.StderrPipe()
		read = stderr
	}
	if err != nil {
		return 2, err
	}
	if err := c.Start(); err != nil {
		return 2, err
	}
	var rerr error
	if read != nil {
		rerr = read(bufio.NewReaderSize(pipe, 1<<16))
		io.Copy(io.Discard, pipe) // whatever the reader left, so the command never blocks
	}
	err = c.Wait()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, rerr
	case errors.As(err, &ee):
		if st, ok := ee.Sys().(syscall.WaitStatus); ok && st.Signaled() {
			return 128 + int(st.Signal()), rerr
		}
		return ee.ExitCode(), rerr
	default:
		return 2, err
	}
}
