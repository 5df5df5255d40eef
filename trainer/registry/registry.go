// Package registry is the record, on one machine, of the Trainer launches
// the node agent started there: DIR/NODE/TRAINER.json per launch, a lock
// per node, and the reclaim fence. The node agent writes and removes
// entries; the per-launch supervisor records its program's exit in its
// entry; the node's prolog reads them to kill. It lives on local,
// root-owned storage (default /run/bftrainer/nodes, emptied at boot, as
// the processes are), so nothing in it is synced to disk: an atomic
// rename is all a concurrent reader needs, and a crash takes the
// processes with it.
package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/bftrainer/bftrainer/internal/atomicfile"
	"github.com/bftrainer/bftrainer/names"
	"github.com/bftrainer/bftrainer/trainer/wire"
	"golang.org/x/sys/unix"
)

// Registry is one machine's record of launches, by node (several nodes
// may share a machine in tests).
type Registry struct {
	Dir string
}

// ErrUnsafeDir is returned for a registry or log directory that someone
// other than us could write: entries name processes that root kills.
var ErrUnsafeDir = errors.New("directory is writable by others")

// EnsureRoot creates dir if needed and checks that it is ours and not
// writable by anyone else.
func EnsureRoot(dir string) error {
	if dir == "" || !filepath.IsAbs(dir) {
		return fmt.Errorf("directory %q: want an absolute path", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return checkRoot(dir)
}

// checkRoot checks that an existing dir is ours and not writable by
// anyone else.
func checkRoot(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s: no owner information", dir)
	}
	if int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%s: owned by uid %d, not by us (uid %d): %w", dir, st.Uid, os.Geteuid(), ErrUnsafeDir)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%s: mode %v: %w", dir, fi.Mode().Perm(), ErrUnsafeDir)
	}
	return nil
}

// nodeDir returns the node's directory, created (mode 0700) if needed.
func (r Registry) nodeDir(node string) (string, error) {
	if err := names.ValidateNode(node); err != nil {
		return "", err
	}
	if err := EnsureRoot(r.Dir); err != nil {
		return "", fmt.Errorf("registry: %w", err)
	}
	d := filepath.Join(r.Dir, node)
	if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("registry: %w", err)
	}
	return d, nil
}

// Lock serialises the operations on one node's entries: a start, a kill,
// a supervisor recording an exit.
type Lock struct{ f *os.File }

// Lock takes the node's lock, waiting until ctx ends.
func (r Registry) Lock(ctx context.Context, node string) (*Lock, error) {
	d, err := r.nodeDir(node)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(d, ".lock"), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("registry lock: %w", err)
	}
	pause := 100 * time.Microsecond
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return &Lock{f: f}, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("registry lock: %w", err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("registry lock for %s: %w", node, ctx.Err())
		case <-time.After(pause):
		}
		pause = min(2*pause, 2*time.Millisecond)
	}
}

// Unlock drops the lock; a nil lock is a no-op.
func (l *Lock) Unlock() {
	if l != nil && l.f != nil {
		l.f.Close() // drops the flock
		l.f = nil
	}
}

// entryPath is where a Trainer's entry on a node lives.
func (r Registry) entryPath(node, trainer string) string {
	return filepath.Join(r.Dir, node, trainer+".json")
}

// Nodes returns the nodes that have a directory in the registry.
func (r Registry) Nodes() ([]string, error) {
	ents, err := os.ReadDir(r.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	var out []string
	for _, de := range ents {
		if de.IsDir() && names.ValidateNode(de.Name()) == nil {
			out = append(out, de.Name())
		}
	}
	return out, nil
}

// Entries returns the node's entries, by Trainer name. A node never used
// has none.
func (r Registry) Entries(node string) ([]wire.Entry, error) {
	if err := names.ValidateNode(node); err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(filepath.Join(r.Dir, node))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err == nil {
		err = checkRoot(r.Dir)
	}
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	var out []wire.Entry
	for _, de := range ents {
		name := de.Name()
		if !strings.HasSuffix(name, ".json") || strings.HasPrefix(name, ".") {
			continue
		}
		e, ok, err := r.Entry(node, strings.TrimSuffix(name, ".json"))
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b wire.Entry) int { return strings.Compare(a.Trainer, b.Trainer) })
	return out, nil
}

// Entry returns one Trainer's entry on a node.
func (r Registry) Entry(node, trainer string) (wire.Entry, bool, error) {
	if err := names.ValidateTrainer(trainer); err != nil {
		return wire.Entry{}, false, err
	}
	b, err := os.ReadFile(r.entryPath(node, trainer))
	if errors.Is(err, os.ErrNotExist) {
		return wire.Entry{}, false, nil
	}
	if err != nil {
		return wire.Entry{}, false, fmt.Errorf("registry: %w", err)
	}
	var e wire.Entry
	if err := json.Unmarshal(b, &e); err != nil {
		return wire.Entry{}, false, fmt.Errorf("registry entry %s/%s: %w", node, trainer, err)
	}
	return e, true, nil
}

// Write saves an entry atomically, so that a kill reading it
// concurrently sees the old or the new one, whole.
func (r Registry) Write(e wire.Entry) error {
	if err := names.ValidateTrainer(e.Trainer); err != nil {
		return err
	}
	d, err := r.nodeDir(e.Node)
	if err != nil {
		return err
	}
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(d, e.Trainer+".json"), b, 0o600, false)
}

// Remove forgets a Trainer's entry on a node; removing a file needs no
// free space, so this works on a full filesystem too.
func (r Registry) Remove(node, trainer string) error {
	if err := names.ValidateNode(node); err != nil {
		return err
	}
	if err := names.ValidateTrainer(trainer); err != nil {
		return err
	}
	err := os.Remove(r.entryPath(node, trainer))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// fenceFile marks a node that a scheduler job took: starts are refused
// until the job's epilog lifts it, or the controller does once the
// scheduler says the node is idle. It has no expiry: a job may run for
// days, and a Trainer started beside it would hold its GPU.
const fenceFile = ".fence"

// Fence marks the node reclaimed since the given time.
func (r Registry) Fence(node string, since time.Time) error {
	d, err := r.nodeDir(node)
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(d, fenceFile), []byte(since.UTC().Format(time.RFC3339Nano)), 0o600, false)
}

// Unfence lifts the mark.
func (r Registry) Unfence(node string) error {
	if err := names.ValidateNode(node); err != nil {
		return err
	}
	err := os.Remove(filepath.Join(r.Dir, node, fenceFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// Fenced returns since when starts on the node are refused; ok is false
// when they are not.
func (r Registry) Fenced(node string) (since time.Time, ok bool) {
	b, err := os.ReadFile(filepath.Join(r.Dir, node, fenceFile))
	if err != nil {
		return time.Time{}, false
	}
	since, err = time.Parse(time.RFC3339Nano, strings.TrimSpace(string(b)))
	if err != nil {
		// A fence we cannot read is still a fence.
		return time.Time{}, true
	}
	return since, true
}
