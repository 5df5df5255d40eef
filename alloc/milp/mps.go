package milp

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
)

// MPS is written in strictly fixed format, the one dialect CBC, HiGHS,
// Gurobi, GLPK and lp_solve all read the same way (COIN rejects free-MPS
// BV bounds). Fields occupy fixed columns (1-based, inclusive):
//
//	field:   1      2       3        4        5        6
//	columns: 2-3    5-12    15-22    25-36    40-47    50-61
//
// Names have at most 8 characters (Build's names have at most 8); numbers
// at most 12, right-aligned in their field. The objective is minimised,
// so WriteMPS writes −Obj: an OBJSENSE section is not portable.

// MaxRelError is the largest relative error WriteMPS accepts when a
// number's exact decimal form does not fit in 12 characters.
//
// A number is written exactly (its shortest decimal form that reads back
// as the same float64) whenever that form fits: every integer below 1e11
// in magnitude, every number with up to 10 significant digits between 0.1
// and 1e10, and short ones of any magnitude ("1e-20"); a leading "0." is
// written "." when that saves the last digit. Otherwise it is rounded to
// the most significant digits that fit: at least 10 (relative error ≤
// 5e-10) for magnitudes in [0.1, 1e11), fewer for tinier or huger ones.
// Computed coefficients — weight × T_fwd, rescale cost × current rate,
// speedups — are often rounded even when their factors are short
// (2.37 × 45.67 is 108.23790000000001 in float64), by far less than the
// bound.
//
// Why 1e-9 and not 1e-12: an arbitrary float64 needs 17 digits, so 1e-12
// is out of reach in 12 characters (a Summit curve value such as
// 321234.567890123 already is), while the solvers' own feasibility and
// integrality tolerances are 1e-7..1e-9, so rounding within 1e-9 changes
// no decision a solver can resolve; plans are re-valued exactly from
// their counts anyway (Solver). A number that cannot be written within
// 1e-9 (e.g. −1.2345678912e-5) is refused with ErrPrecision rather than
// silently perturbed.
const MaxRelError = 1e-9

// ErrPrecision is returned by WriteMPS for a number that fixed-format MPS
// cannot hold within MaxRelError.
var ErrPrecision = errors.New("number does not fit 12 characters")

const numWidth = 12

// Field start columns (0-based offsets in a line).
const (
	f1 = 1  // columns 2-3
	f2 = 4  // columns 5-12
	f3 = 14 // columns 15-22
	f4 = 24 // columns 25-36
	f5 = 39 // columns 40-47
	f6 = 49 // columns 50-61
)

// mpsWriter writes lines into a bufio.Writer, reusing one line buffer.
type mpsWriter struct {
	w    *bufio.Writer
	line []byte
	num  []byte
	err  error
}

func (mw *mpsWriter) pad(col int) {
	for len(mw.line) < col {
		mw.line = append(mw.line, ' ')
	}
}

func (mw *mpsWriter) text(col int, s string) {
	mw.pad(col)
	mw.line = append(mw.line, s...)
}

// number appends v right-aligned in the 12-character field at col.
func (mw *mpsWriter) number(col int, v float64, where func() string) {
	var err error
	mw.num, err = appendNumber(mw.num[:0], v)
	if err != nil && mw.err == nil {
		mw.err = fmt.Errorf("%s: %w", where(), err)
	}
	mw.pad(col + numWidth - len(mw.num))
	mw.line = append(mw.line, mw.num...)
}

func (mw *mpsWriter) flush() {
	mw.line = append(mw.line, '\n')
	if _, err := mw.w.Write(mw.line); err != nil && mw.err == nil {
		mw.err = err
	}
	mw.line = mw.line[:0]
}

