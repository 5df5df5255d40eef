package registry_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/names"
	"github.com/bftrainer/bftrainer/trainer/registry"
	"github.com/bftrainer/bftrainer/trainer/wire"
)

// lockerEnv, set to "DIR NODE", makes the test binary a process that
// holds that node's lock until its stdin closes (TestMain).
const lockerEnv = "BFTRAINER_REGISTRY_TEST_LOCKER"

func TestMain(m *testing.M) {
	if v := os.Getenv(lockerEnv); v != "" {
		dir, node, _ := strings.Cut(v, " ")
		lk, err := registry.Registry{Dir: dir}.Lock(context.Background(), node)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println("locked")
		io.Copy(io.Discard, os.Stdin)
		lk.Unlock()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func newRegistry(t *testing.T) registry.Registry {
	t.Helper()
	return registry.Registry{Dir: filepath.Join(t.TempDir(), "nodes")}
}

var started = time.Date(2026, 12, 1, 8, 0, 0, 123456789, time.UTC)

func entry(node, trainer, token string) wire.Entry {
	return wire.Entry{Trainer: trainer, Node: node, Owner: "alice", UID: 1000, GID: 1000, Run: "run-" + token, Token: token,
		PGID: 4242, PID: 4243, Ticks: 99, Argv: []string{"python", "train.py"}, Workdir: "/home/alice", Log: "/var/log/x", Started: started}
}

// TestEnsureRoot: the registry's root must be an absolute directory of
// ours that no one else may write: its entries name processes root kills.
func TestEnsureRoot(t *testing.T) {
	for _, c := range []struct {
		name    string
		prepare func(t *testing.T) string
		unsafe  bool // want ErrUnsafeDir
		ok      bool
	}{
		{"created when missing", func(t *testing.T) string { return filepath.Join(t.TempDir(), "a", "b") }, false, true},
		{"existing, mode 0755", func(t *testing.T) string { return mkdir(t, 0o755) }, false, true},
		{"relative path", func(*testing.T) string { return "nodes" }, false, false},
		{"empty path", func(*testing.T) string { return "" }, false, false},
		{"group-writable", func(t *testing.T) string { return mkdir(t, 0o775) }, true, false},
		{"world-writable", func(t *testing.T) string { return mkdir(t, 0o757) }, true, false},
		{"owned by someone else", func(t *testing.T) string {
			if os.Geteuid() != 0 {
				t.Skip("needs root to give a directory away")
			}
			d := mkdir(t, 0o755)
			if err := os.Chown(d, 65534, 65534); err != nil {
				t.Fatal(err)
			}
			return d
		}, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := c.prepare(t)
			err := registry.EnsureRoot(dir)
			if c.ok != (err == nil) || c.unsafe != errors.Is(err, registry.ErrUnsafeDir) {
				t.Fatalf("EnsureRoot(%q): %v; want ok %v, unsafe %v", dir, err, c.ok, c.unsafe)
			}
			if c.ok {
				if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
					t.Fatalf("%s not a directory after EnsureRoot: %v", dir, err)
				}
			}
		})
	}
}

func mkdir(t *testing.T, mode os.FileMode) string {
	t.Helper()
	d := filepath.Join(t.TempDir(), "nodes")
	if err := os.Mkdir(d, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d, mode); err != nil { // past the umask
		t.Fatal(err)
	}
	return d
}

