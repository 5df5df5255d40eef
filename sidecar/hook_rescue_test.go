package sidecar

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/hooks"
	"github.com/bftrainer/bftrainer/internal/lab/hookburst"
	"github.com/bftrainer/bftrainer/journal"
	"github.com/bftrainer/bftrainer/store"
)

// lockedBuffer is a hook log written by Hook and by its work after it
// returned.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// rescueSetup is a core with a real journal and fallback, whose primary
// write (the seam one layer up: the real journal's Write, called once
// release closes) hangs as on a hung filesystem. wrote reports the late
// write's outcome.
type rescueSetup struct {
	c              *Core
	jdir, fdir     string
	logs           *lockedBuffer
	release, wrote chan error
	db             *store.DB
}

func newRescue(t *testing.T, fallback bool) *rescueSetup {
	t.Helper()
	dir := t.TempDir()
	s := &rescueSetup{jdir: filepath.Join(dir, "journal"), logs: &lockedBuffer{},
		release: make(chan error), wrote: make(chan error, 1)}
	if err := journal.Create(s.jdir, -1); err != nil {
		t.Fatal(err)
	}
	if fallback {
		s.fdir = filepath.Join(dir, "fallback")
		if err := journal.Create(s.fdir, -1); err != nil {
			t.Fatal(err)
		}
	}
	c, err := New(Options{Database: filepath.Join(dir, "b.db"), Journal: s.jdir, JournalFallback: s.fdir,
		Hook: HookOptions{Deadline: 100 * time.Millisecond, Log: log.New(s.logs, "", 0)}})
	if err != nil {
		t.Fatal(err)
	}
	// The fallback's grace is no part of these tests: a starved test
	// machine must not turn a fallback write into a logged record.
	c.fallbackGrace = time.Minute
	c.write = func(r journal.Record) (journal.Written, error) {
		<-s.release
		w, err := c.journal.Write(r)
		s.wrote <- err
		return w, err
	}
	s.c = c
	s.db, err = store.Open(context.Background(), filepath.Join(dir, "b.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.db.Close() })
	return s
}

// hook runs one controller prolog for job and waits, bounded, for Hook
// to return.
func (s *rescueSetup) hook(t *testing.T, job string) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		s.c.Hook(context.Background(), hooks.MapEnv(map[string]string{"SLURM_SCRIPT_CONTEXT": "prolog_slurmctld", "SLURM_JOB_ID": job, "SLURM_JOB_NODELIST": "n1"}), nil)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("Hook did not return while its journal write hung")
	}
}

