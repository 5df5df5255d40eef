// Package grafana holds bftrainer's Grafana dashboard (bftrainer.json)
// and its test: every query the dashboard makes names metrics, and labels,
// that the reconciler really writes, so that renaming one fails here
// instead of silently emptying a panel.
package grafana

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/sidecar"
)

// dashboard is the part of Grafana's dashboard model the test reads: the
// panels (rows and their nested panels too) and their targets' PromQL,
// and the template variables' queries.
type dashboard struct {
	Title      string  `json:"title"`
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID      int     `json:"id"`
	Type    string  `json:"type"`
	Title   string  `json:"title"`
	Panels  []panel `json:"panels"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

// query is one PromQL expression and where the dashboard has it.
type query struct{ where, expr string }

// queries returns every PromQL expression of the dashboard.
func queries(tb testing.TB, d dashboard) []query {
	tb.Helper()
	var out []query
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if p.Type != "row" && len(p.Targets) == 0 {
				tb.Errorf("panel %q has no query", p.Title)
			}
			for _, t := range p.Targets {
				out = append(out, query{"panel " + p.Title + " (" + t.RefID + ")", t.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			tb.Fatalf("variable %s: %v", v.Name, err)
		}
		// label_values(METRIC, LABEL) is Grafana's, not PromQL: the
		// series it reads are METRIC's, and LABEL one of theirs.
		if m := regexp.MustCompile(`^label_values\((.+),\s*(\w+)\)$`).FindStringSubmatch(q.Query); m != nil {
			out = append(out, query{"variable " + v.Name, m[1]})
			continue
		}
		out = append(out, query{"variable " + v.Name, q.Query})
	}
	return out
}

// grafanaVars are Grafana's interval variables, replaced by a duration
// before parsing (the others, such as $instance, sit in label values).
var grafanaVars = regexp.MustCompile(`\$(__rate_interval|__interval|__range)\b|\$\{(__rate_interval|__interval|__range)\}`)

// selector is a series selector found in a query.
type selector struct {
	name     string
	matchers []*labels.Matcher
}

// selectors parses expr with Prometheus' PromQL parser and returns its
// series selectors.
func selectors(expr string) ([]selector, error) {
	e, err := parser.ParseExpr(grafanaVars.ReplaceAllString(expr, "5m"))
	if err != nil {
		return nil, err
	}
	var out []selector
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			s := selector{name: vs.Name}
			for _, m := range vs.LabelMatchers {
				if m.Name == model.MetricNameLabel {
					if s.name == "" && m.Type == labels.MatchEqual {
						s.name = m.Value
					}
					continue
				}
				s.matchers = append(s.matchers, m)
			}
			out = append(out, s)
		}
		return nil
	})
	return out, nil
}

// series are the exposition's series: each name's label sets. A
// histogram's are its _bucket (with le), _sum and _count.
func series(fams map[string]*dto.MetricFamily) map[string][]map[string]string {
	out := map[string][]map[string]string{}
	for name, f := range fams {
		for _, m := range f.Metric {
			ls := map[string]string{}
			for _, lp := range m.Label {
				ls[lp.GetName()] = lp.GetValue()
			}
			if f.GetType() != dto.MetricType_HISTOGRAM {
				out[name] = append(out[name], ls)
				continue
			}
			out[name+"_sum"] = append(out[name+"_sum"], ls)
			out[name+"_count"] = append(out[name+"_count"], ls)
			for range m.Histogram.Bucket {
				b := map[string]string{"le": ""}
				for k, v := range ls {
					b[k] = v
				}
				out[name+"_bucket"] = append(out[name+"_bucket"], b)
			}
		}
	}
	return out
}

// scrapeLabels are the labels Prometheus adds when it scrapes
// node_exporter: not in the file.
var scrapeLabels = map[string]bool{"instance": true, "job": true}

// exposition runs a reconciler round the way `bftrainer reconcile` does —
// the core on a real SQLite database, its journal beside it, two nodes
// joined — with the metrics file set, and parses the file it wrote with
// Prometheus' text parser.
func exposition(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	prom := filepath.Join(dir, "bftrainer.prom")
	c, err := sidecar.New(sidecar.Options{Database: filepath.Join(dir, "lib", "bftrainer.db"), Pool: pool.Config{TFwd: 10, MaxTrainers: 4},
		MetricsFile: prom})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Nodes(ctx, true, []string{"n[1-2]"}, "", true); err != nil {
		t.Fatal(err)
	}
	if err := c.Reconcile(ctx, true); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(prom)
	if err != nil {
		t.Fatalf("the round wrote no metrics file: %v", err)
	}
	defer f.Close()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(f)
	if err != nil {
		t.Fatalf("the metrics file does not parse: %v", err)
	}
	return fams
}

// TestDashboardQueriesWrittenMetrics: every metric every panel and
// variable of bftrainer.json queries is in the exposition a reconciler
// round writes, with every label the query matches on, and a value its
// equality matchers ask for.
func TestDashboardQueriesWrittenMetrics(t *testing.T) {
	b, err := os.ReadFile("bftrainer.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("bftrainer.json: %v", err)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("the dashboard has no uid or title")
	}
	written := series(exposition(t))
	queried := map[string]bool{}
	qs := queries(t, d)
	if len(qs) == 0 {
		t.Fatal("the dashboard has no queries")
	}
	for _, q := range qs {
		sels, err := selectors(q.expr)
		if err != nil {
			t.Errorf("%s: %q does not parse: %v", q.where, q.expr, err)
			continue
		}
		if len(sels) == 0 {
			t.Errorf("%s: %q selects no series", q.where, q.expr)
		}
		for _, s := range sels {
			ss, ok := written[s.name]
			if !ok {
				t.Errorf("%s queries %s, which the reconciler does not write (docs/metrics.md lists what it does)", q.where, s.name)
				continue
			}
			queried[s.name] = true
			for _, m := range s.matchers {
				if scrapeLabels[m.Name] {
					continue
				}
				found, matched := false, false
				for _, ls := range ss {
					v, has := ls[m.Name]
					found = found || has
					matched = matched || has && (m.Type != labels.MatchEqual || v == m.Value)
				}
				switch {
				case !found:
					t.Errorf("%s: %s has no label %s", q.where, s.name, m.Name)
				case !matched:
					t.Errorf("%s: %s has no series with %s", q.where, s.name, m)
				}
			}
		}
	}
	// What the dashboard leaves out: every metric written has a panel
	// (bftrainer_standin had none for a while, and no test said so).
	var unused []string
	for name := range written {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
		if !queried[name] && !queried[base+"_bucket"] && !queried[base+"_count"] && !queried[base+"_sum"] {
			unused = append(unused, name)
		}
	}
	sort.Strings(unused)
	t.Logf("%d queries", len(qs))
	if len(unused) > 0 {
		t.Errorf("series the reconciler writes and no panel graphs: %v (add a panel, and a row to README.md's table)", unused)
	}
}

// TestSelectors: the extraction finds the metrics of a query, wherever
// they sit, and not function names, label names or Grafana's variables.
func TestSelectors(t *testing.T) {
	sels, err := selectors(`histogram_quantile(0.99, sum by (le) (rate(a_bucket{instance=~"$instance"}[$__rate_interval]))) / on(instance) b{state="x"} + {__name__="c"}`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range sels {
		got = append(got, s.name)
	}
	if want := []string{"a_bucket", "b", "c"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("selectors %v, want %v", got, want)
	}
	if len(sels) == 3 && (len(sels[1].matchers) != 1 || sels[1].matchers[0].Name != "state") {
		t.Errorf("b's matchers %v, want state", sels[1].matchers)
	}
}
