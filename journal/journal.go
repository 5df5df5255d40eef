// Package journal owns the scheduler hooks' durable journal: the drop
// directory beside the database where every hook call leaves its events,
// complete, and returns, and from which the reconciler — the single writer
// of SQLite — records them exactly once.
//
// A hook never touches SQLite. Any reader of the database (an ordinary
// user holding a read lock on the -shm file, a VACUUM, a long admin
// transaction) can delay a SQLite writer; nobody but root and the
// SlurmUser's group can do anything in the journal directory, and a write
// there takes no lock at all.
//
// # On disk
//
// The directory (Dir, e.g. /var/lib/bftrainer/journal) is owned by root
// (or the reconciler's user), group the SlurmUser's group, mode 2770
// (DirMode; Create makes it so). Writer and reader both refuse a directory
// that is a symlink, is owned by anyone else or is writable by others
// (ErrUnsafe). It holds only:
//
//	<at>-<id>.ev   one committed record: at is the hook's timestamp in
//	               Unix nanoseconds, 19 digits, and id the 128-bit random
//	               id the hook chose, 32 lowercase hex digits; names sort
//	               in the hooks' order (timestamp, then id)
//	.tmp-<id>      a record being written (or left by a hook that died)
//
// so it is empty when everything is recorded (a systemd path unit's
// DirectoryNotEmpty= can start the reconciler). Bad files are moved beside
// it, into <Dir>.bad (mode 0700, the reader's; the newest 100 kept, with
// the count of those not yet given a row).
//
// A record file is one JSON object and a newline, mode 0640:
//
//	{"v":1,"id":"<id>","at":"<RFC 3339, ns>","events":[{"at":…,"kind":"hook",
//	 "source":"slurm","context":"prolog_slurmctld","job":"42","nodes":["n1"],
//	 "ms":1.2,"detail":{…}}, {"kind":"leave",…}]}
//
// Event fields are those of store.Event (value and ms absent when unset);
// unknown fields are refused. Only the kinds a hook writes are accepted
// (hook, leave, release, kill, error): a record cannot submit a Trainer or cancel one.
//
// # Guarantees
//
// Write: the record is written under its temporary name, then renamed into
// place, so a reader sees all of it or nothing. When Dir cannot take it
// (full, read-only, missing, unsafe) it goes to Fallback, a directory on
// another filesystem (e.g. /run/bftrainer/journal, a tmpfs), with the same
// rules. Write takes no lock, waits on no other process and touches no
// file that anyone outside root and the directory's group can open.
// WriteFallback writes a record to Fallback only: for a hook whose Write
// has not returned by its deadline (Dir's filesystem hung, the process
// starved), with the ID Write was given, so that the record is safe before
// the hook exits; Write may still land it in Dir too, and the two copies
// are one record to Ingest (below). Fallback is best a tmpfs: it cannot
// hang on a device.
//
// Durability: a record is not fsynced by default (Sync false). It
// survives the hook's crash or kill -9 and the reconciler's at once — it
// is in the kernel's page cache — but a power loss or kernel crash may
// lose the records of the last few seconds (ext4 commits its journal every
// 5 s), or leave one empty or cut short, which ingestion reports as a bad
// file. The database runs with synchronous=NORMAL and has the same window,
// and a sync with the scheduler repairs the pool after a restart. An fsync
// of the file and the directory would close the window at a price set by
// every other writer of the disk: measured here (BenchmarkHookWrite, one
// process per call, 300 calls each), the write step took p50/p99 0.45/0.66
// ms without and 0.96/1.42 ms with, and 0.56/1.01 ms without and
// 3.4/28 ms with while another process rewrote 64 MiB and synced
// (BenchmarkHookWriteDiskBusy). A hook must not wait on slurmctld's own
// state saves.
//
// No direct SQLite write is kept on the hook path: in a burst of 200
// concurrent hooks with both cores busy, 97% of appends that do not wait
// (busy timeout 0) failed and would have fallen back to the journal
// anyway (BenchmarkHookBurst), a reader's lock makes all of them fail, and
// two paths would let a later hook's event be folded before an earlier
// one's. The direct append, alone, took p50/p99 0.75/1.94 ms.
//
// Ingest: records are recorded in the hooks' order (timestamp, then id),
// keeping the hook's own timestamps, in one transaction, and their files
// removed after it commits. Each event carries the origin "<id>.<n>",
// unique in the events table: a crash between the commit and the removal
// leaves files whose second ingestion adds nothing. Exactly once, then,
// even with two ingesters at once. A bad file (not a record, truncated,
// junk, a symlink or other non-regular file, a foreign owner, a wrong mode,
// other links, larger than MaxRecord) is recorded as an error and moved
// aside (removed when too large), and never holds up the good ones; the
// error rows are limited to 10 an hour, the rest counted in one summary
// row (over budget, counted until the budget is back). A file that merely
// cannot be read now (out of descriptors, the user database unreachable)
// stays for the next round. A temporary file older than a minute is a hook
// that died while writing: if it holds a whole record it is recorded, else
// it is bad. At most 10,000 records per call; Result.Left asks for more.
package journal

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bftrainer/bftrainer/store"
)

