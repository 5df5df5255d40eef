package sidecar

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/store"
	"github.com/bftrainer/bftrainer/trainer"
)

// parseMetrics reads a metrics file with Prometheus' own parser, with the
// strict legacy name rules older node_exporters apply.
func parseMetrics(tb testing.TB, path string) map[string]*dto.MetricFamily {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(f)
	if err != nil {
		b, _ := os.ReadFile(path)
		tb.Fatalf("the metrics file does not parse: %v\n%s", err, b)
	}
	return fams
}

// metric returns the value of the sample of family name with the label
// pair label (k=v, or "" for none): a gauge's, a counter's, or a
// histogram's sample count.
func metric(tb testing.TB, fams map[string]*dto.MetricFamily, name, label string) float64 {
	tb.Helper()
	f, ok := fams[name]
	if !ok {
		tb.Fatalf("no metric %s", name)
	}
	for _, m := range f.Metric {
		if label != "" {
			k, v, _ := strings.Cut(label, "=")
			found := false
			for _, lp := range m.Label {
				found = found || lp.GetName() == k && lp.GetValue() == v
			}
			if !found {
				continue
			}
		}
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	tb.Fatalf("no sample of %s with %q", name, label)
	return 0
}

// TestMetricsFile: a round writes the pool's gauges and counters in the
// text format Prometheus parses, replaced atomically (nothing else left
// in the directory), and the next round's figures follow the pool: a
// reclaim is counted, the hook histogram counts each hook call once.
func TestMetricsFile(t *testing.T) {
	ctx := context.Background()
	db := MustDB(t)
	dir := t.TempDir()
	prom := filepath.Join(dir, "bftrainer.prom")
	spec, _ := json.Marshal(trainer.Spec{Argv: []string{"/bin/true"}})
	req, _ := json.Marshal(SubmitRequest{ID: "t1", Min: 1, Max: 2, Curve: alloc.Curve{Nodes: []int{0, 1, 2}, Throughput: []float64{0, 10, 20}},
		RDown: 5, Samples: 1e9, Launch: store.Launch{Launcher: trainer.Exec, Spec: spec}})
	at := time.Now().Add(-time.Minute)
	if _, err := db.Append(ctx,
		store.Event{At: at, Kind: store.KindHook, Source: "slurm", Ms: 3, HasMs: true},
		store.Event{At: at, Kind: store.KindHook, Source: "slurm", Ms: 40, HasMs: true},
		store.Event{At: at, Kind: store.KindJoin, Source: "test", Nodes: []string{"n1", "n2", "n3"}},
		store.Event{At: at, Kind: store.KindSubmit, Source: "test", Trainer: "t1", User: "alice", Detail: req}); err != nil {
		t.Fatal(err)
	}
	r := &Reconciler{DB: db, Pool: pool.Config{TFwd: 10, MaxTrainers: 4}, Metrics: prom}
	if _, err := r.Round(ctx); err != nil {
		t.Fatal(err)
	}
	fams := parseMetrics(t, prom)
	for _, c := range []struct {
		name, label string
		want        float64
	}{
		{"bftrainer_idle_nodes", "", 3},
		{"bftrainer_lent_nodes", "", 2},
		{"bftrainer_completing_nodes", "", 0},
		{"bftrainer_trainers", "state=running", 1},
		{"bftrainer_trainers", "state=queued", 0},
		{"bftrainer_trainers", "state=failed", 0},
		{"bftrainer_max_trainers", "", 4},
		{"bftrainer_reclaims_total", "", 0},
		{"bftrainer_hook_duration_seconds", "", 2},
		{"bftrainer_solve_duration_seconds", "", 1},
		{"bftrainer_kill_duration_seconds", "", 0},
		{"bftrainer_errors_total", "", 0},
	} {
		if got := metric(t, fams, c.name, c.label); got != c.want {
			t.Errorf("%s{%s} = %v, want %v", c.name, c.label, got, c.want)
		}
	}
	h := fams["bftrainer_hook_duration_seconds"].Metric[0].Histogram
	if got := h.GetSampleSum(); got < 0.0429 || got > 0.0431 {
		t.Errorf("hook seconds sum %v, want 0.043", got)
	}
	for _, b := range h.Bucket {
		want := uint64(0) // of the calls of 3 and 40 ms, those within the bound
		for _, s := range []float64{0.003, 0.040} {
			if s <= b.GetUpperBound() {
				want++
			}
		}
		if b.GetCumulativeCount() != want {
			t.Errorf("hook bucket le=%v: %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want)
		}
	}
	if fi, err := os.Stat(prom); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("metrics file: %v %v, want mode 0644", fi, err)
	}

	// A reclaim of a lent node, and one more hook call, which killed the
	// Trainer's processes on n1.
	at = time.Now()
	if _, err := db.Append(ctx,
		store.Event{At: at, Kind: store.KindHook, Source: "slurm", Ms: 600, HasMs: true},
		store.Event{At: at, Kind: store.KindKill, Source: "slurm", Job: "42", Nodes: []string{"n1"}, Value: 2, HasVal: true, Ms: 12, HasMs: true},
		store.Event{At: at, Kind: store.KindLeave, Source: "slurm", Job: "42", Nodes: []string{"n1", "n2", "n3"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Round(ctx); err != nil {
		t.Fatal(err)
	}
	fams = parseMetrics(t, prom)
	for _, c := range []struct {
		name, label string
		want        float64
	}{
		{"bftrainer_idle_nodes", "", 0},
		{"bftrainer_busy_nodes", "", 3},
		{"bftrainer_reclaims_total", "", 1},
		{"bftrainer_hook_duration_seconds", "", 3},
		{"bftrainer_kill_duration_seconds", "", 1},
	} {
		if got := metric(t, fams, c.name, c.label); got != c.want {
			t.Errorf("after the reclaim: %s{%s} = %v, want %v", c.name, c.label, got, c.want)
		}
	}
	if got := metric(t, fams, "bftrainer_lost_samples_total", "cause=reclaim"); got <= 0 {
		t.Errorf("a reclaim of a running Trainer lost %v samples, want > 0", got)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("the metrics directory holds %d files, want only bftrainer.prom (no temporary left)", len(ents))
	}
}

// TestMetricsDocumented: docs/metrics.md documents every metric the file
// has, with its type, and no other.
func TestMetricsDocumented(t *testing.T) {
	db := MustDB(t)
	r := &Reconciler{DB: db, Metrics: filepath.Join(t.TempDir(), "bftrainer.prom"), Database: db.Path(),
		Backlog: func() (int, error) { return 5, nil }}
	if _, err := r.Round(context.Background()); err != nil {
		t.Fatal(err)
	}
	fams := parseMetrics(t, r.Metrics)
	if got := metric(t, fams, "bftrainer_journal_records", ""); got != 5 {
		t.Errorf("journal records %v, want the backlog's 5", got)
	}
	if got := metric(t, fams, "bftrainer_standin", ""); got != 0 {
		t.Errorf("stand-in %v on the database itself, want 0", got)
	}
	doc, err := os.ReadFile(filepath.Join("..", "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]string{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(bftrainer_[a-z_]+)(\\{[a-z]+\\})?` \\| (gauge|counter|histogram) \\|").FindAllStringSubmatch(string(doc), -1) {
		documented[m[1]] = m[3]
	}
	for name, f := range fams {
		if got, want := documented[name], strings.ToLower(f.GetType().String()); got != want {
			t.Errorf("docs/metrics.md: %s documented as %q, written as %q", name, got, want)
		}
	}
	for name := range documented {
		if fams[name] == nil {
			t.Errorf("docs/metrics.md documents %s, which is not written", name)
		}
	}
}