// TestEntries: entries are written, read back whole, listed by Trainer
// name, private to root, and removed (twice is fine); the node's lock,
// fence and a writer's temporary file are not entries.
func TestEntries(t *testing.T) {
	r := newRegistry(t)
	if es, err := r.Entries("n1"); err != nil || es != nil {
		t.Fatalf("a node never used: %v, %v; want none", es, err)
	}
	if ns, err := r.Nodes(); err != nil || ns != nil {
		t.Fatalf("a registry never used: nodes %v, %v", ns, err)
	}
	for _, e := range []wire.Entry{entry("n1", "zeta", "z1"), entry("n1", "alpha", "a1"), entry("n2", "alpha", "a2")} {
		if err := r.Write(e); err != nil {
			t.Fatal(err)
		}
	}
	// A newer launch of the same Trainer replaces the entry.
	ex := &wire.ExitStatus{Code: 3, At: started.Add(time.Hour)}
	replaced := entry("n1", "zeta", "z2")
	replaced.Exit = ex
	if err := r.Write(replaced); err != nil {
		t.Fatal(err)
	}
	lk, err := r.Lock(context.Background(), "n1")
	if err != nil {
		t.Fatal(err)
	}
	lk.Unlock()
	if err := r.Fence("n1", started); err != nil {
		t.Fatal(err)
	}
	stray := filepath.Join(r.Dir, "n1", ".tmp-alpha.json-123")
	if err := os.WriteFile(stray, []byte("{half"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.Dir, "n1", "notes.txt"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := r.Entries("n1")
	if err != nil {
		t.Fatal(err)
	}
	if want := []wire.Entry{entry("n1", "alpha", "a1"), replaced}; !reflect.DeepEqual(got, want) {
		t.Fatalf("entries of n1:\n got %+v\nwant %+v", got, want)
	}
	if ns, err := r.Nodes(); err != nil || !slices.Equal(ns, []string{"n1", "n2"}) {
		t.Fatalf("nodes %v, %v; want [n1 n2]", ns, err)
	}
	for path, want := range map[string]os.FileMode{
		filepath.Join(r.Dir, "n1"):              0o700 | os.ModeDir,
		filepath.Join(r.Dir, "n1", "zeta.json"): 0o600,
	} {
		if fi, err := os.Stat(path); err != nil || fi.Mode() != want {
			t.Errorf("%s: %v (%v), want mode %v", path, fi.Mode(), err, want)
		}
	}
	for range 2 {
		if err := r.Remove("n1", "zeta"); err != nil {
			t.Fatal(err)
		}
	}
	if e, ok, err := r.Entry("n1", "zeta"); err != nil || ok {
		t.Fatalf("removed entry: %+v ok=%v %v", e, ok, err)
	}
	if e, ok, err := r.Entry("n2", "alpha"); err != nil || !ok || e.Token != "a2" {
		t.Fatalf("n2's entry after n1's removal: %+v ok=%v %v", e, ok, err)
	}
}

// TestEntriesRefused: a damaged entry is an error naming it (a kill must
// not skip a launch it cannot read), and a registry someone else may
// write is not read.
func TestEntriesRefused(t *testing.T) {
	for _, c := range []struct {
		name   string
		damage func(t *testing.T, r registry.Registry)
		want   string
		is     error
	}{
		{"entry not JSON", func(t *testing.T, r registry.Registry) {
			os.WriteFile(filepath.Join(r.Dir, "n1", "beta.json"), []byte("{half"), 0o600)
		}, "registry entry n1/beta", nil},
		{"root world-writable", func(t *testing.T, r registry.Registry) { os.Chmod(r.Dir, 0o777) }, "", registry.ErrUnsafeDir},
		{"root group-writable", func(t *testing.T, r registry.Registry) { os.Chmod(r.Dir, 0o770) }, "", registry.ErrUnsafeDir},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRegistry(t)
			if err := r.Write(entry("n1", "alpha", "a1")); err != nil {
				t.Fatal(err)
			}
			c.damage(t, r)
			es, err := r.Entries("n1")
			if err == nil || !strings.Contains(err.Error(), c.want) || (c.is != nil && !errors.Is(err, c.is)) {
				t.Fatalf("Entries: %v, %v; want an error with %q (%v)", es, err, c.want, c.is)
			}
		})
	}
}

// TestNamesConfined: a node or Trainer name that is not a name is
// refused before it reaches a path, by every operation; nothing is
// written outside the registry.
func TestNamesConfined(t *testing.T) {
	for _, node := range []string{"", "..", ".", "../x", "n1/../../x", "-n1", "n 1"} {
		t.Run("node "+node, func(t *testing.T) {
			base := t.TempDir()
			r := registry.Registry{Dir: filepath.Join(base, "reg", "nodes")}
			if err := registry.EnsureRoot(r.Dir); err != nil {
				t.Fatal(err)
			}
			check := func(op string, err error) {
				t.Helper()
				if !errors.Is(err, names.ErrNode) {
					t.Errorf("%s(%q): %v, want a node-name error", op, node, err)
				}
			}
			check("Write", r.Write(entry(node, "alpha", "a1")))
			_, err := r.Entries(node)
			check("Entries", err)
			_, err = r.Lock(context.Background(), node)
			check("Lock", err)
			check("Fence", r.Fence(node, started))
			check("Unfence", r.Unfence(node))
			check("Remove", r.Remove(node, "alpha"))
			// Only the registry's root, as EnsureRoot made it.
			var files []string
			filepath.Walk(base, func(p string, _ os.FileInfo, _ error) error {
				files = append(files, strings.TrimPrefix(p, base))
				return nil
			})
			if want := []string{"", "/reg", "/reg/nodes"}; !slices.Equal(files, want) {
				t.Errorf("files after the refused calls: %q, want %q", files, want)
			}
		})
	}
	r := newRegistry(t)
	if err := registry.EnsureRoot(r.Dir); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(r.Dir, "victim.json")
	if err := os.WriteFile(victim, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.Remove("n1", "../victim"); !errors.Is(err, names.ErrTrainer) {
		t.Errorf("Remove(n1, ../victim): %v, want a trainer-name error", err)
	}
	if _, err := os.Stat(victim); err != nil {
		t.Errorf("Remove reached outside the node's directory: %v", err)
	}
	for _, tr := range []string{"", "../alpha", "-alpha", ".alpha", "al/pha"} {
		if err := r.Write(entry("n1", tr, "a1")); !errors.Is(err, names.ErrTrainer) {
			t.Errorf("Write of Trainer %q: %v, want a trainer-name error", tr, err)
		}
		if _, _, err := r.Entry("n1", tr); !errors.Is(err, names.ErrTrainer) {
			t.Errorf("Entry(n1, %q): %v, want a trainer-name error", tr, err)
		}
	}
}

// TestFence: a fence holds from when it was set until lifted; one that
// cannot be read still holds; lifting twice is fine; fences are per node.
func TestFence(t *testing.T) {
	r := newRegistry(t)
	if _, ok := r.Fenced("n1"); ok {
		t.Fatal("fenced before any fence")
	}
	if err := r.Fence("n1", started.In(time.FixedZone("x", 3600))); err != nil {
		t.Fatal(err)
	}
	if since, ok := r.Fenced("n1"); !ok || !since.Equal(started) {
		t.Fatalf("Fenced: %v %v, want %v true", since, ok, started)
	}
	if _, ok := r.Fenced("n2"); ok {
		t.Fatal("n1's fence holds on n2")
	}
	for range 2 {
		if err := r.Unfence("n1"); err != nil {
			t.Fatal(err)
		}
		if _, ok := r.Fenced("n1"); ok {
			t.Fatal("still fenced after Unfence")
		}
	}
	if err := r.Fence("n1", started); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.Dir, "n1", ".fence"), []byte("garbled"), 0o600); err != nil {
		t.Fatal(err)
	}
	if since, ok := r.Fenced("n1"); !ok || !since.IsZero() {
		t.Fatalf("an unreadable fence: %v %v, want a fence of unknown time", since, ok)
	}
}

