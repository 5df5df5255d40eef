package journal

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/store"
)

// t0 is whole microseconds: the history keeps no finer time.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 123456000, time.UTC)

// TestWriteIngest: records written in any order are recorded in the
// hooks' order (timestamp, then id), with the hooks' own timestamps and
// every field, each event with its origin; their files are gone.
func TestWriteIngest(t *testing.T) {
	j, db := mustJournal(t), mustDB(t)
	// Written latest first; two with the same timestamp.
	var ids []ID
	for _, at := range []time.Time{t0.Add(2 * time.Second), t0, t0} {
		ids = append(ids, mustWrite(t, j, hookRecord("7", at)).ID)
	}
	if got := len(entries(t, j.Dir)); got != 3 {
		t.Fatalf("%d files in the journal, want 3", got)
	}
	res := mustIngest(t, j, db, t0.Add(time.Minute))
	if res.Records != 3 || res.Added != 6 || res.Bad != 0 {
		t.Fatalf("ingest: %+v, want 3 records, 6 events, none bad", res)
	}
	if left := entries(t, j.Dir); len(left) != 0 {
		t.Fatalf("files left after ingest: %v", left)
	}
	evs, err := db.Events(context.Background(), store.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	first, second := ids[1], ids[2]
	if string(second[:]) < string(first[:]) {
		first, second = second, first
	}
	var got []string
	for _, e := range evs {
		got = append(got, string(e.Kind)+"@"+e.At.Sub(t0).String()+"#"+e.Origin)
	}
	want := []string{
		"hook@0s#" + first.String() + ".0", "leave@1µs#" + first.String() + ".1",
		"hook@0s#" + second.String() + ".0", "leave@1µs#" + second.String() + ".1",
		"hook@2s#" + ids[0].String() + ".0", "leave@2.000001s#" + ids[0].String() + ".1",
	}
	if g, w := strings.Join(got, " "), strings.Join(want, " "); g != w {
		t.Fatalf("events\n %s\nwant\n %s", g, w)
	}
	e := evs[0]
	if e.Source != "slurm" || e.Context != "prolog_slurmctld" || e.Job != "7" || e.User != "alice" ||
		strings.Join(e.Nodes, ",") != "n7" || !e.HasMs || e.Ms != 0.5 || e.HasVal || string(e.Detail) != `{"action":"reclaim"}` {
		t.Fatalf("hook event not kept whole: %+v", e)
	}
	if res := mustIngest(t, j, db, t0.Add(time.Minute)); res != (Result{}) {
		t.Fatalf("second ingest of an empty journal: %+v", res)
	}
}

// TestIngestExactlyOnce: a crash between the commit and the removal of
// the files (here: the cleanup refused), and the same files put back
// later, record nothing twice; a record in both the journal and the
// fallback is recorded once.
func TestIngestExactlyOnce(t *testing.T) {
	j, db := mustJournal(t), mustDB(t)
	fb := filepath.Join(t.TempDir(), "fallback")
	if err := Create(fb, -1); err != nil {
		t.Fatal(err)
	}
	j.Fallback = fb
	for i := range 5 {
		mustWrite(t, j, hookRecord(itoa(i), t0.Add(time.Duration(i)*time.Second)))
	}
	// The same record, twice: in the journal and in the fallback.
	dup := mustWrite(t, j, hookRecord("5", t0.Add(5*time.Second)))
	b, err := os.ReadFile(dup.Path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(fb, filepath.Base(dup.Path)), b, fileMode); err != nil {
		t.Fatal(err)
	}
	saved := map[string][]byte{}
	for _, n := range entries(t, j.Dir) {
		saved[n], _ = os.ReadFile(filepath.Join(j.Dir, n))
	}
	crash := errors.New("crash after commit")
	j.afterCommit = func() error { return crash }
	if _, err := j.Ingest(context.Background(), db, t0.Add(time.Minute)); !errors.Is(err, crash) {
		t.Fatalf("ingest: %v, want the injected crash", err)
	}
	if n := len(entries(t, j.Dir)); n != 6 {
		t.Fatalf("%d files after the crash, want all 6", n)
	}
	j.afterCommit = nil
	res := mustIngest(t, j, db, t0.Add(time.Minute))
	if res.Records != 7 || res.Added != 0 {
		t.Fatalf("ingest after the crash: %+v, want 7 records (one twice) and 0 events added", res)
	}
	for n, b := range saved { // put them all back
		if err := os.WriteFile(filepath.Join(j.Dir, n), b, fileMode); err != nil {
			t.Fatal(err)
		}
	}
	if res := mustIngest(t, j, db, t0.Add(time.Minute)); res.Records != 6 || res.Added != 0 {
		t.Fatalf("ingest of files put back: %+v, want 6 records and 0 events added", res)
	}
	counts := jobCounts(t, db)
	for i := range 6 {
		if c := counts[itoa(i)]; c != [2]int{1, 1} {
			t.Fatalf("job %d recorded %v times (hook, leave), want once each", i, c)
		}
	}
	if left := append(entries(t, j.Dir), entries(t, fb)...); len(left) != 0 {
		t.Fatalf("files left: %v", left)
	}
}

// TestWriteRefuses: what a reader would refuse is refused at the source.
func TestWriteRefuses(t *testing.T) {
	j := mustJournal(t)
	for _, tt := range []struct {
		name string
		r    Record
	}{
		{"no events", Record{At: t0}},
		{"a submission", Record{At: t0, Events: []store.Event{{At: t0, Kind: store.KindSubmit, Trainer: "t1", User: "root"}}}},
		{"a bad node name", Record{At: t0, Events: []store.Event{{At: t0, Kind: store.KindLeave, Nodes: []string{"n1;rm -rf"}}}}},
		{"too big", Record{At: t0, Events: []store.Event{{At: t0, Kind: store.KindHook, Error: strings.Repeat("x", MaxRecord)}}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := j.Write(tt.r); err == nil {
				t.Fatal("written")
			}
		})
	}
	if left := entries(t, j.Dir); len(left) != 0 {
		t.Fatalf("files left: %v", left)
	}
}

// TestUnsafeDirectory: a journal others could write, or a link to one,
// is neither written nor read; the fallback takes the record.
func TestUnsafeDirectory(t *testing.T) {
	base := t.TempDir()
	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(open, 0o777)
	other := filepath.Join(base, "other")
	if err := Create(other, -1); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(other, 65534, -1); err != nil {
		t.Skipf("cannot chown (not root?): %v", err)
	}
	good := filepath.Join(base, "good")
	if err := Create(good, -1); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{open, other, link} {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			if _, err := (&Journal{Dir: dir}).Write(hookRecord("1", t0)); !errors.Is(err, ErrUnsafe) {
				t.Fatalf("write: %v, want ErrUnsafe", err)
			}
			if _, err := (&Journal{Dir: dir}).Ingest(context.Background(), mustDB(t), t0); !errors.Is(err, ErrUnsafe) {
				t.Fatalf("ingest: %v, want ErrUnsafe", err)
			}
			fb := filepath.Join(t.TempDir(), "fb")
			if err := Create(fb, -1); err != nil {
				t.Fatal(err)
			}
			w, err := (&Journal{Dir: dir, Fallback: fb}).Write(hookRecord("1", t0))
			if err != nil || !errors.Is(w.Primary, ErrUnsafe) || filepath.Dir(w.Path) != fb {
				t.Fatalf("write with fallback: %+v, %v; want it in %s, Primary ErrUnsafe", w, err, fb)
			}
		})
	}
	if n := len(entries(t, good)); n != 0 {
		t.Fatalf("%d files written through the link", n)
	}
}

