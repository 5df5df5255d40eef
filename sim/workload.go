package sim

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// Job is one Trainer of a workload: when it arrives, its node bounds, its rescale costs,
// how much work it must do and its scaling curve.
type Job struct {
	ID         string
	Model      string
	Submit     time.Time
	RUp, RDown float64   // seconds of progress lost when scaling up / down (tcup_s, tcdw_s)
	Min, Max   int       // node bounds (jmin, jmax)
	Samples    float64   // samples to process to finish (pmax_samples)
	Nodes      []int     // node-count breakpoints of the curves (ns), increasing
	Throughput []float64 // samples/s at each breakpoint (ps): progress is counted in these
	Metric     []float64 // what the allocator maximises at each breakpoint (os)
}

// ThroughputAt is the throughput (samples/s) at n nodes, linearly interpolated between
// breakpoints and held constant beyond the last; 0 at n ≤ 0.
func (j Job) ThroughputAt(n float64) float64 { return jobCurveAt(j.Nodes, j.Throughput, n) }

// MetricAt is the allocator's metric at n nodes, interpolated as ThroughputAt.
func (j Job) MetricAt(n float64) float64 { return jobCurveAt(j.Nodes, j.Metric, n) }

// jobCurveAt interpolates (xs, ys) at x; below the first breakpoint it interpolates from
// (0, 0), beyond the last it holds the last value.
func jobCurveAt(xs []int, ys []float64, x float64) float64 {
	if x <= 0 || len(xs) == 0 {
		return 0
	}
	x0, y0 := 0.0, 0.0
	for i, xi := range xs {
		x1, y1 := float64(xi), ys[i]
		if x <= x1 {
			if x1 == x0 {
				return y1
			}
			return y0 + (y1-y0)*(x-x0)/(x1-x0)
		}
		x0, y0 = x1, y1
	}
	return y0
}

// workloadColumns are the columns of the paper's workload CSV, in its order.
var workloadColumns = []string{"job", "model", "tsub", "tcup_s", "tcdw_s", "jmin", "jmax", "pmax_samples", "ns", "ps", "os"}

// ReadWorkload reads the paper's workload CSV, one Trainer per row:
// job,model,tsub,tcup_s,tcdw_s,jmin,jmax,pmax_samples,ns,ps,os, with `;`-separated curve
// lists and naive tsub times read as UTC. Columns are found by header name (extra columns
// are ignored). Each row is validated: non-empty unique job, finite non-negative costs,
// 1 ≤ jmin ≤ jmax, positive samples, breakpoints non-negative and strictly increasing and
// covering [jmin, jmax], curves of the same length, finite, throughput non-negative.
// Errors name the line and column. Rows come back in file order.
func ReadWorkload(r io.Reader) ([]Job, error) {
	r, err := maybeGunzip(r)
	if err != nil {
		return nil, fmt.Errorf("read workload: %w", err)
	}
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	head, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("read workload: header: %w", err)
	}
	col := map[string]int{}
	for i, h := range head {
		col[strings.TrimSpace(h)] = i
	}
	for _, c := range workloadColumns {
		if _, ok := col[c]; !ok {
			return nil, fmt.Errorf("read workload: line 1: no column %q", c)
		}
	}
	var jobs []Job
	ids := map[string]int{}
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read workload: %w", err)
		}
		line, _ := cr.FieldPos(0)
		p := workloadRow{rec: rec, col: col, line: line}
		j := p.job()
		if p.err != nil {
			return nil, fmt.Errorf("read workload: %w", p.err)
		}
		if prev, ok := ids[j.ID]; ok {
			return nil, fmt.Errorf("read workload: line %d, column %q: job %q already on line %d", line, "job", j.ID, prev)
		}
		ids[j.ID] = line
		jobs = append(jobs, j)
	}
	return jobs, nil
}

// workloadRow parses one row, keeping the first error.
type workloadRow struct {
	rec  []string
	col  map[string]int
	line int
	err  error
}

func (p *workloadRow) fail(column, format string, args ...any) {
	if p.err == nil {
		p.err = fmt.Errorf("line %d, column %q: %s", p.line, column, fmt.Sprintf(format, args...))
	}
}

func (p *workloadRow) field(column string) string {
	return strings.TrimSpace(p.rec[p.col[column]])
}

func (p *workloadRow) float(column string) float64 {
	s := p.field(column)
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		p.fail(column, "%q is not a finite number", s)
		return 0
	}
	return v
}

func (p *workloadRow) integer(column string) int {
	s := p.field(column)
	v, err := strconv.Atoi(s)
	if err != nil {
		// Accept integral floats such as "64.0", as pandas writes them.
		f, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil || f != math.Trunc(f) || math.Abs(f) > math.MaxInt32 {
			p.fail(column, "%q is not an integer", s)
			return 0
		}
		v = int(f)
	}
	return v
}

