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

// CBC runs the COIN-OR CBC command-line solver (Debian coinor-cbc;
// tested with 2.10.8, the version installed here and in CI):
//
//	cbc model.mps -timeMode elapsed -sec T -ratioGap 0 -allowableGap 0
//	    -increment 0 -threads 1 -solve -solu solution.txt
//
// -timeMode elapsed makes -sec wall-clock seconds (CBC counts CPU time by
// default). Both gaps are 0 so that "Optimal" means proven optimal
// (allowableGap defaults to 1e-10 in the Debian build, and python-mip,
// the reference's CBC driver, sets a relative gap of 1e-4). -increment 0:
// by default CBC only accepts a new incumbent 1e-5 better than the last,
// which can stop it on an answer 1e-5 short of the optimum; allocation
// objectives differ by less than that between count vectors often enough
// to matter to a 1e-9 comparison.
//
// The -solu file starts with a status line ("Optimal - objective value
// -12.5", "Infeasible - …", "Integer infeasible - …", "Stopped on time -
// …", "Stopped on time (no integer solution - continuous used) - …",
// "Stopped on iterations - …", "Stopped on difficulties - …", "Stopped
// on ctrl-c - …") followed by "index name value reduced-cost" lines,
// flagged "**" when infeasible, for the columns that are not zero.
//
// One trap, seen with CBC 2.10.8: when the time limit interrupts its
// preprocessing, CBC prints "Pre-processing says infeasible or unbounded"
// and writes "Integer infeasible". An infeasible status from a run that
// lasted the time limit is therefore read as a time limit.
type CBC struct {
	// Path of the cbc program; empty means "cbc" on PATH.
	Path string
}

// Name returns "cbc".
func (CBC) Name() string { return "cbc" }

const cbcHint = "install CBC (apt install coinor-cbc) or set CBC.Path"

// Available reports whether the cbc program can be found.
func (c CBC) Available() error {
	_, err := lookPath("cbc", c.Path, "cbc", cbcHint)
	return err
}

// Solve writes the model, runs cbc on it and reads its -solu file.
func (c CBC) Solve(ctx context.Context, m *Model, o Options) (*Solution, error) {
	return command{
		name: "cbc", path: c.Path, prog: "cbc", hint: cbcHint,
		args: func(dir, model string, o Options) ([]string, string, error) {
			solu := filepath.Join(dir, "solution.txt")
			args := []string{model, "-timeMode", "elapsed"}
			if o.TimeLimit > 0 {
				args = append(args, "-sec", seconds(o.TimeLimit))
			}
			args = append(args, "-ratioGap", "0", "-allowableGap", "0", "-increment", "0",
				"-threads", strconv.Itoa(o.threads()), "-solve", "-solu", solu)
			return args, solu, nil
		},
		read: func(out, solu string, ran time.Duration, m *Model, o Options) (*Solution, error) {
			data, err := os.ReadFile(solu)
			if err != nil {
				return nil, fmt.Errorf("no solution file: %w; output ends: %s", err, lastLines(out, 5))
			}
			s, err := parseCBC(data, m)
			if err != nil {
				return nil, err
			}
			distrustInfeasible(s, o.TimeLimit, ran)
			return s, nil
		},
	}.solve(ctx, m, o)
}

// distrustInfeasible reads an infeasible status from a run that lasted
// the time limit as a time limit: CBC 2.10 reports preprocessing cut
// short by the limit as "Pre-processing says infeasible or unbounded",
// and its status as "Integer infeasible".
func distrustInfeasible(s *Solution, limit, ran time.Duration) {
	if s.Status == Infeasible && limit > 0 && ran >= limit {
		s.Status = TimeLimit
		s.Message += " at the time limit, which proves nothing"
	}
}

// parseCBC reads a cbc -solu file.
func parseCBC(data []byte, m *Model) (*Solution, error) {
	ls := lines(data)
	if len(ls) == 0 || ls[0] == "" {
		return nil, fmt.Errorf("empty solution file")
	}
	head, obj, _ := strings.Cut(ls[0], " - objective value ")
	s := &Solution{Message: head}
	switch {
	case head == "Optimal":
		s.Status = Optimal
	case head == "Infeasible" || head == "Integer infeasible":
		s.Status = Infeasible
	case strings.HasPrefix(head, "Stopped on time"), strings.HasPrefix(head, "Stopped on iterations"):
		s.Status = TimeLimit
	default:
		s.Status = Error
	}
	if s.Status != Optimal {
		return s, nil
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(obj), 64)
	if err != nil {
		return nil, fmt.Errorf("objective in %q: %w", ls[0], err)
	}
	s.Objective = -v
	s.Values = make([]float64, len(m.Cols))
	var idx map[string]int // built only if cbc's column numbers disagree
	for _, l := range ls[1:] {
		f := strings.Fields(strings.TrimPrefix(l, "**"))
		if len(f) < 3 {
			continue
		}
		// cbc numbers columns in file order, which is Cols order.
		if c, err := strconv.Atoi(f[0]); err == nil && c >= 0 && c < len(m.Cols) && m.Cols[c].Name == f[1] {
			v, err := strconv.ParseFloat(f[2], 64)
			if err != nil {
				return nil, fmt.Errorf("value of %s: %w", f[1], err)
			}
			s.Values[c] = v
			continue
		}
		if idx == nil {
			idx = m.ColumnIndex()
		}
		if err := setValue(s.Values, idx, f[1], f[2]); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// lastLines returns the last n lines of s, joined by " | ".
func lastLines(s string, n int) string {
	ls := strings.Split(strings.TrimSpace(s), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, " | ")
}