// TestLock: one holder per node at a time, across processes; a waiter
// gives up when its context ends and gets the lock once the holder's
// process lets go; other nodes are not held up.
func TestLock(t *testing.T) {
	r := newRegistry(t)
	if err := registry.EnsureRoot(r.Dir); err != nil {
		t.Fatal(err)
	}
	holder := exec.Command(os.Args[0], "-test.run=^$")
	holder.Env = append(os.Environ(), lockerEnv+"="+r.Dir+" n1")
	holder.Stderr = os.Stderr
	stdin, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer holder.Wait()
	defer stdin.Close()
	if sc := bufio.NewScanner(out); !sc.Scan() || sc.Text() != "locked" {
		t.Fatalf("the holder process did not take the lock: %q", sc.Text())
	}

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if lk, err := r.Lock(ctx, "n1"); !errors.Is(err, context.DeadlineExceeded) {
		lk.Unlock()
		t.Fatalf("Lock while another process holds it: %v, want the context's deadline", err)
	}
	other, err := r.Lock(context.Background(), "n2")
	if err != nil {
		t.Fatalf("n2 held up by n1's holder: %v", err)
	}
	other.Unlock()

	got := make(chan error, 1)
	var mine *registry.Lock
	go func() {
		var err error
		mine, err = r.Lock(context.Background(), "n1")
		got <- err
	}()
	stdin.Close() // the holder lets go and exits
	if err := <-got; err != nil {
		t.Fatalf("Lock after the holder let go: %v", err)
	}
	// Held in this process too: a second handle here waits.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	if _, err := r.Lock(ctx2, "n1"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second Lock in the holder's process: %v, want the deadline", err)
	}
	mine.Unlock()
	mine.Unlock() // twice is a no-op
	var none *registry.Lock
	none.Unlock()
	if lk, err := r.Lock(context.Background(), "n1"); err != nil {
		t.Fatalf("Lock after Unlock: %v", err)
	} else {
		lk.Unlock()
	}
}

// TestWriteWhole: a reader racing a writer that rewrites an entry, small
// and large in turn, always reads one of them whole (an atomic rename),
// and no temporary file is left behind.
func TestWriteWhole(t *testing.T) {
	r := newRegistry(t)
	small, large := entry("n1", "alpha", "small"), entry("n1", "alpha", "large")
	large.Argv = slices.Repeat([]string{strings.Repeat("x", 100)}, 500) // ~50 kB: several write calls
	if err := r.Write(small); err != nil {
		t.Fatal(err)
	}
	const writes = 100
	done := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	reads := make([]int, 4)
	for i := range reads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				e, ok, err := r.Entry("n1", "alpha")
				if err != nil || !ok || (e.Token == "small") != (len(e.Argv) == 2) || (e.Token == "large") != (len(e.Argv) == 500) {
					errs <- fmt.Errorf("read %s with %d args, ok %v: %v", e.Token, len(e.Argv), ok, err)
					return
				}
				reads[i]++
			}
		}()
	}
	for i := range writes {
		e := small
		if i%2 == 0 {
			e = large
		}
		if err := r.Write(e); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d writes, reads per reader %v", writes, reads)
	ents, err := os.ReadDir(filepath.Join(r.Dir, "n1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range ents {
		if de.Name() != "alpha.json" {
			t.Errorf("left in the node's directory: %s", de.Name())
		}
	}
}
