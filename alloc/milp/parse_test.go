package milp

import (
	"strings"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/alloc"
)

// The samples follow each solver's documented output; CBC's are copied
// from cbc 2.10.8 runs here.

func TestParseCBC(t *testing.T) {
	m := Build(tinyProblem(alloc.Default))
	tests := []struct {
		name   string
		file   string
		status Status
		obj    float64
		values map[string]float64
	}{
		{
			name:   "optimal",
			file:   "Optimal - objective value -155.50000000\n      0 X0                     1                       0\n     40 S0                 15.5                       0\n** 41 L0                  0.5                       0\n",
			status: Optimal, obj: 155.5,
			values: map[string]float64{"X0": 1, "S0": 15.5, "L0": 0.5},
		},
		{name: "infeasible", file: "Infeasible - objective value 0.00000000\n", status: Infeasible},
		{name: "integer infeasible", file: "Integer infeasible - objective value 0.00000000\n", status: Infeasible},
		{name: "stopped on time", file: "Stopped on time - objective value -13863676.00000000\n      0 X0  1  0\n", status: TimeLimit},
		{name: "stopped on iterations", file: "Stopped on iterations - objective value 1e+50\n", status: TimeLimit},
		{name: "difficulties", file: "Stopped on difficulties - objective value 0\n", status: Error},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := parseCBC([]byte(tt.file), m)
			if err != nil {
				t.Fatal(err)
			}
			checkParsed(t, m, s, tt.status, tt.obj, tt.values)
		})
	}
	if _, err := parseCBC(nil, m); err == nil {
		t.Fatal("empty file parsed")
	}
}

func TestDistrustInfeasible(t *testing.T) {
	tests := []struct {
		name       string
		limit, ran time.Duration
		want       Status
	}{
		{"well before the limit", 10 * time.Second, time.Second, Infeasible},
		{"no limit", 0, time.Minute, Infeasible},
		{"at the limit", time.Second, 1100 * time.Millisecond, TimeLimit},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Solution{Status: Infeasible, Message: "Integer infeasible"}
			distrustInfeasible(s, tt.limit, tt.ran)
			if s.Status != tt.want {
				t.Fatalf("status %v (%s), want %v", s.Status, s.Message, tt.want)
			}
		})
	}
}

func TestParseHiGHS(t *testing.T) {
	m := Build(tinyProblem(alloc.Default))
	tests := []struct {
		name   string
		file   string
		status Status
		obj    float64
		values map[string]float64
		bad    bool
	}{
		{
			name:   "optimal",
			file:   "Model status\nOptimal\n\n# Primal solution values\nFeasible\nObjective -155.5\n# Columns 3\nX0 1\nS0 15.5\nL0 0.5\n# Rows 1\nP0 1\n\n# Dual solution values\nNone\n",
			status: Optimal, obj: 155.5,
			values: map[string]float64{"X0": 1, "S0": 15.5, "L0": 0.5},
		},
		{name: "time limit", file: "Model status\nTime limit reached\n\n# Primal solution values\nFeasible\nObjective -1\n", status: TimeLimit},
		{name: "infeasible", file: "Model status\nInfeasible\n\n# Primal solution values\nNone\n", status: Infeasible},
		{name: "other", file: "Model status\nSolve error\n", status: Error},
		{name: "not a solution file", file: "hello\n", bad: true},
		{name: "optimal without values", file: "Model status\nOptimal\n\n# Primal solution values\nNone\n", bad: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := parseHiGHS([]byte(tt.file), m)
			if tt.bad {
				if err == nil {
					t.Fatalf("parsed %+v", s)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			checkParsed(t, m, s, tt.status, tt.obj, tt.values)
		})
	}
}

func TestParseGurobi(t *testing.T) {
	m := Build(tinyProblem(alloc.Default))
	tests := []struct {
		name   string
		log    string
		status Status
	}{
		{"optimal", "Explored 1 nodes (3 simplex iterations) in 0.01 seconds\n\nOptimal solution found (tolerance 0.00e+00)\nBest objective -1.555000000000e+02, best bound -1.555000000000e+02, gap 0.0000%\n", Optimal},
		{"time limit", "Time limit reached\nBest objective -1.5e+02, best bound -1.6e+02, gap 6.2500%\n", TimeLimit},
		{"infeasible", "Model is infeasible\nBest objective -, best bound -, gap -\n", Infeasible},
		{"infeasible model", "Infeasible model\n", Infeasible},
		{"infeasible or unbounded", "Model is infeasible or unbounded\n", Error},
		{"licence error", "ERROR 10009: No Gurobi license found\n", Error},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if s := gurobiStatus(tt.log); s.Status != tt.status {
				t.Fatalf("status %v (%s), want %v", s.Status, s.Message, tt.status)
			}
		})
	}
	s := &Solution{Status: Optimal}
	sol := "# Solution for model BFTRAIN\n# Objective value = -1.5550000000000000e+02\nX0 1\nS0 15.5\nL0 0.5\n"
	if err := parseGurobiSol([]byte(sol), m, s); err != nil {
		t.Fatal(err)
	}
	checkParsed(t, m, s, Optimal, 155.5, map[string]float64{"X0": 1, "S0": 15.5, "L0": 0.5})
}

