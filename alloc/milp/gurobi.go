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

// Gurobi runs Gurobi's command-line tool gurobi_cl (any version with a
// licence). UNTESTED HERE: Gurobi is not installed on this machine or in
// CI; the command line and file formats follow Gurobi's documentation
// (https://docs.gurobi.com/projects/optimizer/en/current/reference/misc/commandline.html),
// and the parsers are tested on documented samples.
//
//	gurobi_cl ResultFile=solution.sol TimeLimit=T MIPGap=0 MIPGapAbs=0
//	          Threads=1 model.mps
//
// MIPGap defaults to 1e-4 and MIPGapAbs to 1e-10; both are set to 0 to
// match the exact solver. gurobi_cl writes no status into the .sol file,
// so the status comes from its log: "Optimal solution found", "Time limit
// reached", "Model is infeasible" (or "Infeasible model"). The .sol file
// has "# Objective value = v" and then "name value" lines. A licence is
// checked at every start, which a hook pays on every solve.
type Gurobi struct {
	// Path of the gurobi_cl program; empty means "gurobi_cl" on PATH.
	Path string
}

// Name returns "gurobi".
func (Gurobi) Name() string { return "gurobi" }

const gurobiHint = "install Gurobi with a licence and put $GUROBI_HOME/bin on PATH, or set Gurobi.Path"

// Available reports whether the gurobi_cl program can be found (not
// whether a licence is valid: that shows only when it runs).
func (g Gurobi) Available() error {
	_, err := lookPath("gurobi", g.Path, "gurobi_cl", gurobiHint)
	return err
}

// Solve writes the model, runs gurobi_cl and reads its log and .sol file.
func (g Gurobi) Solve(ctx context.Context, m *Model, o Options) (*Solution, error) {
	return command{
		name: "gurobi", path: g.Path, prog: "gurobi_cl", hint: gurobiHint,
		args: func(dir, model string, o Options) ([]string, string, error) {
			sol := filepath.Join(dir, "solution.sol")
			args := []string{"ResultFile=" + sol}
			if o.TimeLimit > 0 {
				args = append(args, "TimeLimit="+seconds(o.TimeLimit))
			}
			args = append(args, "MIPGap=0", "MIPGapAbs=0", "Threads="+strconv.Itoa(o.threads()), model)
			return args, sol, nil
		},
		read: func(out, sol string, _ time.Duration, m *Model, _ Options) (*Solution, error) {
			s := gurobiStatus(out)
			if s.Status == Optimal {
				data, err := os.ReadFile(sol)
				if err != nil {
					return nil, fmt.Errorf("optimal but no solution file: %w", err)
				}
				if err := parseGurobiSol(data, m, s); err != nil {
					return nil, err
				}
			}
			return s, nil
		},
	}.solve(ctx, m, o)
}

// gurobiStatus reads the final status from gurobi_cl's log.
func gurobiStatus(log string) *Solution {
	s := &Solution{Status: Error, Message: "no status in gurobi_cl output: " + lastLines(log, 3)}
	for _, l := range strings.Split(log, "\n") {
		l = strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(l, "Optimal solution found"):
			s.Status, s.Message = Optimal, l
		case strings.HasPrefix(l, "Time limit reached"):
			s.Status, s.Message = TimeLimit, l
		case strings.HasPrefix(l, "Model is infeasible or unbounded"):
			s.Status, s.Message = Error, l
		case strings.HasPrefix(l, "Model is infeasible"), strings.HasPrefix(l, "Infeasible model"):
			s.Status, s.Message = Infeasible, l
		}
	}
	return s
}

// parseGurobiSol reads a .sol file into s.
func parseGurobiSol(data []byte, m *Model, s *Solution) error {
	idx := m.ColumnIndex()
	s.Values = make([]float64, len(m.Cols))
	for _, l := range lines(data) {
		if l == "" {
			continue
		}
		if rest, ok := strings.CutPrefix(l, "#"); ok {
			if v, ok := strings.CutPrefix(strings.TrimSpace(rest), "Objective value ="); ok {
				f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				if err != nil {
					return fmt.Errorf("objective %q: %w", v, err)
				}
				s.Objective = -f
			}
			continue
		}
		f := strings.Fields(l)
		if len(f) != 2 {
			return fmt.Errorf("solution line %q", l)
		}
		if err := setValue(s.Values, idx, f[0], f[1]); err != nil {
			return err
		}
	}
	return nil
}
