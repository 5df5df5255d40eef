package trainer

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

	"github.com/bftrainer/bftrainer/names"
	"golang.org/x/sys/unix"
)

// Registry is the record, on one machine, of the process groups we
// started there, per node (several "nodes" may share a machine in tests):
// DIR/NODE/TRAINER.json, one entry per Trainer launch. It lives on local,
// root-owned storage (default /run/bftrainer/nodes, emptied at boot, as
// the processes are) and is all the node's own prolog needs to kill: no
// database, no network.
type Registry struct {
	Dir string
}

// Entry is one launch in the registry.
type Entry struct {
	Trainer string      `json:"trainer"`
	Node    string      `json:"node"`
	Owner   string      `json:"owner"`
	UID     int         `json:"uid"`
	GID     int         `json:"gid"`
	Token   string      `json:"token"`
	PGID    int         `json:"pgid"` // the supervisor's pid: its session and process group
	PID     int         `json:"pid"`  // the program's pid
	Argv    []string    `json:"argv"`
	Workdir string      `json:"workdir,omitempty"`
	Log     string      `json:"log,omitempty"`
	Started time.Time   `json:"started"`
	Exit    *ExitStatus `json:"exit,omitempty"` // set by the supervisor when the program exits by itself
}

// ExitStatus is how a program ended by itself.
type ExitStatus struct {
	Code   int       `json:"code"`             // exit status; -1 when killed by a signal
	Signal string    `json:"signal,omitempty"` // the signal, if one killed it
	At     time.Time `json:"at"`
}

// ErrUnsafeDir is returned for a registry or log directory that someone
// other than us could write: entries name process groups that root kills.
var ErrUnsafeDir = errors.New("directory is writable by others")

// ensureRoot creates dir if needed and checks it is ours and not
// writable by anyone else.
func ensureRoot(dir string) error {
	if dir == "" || !filepath.IsAbs(dir) {
		return fmt.Errorf("directory %q: want an absolute path", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
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
	if err := ensureRoot(r.Dir); err != nil {
		return "", fmt.Errorf("registry: %w", err)
	}
	d := filepath.Join(r.Dir, node)
	if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("registry: %w", err)
	}
	return d, nil
}

// nodeLock serialises the operations on one node's entries: a start, a
// kill, a supervisor recording an exit.
type nodeLock struct{ f *os.File }

// lock takes the node's lock, waiting until ctx ends.
func (r Registry) lock(ctx context.Context, node string) (*nodeLock, error) {
	d, err := r.nodeDir(node)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(d, ".lock"), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("registry lock: %w", err)
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return &nodeLock{f: f}, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("registry lock: %w", err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("registry lock for %s: %w", node, ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
}

func (l *nodeLock) unlock() {
	if l != nil && l.f != nil {
		l.f.Close() // drops the flock
		l.f = nil
	}
}

// entryPath is where a Trainer's entry on a node lives.
func (r Registry) entryPath(node, trainer string) string {
	return filepath.Join(r.Dir, node, trainer+".json")
}

// Entries returns the node's entries, by Trainer name. A node never used
// has none.
func (r Registry) Entries(node string) ([]Entry, error) {
	if err := names.ValidateNode(node); err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(filepath.Join(r.Dir, node))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	var out []Entry
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
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Trainer, b.Trainer) })
	return out, nil
}

// Entry returns one Trainer's entry on a node.
func (r Registry) Entry(node, trainer string) (Entry, bool, error) {
	if err := names.ValidateTrainer(trainer); err != nil {
		return Entry{}, false, err
	}
	b, err := os.ReadFile(r.entryPath(node, trainer))
	if errors.Is(err, os.ErrNotExist) {
		return Entry{}, false, nil
	}
	if err != nil {
		return Entry{}, false, fmt.Errorf("registry: %w", err)
	}
	var e Entry
	if err := json.Unmarshal(b, &e); err != nil {
		return Entry{}, false, fmt.Errorf("registry entry %s/%s: %w", node, trainer, err)
	}
	return e, true, nil
}

// write saves an entry atomically (temporary file, fsync, rename), so a
// kill that reads it concurrently sees the old or the new one, whole.
func (r Registry) write(e Entry) error {
	d, err := r.nodeDir(e.Node)
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(e, "", "  ")
	if err != nil {
		return err
	}
	return writeAtomic(filepath.Join(d, e.Trainer+".json"), b, 0o600)
}

func (r Registry) remove(node, trainer string) error {
	err := os.Remove(r.entryPath(node, trainer))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// writeAtomic writes a file whole or not at all: a temporary file in the
// same directory, synced, then renamed over the old one.
func writeAtomic(path string, b []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// fenceFile marks a node that a scheduler job took: starts are refused
// until the job's epilog lifts it (or it expires), so a re-plan made just
// before the reclaim cannot start a Trainer on a node that was just
// cleared.
const fenceFile = ".fence"

// fence marks the node reclaimed until the given time.
func (r Registry) fence(node string, until time.Time) error {
	d, err := r.nodeDir(node)
	if err != nil {
		return err
	}
	return writeAtomic(filepath.Join(d, fenceFile), []byte(until.UTC().Format(time.RFC3339Nano)), 0o600)
}

// unfence lifts the mark.
func (r Registry) unfence(node string) error {
	err := os.Remove(filepath.Join(r.Dir, node, fenceFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// fenced returns the time until which starts on the node are refused, or
// the zero time.
func (r Registry) fenced(node string, now time.Time) time.Time {
	b, err := os.ReadFile(filepath.Join(r.Dir, node, fenceFile))
	if err != nil {
		return time.Time{}
	}
	until, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(string(b)))
	if err != nil || !until.After(now) {
		return time.Time{}
	}
	return until
}
