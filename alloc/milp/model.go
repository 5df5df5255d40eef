// Package milp decides allocations the way the BFTrainer paper does: it
// writes the paper's node-level MILP for an alloc.Problem (one binary per
// Trainer and node) and hands it to a real MILP solver — the CBC, HiGHS or
// Gurobi command-line programs, through a fixed-format MPS file.
//
// The package owns three things: the model (Build, Model), its MPS file
// (WriteMPS) and the reading back of a solver's answer (Backend, Decode).
// Solver wraps them as an alloc.Solver. alloc.Exact decides the same
// optimum in milliseconds, without a solver; this package exists to check
// it on random problems, to reproduce the reference code side by side, and
// for extensions of the model that the count-level DP cannot express.
//
// Unlike the rest of alloc, this package writes files and runs processes.
package milp

import (
	"fmt"
	"math"
	"strconv"

	"github.com/bftrainer/bftrainer/alloc"
)

// Sense is a row's relation to its right-hand side.
type Sense byte

const (
	// LE is Σ a·x ≤ rhs.
	LE Sense = 'L'
	// GE is Σ a·x ≥ rhs.
	GE Sense = 'G'
	// EQ is Σ a·x = rhs.
	EQ Sense = 'E'
)

// Column is one variable of a Model.
type Column struct {
	Name    string
	Lower   float64 // may be -Inf
	Upper   float64 // may be +Inf
	Integer bool
	Obj     float64 // coefficient in the objective, which is maximised
}

// Row is one linear constraint of a Model; its coefficients are stored
// by column (Model.Start, Index, Value).
type Row struct {
	Name  string
	Sense Sense
	RHS   float64
}

// Model is a MILP in plain sparse form: maximise Σ Obj·x subject to the
// rows and the column bounds. The matrix is stored by column (CSC):
// column c has the coefficients Value[k] in rows Index[k], for k in
// [Start[c], Start[c+1]). Zero coefficients are never stored.
type Model struct {
	Name  string // written on the MPS NAME line; at most 8 characters
	Cols  []Column
	Rows  []Row
	Start []int
	Index []int32
	Value []float64
	// BigM is the M of the either-or rows: N+1 under Reference
	// semantics, 2N+1 under Default (see Build).
	BigM int

	// What Decode needs: x_{j,n} is column j·len(nodes)+n.
	nodes    []string
	trainers []string
}

// Column-name families (the first letter of a name) — see Build.
const (
	famX = 'X' // x_{j,n}: node n runs Trainer j
	famD = 'D' // d_{j,n} = x_{j,n} XOR c_{j,n}
	famA = 'A' // z^min_j
	famB = 'B' // z^max_j
	famM = 'M' // m_j: 0 grows only, 1 shrinks only
	famU = 'U' // u_j: scales up
	famW = 'W' // w_j: scales down
	famY = 'Y' // y_{j,s}: n_j lies on segment s of the curve
	famN = 'N' // n_j = Σ_n x_{j,n} (integer)
	famS = 'S' // S_j: the curve's value at n_j
	famL = 'L' // λ_{j,i}: convex-combination weights
)

// Row-name families.
const (
	famP = 'P' // Σ_j x_{j,n} ≤ 1: one Trainer per node
	famQ = 'Q' // the four XOR rows of d_{j,n}
	famC = 'C' // n_j − Σ_n x_{j,n} = 0
	famR = 'R' // the four size (either-or) rows
	famT = 'T' // the two no-migration rows
	famF = 'F' // the four scale-up / scale-down flag rows
	famV = 'V' // Σ_i λ_{j,i} = 1
	famI = 'I' // n_j − Σ_i ν_i λ_{j,i} = 0
	famO = 'O' // Σ_i o_i λ_{j,i} − S_j = 0
	famE = 'E' // Σ_s y_{j,s} = 1
	famH = 'H' // λ_{j,i} ≤ y_{j,i} + y_{j,i+1}
)

// objName, bndName, rhsName and markName are all upper case; generated
// names are one upper-case letter followed by lower-case base-36 digits,
// so they can never collide.
const (
	objName  = "OBJ"
	rhsName  = "RHS"
	bndName  = "BND"
	markName = "MARKER"
)

