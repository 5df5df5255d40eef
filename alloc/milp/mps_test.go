package milp

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/alloc/alloctest"
)

var update = flag.Bool("update", false, "rewrite testdata golden files")

// tinyProblem is the golden test's problem: two Trainers, three nodes.
func tinyProblem(sem alloc.Semantics) *alloc.Problem {
	t0 := time.Date(2021, 2, 10, 20, 0, 0, 0, time.UTC)
	return &alloc.Problem{
		TFwd:      10,
		Objective: alloc.Throughput,
		Semantics: sem,
		Free:      []alloc.Node{{Name: "a", Since: t0}},
		Trainers: []alloc.Trainer{
			{
				ID: "t0", Min: 1, Max: 2, RUp: 5, RDown: 2.5,
				Curve: alloc.Curve{Nodes: []int{0, 1, 2}, Throughput: []float64{0, 10, 15.5}},
				Held:  []alloc.Node{{Name: "b", Since: t0}},
			},
			{
				ID: "t1", Min: 2, Max: 3, Weight: 2, RUp: 1, RDown: 1,
				Curve: alloc.Curve{Nodes: []int{1, 3}, Throughput: []float64{4, 9}},
				Held:  []alloc.Node{{Name: "c", Since: t0}},
			},
		},
	}
}

func TestWriteMPSGolden(t *testing.T) {
	tests := []struct {
		name string
		sem  alloc.Semantics
	}{
		{"tiny", alloc.Default},
		{"tiny-reference", alloc.Reference},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			m := Build(tinyProblem(tt.sem))
			if err := m.WriteMPS(&buf); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", tt.name+".mps")
			if *update {
				if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if got := buf.String(); got != string(want) {
				t.Fatalf("MPS differs from %s (go test -update rewrites it):\n%s", path, got)
			}
			checkFixedMPS(t, buf.Bytes(), m)
		})
	}
}

// TestWriteMPSConformance reads back, by column position only, the MPS of
// random problems (plain floats included) and compares every field with
// the model.
func TestWriteMPSConformance(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	objs := []alloc.Objective{alloc.Throughput, alloc.Speedup, alloc.Metric}
	for i := range 40 {
		o := alloctest.Options{
			Trainers:  1 + r.IntN(6),
			Nodes:     r.IntN(30),
			Semantics: alloc.Semantics(r.IntN(2)),
			Objective: objs[r.IntN(3)],
			Nice:      i%2 == 0,
		}
		t.Run(fmt.Sprintf("%02d", i), func(t *testing.T) {
			p := alloctest.Problem(r, o)
			m := Build(p)
			var buf bytes.Buffer
			if err := m.WriteMPS(&buf); err != nil {
				t.Fatal(err)
			}
			checkFixedMPS(t, buf.Bytes(), m)
		})
	}
	t.Run("summit", func(t *testing.T) {
		m := Build(alloctest.Summit(3, 150, 150, 7))
		var buf bytes.Buffer
		if err := m.WriteMPS(&buf); err != nil {
			t.Fatal(err)
		}
		checkFixedMPS(t, buf.Bytes(), m)
	})
}

// fields are the fixed-format fields as 0-based [start, end) columns.
var fields = [6][2]int{{1, 3}, {4, 12}, {14, 22}, {24, 36}, {39, 47}, {49, 61}}

// splitFixed returns a data line's six fields, failing on any character
// outside them or a field holding more than one token.
func splitFixed(t *testing.T, ln int, line string) [6]string {
	t.Helper()
	if len(line) > 61 {
		t.Fatalf("line %d is %d characters long: %q", ln, len(line), line)
	}
	in := make([]bool, 61)
	var out [6]string
	for i, f := range fields {
		for c := f[0]; c < f[1]; c++ {
			in[c] = true
		}
		if f[0] < len(line) {
			s := strings.TrimSpace(line[f[0]:min(f[1], len(line))])
			if strings.ContainsAny(s, " \t") {
				t.Fatalf("line %d field %d holds %q", ln, i+1, s)
			}
			out[i] = s
		}
	}
	for c := range len(line) {
		if !in[c] && line[c] != ' ' {
			t.Fatalf("line %d has %q in column %d, outside every field: %q", ln, line[c], c+1, line)
		}
	}
	// A field's token must not run into the next field.
	for i, f := range fields {
		if f[1] < len(line) && line[f[1]-1] != ' ' && line[f[1]] != ' ' {
			t.Fatalf("line %d: field %d runs past column %d: %q", ln, i+1, f[1], line)
		}
	}
	return out
}

