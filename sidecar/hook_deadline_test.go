package sidecar

import (
	"bytes"
	"context"
	"log"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/hooks"
	"github.com/bftrainer/bftrainer/journal"
)

// TestHookDeadlineAfterRecord: a deadline that passes once the call's
// record is written (here the reconciler's nudge hangs; on a starved
// machine the process may simply not run for a while) ends the hook in
// time and logs nothing: its work is done. Before the record, the
// deadline is logged (TestHookFailsOpen, "the kill hangs").
func TestHookDeadlineAfterRecord(t *testing.T) {
	dir := t.TempDir()
	jdir := filepath.Join(dir, "journal")
	if err := journal.Create(jdir, -1); err != nil {
		t.Fatal(err)
	}
	hang := make(chan struct{})
	defer close(hang)
	var logs bytes.Buffer
	c, err := New(Options{Database: filepath.Join(dir, "b.db"), Journal: jdir, Trigger: func() error { <-hang; return nil },
		Hook: HookOptions{Deadline: 200 * time.Millisecond, Log: log.New(&logs, "", 0)}})
	if err != nil {
		t.Fatal(err)
	}
	slurmPrologReturns(t, c, 10*time.Second)
	if files, _ := os.ReadDir(jdir); len(files) != 1 {
		t.Fatalf("%d files in the journal, want the call's record", len(files))
	}
	if logs.Len() > 0 {
		t.Fatalf("the hook logged %q: its record was written before the deadline", logs.String())
	}
}

// slurmPrologReturns calls job 3's controller prolog on n1 and fails the
// test unless Hook returns within bound.
func slurmPrologReturns(t *testing.T, c *Core, bound time.Duration) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		c.Hook(context.Background(), hooks.MapEnv(map[string]string{"SLURM_SCRIPT_CONTEXT": "prolog_slurmctld", "SLURM_JOB_ID": "3", "SLURM_JOB_NODELIST": "n1"}), nil)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(bound):
		t.Fatalf("the hook did not return within %v", bound)
	}
}