func (p *workloadRow) floats(column string) []float64 {
	s := p.field(column)
	if s == "" {
		p.fail(column, "empty list")
		return nil
	}
	parts := strings.Split(s, ";")
	out := make([]float64, len(parts))
	for i, x := range parts {
		v, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			p.fail(column, "item %d: %q is not a finite number", i+1, x)
			return nil
		}
		out[i] = v
	}
	return out
}

func (p *workloadRow) job() Job {
	j := Job{ID: p.field("job"), Model: p.field("model")}
	if j.ID == "" {
		p.fail("job", "empty")
	}
	if ts := p.field("tsub"); ts != "" {
		t, err := parseTraceTime(ts)
		if err != nil {
			p.fail("tsub", "%v", err)
		}
		j.Submit = t
	} else {
		p.fail("tsub", "empty")
	}
	j.RUp, j.RDown = p.float("tcup_s"), p.float("tcdw_s")
	if j.RUp < 0 {
		p.fail("tcup_s", "negative")
	}
	if j.RDown < 0 {
		p.fail("tcdw_s", "negative")
	}
	j.Min, j.Max = p.integer("jmin"), p.integer("jmax")
	if j.Min < 1 {
		p.fail("jmin", "%d < 1", j.Min)
	}
	if j.Max < j.Min {
		p.fail("jmax", "%d < jmin %d", j.Max, j.Min)
	}
	if j.Samples = p.float("pmax_samples"); j.Samples <= 0 {
		p.fail("pmax_samples", "not positive")
	}
	ns := p.floats("ns")
	j.Throughput, j.Metric = p.floats("ps"), p.floats("os")
	if p.err != nil {
		return j
	}
	j.Nodes = make([]int, len(ns))
	for i, x := range ns {
		if x != math.Trunc(x) || x < 0 || x > maxTraceNodes {
			p.fail("ns", "item %d: %v is not a node count", i+1, x)
			return j
		}
		j.Nodes[i] = int(x)
		if i > 0 && j.Nodes[i] <= j.Nodes[i-1] {
			p.fail("ns", "item %d: %d not above %d", i+1, j.Nodes[i], j.Nodes[i-1])
			return j
		}
	}
	switch {
	case len(j.Throughput) != len(ns):
		p.fail("ps", "%d items, ns has %d", len(j.Throughput), len(ns))
	case len(j.Metric) != len(ns):
		p.fail("os", "%d items, ns has %d", len(j.Metric), len(ns))
	case j.Nodes[0] > j.Min:
		p.fail("ns", "first breakpoint %d above jmin %d", j.Nodes[0], j.Min)
	case j.Nodes[len(ns)-1] < j.Max:
		p.fail("ns", "last breakpoint %d below jmax %d", j.Nodes[len(ns)-1], j.Max)
	}
	for i, v := range j.Throughput {
		if v < 0 {
			p.fail("ps", "item %d: negative", i+1)
		}
	}
	return j
}

// writeWorkload writes jobs in the CSV form ReadWorkload reads. Numbers are written
// exactly (shortest round-trip form), so a read-write-read cycle changes nothing.
func writeWorkload(w io.Writer, jobs []Job) error {
	cw := csv.NewWriter(w)
	cw.Write(workloadColumns)
	rec := make([]string, len(workloadColumns))
	for _, j := range jobs {
		ns := make([]float64, len(j.Nodes))
		for i, n := range j.Nodes {
			ns[i] = float64(n)
		}
		rec[0], rec[1] = j.ID, j.Model
		rec[2] = j.Submit.UTC().Format(traceTimeLayout + ".999999999")
		rec[3], rec[4] = formatNumber(j.RUp), formatNumber(j.RDown)
		rec[5], rec[6] = strconv.Itoa(j.Min), strconv.Itoa(j.Max)
		rec[7] = formatNumber(j.Samples)
		rec[8], rec[9], rec[10] = formatList(ns), formatList(j.Throughput), formatList(j.Metric)
		if err := cw.Write(rec); err != nil {
			return fmt.Errorf("write workload: %w", err)
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("write workload: %w", err)
	}
	return nil
}

// formatNumber writes v in the shortest form that reads back exactly, without an
// exponent for everyday magnitudes ("130000000", "17.78804344238519").
func formatNumber(v float64) string {
	if a := math.Abs(v); a != 0 && (a < 1e-6 || a >= 1e21) {
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

func formatList(vs []float64) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = formatNumber(v)
	}
	return strings.Join(parts, ";")
}