func parseNum(t *testing.T, ln int, s string) float64 {
	t.Helper()
	if len(s) > numWidth {
		t.Fatalf("line %d: number %q longer than %d", ln, s, numWidth)
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("line %d: %v", ln, err)
	}
	return v
}

func near(a, b float64) bool {
	return a == b || math.Abs(a-b) <= MaxRelError*math.Abs(b)
}

// checkFixedMPS reads data as strict fixed-format MPS and compares it
// with m.
func checkFixedMPS(t *testing.T, data []byte, m *Model) {
	t.Helper()
	type colData struct {
		integer bool
		obj     float64
		entries map[string]float64
		lo, up  float64
	}
	rows := map[string]Row{}
	var rowOrder []string
	cols := map[string]*colData{}
	var colOrder []string
	rhs := map[string]float64{}
	section, integer := "", false
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1024), 1024)
	ln := 0
	for sc.Scan() {
		ln++
		line := sc.Text()
		if line == "" {
			t.Fatalf("line %d is empty", ln)
		}
		if line[0] != ' ' {
			section = strings.Fields(line)[0]
			if section == "NAME" {
				if got := strings.TrimSpace(line[14:]); got != m.Name {
					t.Fatalf("NAME %q, want %q", got, m.Name)
				}
			}
			continue
		}
		f := splitFixed(t, ln, line)
		for _, name := range []string{f[1], f[2], f[4]} {
			if len(name) > 8 {
				t.Fatalf("line %d: name %q longer than 8", ln, name)
			}
		}
		switch section {
		case "ROWS":
			if f[0] == "N" {
				if f[1] != objName {
					t.Fatalf("line %d: objective row %q", ln, line)
				}
				continue
			}
			if len(f[0]) != 1 || !strings.Contains("LGE", f[0]) {
				t.Fatalf("line %d: row type %q", ln, f[0])
			}
			rows[f[1]] = Row{Name: f[1], Sense: Sense(f[0][0])}
			rowOrder = append(rowOrder, f[1])
		case "COLUMNS":
			if f[2] == "'MARKER'" {
				switch f[4] {
				case "'INTORG'":
					integer = true
				case "'INTEND'":
					integer = false
				default:
					t.Fatalf("line %d: marker %q", ln, f[4])
				}
				continue
			}
			c := cols[f[1]]
			if c == nil {
				c = &colData{integer: integer, entries: map[string]float64{}, up: math.Inf(1)}
				cols[f[1]] = c
				colOrder = append(colOrder, f[1])
			}
			for _, e := range [][2]string{{f[2], f[3]}, {f[4], f[5]}} {
				if e[0] == "" {
					continue
				}
				v := parseNum(t, ln, e[1])
				if e[0] == objName {
					c.obj = -v
				} else {
					c.entries[e[0]] = v
				}
			}
		case "RHS":
			if f[1] != rhsName {
				t.Fatalf("line %d: rhs set %q", ln, f[1])
			}
			for _, e := range [][2]string{{f[2], f[3]}, {f[4], f[5]}} {
				if e[0] != "" {
					rhs[e[0]] = parseNum(t, ln, e[1])
				}
			}
		case "BOUNDS":
			c := cols[f[2]]
			if c == nil || f[1] != bndName {
				t.Fatalf("line %d: bound %q", ln, line)
			}
			switch f[0] {
			case "UP":
				c.up = parseNum(t, ln, f[3])
			case "LO":
				c.lo = parseNum(t, ln, f[3])
			case "FX":
				c.lo = parseNum(t, ln, f[3])
				c.up = c.lo
			case "FR":
				c.lo, c.up = math.Inf(-1), math.Inf(1)
			case "MI":
				c.lo = math.Inf(-1)
			case "PL":
				c.up = math.Inf(1)
			default:
				t.Fatalf("line %d: bound type %q", ln, f[0])
			}
		default:
			t.Fatalf("line %d: data in section %q", ln, section)
		}
	}
	if section != "ENDATA" {
		t.Fatalf("last section %q, want ENDATA", section)
	}
	if len(rowOrder) != len(m.Rows) {
		t.Fatalf("%d rows read, model has %d", len(rowOrder), len(m.Rows))
	}
	for i, r := range m.Rows {
		got := rows[r.Name]
		if rowOrder[i] != r.Name || got.Sense != r.Sense || !near(rhs[r.Name], r.RHS) {
			t.Fatalf("row %d: read %q %c rhs %v, model %q %c rhs %v", i, rowOrder[i], got.Sense, rhs[r.Name], r.Name, r.Sense, r.RHS)
		}
	}
	if len(colOrder) != len(m.Cols) {
		t.Fatalf("%d columns read, model has %d", len(colOrder), len(m.Cols))
	}
	for i, col := range m.Cols {
		c := cols[col.Name]
		if colOrder[i] != col.Name || c.integer != col.Integer || !near(c.obj, col.Obj) || c.lo != col.Lower || c.up != col.Upper {
			t.Fatalf("column %d: read %q int=%v obj=%v [%v,%v], model %+v", i, colOrder[i], c.integer, c.obj, c.lo, c.up, col)
		}
		if got, want := len(c.entries), m.Start[i+1]-m.Start[i]; got != want {
			t.Fatalf("column %s: %d entries read, model has %d", col.Name, got, want)
		}
		for k := m.Start[i]; k < m.Start[i+1]; k++ {
			row := m.Rows[m.Index[k]].Name
			if v, ok := c.entries[row]; !ok || !near(v, m.Value[k]) {
				t.Fatalf("column %s row %s: read %v, model %v", col.Name, row, v, m.Value[k])
			}
		}
	}
}

