package milp

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// HiGHS runs the HiGHS MILP solver through its command line: either the
// native highs program (HiGHS ≥ 1.5; Debian 13 and later package it as
// "highs"), or, where there is none (Debian 12), HiGHS compiled to
// WebAssembly, run by node through the driver shipped in highs-wasm/
// (bftrainer-highs.mjs and the npm package highs it pins), which takes the
// same command line and writes the same solution file. The driver is
// tested here and in CI (HiGHS 1.15.1 from npm highs 1.15.3); the native
// program is UNTESTED (none on Debian 12): its command line and file
// format follow the HiGHS documentation, and the driver's output comes
// from HiGHS' own solution writer.
//
// Command line (https://ergo-code.github.io/HiGHS/stable/executable/):
//
//	highs --model_file model.mps --options_file highs.opt
//	      --solution_file solution.txt --time_limit T
//
// with the options file (https://ergo-code.github.io/HiGHS/stable/options/definitions/)
//
//	mip_rel_gap = 0           (default 1e-4: would stop short of optimal)
//	mip_abs_gap = 0           (default 1e-6)
//	threads = 1               (the driver drops it: its build has one thread)
//	write_solution_style = 0  (the raw style parsed below)
//
// The raw solution file reads "Model status", then the status ("Optimal",
// "Time limit reached", "Infeasible", …), then "# Primal solution
// values", "Feasible" or "None", "Objective v", "# Columns n" and n lines
// "name value". The model is the same fixed-format MPS as for CBC; HiGHS'
// reader takes it (our names have no spaces, so its free-format parser
// and its fixed-format fallback agree).
//
// The driver pays for starting node and compiling the WebAssembly module
// on every solve (0.2–0.4 s here, on a 2-core machine).
type HiGHS struct {
	// Path of the highs program, or of the WebAssembly driver: a path
	// that ends in .mjs or .js (after symbolic links) is the driver, run
	// with the node on PATH. Empty means "highs" on PATH, else
	// "bftrainer-highs" (the driver, linked onto PATH) on PATH.
	Path string
}

// Name returns "highs".
func (HiGHS) Name() string { return "highs" }

// wasmDriver is the name the WebAssembly driver goes by on PATH.
const wasmDriver = "bftrainer-highs"

const highsHint = "install HiGHS (Debian 13: apt install highs), or run it as WebAssembly: " +
	"apt install nodejs npm; npm ci --prefix alloc/milp/highs-wasm (in bftrainer's source); " +
	"then set the solver path to its bftrainer-highs.mjs, or link that onto PATH as bftrainer-highs"

// Available reports whether HiGHS can run: the highs program, or the
// driver with node and the npm package installed.
func (h HiGHS) Available() error {
	_, _, err := h.program()
	return err
}

// program returns the command that runs HiGHS: the program and the
// arguments before the solver's own (the driver's script for node).
func (h HiGHS) program() (string, []string, error) {
	path, err := h.find()
	if err != nil {
		return "", nil, err
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		real = path
	}
	// node runs in the solver's work directory.
	if real, err = filepath.Abs(real); err != nil {
		return "", nil, fmt.Errorf("highs: %w", err)
	}
	if !isScript(real) {
		return path, nil, nil
	}
	node, err := exec.LookPath("node")
	if err != nil {
		return "", nil, fmt.Errorf("highs: %w: node: command not found on PATH, needed by the WebAssembly driver %s; install Node.js ≥ 18 (apt install nodejs)", ErrBackendAbsent, real)
	}
	dir := filepath.Dir(real)
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "highs", "package.json")); err != nil {
		return "", nil, fmt.Errorf("highs: %w: the npm package highs is not installed beside %s; run: npm ci --prefix %s (Debian: apt install npm)", ErrBackendAbsent, real, dir)
	}
	return node, []string{real}, nil
}

