package alloc_test

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/bftrainer/bftrainer/alloc"
)

// sharedDataDir finds the project's third-party data (../shared/data from
// the main checkout, whatever the worktree depth), or skips.
func sharedDataDir(tb testing.TB) string {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		p := filepath.Join(dir, "shared", "data")
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			return p
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Skip("shared data absent: no shared/data in any parent directory")
		}
		dir = parent
	}
}

func readCSV(tb testing.TB, path string) []map[string]string {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	r := csv.NewReader(f)
	head, err := r.Read()
	if err != nil {
		tb.Fatal(err)
	}
	var rows []map[string]string
	for {
		rec, err := r.Read()
		if err == io.EOF {
			return rows
		}
		if err != nil {
			tb.Fatal(err)
		}
		row := map[string]string{}
		for i, h := range head {
			row[h] = rec[i]
		}
		rows = append(rows, row)
	}
}

func atof(tb testing.TB, s string) float64 {
	tb.Helper()
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

// heldOutCurve is a measured curve: throughput at each node count.
type heldOutCurve struct {
	name string
	rate map[int]float64
}

func (c heldOutCurve) counts() []int {
	var ns []int
	for n := range c.rate {
		ns = append(ns, n)
	}
	sort.Ints(ns)
	return ns
}

// summitCurves reads the seven Summit curves (1–64 nodes).
func summitCurves(tb testing.TB, data string) []heldOutCurve {
	by := map[string]map[int]float64{}
	var order []string
	for _, row := range readCSV(tb, filepath.Join(data, "workloads", "model-scalability.csv")) {
		m := row["model"]
		if by[m] == nil {
			by[m] = map[int]float64{}
			order = append(order, m)
		}
		by[m][int(atof(tb, row["nodes"]))] = atof(tb, row["throughput_samples_per_s"])
	}
	var out []heldOutCurve
	for _, m := range order {
		out = append(out, heldOutCurve{"summit/" + m, by[m]})
	}
	return out
}

// polluxCurves builds, per Pollux model and per local batch size measured
// at every count, the curve of whole 4-GPU nodes: 1–4 nodes from
// placements.csv (placements "4", "44", "444", "4444"), 6–16 nodes from
// scalability.csv (num_replicas = 4·num_nodes); samples/s =
// replicas·local_bsz/step_time, the median over repeated rows.
func polluxCurves(tb testing.TB, data string) []heldOutCurve {
	dirs, err := filepath.Glob(filepath.Join(data, "pollux", "*", "scalability.csv"))
	if err != nil || len(dirs) == 0 {
		tb.Skipf("no Pollux curves under %s", data)
	}
	var out []heldOutCurve
	for _, sc := range dirs {
		dir := filepath.Dir(sc)
		obs := map[int]map[int][]float64{} // bsz → nodes → samples/s
		add := func(bsz, nodes int, v float64) {
			if obs[bsz] == nil {
				obs[bsz] = map[int][]float64{}
			}
			obs[bsz][nodes] = append(obs[bsz][nodes], v)
		}
		for _, row := range readCSV(tb, filepath.Join(dir, "placements.csv")) {
			p := row["placement"]
			if strings.Trim(p, "4") != "" {
				continue
			}
			bsz := atof(tb, row["local_bsz"])
			add(int(bsz), len(p), 4*float64(len(p))*bsz/atof(tb, row["step_time"]))
		}
		for _, row := range readCSV(tb, sc) {
			nodes, reps := atof(tb, row["num_nodes"]), atof(tb, row["num_replicas"])
			if reps != 4*nodes {
				continue
			}
			bsz := atof(tb, row["local_bsz"])
			add(int(bsz), int(nodes), reps*bsz/atof(tb, row["step_time"]))
		}
		var bszs []int
		for b := range obs {
			bszs = append(bszs, b)
		}
		sort.Ints(bszs)
		for _, b := range bszs {
			c := heldOutCurve{fmt.Sprintf("pollux/%s/bsz=%d", filepath.Base(dir), b), map[int]float64{}}
			for n, vs := range obs[b] {
				slices.Sort(vs)
				c.rate[n] = vs[len(vs)/2]
			}
			if len(c.rate) == 8 { // measured at every count
				out = append(out, c)
			}
		}
	}
	return out
}

// heldOutError fits the learner from the counts in seen (exact, or with
// seeded 5 % noise) and returns, at the curve's other counts, the mean and
// largest |relative error|, the share within two of its SDs, and the same
// mean error for linear scaling from the smallest seen count.
func heldOutError(tb testing.TB, c heldOutCurve, seen []int, noise float64, seed uint64) (mean, worst, covered, linear float64) {
	tb.Helper()
	var l alloc.CurveLearner
	ns := c.counts()
	s := mustState(tb, 1, ns[len(ns)-1], nil)
	r := rand.New(rand.NewPCG(seed, 11))
	for _, n := range seen {
		for k := range 8 {
			v := c.rate[n]
			if noise > 0 {
				v *= math.Max(0, 1+noise*r.NormFloat64())
			}
			if err := l.Observe(s, alloc.CurveObs{Nodes: n, Rate: v, Duration: 60, Since: 60 + 60*float64(k)}); err != nil {
				tb.Fatal(err)
			}
		}
	}
	e := l.Estimate(s)
	checkSane(tb, &e, 1, ns[len(ns)-1])
	k := 0
	for _, n := range ns {
		if slices.Contains(seen, n) {
			continue
		}
		got, sd := e.At(n)
		if !(got > 0) {
			tb.Fatalf("%s from %v: rate %v at %d nodes", c.name, seen, got, n)
		}
		rel := math.Abs(got/c.rate[n] - 1)
		mean += rel
		worst = math.Max(worst, rel)
		if math.Abs(math.Log(got/c.rate[n])) <= 2*sd {
			covered++
		}
		linear += math.Abs(c.rate[seen[0]]*float64(n)/float64(seen[0])/c.rate[n] - 1)
		k++
	}
	return mean / float64(k), worst, covered / float64(k), linear / float64(k)
}

// TestCurveHeldOut reports how well the learner predicts measured curves
// it has not seen, from 1, from 1–2 and from 1–2–4 nodes. The curves are
// held-out checks only: nothing of the learner is fitted to them, and the
// test asserts only that every prediction is a positive finite rate. Run
// with -v for the table.
func TestCurveHeldOut(t *testing.T) {
	data := sharedDataDir(t)
	groups := []struct {
		name   string
		curves []heldOutCurve
	}{
		{"summit", summitCurves(t, data)},
		{"pollux", polluxCurves(t, data)},
	}
	t.Logf("%-8s %-9s %-6s %7s %9s %8s %9s %9s", "curves", "seen", "noise", "n", "mean_err", "max_err", "within2sd", "linear")
	for _, g := range groups {
		if len(g.curves) == 0 {
			t.Fatalf("no %s curves read", g.name)
		}
		for _, seen := range [][]int{{1}, {1, 2}, {1, 2, 4}} {
			for _, noise := range []float64{0, 0.05} {
				var mean, worst, cov, lin float64
				for i, c := range g.curves {
					m, w, cv, li := heldOutError(t, c, seen, noise, uint64(i))
					mean += m
					worst = math.Max(worst, w)
					cov += cv
					lin += li
				}
				k := float64(len(g.curves))
				t.Logf("%-8s %-9s %-6.2f %7d %8.1f%% %7.1f%% %8.0f%% %8.1f%%", g.name, fmt.Sprint(seen), noise, len(g.curves), 100*mean/k, 100*worst, 100*cov/k, 100*lin/k)
			}
		}
	}
	// Per model, from 1–2–4 nodes, exact: Summit per curve, Pollux per
	// model over its batch sizes.
	t.Logf("%-24s %9s %8s %9s %9s", "from 1,2,4 (exact)", "mean_err", "max_err", "within2sd", "linear")
	for _, g := range groups {
		var names []string
		by := map[string][]heldOutCurve{}
		for _, c := range g.curves {
			name := c.name
			if g.name == "pollux" {
				name = name[:strings.LastIndex(name, "/")]
			}
			if by[name] == nil {
				names = append(names, name)
			}
			by[name] = append(by[name], c)
		}
		for _, name := range names {
			var mean, worst, cov, lin float64
			for i, c := range by[name] {
				m, w, cv, li := heldOutError(t, c, []int{1, 2, 4}, 0, uint64(i))
				mean += m
				worst = math.Max(worst, w)
				cov += cv
				lin += li
			}
			k := float64(len(by[name]))
			t.Logf("%-24s %8.1f%% %7.1f%% %8.0f%% %8.1f%%", name, 100*mean/k, 100*worst, 100*cov/k, 100*lin/k)
		}
	}
}