// maxNameIndex is the largest index a one-letter name with seven base-36
// digits can carry (MPS names have at most 8 characters).
const maxNameIndex = 36*36*36*36*36*36*36 - 1

// curve is a Trainer's piecewise-linear value as the MILP sees it.
type curve struct {
	nu []int     // breakpoints, from 0, increasing
	o  []float64 // metric at each breakpoint (o[0] at 0 nodes as the curve says)
	// o0 is the curve's own value at 0 nodes when it is not 0 (a Metric
	// curve may say so); alloc values 0 nodes at 0, so the objective
	// corrects it through z^min.
	o0 float64
	// mult is what S_j is worth per unit in the objective, before the
	// Trainer's weight: T_fwd for the paper's curve, 1 for a gain table.
	mult float64
	// oneHot: a breakpoint at every count, so the weights λ are binaries
	// (one of them 1) and need no segment binaries.
	oneHot bool
}

// gainCurve is the curve of a Pricing's gains: a breakpoint at every count
// 0..limit, so that S_j, interpolated between adjacent integers, is the
// gain at the integer n_j.
func gainCurve(gain func(j, k int) float64, j, limit int) curve {
	cv := curve{mult: 1, oneHot: true}
	for k := 0; k <= max(limit, 1); k++ {
		cv.nu, cv.o = append(cv.nu, k), append(cv.o, gain(j, k))
	}
	return cv
}

// trainerCurve returns the breakpoints the MILP needs for Trainer t, up
// to the first breakpoint at or beyond limit: the curve's own points (so
// their values are the numbers the user gave), with (0, 0) in front when
// the curve does not start at 0.
func trainerCurve(p *alloc.Problem, t *alloc.Trainer, limit int) curve {
	c := &t.Curve
	ys, scale := p.Goal().Column(c)
	var cv curve
	if c.Nodes[0] != 0 {
		cv.nu, cv.o = append(cv.nu, 0), append(cv.o, 0)
	}
	for i, n := range c.Nodes {
		if len(cv.nu) > 0 && cv.nu[len(cv.nu)-1] >= limit {
			break
		}
		v := ys[i]
		if scale != 1 {
			v /= scale
		}
		cv.nu, cv.o = append(cv.nu, n), append(cv.o, v)
	}
	if c.Nodes[0] == 0 {
		cv.o0 = cv.o[0]
	}
	cv.mult = p.TFwd
	return cv
}