// Journal is a journal directory and its fallback.
type Journal struct {
	// Dir is the journal, beside the database.
	Dir string
	// Fallback takes a record Dir cannot; it should be on another
	// filesystem. Empty: none.
	Fallback string
	// Sync fsyncs each record and its directory before Write returns.
	Sync bool

	// Reader limits; zero means the default.
	maxBatch    int           // records per Ingest
	tempAge     time.Duration // a temporary file older than this is abandoned
	errorBudget int           // error rows per errorWindow
	errorWindow time.Duration

	afterCommit func() error // tests: runs between the commit and the cleanup
}

// DirMode is the journal directory's mode: root and the SlurmUser's group
// write it, files created in it take its group, nobody else may enter.
const DirMode = os.ModeDir | os.ModeSetgid | 0o770

// fileMode is a record's mode: the directory's group may read it.
const fileMode = 0o640

// MaxRecord bounds a record file. A reclaim of a 100,000-node job names
// every node twice (its hook and its leave event): about 3 MB.
const MaxRecord = 8 << 20

// maxEvents bounds the events in one record; a hook writes two or three.
const maxEvents = 64

// kinds are the event kinds a record may carry: what a hook writes.
var kinds = []store.Kind{store.KindHook, store.KindLeave, store.KindRelease, store.KindKill, store.KindError}

// Defaults of the reader.
const (
	defaultMaxBatch    = 10000
	defaultTempAge     = time.Minute // hooks.deadline is at most 10 min, 2 s by default
	defaultErrorBudget = 10
	defaultErrorWindow = time.Hour
	keepBad            = 100    // bad files kept
	badSuffix          = ".bad" // beside the journal: its bad files
	tmpPrefix          = ".tmp-"
	recordSuffix       = ".ev"
)

// ErrUnsafe is returned for a journal directory that could let someone
// other than root and its group plant, change or remove records.
var ErrUnsafe = errors.New("journal directory is unsafe")

// ID identifies a record: 128 random bits chosen by the writer.
type ID [16]byte

// NewID returns a random ID, from the kernel's random source (getrandom
// straight away: crypto/rand's first call in a process costs a hook more
// than the whole write).
func NewID() (ID, error) {
	var id ID
	for n := 0; n < len(id); {
		k, err := unix.Getrandom(id[n:], 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return ID{}, fmt.Errorf("record id: %w", err)
		}
		n += k
	}
	return id, nil
}

// String is the ID as 32 lowercase hex digits.
func (id ID) String() string { return hex.EncodeToString(id[:]) }

// ParseID reads an ID written by String.
func ParseID(s string) (ID, error) {
	var id ID
	if len(s) != 2*len(id) {
		return ID{}, fmt.Errorf("record id %q: want %d hex digits", s, 2*len(id))
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return ID{}, fmt.Errorf("record id %q: want lowercase hex", s)
		}
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil {
		return ID{}, fmt.Errorf("record id %q: %w", s, err)
	}
	return id, nil
}

// Record is what one hook call writes: its events, complete.
type Record struct {
	ID     ID        // zero: Write chooses one
	At     time.Time // the hook's timestamp (when it started); zero: now
	Events []store.Event
}

// Create makes the journal directory, owned by the caller (root) and the
// group gid (-1: the caller's), with DirMode. An existing one is checked,
// not changed.
func Create(dir string, gid int) error {
	if err := os.Mkdir(dir, DirMode.Perm()); err != nil {
		if !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("create journal: %w", err)
		}
		return checkDir(dir)
	}
	// mkdir(2) ignores the setgid bit and the umask may have cleared g+w.
	if err := os.Lchown(dir, -1, gid); err != nil {
		return fmt.Errorf("create journal: %w", err)
	}
	if err := os.Chmod(dir, DirMode); err != nil {
		return fmt.Errorf("create journal: %w", err)
	}
	return checkDir(dir)
}

// checkDir checks a journal directory before it is written or believed:
// a real directory, owned by root or by us, not writable by others.
func checkDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory (%v): %w", dir, fi.Mode().Type(), ErrUnsafe)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s: no owner information: %w", dir, ErrUnsafe)
	}
	if st.Uid != 0 && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%s is owned by uid %d, not by root or us: %w", dir, st.Uid, ErrUnsafe)
	}
	if fi.Mode().Perm()&0o002 != 0 {
		return fmt.Errorf("%s is writable by others (mode %v): %w", dir, fi.Mode(), ErrUnsafe)
	}
	return nil
}

func (j *Journal) defaults() {
	if j.maxBatch <= 0 {
		j.maxBatch = defaultMaxBatch
	}
	if j.tempAge <= 0 {
		j.tempAge = defaultTempAge
	}
	if j.errorBudget <= 0 {
		j.errorBudget = defaultErrorBudget
	}
	if j.errorWindow <= 0 {
		j.errorWindow = defaultErrorWindow
	}
}

// dirs are the directories to read, the journal first.
func (j *Journal) dirs() []string {
	var out []string
	for _, d := range []string{j.Dir, j.Fallback} {
		if d != "" {
			out = append(out, d)
		}
	}
	return out
}
