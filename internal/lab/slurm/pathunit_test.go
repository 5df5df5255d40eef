package slurm

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestJournalPath: the stand-in for bftrainer-journal.path starts a
// reconcile while the journal holds a record, and none while it is
// empty. The "bftrainer" here is a script that takes the journal's
// records and counts its runs.
func TestJournalPath(t *testing.T) {
	dir := t.TempDir()
	journal, count := filepath.Join(dir, "journal"), filepath.Join(dir, "runs")
	if err := os.Mkdir(journal, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "bftrainer")
	script := "#!/bin/sh\n[ \"$1\" = reconcile ] || exit 2\nrm -f " + journal + "/*\necho run >> " + count + "\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	in := &Install{Journal: journal, Bin: bin}
	stop := make(chan struct{})
	type result struct{ runs, failed int }
	done := make(chan result, 1)
	go func() {
		r, f := in.journalPath(context.Background(), stop, nil)
		done <- result{r, f}
	}()
	for i := range 3 {
		if err := os.WriteFile(filepath.Join(journal, "rec"+string(rune('a'+i))), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for dirNotEmpty(journal) {
			if time.Now().After(deadline) {
				t.Fatalf("record %d still in the journal after 30 s", i)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	close(stop)
	r := <-done
	b, _ := os.ReadFile(count)
	ran := strings.Count(string(b), "run")
	if r.failed != 0 || r.runs != ran || ran < 3 {
		t.Errorf("started %d reconciles (%d failed), the script ran %d times; want 3 or more, all run, none failed", r.runs, r.failed, ran)
	}
	// Empty: nothing more starts.
	if dirNotEmpty(journal) || dirNotEmpty(filepath.Join(dir, "absent")) {
		t.Error("an empty or absent directory reads as not empty")
	}
}

// TestServiceNice: the lab's service and path unit run at the Nice= the
// guide's units give, so that the pilot measures the wiring a site gets.
func TestServiceNice(t *testing.T) {
	for _, unit := range []string{"bftrainer-reconcile.service", "bftrainer-reconcile-now.service"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "..", "contrib", "slurm", unit))
		if err != nil {
			t.Fatal(err)
		}
		var nice []string
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "Nice="); ok {
				nice = append(nice, v)
			}
		}
		if want := []string{strconv.Itoa(ServiceNice)}; !slices.Equal(nice, want) {
			t.Errorf("%s: Nice= %q, the lab runs at %q", unit, nice, want)
		}
	}
}