// Build returns the paper's node-level MILP (arXiv 2106.12091; notes/paper.md
// §2, the reference's progGRB.py / progMIP.py) for the Problem, over all N
// nodes of the decision, free and held. p must be valid (Problem.Validate).
//
// Variables, per Trainer j and node n: binaries x_{j,n} (n runs j) and
// d_{j,n} = x_{j,n} XOR c_{j,n} (c: j holds n now); per Trainer, binaries
// z^min_j, z^max_j (size either-or), m_j (0 grows only, 1 shrinks only),
// u_j, w_j (scales up, down), the integer n_j = Σ_n x_{j,n}, and
// continuous S_j (the curve's value at n_j) and curve weights λ_{j,i}.
// The rows are the paper's, with M the big-M:
//
//	n_j ≥ Nmin_j − M z^min_j,  n_j ≤ M(1 − z^min_j)            size either-or
//	n_j ≤ Nmax_j + M z^max_j,  n_j ≤ M(1 − z^max_j)
//	Σ_j x_{j,n} ≤ 1                                         one Trainer per node
//	d ≤ x + c,  d ≥ x − c,  d ≥ c − x,  d ≤ 2 − x − c         XOR
//	n_j − C_j ≥ Σ_n d_{j,n} − M m_j                           no migration
//	n_j − C_j ≤ −Σ_n d_{j,n} + M(1 − m_j)
//	Σ_i λ_{j,i} = 1,  n_j = Σ_i ν_i λ_{j,i},  S_j = Σ_i o_i λ_{j,i}
//	n_j ≤ C_j + (M − C_j) u_j,  n_j ≥ (C_j + 1) u_j            scale-up flag
//	n_j ≤ C_j − 1 + (M − C_j + 1)(1 − w_j),  n_j ≥ C_j (1 − w_j)  scale-down flag
//
// maximising Σ_j ω_j (T_fwd S_j − (u_j R_up,j + w_j R_down,j) r_j), with ω_j
// the Trainer's weight and r_j its current rate (Trainer.Rate at C_j), so
// each Trainer's term equals Problem.Value at its count.
//
// Where Build departs from the reference's text, the feasible counts and
// their objective stay the same:
//
//   - The curve is not an SOS2 set: "λ adjacent" is written with segment
//     binaries y_{j,s}, Σ_s y_{j,s} = 1 and λ_{j,i} ≤ y_{j,i} + y_{j,i+1}
//     (the convex-combination formulation). HiGHS has no SOS constraints,
//     and SOS sections of MPS files are read differently by each solver.
//   - n_j is an integer column with one defining row, not Σ_n x_{j,n}
//     repeated in eleven rows: the same model with about 45% fewer
//     nonzeros, and a count the solver can branch on.
//   - Nmin_j is max(Min, 1) capped at N+1 and Nmax_j is MaxNodes capped
//     at N: the same integer sizes, and a Trainer whose minimum exceeds
//     the pool is off instead of making the model infeasible, as alloc
//     decides. Breakpoints beyond the first one at or past Nmax_j are
//     dropped; a curve that does not start at 0 gets (0, 0) in front.
//   - A Metric curve may value 0 nodes at o_0 ≠ 0, which alloc counts as
//     0; the objective then has −ω T o_0 on z^min_j, which is 1 exactly
//     when n_j = 0 because Nmin_j ≥ 1.
//
// The big-M. In the no-migration rows a Trainer that grows by a nodes has
// Σ_n d = a and must take m = 0 (m = 1 would force a ≤ −a), leaving
// a ≤ −a + M; one that shrinks by r must take m = 1 and then needs
// −r ≥ r − M; one that adds and drops at once fails both choices of m
// whatever M is. So a size change of δ is possible exactly when 2|δ| ≤ M.
// Under alloc.Reference M = N+1, as the reference writes it, which is its
// step limit ⌊(N+1)/2⌋ (Problem.StepLimit). Under alloc.Default M = 2N+1:
// a Trainer holds C ≤ N nodes and can reach at most N, so |δ| ≤ N and
// 2|δ| ≤ 2N < M — no limit. Every other row needs only M ≥ N+1 (n_j ≤ N
// and Nmin_j ≤ N+1), which both choices satisfy.
//
// Columns come in two blocks, integer then continuous: all X, all D, then
// per Trainer A, B, M, U, W, N and its Y; then per Trainer S and its L.
// Names (MPS allows 8 characters): one upper-case letter for the family
// and the index in lower-case base 36. Columns: X and D index j·N+n; A, B,
// M, U, W, N, S index j; Y and L count up through all Trainers. Rows: P
// index n; Q index 4(j·N+n)+k; R and F index 4j+k; T index 2j+k; C, V, I,
// O, E index j; H counts up. Nodes are in Problem order: the free nodes,
// then each Trainer's held nodes.
func Build(p *alloc.Problem) *Model {
	return BuildPriced(p, nil)
}

