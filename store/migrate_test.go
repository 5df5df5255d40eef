package store_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/bftrainer/bftrainer/store"
	_ "github.com/mattn/go-sqlite3" // the plain driver: a database built the way an earlier bftrainer left it
)

// migrationFiles returns the embedded migrations' files (store/migrations,
// the directory the package embeds), in order, by version.
func migrationFiles(t *testing.T) map[int]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("migrations", "*.sql"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no migrations found (%v)", err)
	}
	out := map[int]string{}
	for _, f := range files {
		n, err := strconv.Atoi(strings.SplitN(filepath.Base(f), "_", 2)[0])
		if err != nil {
			t.Fatalf("migration %s: no version number", f)
		}
		if prev, dup := out[n]; dup {
			t.Fatalf("migrations %s and %s share version %d", prev, f, n)
		}
		out[n] = f
	}
	return out
}

// TestMigrationsNumbered: the migrations are numbered 1, 2, … N with no
// gap and no repeat. Open applies those above the database's
// user_version in order, so a gap or a repeat would skip one on some
// databases and not on others.
func TestMigrationsNumbered(t *testing.T) {
	ms := migrationFiles(t)
	for v := 1; v <= len(ms); v++ {
		if _, ok := ms[v]; !ok {
			t.Fatalf("versions %v: %d is missing", slices.Sorted(maps.Keys(ms)), v)
		}
	}
	db := MustOpen(t, filepath.Join(t.TempDir(), "n.db"))
	if v, err := db.SchemaVersion(context.Background()); err != nil || v != len(ms) {
		t.Fatalf("a new database is at version %d (%v), want %d, the last migration", v, err, len(ms))
	}
}

// seeds are rows an earlier bftrainer wrote, by the schema version that
// first accepts them: a database built at version N holds every seed up
// to N. A new migration that changes what rows look like adds its own.
var seeds = map[int][]string{
	1: {
		`INSERT INTO events (id, at, kind, source, context, job, nodes, node_count, ms, detail)
		 VALUES (1, '2026-11-29T23:59:00.000000Z', 'hook', 'slurm', 'prolog_slurmctld', '7', 'n1 n2', 2, 1.5, '{"action":"reclaim"}')`,
		`INSERT INTO events (id, at, kind, source, job, nodes, node_count) VALUES (2, '2026-11-29T23:59:00.000000Z', 'leave', 'slurm', '7', 'n1 n2', 2)`,
		`INSERT INTO events (id, at, kind, source, trainer, user, detail) VALUES (3, '2026-11-29T23:59:01.000000Z', 'submit', 'cli', 't1', 'alice', '{}')`,
		`INSERT INTO events (id, at, kind, source, node_count, value, ms, detail) VALUES (4, '2026-11-29T23:59:02.000000Z', 'solve', 'reconciler', 3, 36, 0.25, '{"solver":"exact","status":"optimal","trainers":1}')`,
		`INSERT INTO events (id, at, kind, source, error) VALUES (5, '2026-11-29T23:59:03.000000Z', 'error', 'slurm', 'bad hostlist')`,
		`INSERT INTO nodes (name, state, since, ord, job, trainer) VALUES
		 ('n1', 'busy', '2026-11-29T23:59:00.000000Z', 0, '7', ''),
		 ('n2', 'busy', '2026-11-29T23:59:00.000000Z', 1, '7', ''),
		 ('n3', 'idle', '2026-11-29T23:00:00.000000Z', 2, '', 't1')`,
		`INSERT INTO trainers (id, owner, status, launcher, min_nodes, max_nodes, samples, done, rate, node_count, submitted, admitted, seq, spec)
		 VALUES ('t1', 'alice', 'running', 'exec', 1, 4, 1000000, 2500, 10, 1, '2026-11-29T23:59:01.000000Z', '2026-11-29T23:59:02.000000Z', 1,
		 '{"curve":{"nodes":[0,1,2,4],"throughput":[0,10,19,36]},"rescale_up_s":6,"rescale_down_s":14,"launch":{"launcher":"exec","spec":{"argv":["train"]}}}')`,
		`INSERT INTO allocations (trainer, node, pos) VALUES ('t1', 'n3', 0)`,
		`INSERT INTO meta (key, value) VALUES ('applied_id', '4'), ('now', '2026-11-29T23:59:02.000000Z')`,
		`INSERT INTO usage (day, idle_node_seconds, used_node_seconds) VALUES ('2026-11-29', 7200, 3600)`,
	},
}