// WriteMPS writes the model as fixed-format MPS: NAME, ROWS (the
// objective row OBJ first), COLUMNS with MARKER INTORG/INTEND around
// integer columns, RHS, BOUNDS (UP 1 for binaries, FR for free columns),
// ENDATA. The objective row holds −Obj (the file minimises). It streams:
// memory use does not grow with the model beyond a line buffer.
func (m *Model) WriteMPS(w io.Writer) error {
	mw := &mpsWriter{w: bufio.NewWriterSize(w, 1<<16), line: make([]byte, 0, 80), num: make([]byte, 0, 32)}
	mw.text(0, "NAME")
	mw.text(f3, m.Name)
	mw.flush()
	mw.text(0, "ROWS")
	mw.flush()
	mw.text(f1, "N")
	mw.text(f2, objName)
	mw.flush()
	for i := range m.Rows {
		mw.text(f1, string(m.Rows[i].Sense))
		mw.text(f2, m.Rows[i].Name)
		mw.flush()
	}
	if mw.err != nil {
		return fmt.Errorf("write mps: %w", mw.err)
	}
	mw.text(0, "COLUMNS")
	mw.flush()
	m.writeColumns(mw)
	mw.text(0, "RHS")
	mw.flush()
	m.writeRHS(mw)
	mw.text(0, "BOUNDS")
	mw.flush()
	m.writeBounds(mw)
	mw.text(0, "ENDATA")
	mw.flush()
	if mw.err != nil {
		return fmt.Errorf("write mps: %w", mw.err)
	}
	if err := mw.w.Flush(); err != nil {
		return fmt.Errorf("write mps: %w", err)
	}
	return nil
}

func (m *Model) marker(mw *mpsWriter, kind string) {
	mw.text(f2, markName)
	mw.text(f3, "'MARKER'")
	mw.text(f5, kind)
	mw.flush()
}

func (m *Model) writeColumns(mw *mpsWriter) {
	integer := false
	for c := range m.Cols {
		col := &m.Cols[c]
		if col.Integer != integer {
			if col.Integer {
				m.marker(mw, "'INTORG'")
			} else {
				m.marker(mw, "'INTEND'")
			}
			integer = col.Integer
		}
		// Pairs of (row, value), two per line; the objective first.
		half := false
		entry := func(row string, v float64) {
			if !half {
				mw.text(f2, col.Name)
				mw.text(f3, row)
				mw.number(f4, v, func() string { return fmt.Sprintf("column %s row %s", col.Name, row) })
				half = true
				return
			}
			mw.text(f5, row)
			mw.number(f6, v, func() string { return fmt.Sprintf("column %s row %s", col.Name, row) })
			mw.flush()
			half = false
		}
		lo, hi := m.Start[c], m.Start[c+1]
		if col.Obj != 0 || lo == hi {
			entry(objName, -col.Obj)
		}
		for k := lo; k < hi; k++ {
			entry(m.Rows[m.Index[k]].Name, m.Value[k])
		}
		if half {
			mw.flush()
		}
		if mw.err != nil {
			return
		}
	}
	if integer {
		m.marker(mw, "'INTEND'")
	}
}

func (m *Model) writeRHS(mw *mpsWriter) {
	half := false
	for i := range m.Rows {
		r := &m.Rows[i]
		if r.RHS == 0 {
			continue
		}
		where := func() string { return "rhs of row " + r.Name }
		if !half {
			mw.text(f2, rhsName)
			mw.text(f3, r.Name)
			mw.number(f4, r.RHS, where)
		} else {
			mw.text(f5, r.Name)
			mw.number(f6, r.RHS, where)
			mw.flush()
		}
		half = !half
	}
	if half {
		mw.flush()
	}
}

func (m *Model) writeBounds(mw *mpsWriter) {
	for c := range m.Cols {
		col := &m.Cols[c]
		where := func() string { return "bound of column " + col.Name }
		bound := func(kind string, v float64, value bool) {
			mw.text(f1, kind)
			mw.text(f2, bndName)
			mw.text(f3, col.Name)
			if value {
				mw.number(f4, v, where)
			}
			mw.flush()
		}
		lo, up := col.Lower, col.Upper
		switch {
		case lo == up:
			bound("FX", lo, true)
			continue
		case math.IsInf(lo, -1) && math.IsInf(up, 1):
			bound("FR", 0, false)
			continue
		case math.IsInf(lo, -1):
			bound("MI", 0, false)
		case lo != 0:
			bound("LO", lo, true)
		}
		switch {
		case !math.IsInf(up, 1):
			bound("UP", up, true)
		case col.Integer:
			// Some readers take a marked integer column without an
			// upper bound as binary; say +∞ explicitly.
			bound("PL", 0, false)
		}
		if mw.err != nil {
			return
		}
	}
}