// BuildPriced is Build with the objective of the Pricing pr (nil or
// alloc.FixedHorizon: the paper's, as Build). For any other pricing the
// curve of Trainer j is its gain table, a breakpoint at every count from 0
// to its largest, and S_j is worth ω_j·S_j: the objective is
// Σ_j ω_j (gain_j(n_j) − (u_j R_up,j + w_j R_down,j) r_j), each Trainer's
// term alloc's (Problem.Prices) at its count. With a breakpoint at every
// count the weights λ_{j,i} are binaries instead of a convex combination
// (n_j = Σ_i i·λ_{j,i}, Σ_i λ_{j,i} = 1), so there are no segment binaries y
// nor their rows; every other row is Build's. (the convex-combination form is
// equivalent on integers, with more columns and rows).
func BuildPriced(p *alloc.Problem, pr alloc.Pricing) *Model {
	J := len(p.Trainers)
	nodes := make([]string, 0, p.Size())
	for _, n := range p.Free {
		nodes = append(nodes, n.Name)
	}
	held := make([]int, J) // first model index of Trainer j's held nodes
	for j := range p.Trainers {
		held[j] = len(nodes)
		for _, n := range p.Trainers[j].Held {
			nodes = append(nodes, n.Name)
		}
	}
	N := len(nodes)
	if 4*J*N > maxNameIndex {
		panic(fmt.Sprintf("milp: %d trainers × %d nodes do not fit 8-character MPS names", J, N))
	}
	M := 2*N + 1
	if p.Semantics == alloc.Reference {
		M = N + 1
	}
	m := &Model{Name: "BFTRAIN", BigM: M, nodes: nodes, trainers: make([]string, J)}
	curves := make([]curve, J)
	var gain func(j, k int) float64
	if _, fixed := pr.(alloc.FixedHorizon); pr != nil && !fixed {
		gain = pr.Gains(p)
	}
	for j := range p.Trainers {
		t := &p.Trainers[j]
		m.trainers[j] = t.ID
		if gain != nil {
			curves[j] = gainCurve(gain, j, min(t.MaxNodes(), N))
		} else {
			curves[j] = trainerCurve(p, t, min(t.MaxNodes(), N))
		}
	}

	b := newBuilder(m, J, N, curves)
	b.rows(p, held)
	b.columns(p, held)
	b.finish()
	return m
}

// builder fills a Model: first every row (their indices are computed from
// the layout), then every column with its entries, in MPS order.
type builder struct {
	m      *Model
	J, N   int
	curves []curve
	// first row of each per-Trainer block; per Trainer: C, R0-3, T0-1,
	// F0-3, V, I, O, then (with segments) E and one H per breakpoint.
	tRow []int
	// names are built into one buffer each and sliced at the end.
	names, colNames namer
}

// Offsets inside a Trainer's row block.
const (
	rC = iota
	rR0
	rR1
	rR2
	rR3
	rT0
	rT1
	rF0
	rF1
	rF2
	rF3
	rV
	rI
	rO
	rE        // only when the curve has segments; H rows follow
	fixedRows = rE
)

func newBuilder(m *Model, J, N int, curves []curve) *builder {
	return &builder{m: m, J: J, N: N, curves: curves, tRow: make([]int, J)}
}

func (b *builder) row(fam byte, idx int, s Sense, rhs float64) {
	b.names.add(fam, idx)
	b.m.Rows = append(b.m.Rows, Row{Sense: s, RHS: rhs})
}

func (b *builder) rows(p *alloc.Problem, held []int) {
	J, N, M := b.J, b.N, float64(b.m.BigM)
	nrows := N + 4*J*N
	for j := range J {
		nrows += fixedRows
		if k := len(b.curves[j].nu); k > 1 && !b.curves[j].oneHot {
			nrows += 1 + k
		}
	}
	b.m.Rows = make([]Row, 0, nrows)
	b.names.grow(nrows)
	for n := range N {
		b.row(famP, n, LE, 1)
	}
	for j := range J {
		lo, hi := held[j], held[j]+len(p.Trainers[j].Held)
		for n := range N {
			c := 0.0
			if n >= lo && n < hi {
				c = 1
			}
			q := 4 * (j*N + n)
			b.row(famQ, q, LE, c)     // d − x ≤ c
			b.row(famQ, q+1, GE, -c)  // d − x ≥ −c
			b.row(famQ, q+2, GE, c)   // d + x ≥ c
			b.row(famQ, q+3, LE, 2-c) // d + x ≤ 2 − c
		}
	}
	h := 0
	for j := range J {
		t := &p.Trainers[j]
		C := float64(len(t.Held))
		lo := float64(min(max(t.Min, 1), N+1))
		hi := float64(min(t.MaxNodes(), N))
		b.tRow[j] = len(b.m.Rows)
		b.row(famC, j, EQ, 0)       // n − Σx = 0
		b.row(famR, 4*j, GE, lo)    // n + M z^min ≥ Nmin
		b.row(famR, 4*j+1, LE, M)   // n + M z^min ≤ M
		b.row(famR, 4*j+2, LE, hi)  // n − M z^max ≤ Nmax
		b.row(famR, 4*j+3, LE, M)   // n + M z^max ≤ M
		b.row(famT, 2*j, GE, C)     // n − Σd + M m ≥ C
		b.row(famT, 2*j+1, LE, C+M) // n + Σd + M m ≤ C + M
		b.row(famF, 4*j, LE, C)     // n − (M − C) u ≤ C
		b.row(famF, 4*j+1, GE, 0)   // n − (C + 1) u ≥ 0
		b.row(famF, 4*j+2, LE, M)   // n + (M − C + 1) w ≤ M
		b.row(famF, 4*j+3, GE, C)   // n + C w ≥ C
		b.row(famV, j, EQ, 1)       // Σλ = 1
		b.row(famI, j, EQ, 0)       // n − Σνλ = 0
		b.row(famO, j, EQ, 0)       // Σoλ − S = 0
		if k := len(b.curves[j].nu); k > 1 && !b.curves[j].oneHot {
			b.row(famE, j, EQ, 1) // Σy = 1
			for range k {
				b.row(famH, h, LE, 0) // λ_i − y_i − y_{i+1} ≤ 0
				h++
			}
		}
	}
}