// late lets the hung primary write finish and waits for it.
func (s *rescueSetup) late(t *testing.T) {
	t.Helper()
	close(s.release)
	select {
	case err := <-s.wrote:
		if err != nil {
			t.Fatalf("the late primary write: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the late primary write did not finish")
	}
}

func (s *rescueSetup) ingest(t *testing.T) journal.Result {
	t.Helper()
	res, err := s.c.journal.Ingest(context.Background(), s.db, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// once checks the history holds job's hook and leave once each.
func (s *rescueSetup) once(t *testing.T, job string) {
	t.Helper()
	evs, err := s.db.Events(context.Background(), store.Filter{Job: job})
	if err != nil {
		t.Fatal(err)
	}
	n := map[store.Kind]int{}
	for _, e := range evs {
		n[e.Kind]++
	}
	if len(evs) != 2 || n[store.KindHook] != 1 || n[store.KindLeave] != 1 {
		t.Fatalf("history of job %s: %v, want its hook and leave once each", job, n)
	}
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// TestHookDeadlineRescuesRecord: the journal's filesystem hangs under the
// call's write; Hook returns at its deadline with the same record (same
// ID) in the fallback, and the history gets each event once — ingested
// before the hung write lands in the journal and again after, or with
// both copies there at once.
func TestHookDeadlineRescuesRecord(t *testing.T) {
	for _, tc := range []struct {
		name    string
		between bool // an ingest between the rescue and the late write
	}{{"ingest between", true}, {"late write first", false}} {
		t.Run(tc.name, func(t *testing.T) {
			s := newRescue(t, true)
			s.hook(t, "3")
			fb := dirNames(t, s.fdir)
			if len(fb) != 1 || !strings.HasSuffix(fb[0], ".ev") {
				t.Fatalf("fallback holds %v, want the call's record", fb)
			}
			if got := dirNames(t, s.jdir); len(got) != 0 {
				t.Fatalf("journal holds %v while its write hangs", got)
			}
			if l := s.logs.String(); !strings.Contains(l, "deadline") || !strings.Contains(l, "recorded in the fallback, "+filepath.Join(s.fdir, fb[0])) {
				t.Fatalf("hook log %q: want the deadline and the fallback's record", l)
			}
			if tc.between {
				if res := s.ingest(t); res.Records != 1 || res.Added != 2 {
					t.Fatalf("ingest of the fallback: %+v, want 1 record, 2 events", res)
				}
				s.once(t, "3")
			}
			s.late(t)
			if got := dirNames(t, s.jdir); len(got) != 1 || got[0] != fb[0] {
				t.Fatalf("journal holds %v after the late write, want %s (the same record)", got, fb[0])
			}
			s.ingest(t)
			s.once(t, "3")
			if got := append(dirNames(t, s.jdir), dirNames(t, s.fdir)...); len(got) != 0 {
				t.Fatalf("left after ingest: %v", got)
			}
		})
	}
}

// TestHookDeadlineLogsRecord: with no fallback configured, or one that
// hangs too, the record goes whole to the hook log at the deadline; saved
// by hand as the log says, beside the late write's own copy, it is
// ingested once.
func TestHookDeadlineLogsRecord(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fallback bool
	}{{"no fallback", false}, {"fallback hangs", true}} {
		t.Run(tc.name, func(t *testing.T) {
			s := newRescue(t, tc.fallback)
			hang := make(chan struct{})
			defer close(hang)
			s.c.fallbackGrace = 50 * time.Millisecond
			if tc.fallback {
				s.c.writeFallback = func(journal.Record) (journal.Written, error) {
					<-hang
					return journal.Written{}, nil
				}
			}
			s.hook(t, "4")
			l := s.logs.String()
			m := regexp.MustCompile(`the record, to save as (\S+) in the journal: (\{.*\})`).FindStringSubmatch(l)
			if m == nil {
				t.Fatalf("hook log %q: want the whole record", l)
			}
			if !tc.fallback && !strings.Contains(l, "no fallback configured") {
				t.Fatalf("hook log %q: want why the fallback did not take it", l)
			}
			var probe map[string]any
			if err := json.Unmarshal([]byte(m[2]), &probe); err != nil {
				t.Fatalf("logged record %q: %v", m[2], err)
			}
			restore := filepath.Join(s.jdir, ".restore")
			if err := os.WriteFile(restore, []byte(m[2]+"\n"), 0o640); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(restore, filepath.Join(s.jdir, m[1])); err != nil {
				t.Fatal(err)
			}
			if res := s.ingest(t); res.Records != 1 || res.Added != 2 || res.Bad != 0 {
				t.Fatalf("ingest of the restored record: %+v, want 1 record, 2 events", res)
			}
			s.once(t, "4")
			s.late(t)
			if res := s.ingest(t); res.Records != 1 || res.Added != 0 {
				t.Fatalf("ingest of the late write: %+v, want 1 record found recorded, no event added", res)
			}
			s.once(t, "4")
		})
	}
}

// TestHookDeadlineWaitsForStarvedWrite: a call starved past its deadline
// just before its write (the write returns within the grace, as when
// 1,000 hook processes share two busy cores) ends with its record in the
// journal and one line saying so, not the record logged to be put back
// by hand; with a fallback, the record is in the journal or the
// fallback, ingested once.
func TestHookDeadlineWaitsForStarvedWrite(t *testing.T) {
	for _, fallback := range []bool{false, true} {
		t.Run(fmt.Sprintf("fallback=%t", fallback), func(t *testing.T) {
			s := newRescue(t, fallback)
			hang := make(chan struct{})
			if fallback {
				// The fallback hangs too: only the call's own write can end it.
				s.c.writeFallback = func(journal.Record) (journal.Written, error) {
					<-hang
					return journal.Written{}, errors.New("hung")
				}
			}
			defer close(hang)
			rescued := make(chan struct{})
			s.c.afterDeadline = func() { close(rescued) }
			go func() {
				<-rescued
				close(s.release)
			}()
			s.hook(t, "5")
			if err := <-s.wrote; err != nil {
				t.Fatalf("the late primary write: %v", err)
			}
			l := s.logs.String()
			if !hookburst.IsLate(l) || strings.Contains(l, "to save as") {
				t.Fatalf("hook log %q: want the deadline and the record written, not the record to restore", l)
			}
			if got := dirNames(t, s.jdir); len(got) != 1 || !strings.HasSuffix(got[0], ".ev") {
				t.Fatalf("journal holds %v, want the call's record", got)
			}
			if res := s.ingest(t); res.Records != 1 || res.Added != 2 {
				t.Fatalf("ingest: %+v, want 1 record, 2 events", res)
			}
			s.once(t, "5")
		})
	}
}
