package store_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/store"
)

// TestViewsDocumented: the views docs/history.md lists are exactly the
// views the schema has.
func TestViewsDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "history.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Views\n")
	if !ok {
		t.Fatal("docs/history.md has no Views section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var documented []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\|").FindAllStringSubmatch(section, -1) {
		documented = append(documented, m[1])
	}
	db := MustOpen(t, filepath.Join(t.TempDir(), "v.db"))
	rows, err := db.SQL().Query("SELECT name FROM sqlite_master WHERE type = 'view'")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var have []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		have = append(have, n)
	}
	slices.Sort(documented)
	slices.Sort(have)
	if len(have) == 0 || !slices.Equal(documented, have) {
		t.Fatalf("views in docs/history.md %v, in the schema %v", documented, have)
	}
}

// TestViews reads each documented view over a small hand-made history
// and compares every row with what docs/history.md says it answers,
// worked out by hand (the comments give the sums).
func TestViews(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "v.db")
	db := MustOpen(t, path)
	day1 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	day2 := day1.Add(24 * time.Hour)
	val := func(e store.Event, v float64) store.Event { e.Value, e.HasVal = v, true; return e }
	ms := func(e store.Event, v float64) store.Event { e.Ms, e.HasMs = v, true; return e }
	evs := []store.Event{
		/* 1 */ ms(store.Event{At: day1, Kind: store.KindHook, Source: "slurm", Context: "prolog_slurmctld", Job: "7", Nodes: []string{"n1", "n2"}, Detail: []byte(`{"action":"reclaim"}`)}, 2.5),
		/* 2 */ {At: day1.Add(time.Second), Kind: store.KindLeave, Source: "slurm", Job: "7", Nodes: []string{"n1", "n2"}},
		/* 3 */ val(store.Event{At: day1.Add(2 * time.Second), Kind: store.KindPreempt, Job: "7", Trainer: "ta", Nodes: []string{"n3"}}, 100.4),
		/* 4 */ val(store.Event{At: day1.Add(3 * time.Second), Kind: store.KindPreempt, Job: "7", Trainer: "tb", Nodes: []string{"n4", "n5"}}, 50.2),
		/* 5 */ ms(store.Event{At: day1.Add(4 * time.Second), Kind: store.KindHook, Source: "lsf", Context: "pre_exec", Job: "8", Nodes: []string{"n6"}, Error: "no such host"}, 7),
		/* 6 */ {At: day1.Add(5 * time.Second), Kind: store.KindLeave, Source: "lsf", Job: "8", Nodes: []string{"n6", "n7", "n8"}},
		/* 7 */ {At: day1.Add(6 * time.Second), Kind: store.KindLeave, Source: "cli", Nodes: []string{"n9"}}, // no job: no reclaim
		/* 8 */ ms(val(store.Event{At: day1.Add(7 * time.Second), Kind: store.KindSolve, Source: "reconciler", Count: 5, Detail: []byte(`{"solver":"exact","trainers":2,"status":"optimal"}`)}, 36), 1),
		/* 9 */ ms(val(store.Event{At: day1.Add(8 * time.Second), Kind: store.KindSolve, Source: "reconciler", Count: 4, Detail: []byte(`{"solver":"exact","trainers":2,"status":"optimal"}`)}, 30), 2),
		/* 10 */ ms(store.Event{At: day1.Add(9 * time.Second), Kind: store.KindSolve, Source: "reconciler", Count: 4, Detail: []byte(`{"solver":"cbc","trainers":3,"status":"error"}`), Error: "cbc died"}, 4.25),
		/* 11 */ ms(store.Event{At: day2, Kind: store.KindSolve, Source: "reconciler", Count: 6}, 0.5), // no detail: solver NULL
		/* 12 */ {At: day2.Add(time.Second), Kind: store.KindError, Source: "journal", Context: "bad record", Error: "truncated"},
		/* 13 */ val(store.Event{At: day2.Add(2 * time.Second), Kind: store.KindProgress, Trainer: "ta"}, 10),
	}
	if _, err := db.Append(ctx, evs...); err != nil {
		t.Fatal(err)
	}
	// The reconciler's tables, as its rounds leave them.
	raw, err := sql.Open("sqlite3", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	for _, q := range []string{
		`INSERT INTO usage (day, idle_node_seconds, used_node_seconds) VALUES
		 ('2026-11-30', 0, 0), ('2026-11-29', 7200, 5400), ('2026-12-01', 1800, 1234.5)`,
		`INSERT INTO trainers (id, owner, status, launcher, min_nodes, max_nodes, samples, done, rate, node_count,
		   rescale_loss, preempt_loss, rescales, preemptions, node_seconds, submitted, admitted, ended, seq, spec) VALUES
		 ('tb', 'bob', 'running', 'torchrun', 2, 8, 0, 777.6, 3.14159, 2, 10.5, 50.2, 1, 1, 900,
		   '2026-11-29T09:00:01.000000Z', '2026-11-29T09:00:02.000000Z', '', 2, '{}'),
		 ('ta', 'alice', 'finished', 'exec', 1, 4, 10000, 2500.4, 12.34567, 0, 0.4, 100.4, 3, 1, 5400,
		   '2026-11-29T09:00:00.000000Z', '2026-11-29T09:00:00.500000Z', '2026-11-29T11:00:00.000000Z', 1,
		   '{"learn": {"reports": 4, "report_done": 2400.6}}')`,
	} {
		if _, err := raw.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	at := func(d time.Duration) string { return day1.Add(d).Format(store.TimeFormat) }
	for _, c := range []struct {
		view, query string
		want        []string
	}{
		{"node_hours_daily", `SELECT * FROM node_hours_daily`, []string{
			// 7200 s = 2 h offered, 5400 s = 1.5 h used, 5400/7200; nothing
			// offered: no utilisation; 1234.5/3600 = 0.342916… h, 1234.5/1800 = 0.68583…
			"2026-11-29|2|1.5|0.75",
			"2026-11-30|0|0|NULL",
			"2026-12-01|0.5|0.343|0.6858",
		}},
		{"trainer_progress", `SELECT * FROM trainer_progress`, []string{
			// In submission order; 100·2500.4/10000 = 25.004 → 25.0; 5400 s = 1.5 h;
			// it reported (2400.6 → 2401 measured, the pool's 2500 beside it).
			"ta|alice|finished|exec|0|1|4|2500|measured|2401|10000|25|12.346|0|3|100|1|1.5|2026-11-29T09:00:00.000000Z|2026-11-29T09:00:00.500000Z|2026-11-29T11:00:00.000000Z",
			// No target: no percent; 777.6 → 778; 900 s = 0.25 h; it
			// never reported: its 778 are the pool's model, none measured.
			"tb|bob|running|torchrun|2|2|8|778|modelled|0|0|NULL|3.142|11|1|50|1|0.25|2026-11-29T09:00:01.000000Z|2026-11-29T09:00:02.000000Z|",
		}},
		{"reclaims_per_job", `SELECT * FROM reclaims_per_job ORDER BY job`, []string{
			// Job 7: from its leave (its hook is not counted), 2 idle nodes;
			// 2 Trainers preempted on 1 + 2 nodes; 100.4 + 50.2 = 150.6 → 151.
			"7|" + at(time.Second) + "|2|2|3|151",
			// Job 8: a leave of 3 nodes, nothing preempted. The leave with no
			// job is no job's reclaim.
			"8|" + at(5*time.Second) + "|3|0|0|0",
		}},
		{"solve_latency", `SELECT * FROM solve_latency ORDER BY id`, []string{
			"8|" + at(7*time.Second) + "|exact|2|5|1|36|optimal",
			"9|" + at(8*time.Second) + "|exact|2|4|2|30|optimal",
			"10|" + at(9*time.Second) + "|cbc|3|4|4.25|NULL|error",
			"11|" + day2.Format(store.TimeFormat) + "|NULL|NULL|6|0.5|NULL|NULL",
		}},
		{"solve_latency_daily", `SELECT * FROM solve_latency_daily ORDER BY day, solver`, []string{
			"2026-11-29|cbc|1|4.25|4.25",
			// (1 + 2) / 2 = 1.5, max 2.
			"2026-11-29|exact|2|1.5|2",
			"2026-11-30|NULL|1|0.5|0.5",
		}},
		{"hook_calls", `SELECT * FROM hook_calls ORDER BY id`, []string{
			"1|" + at(0) + "|slurm|prolog_slurmctld|7|2|2.5|",
			"5|" + at(4*time.Second) + "|lsf|pre_exec|8|1|7|no such host",
		}},
		{"errors", `SELECT * FROM errors ORDER BY id`, []string{
			"5|" + at(4*time.Second) + "|hook|lsf|pre_exec|8||no such host",
			"10|" + at(9*time.Second) + "|solve|reconciler||||cbc died",
			"12|" + day2.Add(time.Second).Format(store.TimeFormat) + "|error|journal|bad record|||truncated",
		}},
	} {
		t.Run(c.view, func(t *testing.T) {
			got := queryRows(t, db.SQL(), c.query)
			if !slices.Equal(got, c.want) {
				t.Fatalf("%s:\n got %q\nwant %q", c.query, got, c.want)
			}
		})
	}
	// The report over the same Trainers: processed are ta's measured
	// 2400.6 (its last report, not the pool's 2500.4), and tb's 777.6,
	// modelled, are apart; tb holds 2 nodes: running, not waiting.
	rep, err := db.Report(ctx, time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Samples != 2400.6 || rep.ModelledSamples != 777.6 || rep.ModelledTrainers != 1 || rep.TrainersRunning != 1 || rep.TrainersWaiting != 0 {
		t.Fatalf("report: samples %v, modelled %v of %d, running %d, waiting %d; want 2400.6, 777.6 of 1, 1, 0",
			rep.Samples, rep.ModelledSamples, rep.ModelledTrainers, rep.TrainersRunning, rep.TrainersWaiting)
	}
}

// queryRows runs q and prints each row as sqlite3 does: columns joined by
// '|', NULL for a NULL, numbers in their shortest form.
func queryRows(t *testing.T, db *sql.DB, q string) []string {
	t.Helper()
	rows, err := db.Query(q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		var cells []string
		for _, v := range vals {
			switch v := v.(type) {
			case nil:
				cells = append(cells, "NULL")
			case []byte:
				cells = append(cells, string(v))
			default:
				cells = append(cells, fmt.Sprint(v))
			}
		}
		out = append(out, strings.Join(cells, "|"))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
