package sidecar

import (
	"bytes"
	"context"
	"io"
	"log"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/pool"
)

// syncBuffer is a bytes.Buffer safe for a logger and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestWatchOutlivesAnUnopenableDatabase: the reconciler service does not
// exit when the database cannot be opened at its start (seen in CI: a
// sync creating it held its lock, and the service's first open failed
// with "database is locked"); it says why once and opens it when it can.
func TestWatchOutlivesAnUnopenableDatabase(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	if err := os.WriteFile(dir, nil, 0o644); err != nil { // a file where the directory should be
		t.Fatal(err)
	}
	var logged syncBuffer
	path := filepath.Join(dir, "b.db")
	c, err := New(Options{Database: path, Pool: pool.Config{TFwd: 10}, Log: log.New(&logged, "", 0)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Watch(ctx, 10*time.Millisecond, true) }()
	waitFor(t, func() bool { return strings.Contains(logged.String(), "trying again") }, "the service to say why it cannot open the database")
	select {
	case err := <-done:
		t.Fatalf("Watch returned while the database could not be opened: %v", err)
	default:
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { _, err := os.Stat(path); return err == nil }, "the service to open the database once it could")
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Watch: %v", err)
	}
	if n := strings.Count(logged.String(), "trying again"); n != 1 {
		t.Errorf("the same reason logged %d times, want once:\n%s", n, logged.String())
	}
}

// waitFor polls cond until it holds, for at most a minute.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestWatchHoldsNoDatabaseFileBetweenRounds: between rounds the service
// has no file of the database open, so its filesystem can be remounted
// read-only (the kernel refuses while a file on it is open for writing:
// the pilot's read-only fault could not happen while the service ran) or
// the file replaced. Rounds are an hour apart here: after the first, the
// service must let go of every file.
func TestWatchHoldsNoDatabaseFileBetweenRounds(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "b.db")
	c, err := New(Options{Database: path, Pool: pool.Config{TFwd: 10}, Log: log.New(io.Discard, "", 0)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Watch(ctx, time.Hour, true) }()
	waitFor(t, func() bool { _, err := os.Stat(path); return err == nil }, "the first round to create the database")
	waitFor(t, func() bool { return len(openUnder(t, dir)) == 0 }, "the service to close every file of the database after its round")
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Watch: %v", err)
	}
}

// openUnder lists this process's open files under dir.
func openUnder(t *testing.T, dir string) []string {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var open []string
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err == nil && strings.HasPrefix(target, dir+string(filepath.Separator)) {
			open = append(open, target)
		}
	}
	return open
}
