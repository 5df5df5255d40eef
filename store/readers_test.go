package store_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/store"
)

// The concurrent-readers test's shape: the writer appends batches of
// batchSize events, each batch one transaction, its events all of job
// "b<i>".
const (
	batches   = 60
	batchSize = 7
)

// readerEnv, set, makes the test binary a reader process (TestMain): it
// reads the database at that path until it holds every batch.
const readerEnv = "BFTRAINER_STORE_TEST_READER"

func TestMain(m *testing.M) {
	if path := os.Getenv(readerEnv); path != "" {
		os.Exit(readerProcess(path))
	}
	os.Exit(m.Run())
}

// readerProcess is one reader process: "ready" on stdout after its first
// read, "states N" (the distinct totals it saw) when it saw them all.
func readerProcess(path string) int {
	ctx := context.Background()
	db, err := store.Open(ctx, path, store.Options{ReadOnly: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "reader:", err)
		return 1
	}
	defer db.Close()
	states := map[int]bool{}
	for first := true; ; first = false {
		n, err := readWhole(ctx, db)
		if err != nil {
			fmt.Fprintln(os.Stderr, "reader:", err)
			return 1
		}
		states[n] = true
		if first {
			fmt.Println("ready")
		}
		if n == batches*batchSize {
			fmt.Println("states", len(states))
			return 0
		}
	}
}

// readWhole reads the history twice, through Events and in one read
// transaction of several statements, and checks each read saw whole
// batches only, a prefix of them in commit order. It returns how many
// events it saw.
func readWhole(ctx context.Context, db *store.DB) (int, error) {
	evs, err := db.Events(ctx, store.Filter{})
	if err != nil {
		return 0, err
	}
	if len(evs)%batchSize != 0 {
		return 0, fmt.Errorf("saw %d events: a batch of %d in part", len(evs), batchSize)
	}
	for i, e := range evs {
		if want := fmt.Sprintf("b%d", i/batchSize); e.Job != want || (i > 0 && e.ID <= evs[i-1].ID) {
			return 0, fmt.Errorf("event %d (id %d) is of %s, want %s, in id order", i, e.ID, e.Job, want)
		}
	}
	// One snapshot across statements, while the writer commits.
	tx, err := db.SQL().BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	var n, jobs, n2 int
	if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM events").Scan(&n); err != nil {
		return 0, err
	}
	if err := tx.QueryRowContext(ctx, "SELECT count(DISTINCT job) FROM events").Scan(&jobs); err != nil {
		return 0, err
	}
	if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM events").Scan(&n2); err != nil {
		return 0, err
	}
	if n != n2 || n != jobs*batchSize {
		return 0, fmt.Errorf("one read transaction saw %d events, %d jobs, then %d events", n, jobs, n2)
	}
	return max(len(evs), n), nil
}

// TestReadersDuringWrites: readers in other processes and in goroutines
// (each its own connection, read-only as the CLI's are) read while one
// writer appends batches of events, one transaction each, and
// checkpoints now and then as the reconciler does. No reader ever sees
// part of a batch or a snapshot that moves inside its transaction, and
// none gets an error (SQLITE_BUSY included). The writer waits, every ten
// batches, for a goroutine reader to have seen that batch, so that reads
// do fall between the writes.
func TestReadersDuringWrites(t *testing.T) {
	const goroutines, processes = 4, 3
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	path := filepath.Join(t.TempDir(), "rw.db")
	w := MustOpen(t, path)

	type proc struct {
		cmd *exec.Cmd
		out *bufio.Scanner
	}
	var procs []proc
	for range processes {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), readerEnv+"="+path)
		cmd.Stderr = &strings.Builder{}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		p := proc{cmd, bufio.NewScanner(out)}
		if !p.out.Scan() || p.out.Text() != "ready" {
			cmd.Wait()
			t.Fatalf("reader process not ready: %q %s", p.out.Text(), cmd.Stderr)
		}
		procs = append(procs, p)
	}

	var seen atomic.Int64 // the most events a goroutine reader saw
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	states := make([]int, goroutines)
	ready := make(chan struct{}, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			db, err := store.Open(ctx, path, store.Options{ReadOnly: true})
			if err != nil {
				errs <- err
				return
			}
			defer db.Close()
			distinct := map[int]bool{}
			for first := true; ; first = false {
				n, err := readWhole(ctx, db)
				if err != nil {
					errs <- fmt.Errorf("reader %d: %w", g, err)
					return
				}
				distinct[n] = true
				for cur := seen.Load(); int64(n) > cur && !seen.CompareAndSwap(cur, int64(n)); cur = seen.Load() {
				}
				if first {
					ready <- struct{}{}
				}
				if n == batches*batchSize {
					states[g] = len(distinct)
					return
				}
			}
		}()
	}
	for range goroutines {
		select {
		case <-ready:
		case err := <-errs:
			t.Fatal(err)
		}
	}

	for b := range batches {
		evs := make([]store.Event, batchSize)
		for i := range evs {
			evs[i] = store.Event{At: t0, Kind: store.KindHook, Source: "slurm", Job: fmt.Sprintf("b%d", b), Nodes: []string{fmt.Sprintf("n%d", i)}}
		}
		if _, err := w.Append(ctx, evs...); err != nil {
			t.Fatalf("batch %d: %v", b, err)
		}
		if b%10 == 9 {
			if err := w.Checkpoint(ctx); err != nil {
				t.Fatal(err)
			}
			for want := int64((b + 1) * batchSize); seen.Load() < want; {
				select {
				case err := <-errs:
					t.Fatal(err)
				case <-ctx.Done():
					t.Fatalf("no reader saw batch %d", b)
				default:
					// Spin on the readers' progress: the readers read
					// without pause, and this is no timing guess.
					runtime.Gosched()
				}
			}
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i, p := range procs {
		var line string
		if p.out.Scan() {
			line = p.out.Text()
		}
		if err := p.cmd.Wait(); err != nil || !strings.HasPrefix(line, "states ") {
			t.Errorf("reader process %d: %v %q %s", i, err, line, p.cmd.Stderr)
			continue
		}
		n, _ := strconv.Atoi(strings.TrimPrefix(line, "states "))
		t.Logf("reader process %d saw %d distinct totals", i, n)
	}
	t.Logf("goroutine readers saw %v distinct totals", states)
	if most := slices.Max(states); most < 3 {
		t.Errorf("the goroutine readers saw at most %d distinct totals: none read between two writes", most)
	}
}