func checkParsed(t *testing.T, m *Model, s *Solution, status Status, obj float64, values map[string]float64) {
	t.Helper()
	if s.Status != status {
		t.Fatalf("status %v (%s), want %v", s.Status, s.Message, status)
	}
	if status != Optimal {
		if s.Values != nil {
			t.Fatalf("%v solution has values", status)
		}
		return
	}
	if s.Objective != obj {
		t.Fatalf("objective %v, want %v", s.Objective, obj)
	}
	if len(s.Values) != len(m.Cols) {
		t.Fatalf("%d values for %d columns", len(s.Values), len(m.Cols))
	}
	for i, c := range m.Cols {
		if got, want := s.Values[i], values[c.Name]; got != want {
			t.Fatalf("%s = %v, want %v", c.Name, got, want)
		}
	}
}

func TestDecode(t *testing.T) {
	m := Build(tinyProblem(alloc.Default))
	values := make([]float64, len(m.Cols))
	idx := m.ColumnIndex()
	// x: nodes a, b, c in that order; X0..X2 are t0's, X3..X5 t1's.
	for name, v := range map[string]float64{"X0": 1, "X1": 0.9999999, "X2": 1e-9, "X5": 1} {
		values[idx[name]] = v
	}
	counts, nodes, err := m.Decode(values)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := counts, []int{2, 1}; !equal(got, want) {
		t.Fatalf("counts %v, want %v", got, want)
	}
	if got, want := strings.Join(nodes[0], ","), "a,b"; got != want {
		t.Fatalf("t0 nodes %q, want %q", got, want)
	}
	if got, want := strings.Join(nodes[1], ","), "c"; got != want {
		t.Fatalf("t1 nodes %q, want %q", got, want)
	}
	if _, _, err := m.Decode(values[1:]); err == nil {
		t.Fatal("Decode accepted too few values")
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestBuildBigM checks the big-M of each semantics and the sizes of the
// model (the paper's 2JN binaries and 4JN + N rows, plus per Trainer ones).
func TestBuildBigM(t *testing.T) {
	tests := []struct {
		name string
		sem  alloc.Semantics
		M    int
	}{
		{"default", alloc.Default, 7},
		{"reference", alloc.Reference, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := Build(tinyProblem(tt.sem))
			if m.BigM != tt.M {
				t.Fatalf("BigM %d, want %d", m.BigM, tt.M)
			}
			J, N := 2, 3
			if got, min := len(m.Rows), 4*J*N+N; got < min {
				t.Fatalf("%d rows, want at least %d", got, min)
			}
			bin := 0
			for _, c := range m.Cols {
				if c.Integer && c.Lower == 0 && c.Upper == 1 {
					bin++
				}
			}
			if bin < 2*J*N+5*J {
				t.Fatalf("%d binaries, want at least %d", bin, 2*J*N+5*J)
			}
		})
	}
}