// appendNumber appends v in at most 12 characters: exactly when its
// shortest round-trip decimal form fits, else rounded to the most
// significant digits that fit (ErrPrecision beyond MaxRelError).
func appendNumber(dst []byte, v float64) ([]byte, error) {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return append(dst, "NaN"...), fmt.Errorf("%v: %w", v, ErrPrecision)
	case v == 0:
		return append(dst, '0'), nil
	case v == math.Trunc(v) && math.Abs(v) < 1e11:
		return strconv.AppendInt(dst, int64(v), 10), nil
	}
	start := len(dst)
	// Shortest exact forms: plain decimal, or exponent.
	dst = strconv.AppendFloat(dst, v, 'f', -1, 64)
	if len(dst)-start <= numWidth {
		return dst, nil
	}
	dst = compactExp(strconv.AppendFloat(dst[:start], v, 'e', -1, 64), start)
	if len(dst)-start <= numWidth {
		return dst, nil
	}
	if d := dropLeadingZero(strconv.AppendFloat(dst[:start], v, 'f', -1, 64), start); len(d)-start <= numWidth {
		return d, nil
	}
	// Rounded: the candidate with the smallest error among plain and
	// exponent forms that fit.
	best, bestErr := []byte(nil), math.Inf(1)
	var buf []byte
	for prec := numWidth; prec >= 0; prec-- {
		buf = dropLeadingZero(strconv.AppendFloat(buf[:0], v, 'f', prec, 64), 0)
		if len(buf) <= numWidth {
			if e := relErr(buf, v); e < bestErr {
				best, bestErr = append(best[:0], buf...), e
			}
			break
		}
	}
	for prec := numWidth; prec >= 0; prec-- {
		buf = compactExp(strconv.AppendFloat(buf[:0], v, 'e', prec, 64), 0)
		if len(buf) <= numWidth {
			if e := relErr(buf, v); e < bestErr {
				best, bestErr = append(best[:0], buf...), e
			}
			break
		}
	}
	dst = append(dst[:start], best...)
	if bestErr > MaxRelError {
		return dst, fmt.Errorf("%v written as %s (relative error %.1e): %w", v, best, bestErr, ErrPrecision)
	}
	return dst, nil
}

func relErr(s []byte, v float64) float64 {
	w, err := strconv.ParseFloat(string(s), 64)
	if err != nil {
		return math.Inf(1)
	}
	return math.Abs(w-v) / math.Abs(v)
}

// compactExp rewrites Go's exponent ("e-05", "e+20") in dst[start:] as
// the shortest one ("e-5", "e20").
func compactExp(dst []byte, start int) []byte {
	e := -1
	for i := len(dst) - 1; i >= start; i-- {
		if dst[i] == 'e' {
			e = i
			break
		}
	}
	if e < 0 {
		return dst
	}
	out := dst[:e+1]
	i := e + 1
	if dst[i] == '-' {
		out = append(out, '-')
	}
	if dst[i] == '-' || dst[i] == '+' {
		i++
	}
	for i < len(dst)-1 && dst[i] == '0' {
		i++
	}
	return append(out, dst[i:]...)
}

// dropLeadingZero turns "0.5" into ".5" and "-0.5" into "-.5" in
// dst[start:], a form every MPS reader here parses (strtod).
func dropLeadingZero(dst []byte, start int) []byte {
	s := dst[start:]
	switch {
	case len(s) > 2 && s[0] == '0' && s[1] == '.':
		return append(dst[:start], s[1:]...)
	case len(s) > 3 && s[0] == '-' && s[1] == '0' && s[2] == '.':
		return append(append(dst[:start], '-'), s[2:]...)
	}
	return dst
}