// find returns the configured program or driver, or the one on PATH.
func (h HiGHS) find() (string, error) {
	switch {
	case h.Path != "" && isScript(h.Path):
		if _, err := os.Stat(h.Path); err != nil {
			return "", fmt.Errorf("highs: %w: %s: not found; %s", ErrBackendAbsent, h.Path, highsHint)
		}
		return h.Path, nil
	case h.Path != "":
		return lookPath("highs", h.Path, "highs", highsHint)
	}
	for _, name := range []string{"highs", wasmDriver} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("highs: %w: neither highs nor %s found on PATH; %s", ErrBackendAbsent, wasmDriver, highsHint)
}

// isScript reports whether path names a JavaScript file: the driver.
func isScript(path string) bool {
	ext := filepath.Ext(path)
	return ext == ".mjs" || ext == ".js"
}

// Solve writes the model and options, runs highs and reads its solution
// file.
func (h HiGHS) Solve(ctx context.Context, m *Model, o Options) (*Solution, error) {
	return command{
		name: "highs", find: h.program,
		args: func(dir, model string, o Options) ([]string, string, error) {
			opts := filepath.Join(dir, "highs.opt")
			text := fmt.Sprintf("mip_rel_gap = 0\nmip_abs_gap = 0\nthreads = %d\nwrite_solution_style = 0\n", o.threads())
			if err := os.WriteFile(opts, []byte(text), 0o644); err != nil {
				return nil, "", fmt.Errorf("write options: %w", err)
			}
			sol := filepath.Join(dir, "solution.txt")
			args := []string{"--model_file", model, "--options_file", opts, "--solution_file", sol}
			if o.TimeLimit > 0 {
				args = append(args, "--time_limit", seconds(o.TimeLimit))
			}
			return args, sol, nil
		},
		read: func(out, sol string, _ time.Duration, m *Model, _ Options) (*Solution, error) {
			data, err := os.ReadFile(sol)
			if err != nil {
				return nil, fmt.Errorf("no solution file: %w; output ends: %s", err, lastLines(out, 5))
			}
			return parseHiGHS(data, m)
		},
	}.solve(ctx, m, o)
}

// parseHiGHS reads a raw-style (write_solution_style = 0) solution file.
func parseHiGHS(data []byte, m *Model) (*Solution, error) {
	ls := lines(data)
	if len(ls) < 2 || ls[0] != "Model status" {
		return nil, fmt.Errorf("solution file does not start with \"Model status\"")
	}
	s := &Solution{Message: ls[1]}
	switch ls[1] {
	case "Optimal":
		s.Status = Optimal
	case "Time limit reached":
		s.Status = TimeLimit
	case "Infeasible":
		s.Status = Infeasible
	default:
		s.Status = Error
	}
	if s.Status != Optimal {
		return s, nil
	}
	idx := m.ColumnIndex()
	s.Values = make([]float64, len(m.Cols))
	i := 2
	for i < len(ls) && ls[i] != "# Primal solution values" {
		i++
	}
	if i+1 >= len(ls) || ls[i+1] != "Feasible" {
		return nil, fmt.Errorf("optimal status but no feasible primal solution")
	}
	cols := -1
	for i += 2; i < len(ls); i++ {
		l := ls[i]
		if v, ok := strings.CutPrefix(l, "Objective "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return nil, fmt.Errorf("objective %q: %w", v, err)
			}
			s.Objective = -f
			continue
		}
		if v, ok := strings.CutPrefix(l, "# Columns "); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return nil, fmt.Errorf("column count %q: %w", v, err)
			}
			cols = n
			i++
			break
		}
	}
	if cols < 0 {
		return nil, fmt.Errorf("no \"# Columns\" section")
	}
	for end := i + cols; i < end && i < len(ls); i++ {
		name, value, ok := strings.Cut(ls[i], " ")
		if !ok {
			return nil, fmt.Errorf("column line %q", ls[i])
		}
		if err := setValue(s.Values, idx, name, strings.TrimSpace(value)); err != nil {
			return nil, err
		}
	}
	return s, nil
}
