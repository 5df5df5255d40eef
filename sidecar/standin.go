package sidecar

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bftrainer/bftrainer/store"
)

// The stand-in (issue 27's pilot): while the database's filesystem is
// read-only (an admin's remount for a backup, a failing disk the kernel
// made read-only), rounds run on a copy of the database on the journal
// fallback's filesystem, and the copy replaces the database's content as
// soon as it can be written again.
//
// Without it a round could record nothing, so it did nothing: Trainers
// already running went on, but nodes released meanwhile stayed idle for
// as long as the fault lasted (the pilot's read-only minute lost 0.038 of
// its 0.041 idle node-hours). With it the rounds go on as before: the
// hooks' records, which went to the fallback, are recorded in the
// stand-in; starts, stops and the plan are recorded there before they are
// acted on, as always; and nothing is claimed that is not recorded.
//
// On disk, beside the fallback (<journal_fallback>-standin.db and .lock,
// e.g. /run/bftrainer/journal-standin.db): as durable as the fallback's
// records, which it holds once they are recorded (a tmpfs's are lost with
// a reboot, and so are the Trainer processes the stand-in's rows describe).
//
// The rules, so that no write is ever lost between the two:
//
//   - While the stand-in exists it is the database: every writer opens
//     it, every reader reads it. Only a writer that finds the database's
//     filesystem read-only makes one (store.CopyFile: one read
//     transaction of the database), under the lock held exclusively, and
//     after the lock it tries the database once more.
//   - The first writer to find the database writable again, the stand-in
//     there and the lock free, copies the stand-in into it in one
//     transaction (store.DB.Absorb), then removes the stand-in, under the
//     lock held exclusively.
//   - Every writer's handle, of either, holds the lock shared while open:
//     so nothing writes either while one is made or absorbed, and a
//     writer that opened the database just before it became read-only
//     cannot write after the copy was taken.
//   - A crash anywhere leaves either the stand-in (the next writer absorbs
//     it) or the database absorbed and the stand-in still there (absorbed
//     again, the same content: no writer wrote the database in between,
//     since the stand-in was there).
//
// The reconciler's round lock is beside whichever it opened (its
// LockPath), so rounds exclude each other on either.
type standin struct {
	path string // the copy
	lock string // held shared by writers, exclusively to make or absorb the copy
}

// standinWait is how long a writer waits for the stand-in's lock before it
// gives up for now (a round tries again at the next).
const standinWait = 2 * time.Second

// standin returns the stand-in's paths; false when there is no journal
// fallback (nowhere else to write).
func (c *Core) standin() (standin, bool) {
	if c.o.JournalFallback == "" || c.o.Database == "" {
		return standin{}, false
	}
	base := standinBase(c.o.JournalFallback)
	return standin{path: base + ".db", lock: base + ".lock"}, true
}

// StandInPath is where the stand-in of a configuration whose
// journal_fallback is fallback lies while rounds run on it:
// <fallback>-standin.db (its lock beside it, <fallback>-standin.lock).
func StandInPath(fallback string) string {
	return standinBase(fallback) + ".db"
}

// standinBase is the stand-in's and its lock's path less the extension.
func standinBase(fallback string) string {
	return filepath.Clean(fallback) + "-standin"
}

// exists reports whether the stand-in is there.
func (s standin) exists() bool {
	_, err := os.Stat(s.path)
	return err == nil
}

// StandIn is the stand-in's path while rounds run on it; "" otherwise.
func (c *Core) StandIn() string {
	if s, ok := c.standin(); ok && s.exists() {
		return s.path
	}
	return ""
}

// openWrite opens the database for writing, or the stand-in while there
// is one (absorbing it first when the database can be written again), or
// makes one when the database's filesystem is read-only. The handle holds
// the stand-in's lock shared until it is closed.
//
// absorbWait is how long it waits for writers of the stand-in to close
// before it leaves the stand-in to the next writer: 0 for commands and
// hook-started rounds, which must not wait on a round; the service, which
// nobody waits for, waits longer, so that rounds started one after another
// by hooks cannot keep the stand-in in use for ever.
func (c *Core) openWrite(ctx context.Context, absorbWait time.Duration) (*store.DB, error) {
	s, ok := c.standin()
	if !ok {
		return c.openPrimary(ctx)
	}
	if s.exists() {
		if db, err := c.absorb(ctx, s, absorbWait); db != nil || err != nil {
			return db, err
		}
	}
	// Under /run, gone after a boot; a failure shows at the lock's open.
	if err := os.MkdirAll(filepath.Dir(s.lock), 0o755); err != nil {
		c.o.Log.Printf("stand-in: %v", err)
	}
	shared, err := lockFile(s.lock, unix.LOCK_SH, standinWait)
	if err != nil {
		// No lock to hold (the fallback's directory is not ours): the
		// database alone, as before the stand-in.
		c.o.Log.Printf("stand-in: %v", err)
		return c.openPrimary(ctx)
	}
	if s.exists() {
		// Made since we looked.
		return c.openHeld(ctx, s.path, shared)
	}
	db, err := c.openPrimary(ctx)
	if err == nil {
		db.OnClose(shared.Unlock)
		return db, nil
	}
	shared.Unlock()
	if !errors.Is(err, unix.EROFS) {
		return nil, err
	}
	if _, serr := os.Stat(c.o.Database); serr != nil {
		return nil, err // nothing to copy
	}
	return c.makeStandin(ctx, s)
}