// col starts a column; entries follow through add.
func (b *builder) col(fam byte, idx int, lo, up float64, integer bool, obj float64) {
	m := b.m
	b.colNames.add(fam, idx)
	m.Cols = append(m.Cols, Column{Lower: lo, Upper: up, Integer: integer, Obj: obj})
	m.Start = append(m.Start, len(m.Index))
}

func (b *builder) add(row int, v float64) {
	if v != 0 {
		b.m.Index = append(b.m.Index, int32(row))
		b.m.Value = append(b.m.Value, v)
	}
}

func (b *builder) columns(p *alloc.Problem, held []int) {
	J, N, M := b.J, b.N, b.m.BigM
	ncols := 2 * J * N
	for j := range J {
		k := len(b.curves[j].nu)
		ncols += 5 + 2 + k
		if !b.curves[j].oneHot {
			ncols += k - 1
		}
	}
	m := b.m
	m.Cols = make([]Column, 0, ncols)
	m.Start = make([]int, 0, ncols+1)
	m.Index = make([]int32, 0, 12*J*N+40*J)
	m.Value = make([]float64, 0, 12*J*N+40*J)
	b.colNames.grow(ncols)
	inf := math.Inf(1)
	q := func(j, n, k int) int { return N + 4*(j*N+n) + k }
	for j := range J {
		for n := range N {
			b.col(famX, j*N+n, 0, 1, true, 0)
			b.add(n, 1) // P_n
			b.add(q(j, n, 0), -1)
			b.add(q(j, n, 1), -1)
			b.add(q(j, n, 2), 1)
			b.add(q(j, n, 3), 1)
			b.add(b.tRow[j]+rC, -1)
		}
	}
	for j := range J {
		for n := range N {
			b.col(famD, j*N+n, 0, 1, true, 0)
			for k := range 4 {
				b.add(q(j, n, k), 1)
			}
			b.add(b.tRow[j]+rT0, -1)
			b.add(b.tRow[j]+rT1, 1)
		}
	}
	obj := p.Goal()
	y := 0
	for j := range J {
		t := &p.Trainers[j]
		cv := &b.curves[j]
		base := b.tRow[j]
		C := len(t.Held)
		w := t.Priority()
		r := t.Rate(obj, C)
		b.col(famA, j, 0, 1, true, -w*cv.mult*cv.o0)
		b.add(base+rR0, float64(M))
		b.add(base+rR1, float64(M))
		b.col(famB, j, 0, 1, true, 0)
		b.add(base+rR2, -float64(M))
		b.add(base+rR3, float64(M))
		b.col(famM, j, 0, 1, true, 0)
		b.add(base+rT0, float64(M))
		b.add(base+rT1, float64(M))
		b.col(famU, j, 0, 1, true, -w*t.RUp*r)
		b.add(base+rF0, -float64(M-C))
		b.add(base+rF1, -float64(C+1))
		b.col(famW, j, 0, 1, true, -w*t.RDown*r)
		b.add(base+rF2, float64(M-C+1))
		b.add(base+rF3, float64(C))
		// n_j is integer (a sum of binaries): marking it lets the
		// solver branch on a count rather than on symmetric nodes,
		// which makes CBC about a third faster on small problems.
		b.col(famN, j, 0, float64(N), true, 0)
		b.add(base+rC, 1)
		for k := rR0; k <= rF3; k++ {
			b.add(base+k, 1)
		}
		b.add(base+rI, 1)
		// Segment s (1..k−1) joins breakpoints s−1 and s.
		for s := 1; s < len(cv.nu) && !cv.oneHot; s++ {
			b.col(famY, y, 0, 1, true, 0)
			y++
			b.add(base+rE, 1)
			b.add(base+rE+1+s-1, -1) // H of λ_{s−1}
			b.add(base+rE+1+s, -1)   // H of λ_s
		}
	}
	l := 0
	for j := range J {
		t := &p.Trainers[j]
		cv := &b.curves[j]
		base := b.tRow[j]
		b.col(famS, j, math.Inf(-1), inf, false, t.Priority()*cv.mult)
		b.add(base+rO, -1)
		for i := range cv.nu {
			b.col(famL, l, 0, 1, cv.oneHot, 0)
			l++
			b.add(base+rV, 1)
			b.add(base+rI, -float64(cv.nu[i]))
			b.add(base+rO, cv.o[i])
			if len(cv.nu) > 1 && !cv.oneHot {
				b.add(base+rE+1+i, 1)
			}
		}
	}
}

