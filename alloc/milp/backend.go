package milp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Backend runs one external MILP solver on a Model.
type Backend interface {
	// Name is the solver's short name ("cbc", "highs", "gurobi").
	Name() string
	// Available returns an error wrapping ErrBackendAbsent, saying how to
	// install the solver, when its program cannot be found.
	Available() error
	// Solve writes the model, runs the solver and reads its answer. A
	// time limit is a Solution status, not an error; errors are for real
	// failures (solver absent, files, a crash, the context cancelled).
	Solve(ctx context.Context, m *Model, o Options) (*Solution, error)
}

// ErrBackendAbsent is wrapped by the errors of a backend whose solver
// program is not installed.
var ErrBackendAbsent = errors.New("solver not installed")

// Options are a backend's run settings.
type Options struct {
	// TimeLimit is passed to the solver; 0 means none. The solver process
	// is killed if it runs past TimeLimit plus a grace period (solvers
	// check the clock only between steps: not while reading the file).
	TimeLimit time.Duration
	// Threads the solver may use; 0 means 1, as a hook's solve should
	// not take the whole node.
	Threads int
	// Dir receives the model, options and solution files and keeps them
	// for inspection; empty means a fresh temporary directory, removed
	// afterwards.
	Dir string
}

func (o Options) threads() int { return max(o.Threads, 1) }

// grace is how long past its time limit a solver may run before it is
// killed.
func (o Options) grace() time.Duration { return max(2*time.Second, o.TimeLimit/10) }

// Status is how a solver's run ended.
type Status int

const (
	// Optimal: the solver proved its answer optimal (with relative and
	// absolute gaps of 0).
	Optimal Status = iota
	// TimeLimit: the solver stopped on the time limit (or was killed past
	// it) without proving an optimum; any incumbent is ignored, as the
	// reference does.
	TimeLimit
	// Infeasible: the solver proved that no solution exists.
	Infeasible
	// Error: the solver ran but ended some other way (numerical trouble,
	// an unexpected status); Message says how.
	Error
)

func (s Status) String() string {
	switch s {
	case Optimal:
		return "optimal"
	case TimeLimit:
		return "time-limit"
	case Infeasible:
		return "infeasible"
	case Error:
		return "error"
	}
	return fmt.Sprintf("status(%d)", int(s))
}

// Solution is a solver's answer.
type Solution struct {
	Status Status
	// Objective is the maximised objective of Values as the solver
	// reports it (the negation of the file's minimised one), to the
	// digits it prints.
	Objective float64
	// Values are the column values, indexed like Model.Cols (columns the
	// solver did not print are 0); nil unless Status is Optimal.
	Values []float64
	// Wall is the time spent: writing the model, running the solver and
	// reading its answer.
	Wall time.Duration
	// Message is the solver's own status line, or why it was killed.
	Message string
	// Raw is the tail of the solver's console output, for diagnostics.
	Raw string
}

// Backends returns every backend this package knows, installed or not.
func Backends() []Backend { return []Backend{CBC{}, HiGHS{}, Gurobi{}} }

// BackendByName returns the backend called name.
func BackendByName(name string) (Backend, error) {
	var known []string
	for _, b := range Backends() {
		if b.Name() == name {
			return b, nil
		}
		known = append(known, b.Name())
	}
	return nil, fmt.Errorf("unknown milp backend %q (want %s)", name, strings.Join(known, ", "))
}

// lookPath finds a solver program: path if set, else name on PATH. The
// result is absolute: the solver runs in its work directory.
func lookPath(backend, path, name, hint string) (string, error) {
	if path != "" {
		p, err := exec.LookPath(path)
		if err != nil {
			return "", fmt.Errorf("%s: %w: %s: not found or not executable; %s", backend, ErrBackendAbsent, path, hint)
		}
		if p, err = filepath.Abs(p); err != nil {
			return "", fmt.Errorf("%s: %w", backend, err)
		}
		return p, nil
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s: %w: %s: command not found on PATH; %s", backend, ErrBackendAbsent, name, hint)
	}
	return p, nil
}

// workDir returns the directory for one solve and a cleanup function.
func workDir(o Options) (string, func(), error) {
	if o.Dir != "" {
		if err := os.MkdirAll(o.Dir, 0o755); err != nil {
			return "", nil, fmt.Errorf("make work dir: %w", err)
		}
		return o.Dir, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "bftrainer-milp-")
	if err != nil {
		return "", nil, fmt.Errorf("make work dir: %w", err)
	}
	return dir, func() { os.RemoveAll(dir) }, nil
}

// writeModel writes m as MPS into dir/model.mps.
func writeModel(dir string, m *Model) (string, error) {
	path := filepath.Join(dir, "model.mps")
	f, err := os.Create(path)
	if err != nil {
		return "", fmt.Errorf("write model: %w", err)
	}
	if err := m.WriteMPS(f); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("write model: %w", err)
	}
	return path, nil
}