// buildAt makes the database an earlier bftrainer left at version v: an
// empty file for 0 (Open creates the file before it migrates), else the
// migrations 1..v applied from their SQL by the plain driver, in WAL, with
// the seeds up to v.
func buildAt(t *testing.T, v int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), fmt.Sprintf("v%d.db", v))
	if err := os.WriteFile(path, nil, 0o640); err != nil {
		t.Fatal(err)
	}
	if v == 0 {
		return path
	}
	raw, err := sql.Open("sqlite3", "file:"+path+"?_journal_mode=WAL&_foreign_keys=1")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	ms := migrationFiles(t)
	for n := 1; n <= v; n++ {
		b, err := os.ReadFile(ms[n])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := raw.Exec(string(b)); err != nil {
			t.Fatalf("%s: %v", ms[n], err)
		}
		for _, q := range seeds[n] {
			if _, err := raw.Exec(q); err != nil {
				t.Fatalf("seed for version %d: %v\n%s", n, err, q)
			}
		}
	}
	if _, err := raw.Exec(fmt.Sprintf("PRAGMA user_version = %d", v)); err != nil {
		t.Fatal(err)
	}
	return path
}

// schema is the database's schema as SQLite keeps it, one line per object.
func schema(t *testing.T, db *sql.DB) []string {
	t.Helper()
	rows, err := db.Query("SELECT type, name, tbl_name, coalesce(sql, '') FROM sqlite_master ORDER BY type, name")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var typ, name, tbl, q string
		if err := rows.Scan(&typ, &name, &tbl, &q); err != nil {
			t.Fatal(err)
		}
		out = append(out, typ+" "+name+" on "+tbl+": "+strings.Join(strings.Fields(q), " "))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestMigrateFromEveryVersion builds a database at every earlier schema
// version, with the rows that version held, opens it with today's Open
// and checks that it reaches the current version with the same schema as
// a new database, that every earlier row reads back through the API
// unchanged, and that what the later migrations added works on them (an
// event origin: old events have none, a new one is recorded once).
func TestMigrateFromEveryVersion(t *testing.T) {
	ctx := context.Background()
	latest := len(migrationFiles(t))
	fresh := MustOpen(t, filepath.Join(t.TempDir(), "fresh.db"))
	want := schema(t, fresh.SQL())
	for v := 0; v < latest; v++ {
		t.Run(fmt.Sprintf("from version %d", v), func(t *testing.T) {
			path := buildAt(t, v)
			db := MustOpen(t, path)
			if got, err := db.SchemaVersion(ctx); err != nil || got != latest {
				t.Fatalf("version %d after Open (%v), want %d", got, err, latest)
			}
			if got := schema(t, db.SQL()); !slices.Equal(got, want) {
				t.Fatalf("schema after migrating differs from a new database's:\n got %q\nwant %q", got, want)
			}
			var seeded int
			for n := 1; n <= v; n++ {
				seeded += len(seeds[n])
			}
			evs, err := db.Events(ctx, store.Filter{})
			if err != nil {
				t.Fatal(err)
			}
			if v >= 1 {
				checkV1Rows(t, db, evs)
			} else if len(evs) != 0 || seeded != 0 {
				t.Fatalf("an empty file migrated to %d events", len(evs))
			}
			// Later migration 2: events keyed by origin are recorded once.
			e := store.Event{At: t0, Kind: store.KindHook, Source: "slurm", Job: "9", Origin: "rec.0"}
			for i, want := range []int{1, 0} {
				if n, err := db.AppendOnce(ctx, e); err != nil || n != want {
					t.Fatalf("AppendOnce #%d: %d, %v; want %d", i+1, n, err, want)
				}
			}
			if after, _ := db.Events(ctx, store.Filter{}); len(after) != len(evs)+1 || after[len(after)-1].Origin != "rec.0" {
				t.Fatalf("after AppendOnce: %d events (last %+v), want %d", len(after), after[len(after)-1], len(evs)+1)
			}
		})
	}
}

// checkV1Rows checks the version-1 seeds read back whole.
func checkV1Rows(t *testing.T, db *store.DB, evs []store.Event) {
	t.Helper()
	ctx := context.Background()
	var got []string
	for _, e := range evs {
		got = append(got, fmt.Sprintf("%d %s %s %s %s nodes=%v count=%d ms=%v/%v val=%v/%v origin=%q err=%q",
			e.ID, e.At.Format(store.TimeFormat), e.Kind, e.Source, e.Job, e.Nodes, e.Count, e.Ms, e.HasMs, e.Value, e.HasVal, e.Origin, e.Error))
	}
	want := []string{
		`1 2026-11-29T23:59:00.000000Z hook slurm 7 nodes=[n1 n2] count=2 ms=1.5/true val=0/false origin="" err=""`,
		`2 2026-11-29T23:59:00.000000Z leave slurm 7 nodes=[n1 n2] count=2 ms=0/false val=0/false origin="" err=""`,
		`3 2026-11-29T23:59:01.000000Z submit cli  nodes=[] count=0 ms=0/false val=0/false origin="" err=""`,
		`4 2026-11-29T23:59:02.000000Z solve reconciler  nodes=[] count=3 ms=0.25/true val=36/true origin="" err=""`,
		`5 2026-11-29T23:59:03.000000Z error slurm  nodes=[] count=0 ms=0/false val=0/false origin="" err="bad hostlist"`,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("events after migrating:\n got %q\nwant %q", got, want)
	}
	var nulls int
	if err := db.SQL().QueryRow("SELECT count(*) FROM events WHERE origin IS NULL").Scan(&nulls); err != nil || nulls != len(want) {
		t.Fatalf("%d earlier events with a NULL origin (%v), want all %d", nulls, err, len(want))
	}
	snap, err := db.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if snap.AppliedID != 4 || len(snap.State.Nodes) != 3 || len(snap.State.Trainers) != 1 {
		t.Fatalf("state after migrating: applied %d, %d nodes, %d trainers; want 4, 3, 1", snap.AppliedID, len(snap.State.Nodes), len(snap.State.Trainers))
	}
	tr := snap.State.Trainers[0]
	if tr.ID != "t1" || tr.Done != 2500 || len(tr.Nodes) != 1 || tr.Nodes[0].Name != "n3" || tr.RDown != 14 ||
		string(snap.Launch["t1"].Spec) != `{"argv":["train"]}` {
		t.Fatalf("trainer after migrating: %+v launch %+v", tr, snap.Launch["t1"])
	}
	var day string
	var util float64
	if err := db.SQL().QueryRow("SELECT day, utilisation FROM node_hours_daily").Scan(&day, &util); err != nil || day != "2026-11-29" || util != 0.5 {
		t.Fatalf("node_hours_daily after migrating: %s %v (%v), want 2026-11-29 0.5", day, util, err)
	}
}

// TestMigrationFailureRollsBack: a migration that fails leaves the
// database at the version it had, with none of that migration's changes
// and every row, and Open says which migration failed; once the cause is
// gone, Open migrates it. Migration 2 (the event origin: ALTER TABLE,
// then CREATE INDEX) is made to fail in its second statement.
func TestMigrationFailureRollsBack(t *testing.T) {
	ctx := context.Background()
	const failing = 2
	latest := len(migrationFiles(t))
	path := buildAt(t, failing-1)
	raw, err := sql.Open("sqlite3", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	// Something of that name already exists: migration 2's CREATE INDEX
	// fails after its ALTER TABLE ran.
	if _, err := raw.Exec("CREATE INDEX events_origin ON events (job)"); err != nil {
		t.Fatal(err)
	}
	before := schema(t, raw)
	_, err = store.Open(ctx, path, store.Options{})
	last := filepath.Base(migrationFiles(t)[failing])
	if err == nil || !strings.Contains(err.Error(), last) {
		t.Fatalf("Open over a failing migration: %v, want an error naming %s", err, last)
	}
	var v, n int
	if err := raw.QueryRow("PRAGMA user_version").Scan(&v); err != nil || v != failing-1 {
		t.Fatalf("version after a failed migration: %d (%v), want %d", v, err, failing-1)
	}
	if got := schema(t, raw); !slices.Equal(got, before) {
		t.Fatalf("a failed migration changed the schema:\n got %q\nwant %q", got, before)
	}
	if err := raw.QueryRow("SELECT count(*) FROM events").Scan(&n); err != nil || n != 5 {
		t.Fatalf("%d events after a failed migration (%v), want 5", n, err)
	}
	if _, err := raw.Exec("DROP INDEX events_origin"); err != nil {
		t.Fatal(err)
	}
	db := MustOpen(t, path)
	if v, err := db.SchemaVersion(ctx); err != nil || v != latest {
		t.Fatalf("version after the cause was removed: %d (%v), want %d", v, err, latest)
	}
}

// TestNewerSchemaRefused: a database a newer bftrainer wrote (a schema
// version past the last migration this one knows) is not opened for
// writing — an older binary's statements could lose what the newer one
// keeps — and its bytes are unchanged; it still opens read-only.
func TestNewerSchemaRefused(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "bftrainer.db")
	db, err := store.Open(ctx, path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	db.Close()
	raw, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.ExecContext(ctx, "PRAGMA user_version = 99"); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Open(ctx, path, store.Options{}); !errors.Is(err, store.ErrNewerSchema) {
		t.Fatalf("Open of a version 99 database: %v, want %v", err, store.ErrNewerSchema)
	}
	after, _ := os.ReadFile(path)
	if !bytes.Equal(before, after) {
		t.Fatal("the refused database was written")
	}
	ro, err := store.Open(ctx, path, store.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("read-only: %v", err)
	}
	ro.Close()
}