// finish closes the CSC arrays and slices the names out of their buffers.
func (b *builder) finish() {
	m := b.m
	m.Start = append(m.Start, len(m.Index))
	rn := b.names.strings()
	for i := range m.Rows {
		m.Rows[i].Name = rn[i]
	}
	cn := b.colNames.strings()
	for i := range m.Cols {
		m.Cols[i].Name = cn[i]
	}
}

// namer builds many short names into one buffer, so a model of millions
// of rows costs one allocation for its names, not one per name.
type namer struct {
	buf  []byte
	ends []int
}

func (n *namer) grow(count int) {
	n.buf = make([]byte, 0, count*6)
	n.ends = make([]int, 0, count)
}

func (n *namer) add(fam byte, idx int) {
	n.buf = append(n.buf, fam)
	n.buf = strconv.AppendInt(n.buf, int64(idx), 36)
	n.ends = append(n.ends, len(n.buf))
}

func (n *namer) strings() []string {
	all := string(n.buf)
	out := make([]string, len(n.ends))
	start := 0
	for i, e := range n.ends {
		out[i] = all[start:e]
		start = e
	}
	n.buf, n.ends = nil, nil
	return out
}

// Decode turns a solver's column values (indexed like Cols) into node
// sets: counts[j] is the number of nodes with x_{j,n} > 0.5 and nodes[j]
// their names, in model order (free nodes, then held nodes by Trainer).
func (m *Model) Decode(values []float64) (counts []int, nodes [][]string, err error) {
	if len(values) != len(m.Cols) {
		return nil, nil, fmt.Errorf("decode: %d values for %d columns", len(values), len(m.Cols))
	}
	J, N := len(m.trainers), len(m.nodes)
	counts = make([]int, J)
	nodes = make([][]string, J)
	for j := range J {
		for n := range N {
			if values[j*N+n] > 0.5 {
				counts[j]++
				nodes[j] = append(nodes[j], m.nodes[n])
			}
		}
	}
	return counts, nodes, nil
}

// ColumnIndex returns a map from column name to index, for reading a
// solver's answer by name.
func (m *Model) ColumnIndex() map[string]int {
	idx := make(map[string]int, len(m.Cols))
	for i := range m.Cols {
		idx[m.Cols[i].Name] = i
	}
	return idx
}