// openPrimary opens the database itself for writing.
func (c *Core) openPrimary(ctx context.Context) (*store.DB, error) {
	db, err := store.Open(ctx, c.o.Database, store.Options{Mode: c.o.DatabaseMode})
	if err != nil {
		if errors.Is(err, os.ErrPermission) || errors.Is(err, unix.EACCES) || errors.Is(err, unix.EROFS) {
			return nil, fmt.Errorf("%w%.0w", err, ErrNotWritable)
		}
		return nil, err
	}
	return db, nil
}

// openHeld opens path for writing, keeping the shared lock l until the
// handle is closed (released now if the open fails).
func (c *Core) openHeld(ctx context.Context, path string, l *fileLock) (*store.DB, error) {
	db, err := store.Open(ctx, path, store.Options{Mode: c.o.DatabaseMode})
	if err != nil {
		l.Unlock()
		return nil, err
	}
	db.OnClose(l.Unlock)
	return db, nil
}

// makeStandin copies the read-only database to the stand-in and opens it.
func (c *Core) makeStandin(ctx context.Context, s standin) (*store.DB, error) {
	ex, err := lockFile(s.lock, unix.LOCK_EX, standinWait)
	if err != nil {
		return nil, fmt.Errorf("%s is read-only and the stand-in cannot be made now: %w%.0w", c.o.Database, err, ErrNotWritable)
	}
	defer ex.Unlock()
	if !s.exists() {
		// Once more under the lock: writable again, the database it is.
		if db, err := c.openPrimary(ctx); err == nil || !errors.Is(err, unix.EROFS) {
			return c.downgrade(db, err, ex)
		}
		var tag [8]byte
		rand.Read(tag[:])
		tmp := s.path + ".tmp-" + hex.EncodeToString(tag[:])
		if err := store.CopyFile(ctx, c.o.Database, tmp, c.o.DatabaseMode); err != nil {
			os.Remove(tmp)
			return nil, fmt.Errorf("%s is read-only: %w", c.o.Database, err)
		}
		if err := os.Rename(tmp, s.path); err != nil {
			os.Remove(tmp)
			return nil, fmt.Errorf("%s is read-only: stand-in: %w", c.o.Database, err)
		}
		c.o.Log.Printf("%s is on a read-only filesystem: rounds run on the stand-in %s until it can be written again", c.o.Database, s.path)
	}
	db, err := store.Open(ctx, s.path, store.Options{Mode: c.o.DatabaseMode})
	return c.downgrade(db, err, ex)
}

// downgrade turns the exclusive lock ex into the shared one db holds
// (ex is then released by its owner's deferred Unlock, a no-op).
func (c *Core) downgrade(db *store.DB, err error, ex *fileLock) (*store.DB, error) {
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(ex.f.Fd()), unix.LOCK_SH); err != nil {
		db.Close()
		return nil, fmt.Errorf("stand-in lock: %w", err)
	}
	f := ex.f
	ex.f = nil
	db.OnClose((&fileLock{f: f}).Unlock)
	return db, nil
}

// absorb copies the stand-in into the database when the database can be
// written and no writer holds the stand-in, removes the stand-in and
// returns the database; it returns nil, nil when the stand-in stays (the
// database still read-only, or the stand-in in use): the caller opens it.
func (c *Core) absorb(ctx context.Context, s standin, wait time.Duration) (*store.DB, error) {
	if unix.Access(c.o.Database, unix.W_OK) != nil {
		return nil, nil
	}
	ex, err := lockFile(s.lock, unix.LOCK_EX, wait)
	if err != nil {
		return nil, nil // in use: the next writer absorbs it
	}
	defer ex.Unlock()
	db, err := c.openPrimary(ctx)
	if err != nil {
		if errors.Is(err, unix.EROFS) {
			return nil, nil
		}
		return nil, err
	}
	if s.exists() {
		if err := db.Absorb(ctx, s.path); err != nil {
			db.Close()
			c.o.Log.Printf("stand-in: %v; rounds stay on it", err)
			return nil, nil
		}
		for _, suffix := range []string{"", "-wal", "-shm"} {
			if err := os.Remove(s.path + suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
				c.o.Log.Printf("stand-in: %v", err)
			}
		}
		c.o.Log.Printf("%s can be written again: the stand-in's records are in it, and rounds run on it", c.o.Database)
	}
	return c.downgrade(db, nil, ex)
}