func TestAppendNumber(t *testing.T) {
	tests := []struct {
		name  string
		v     float64
		want  string
		exact bool
	}{
		{"zero", 0, "0", true},
		{"negative zero", math.Copysign(0, -1), "0", true},
		{"one", 1, "1", true},
		{"big integer", -99999999999, "-99999999999", true},
		{"integer past 1e11", 1.5e14, "1.5e14", true},
		{"two decimals", 1234.56, "1234.56", true},
		{"ten digits", -1234567.891, "-1234567.891", true},
		{"tiny", 1e-20, "1e-20", true},
		{"huge", 1.5e300, "1.5e300", true},
		{"eleven digits", 0.12345678912, ".12345678912", true},
		{"short fraction", 0.25, "0.25", true},
		{"rounded", 0.1234567891234, ".12345678912", false},
		{"rounded negative", -2.0 / 3, "-.6666666667", false},
		{"third", 1.0 / 3, ".33333333333", false},
		{"large fraction", 321234.567890123, "321234.56789", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := appendNumber(nil, tt.v)
			if err != nil {
				t.Fatal(err)
			}
			if got := string(b); got != tt.want {
				t.Fatalf("appendNumber(%v) = %q, want %q", tt.v, got, tt.want)
			}
			back, _ := strconv.ParseFloat(string(b), 64)
			if exact := back == tt.v; exact != tt.exact {
				t.Fatalf("appendNumber(%v) = %q reads back as %v (exact %v, want %v)", tt.v, b, back, exact, tt.exact)
			}
		})
	}
}

func TestAppendNumberRefuses(t *testing.T) {
	tests := []struct {
		name string
		v    float64
	}{
		{"nan", math.NaN()},
		{"inf", math.Inf(1)},
		{"tiny with many digits", -1.2345678912e-5},
		{"huge with many digits", 123456789012345},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if b, err := appendNumber(nil, tt.v); !errors.Is(err, ErrPrecision) {
				t.Fatalf("appendNumber(%v) = %q, %v; want ErrPrecision", tt.v, b, err)
			}
		})
	}
}

// TestAppendNumberBound checks the documented bound: any float64 of
// magnitude in [0.1, 1e11) is written within 5e-10.
func TestAppendNumberBound(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	for range 200000 {
		v := math.Pow(10, -1+12*r.Float64())
		if v >= 1e11 {
			continue
		}
		if r.IntN(2) == 0 {
			v = -v
		}
		b, err := appendNumber(nil, v)
		if err != nil {
			t.Fatalf("%v: %v", v, err)
		}
		if len(b) > numWidth {
			t.Fatalf("%v written as %q", v, b)
		}
		back, _ := strconv.ParseFloat(string(b), 64)
		if e := math.Abs(back-v) / math.Abs(v); e > 5e-10 {
			t.Fatalf("%v written as %q: relative error %.2e", v, b, e)
		}
	}
}

func TestWriteMPSRefusesImprecise(t *testing.T) {
	m := Build(tinyProblem(alloc.Default))
	m.Cols[0].Obj = -1.2345678912e-5
	err := m.WriteMPS(&bytes.Buffer{})
	if !errors.Is(err, ErrPrecision) || !strings.Contains(err.Error(), m.Cols[0].Name) {
		t.Fatalf("WriteMPS = %v, want ErrPrecision naming column %s", err, m.Cols[0].Name)
	}
}
