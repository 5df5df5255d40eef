package milp

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// HiGHS runs the HiGHS command-line solver (highs ≥ 1.5; Debian 13 and
// later package it as "highs"). UNTESTED HERE: this machine (Debian 12)
// has no HiGHS program; the command line and the file formats follow the
// HiGHS documentation, and the parser is tested on a documented sample.
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
//	threads = 1
//	write_solution_style = 0  (the raw style parsed below)
//
// The raw solution file reads "Model status", then the status ("Optimal",
// "Time limit reached", "Infeasible", …), then "# Primal solution
// values", "Feasible" or "None", "Objective v", "# Columns n" and n lines
// "name value". The model is the same fixed-format MPS as for CBC; HiGHS'
// reader takes it (our names have no spaces, so its free-format parser
// and its fixed-format fallback agree).
type HiGHS struct {
	// Path of the highs program; empty means "highs" on PATH.
	Path string
}

// Name returns "highs".
func (HiGHS) Name() string { return "highs" }

const highsHint = "install HiGHS ≥ 1.5 (Debian 13: apt install highs) or set HiGHS.Path"

// Available reports whether the highs program can be found.
func (h HiGHS) Available() error {
	_, err := lookPath("highs", h.Path, "highs", highsHint)
	return err
}

// Solve writes the model and options, runs highs and reads its solution
// file.
func (h HiGHS) Solve(ctx context.Context, m *Model, o Options) (*Solution, error) {
	return command{
		name: "highs", path: h.Path, prog: "highs", hint: highsHint,
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