// TestBadFiles: every kind of bad file is recorded as an error and moved
// aside (removed when huge), and none holds up the good records around
// it.
func TestBadFiles(t *testing.T) {
	j, db := mustJournal(t), mustDB(t)
	j.errorBudget = 100
	good := mustWrite(t, j, hookRecord("1", t0))
	body, err := os.ReadFile(good.Path)
	if err != nil {
		t.Fatal(err)
	}
	id := func() ID { i, _ := NewID(); return i }
	name := func(at time.Time) (string, ID) { i := id(); return recordName(at, i), i }
	put := func(n string, b []byte, mode os.FileMode) string {
		t.Helper()
		p := filepath.Join(j.Dir, n)
		if err := os.WriteFile(p, b, mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		return p
	}
	// A whole record, re-encoded under a new id.
	record := func(job string, at time.Time) (string, []byte) {
		r := hookRecord(job, at)
		r.ID = id()
		b, err := encode(&r)
		if err != nil {
			t.Fatal(err)
		}
		return recordName(r.At, r.ID), b
	}
	want := map[string]string{} // file → part of its error
	n, _ := name(t0)
	put(n, body[:len(body)/2], fileMode)
	want[n] = "truncated"
	n, _ = name(t0)
	put(n, nil, fileMode)
	want[n] = "empty"
	n, _ = name(t0)
	put(n, []byte("garbage\n"), fileMode)
	want[n] = "not a record"
	n, _ = name(t0)
	put(n, body, fileMode) // another record's content under this name
	want[n] = "does not match its name"
	n, b := record("2", t0)
	put(n, []byte(strings.Replace(string(b), `"v":1`, `"v":1,"extra":true`, 1)), fileMode)
	want[n] = "unknown field"
	n, b = record("2", t0)
	put(n, []byte(strings.Replace(string(b), `"kind":"leave"`, `"kind":"submit"`, 1)), fileMode)
	want[n] = "not one a hook writes"
	n, b = record("3", t0)
	os.Chown(put(n, b, fileMode), 65534, 65534)
	want[n] = "owned by uid 65534"
	n, b = record("4", t0)
	put(n, b, 0o666)
	want[n] = "mode"
	n, b = record("5", t0)
	outside := filepath.Join(t.TempDir(), "elsewhere")
	os.WriteFile(outside, b, fileMode)
	os.Symlink(outside, filepath.Join(j.Dir, n))
	want[n] = "not a regular file"
	n, b = record("6", t0)
	os.Link(put(n, b, fileMode), outside+"2")
	want[n] = "links"
	n, _ = name(t0)
	f, _ := os.Create(filepath.Join(j.Dir, n))
	f.Truncate(MaxRecord + 1) // sparse
	f.Close()
	want[n] = "more than"
	huge := n
	n, _ = name(t0)
	syscall.Mkfifo(filepath.Join(j.Dir, n), 0o640)
	want[n] = "not a regular file"
	n, _ = name(t0)
	os.Mkdir(filepath.Join(j.Dir, n), 0o755)
	want[n] = "not a regular file"
	put("notes.txt", []byte("hello"), fileMode)
	want["notes.txt"] = "not a journal file name"
	mustWrite(t, j, hookRecord("9", t0.Add(time.Second)))

	res := mustIngest(t, j, db, t0.Add(time.Minute))
	if res.Records != 2 || res.Bad != len(want) || res.Unlisted != 0 {
		t.Fatalf("ingest: %+v, want 2 records and %d bad, each listed", res, len(want))
	}
	counts := jobCounts(t, db)
	if len(counts) != 2 || counts["1"] != [2]int{1, 1} || counts["9"] != [2]int{1, 1} {
		t.Fatalf("recorded jobs %v, want 1 and 9 once each", counts)
	}
	errs, err := db.Events(context.Background(), store.Filter{Kinds: []store.Kind{store.KindError}, Source: Source})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range errs {
		w, ok := want[e.Context]
		if !ok || !strings.Contains(e.Error, w) {
			t.Errorf("error row for %s: %q, want it to say %q", e.Context, e.Error, w)
		}
		delete(want, e.Context)
	}
	for n, w := range want {
		t.Errorf("no error row for %s (%s)", n, w)
	}
	if left := entries(t, j.Dir); len(left) != 0 {
		t.Fatalf("files left in the journal: %v", left)
	}
	aside := entries(t, badPath(j.Dir))
	if len(aside) != res.Bad-1 {
		t.Fatalf("%d files moved aside, want %d (all but the huge one): %v", len(aside), res.Bad-1, aside)
	}
	for _, a := range aside {
		if strings.HasSuffix(a, huge) {
			t.Fatalf("the huge file was kept: %s", a)
		}
	}
}

// TestErrorBudget: a flood of junk gives at most errorBudget rows an
// hour, the rest counted in one row, and what arrives over budget is
// counted once the budget is back.
func TestErrorBudget(t *testing.T) {
	j, db := mustJournal(t), mustDB(t)
	junk := func(k, n int) {
		for i := range n {
			os.WriteFile(filepath.Join(j.Dir, fmt.Sprintf("junk-%d-%d", k, i)), []byte("x"), fileMode)
		}
	}
	rows := func(since time.Time) []store.Event {
		evs, err := db.Events(context.Background(), store.Filter{Kinds: []store.Kind{store.KindError}, Source: Source, Since: since})
		if err != nil {
			t.Fatal(err)
		}
		return evs
	}
	junk(1, 50)
	mustWrite(t, j, hookRecord("1", t0))
	res := mustIngest(t, j, db, t0)
	if res.Records != 1 || res.Bad != 50 || res.Unlisted != 50-(defaultErrorBudget-1) {
		t.Fatalf("first flood: %+v", res)
	}
	got := rows(t0)
	if len(got) != defaultErrorBudget || got[len(got)-1].Value != 41 {
		t.Fatalf("%d error rows, the last counting %v; want %d, the last counting 41", len(got), got[len(got)-1].Value, defaultErrorBudget)
	}
	// Within the hour: no rows at all, the files still go, and the good
	// record is still recorded.
	junk(2, 20)
	mustWrite(t, j, hookRecord("2", t0.Add(time.Minute)))
	if res := mustIngest(t, j, db, t0.Add(time.Minute)); res.Records != 1 || res.Bad != 20 || res.Unlisted != 20 {
		t.Fatalf("second flood: %+v", res)
	}
	if n := len(rows(t0)); n != defaultErrorBudget {
		t.Fatalf("%d error rows after the second flood, want still %d", n, defaultErrorBudget)
	}
	if left := entries(t, j.Dir); len(left) != 0 {
		t.Fatalf("files left: %v", left)
	}
	// An hour later, with nothing new: one row counts the 20.
	later := t0.Add(time.Hour + 2*time.Minute)
	mustIngest(t, j, db, later)
	got = rows(later)
	if len(got) != 1 || got[0].Value != 20 {
		t.Fatalf("rows an hour later: %+v, want one counting 20", got)
	}
	if n := len(entries(t, badPath(j.Dir))); n > keepBad {
		t.Fatalf("%d files kept aside, more than %d", n, keepBad)
	}
	if counts := jobCounts(t, db); len(counts) != 2 {
		t.Fatalf("jobs recorded: %v, want 2", counts)
	}
}

// TestTemporaryFiles: a temporary file of a hook still writing is left
// alone; one older than tempAge is a hook that died: a whole record in it
// is recorded, half a record is bad.
func TestTemporaryFiles(t *testing.T) {
	j, db := mustJournal(t), mustDB(t)
	tmp := func(job string, cut bool, age time.Duration) ID {
		r := hookRecord(job, t0)
		b, err := encode(&r)
		if err != nil {
			t.Fatal(err)
		}
		if cut {
			b = b[:len(b)-10]
		}
		p := filepath.Join(j.Dir, tmpPrefix+r.ID.String())
		if err := os.WriteFile(p, b, fileMode); err != nil {
			t.Fatal(err)
		}
		mt := time.Now().Add(-age)
		os.Chtimes(p, mt, mt)
		return r.ID
	}
	fresh := tmp("1", true, 0)
	tmp("2", false, 2*defaultTempAge)
	tmp("3", true, 2*defaultTempAge)
	res := mustIngest(t, j, db, time.Now())
	if res.Records != 1 || res.Bad != 1 || res.InFlight != 1 {
		t.Fatalf("ingest: %+v, want 1 record, 1 bad, 1 in flight", res)
	}
	if counts := jobCounts(t, db); len(counts) != 1 || counts["2"] != [2]int{1, 1} {
		t.Fatalf("recorded %v, want job 2 only", counts)
	}
	if left := entries(t, j.Dir); len(left) != 1 || left[0] != tmpPrefix+fresh.String() {
		t.Fatalf("left %v, want only the fresh temporary file", left)
	}
}

// TestBatches: a backlog larger than a batch is recorded over several
// calls, in order, each saying what is left.
func TestBatches(t *testing.T) {
	j, db := mustJournal(t), mustDB(t)
	j.maxBatch = 4
	for i := range 10 {
		mustWrite(t, j, hookRecord(itoa(i), t0.Add(time.Duration(10-i)*time.Second)))
	}
	var lefts []int
	for {
		res := mustIngest(t, j, db, t0)
		lefts = append(lefts, res.Left)
		if res.Left == 0 {
			break
		}
	}
	if fmt.Sprint(lefts) != "[6 2 0]" {
		t.Fatalf("left after each call %v, want [6 2 0]", lefts)
	}
	evs, _ := db.Events(context.Background(), store.Filter{Kinds: []store.Kind{store.KindHook}})
	var jobs []string
	for _, e := range evs {
		jobs = append(jobs, e.Job)
	}
	if g := strings.Join(jobs, ","); g != "9,8,7,6,5,4,3,2,1,0" {
		t.Fatalf("recorded in order %s, want by timestamp 9,8,…,0", g)
	}
}

// TestBacklog counts what waits.
func TestBacklog(t *testing.T) {
	j := mustJournal(t)
	if n, _, err := j.Backlog(); n != 0 || err != nil {
		t.Fatalf("empty backlog: %d, %v", n, err)
	}
	mustWrite(t, j, hookRecord("1", t0.Add(time.Second)))
	mustWrite(t, j, hookRecord("2", t0))
	n, oldest, err := j.Backlog()
	if n != 2 || !oldest.Equal(t0) || err != nil {
		t.Fatalf("backlog %d, oldest %v, %v; want 2, %v", n, oldest, err, t0)
	}
}

// TestIngestKilled: an ingester killed -9 at arbitrary points, again and
// again, then run to the end, records every record exactly once.
func TestIngestKilled(t *testing.T) {
	j, db := mustJournal(t), mustDB(t)
	const n = 600
	for i := range n {
		mustWrite(t, j, hookRecord(itoa(i), t0.Add(time.Duration(i)*time.Millisecond)))
	}
	kills := 0
	for round := 0; ; round++ {
		if round > 100 {
			t.Fatal("the journal never emptied")
		}
		cmd := role(t, "ingest", "JOURNAL_TEST_DIR="+j.Dir, "JOURNAL_TEST_DB="+db.Path(), "JOURNAL_TEST_BATCH=7")
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Let it finish a few batches (1 to 4), then kill it wherever it
		// is in the next one.
		r := bufio.NewReader(out)
		finished := false
		for range 1 + round%4 {
			if _, err := r.ReadString('\n'); err != nil {
				finished = true // it emptied the journal and exited
				break
			}
		}
		if !finished {
			cmd.Process.Signal(syscall.SIGKILL)
			kills++
		}
		io.Copy(io.Discard, r)
		cmd.Wait()
		if len(entries(t, j.Dir)) == 0 {
			break
		}
	}
	counts := jobCounts(t, db)
	for i := range n {
		if c := counts[itoa(i)]; c != [2]int{1, 1} {
			t.Fatalf("job %d recorded %v times (hook, leave), want once each", i, c)
		}
	}
	if kills == 0 {
		t.Fatal("the ingester was never killed: the test proved nothing")
	}
	t.Logf("%d records, ingester killed %d times, each recorded once", n, kills)
}