// runTimed runs a solver program and returns its output and how long it
// ran. killed reports that it outlived the time limit plus grace and was
// killed; err is set for a cancelled context or a program that could not
// run or died of a signal we did not send.
func runTimed(ctx context.Context, o Options, dir, prog string, args ...string) (out string, killed bool, ran time.Duration, err error) {
	hard := ctx
	if o.TimeLimit > 0 {
		var cancel context.CancelFunc
		hard, cancel = context.WithTimeout(ctx, o.TimeLimit+o.grace())
		defer cancel()
	}
	cmd := exec.CommandContext(hard, prog, args...)
	cmd.Dir = dir
	var buf tailBuffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	// Output pipes may outlive a killed solver's children; do not wait
	// for them forever.
	cmd.WaitDelay = time.Second
	start := time.Now()
	err = cmd.Run()
	ran = time.Since(start)
	out = buf.String()
	switch {
	case ctx.Err() != nil:
		return out, false, ran, fmt.Errorf("interrupted: %w", ctx.Err())
	case err == nil:
		return out, false, ran, nil // even if it finished just at the deadline
	case hard.Err() != nil:
		return out, true, ran, nil
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.Exited() {
		// A solver's exit code is not its status (CBC exits 0 when
		// infeasible, HiGHS non-zero on a time limit): the caller
		// reads the solution file.
		return out, false, ran, nil
	}
	return out, false, ran, fmt.Errorf("run: %w", err)
}

// tailBuffer keeps the last 64 KiB written to it.
type tailBuffer struct{ b []byte }

const tailMax = 64 << 10

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > 2*tailMax {
		t.b = append(t.b[:0], t.b[len(t.b)-tailMax:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	if len(t.b) > tailMax {
		return string(t.b[len(t.b)-tailMax:])
	}
	return string(t.b)
}

// seconds formats d in seconds for a solver's command line.
func seconds(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'g', -1, 64) }

// killedSolution is the answer of a solver killed past its time limit.
func killedSolution(name string, o Options, out string) *Solution {
	return &Solution{
		Status:  TimeLimit,
		Message: fmt.Sprintf("%s killed %v after its time limit of %v", name, o.grace(), o.TimeLimit),
		Raw:     out,
	}
}

// setValue sets the value of the column called name; names that are not
// columns are ignored.
func setValue(values []float64, idx map[string]int, name, value string) error {
	c, ok := idx[name]
	if !ok {
		return nil
	}
	v, err := strconv.ParseFloat(value, 64)
	if err != nil {
		return fmt.Errorf("value of %s: %w", name, err)
	}
	values[c] = v
	return nil
}

// lines splits a solver's file into trimmed lines.
func lines(data []byte) []string {
	var out []string
	for _, l := range bytes.Split(data, []byte("\n")) {
		out = append(out, strings.TrimSpace(string(l)))
	}
	return out
}

// command is one solver's command-line run: the parts every backend
// shares (find the program, write the model, run it under the time limit,
// kill it past the grace) around the parts that differ.
type command struct {
	name, path, prog, hint string
	// find, if set, replaces the lookup of prog: it returns the program
	// to run and the arguments that go before the solver's own (HiGHS'
	// WebAssembly driver runs as "node driver.mjs …").
	find func() (string, []string, error)
	// args returns the program's arguments for the model file (writing any
	// option file into dir) and the solution file it will write.
	args func(dir, model string, o Options) ([]string, string, error)
	// read turns the run's output and solution file into a Solution.
	read func(out, solution string, ran time.Duration, m *Model, o Options) (*Solution, error)
}

func (c command) solve(ctx context.Context, m *Model, o Options) (*Solution, error) {
	start := time.Now()
	prog, pre, err := c.program()
	if err != nil {
		return nil, err
	}
	dir, cleanup, err := workDir(o)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.name, err)
	}
	defer cleanup()
	model, err := writeModel(dir, m)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.name, err)
	}
	args, sol, err := c.args(dir, model, o)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.name, err)
	}
	os.Remove(sol) // a stale file from a kept Dir must not be read back
	out, killed, ran, err := runTimed(ctx, o, dir, prog, append(pre, args...)...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.name, err)
	}
	if killed {
		s := killedSolution(c.name, o, out)
		s.Wall = time.Since(start)
		return s, nil
	}
	s, err := c.read(out, sol, ran, m, o)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.name, err)
	}
	s.Raw = out
	s.Wall = time.Since(start)
	return s, nil
}

// program returns the program to run and its leading arguments.
func (c command) program() (string, []string, error) {
	if c.find != nil {
		return c.find()
	}
	prog, err := lookPath(c.name, c.path, c.prog, c.hint)
	return prog, nil, err
}
