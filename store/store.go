// Package store keeps bftrainer's history and state in SQLite. It is the
// only package that imports the SQLite driver.
//
// The database lives on the controller's local disk (WAL, which it needs,
// does not work on NFS, GPFS or Lustre). Commands append events, and the
// reconciler records the hooks' journal (package journal: hooks never
// open the database); the reconciler, one at a time, folds the new input
// events into the pool state, solves, and saves state and decisions in
// one transaction. Every exported method is one transaction.
package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/mattn/go-sqlite3"
)

// driverName is go-sqlite3 with a connect hook that keeps the -wal and
// -shm files after the last connection closes (SQLITE_FCNTL_PERSIST_WAL).
// Ordinary users read the database (trainer list, show, hosts) but may not
// create files beside it; a read-only WAL reader needs both files to
// exist, and SQLite deletes them when the last writer closes unless told
// to persist them. They are created with the database file's mode.
const driverName = "sqlite3_bftrainer"

func init() {
	sql.Register(driverName, &sqlite3.SQLiteDriver{ConnectHook: func(c *sqlite3.SQLiteConn) error {
		// A read-only connection cannot change it, and need not: only the
		// last writer to close decides.
		c.SetFileControlInt("main", sqlite3.SQLITE_FCNTL_PERSIST_WAL, 1)
		// A kept -wal file must still be emptied: truncate it when the log
		// restarts after a checkpoint and when the last connection closes.
		// Without this its checkpointed frames stay valid, and every hook,
		// the first connection of its process, re-reads them all (WAL
		// recovery), longer with every event.
		_, err := c.Exec("PRAGMA journal_size_limit = 0", nil)
		return err
	}})
}

//go:embed migrations/*.sql
var migrationFS embed.FS

// TimeFormat is how times are stored: UTC, fixed width, so that text order
// is time order and SQLite's date functions read it.
const TimeFormat = "2006-01-02T15:04:05.000000Z"

// DB is an open bftrainer database.
type DB struct {
	ephemeral bool
	db        *sql.DB // writes: BEGIN IMMEDIATE
	rdb       *sql.DB // reads: plain BEGIN, never takes the write lock
	path      string
	mem       memory   // what the last Save wrote (written.go)
	onClose   []func() // run by Close, after the database is closed
}

// Options tune Open.
type Options struct {
	// BusyTimeout is how long a writer waits for the lock. 0 means 5 s.
	BusyTimeout time.Duration
	// ReadOnly opens without writing (no migrations, no directory).
	ReadOnly bool
	// Mode is the permission of a newly created database file and its
	// directory's files; 0 means 0640.
	Mode os.FileMode
	// Ephemeral is for a process that writes a little and exits at once
	// (what the hooks were before the journal; its benchmarks compare
	// against it). Its connection never checkpoints: not on commit
	// (wal_autocheckpoint=0) and not on Close, which leaves the connection
	// to the process's exit. SQLite's checkpoint when the last connection
	// closes fsyncs the database, which is most of a hook's time on a
	// short-lived process; an exit without close is what a crash does, and
	// WAL is made for it. The reconciler checkpoints instead.
	Ephemeral bool
}

// errNotWAL is returned when SQLite could not put the database in WAL mode
// (for instance on a network filesystem).
var errNotWAL = errors.New("database is not in WAL mode")

// Open opens (creating if needed) the database at path and brings its
// schema up to date.
func Open(ctx context.Context, path string, o Options) (*DB, error) {
	if path == "" {
		return nil, errors.New("open store: empty path")
	}
	if o.BusyTimeout <= 0 {
		o.BusyTimeout = 5 * time.Second
	}
	if o.Mode == 0 {
		o.Mode = 0o640
	}
	if !o.ReadOnly {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, fmt.Errorf("open store: %w", err)
		}
		// Create the file with our mode rather than SQLite's 0644.
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, o.Mode)
		if err != nil {
			return nil, fmt.Errorf("open store: %w", err)
		}
		f.Close()
	}
	db, err := sql.Open(driverName, dsn(path, o, "immediate"))
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	rdb, err := sql.Open(driverName, dsn(path, o, "deferred"))
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	s := &DB{db: db, rdb: rdb, path: path}
	if err := s.prepare(ctx, o); err != nil {
		s.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	if o.Ephemeral {
		// One connection, so that the pragma holds for every statement.
		db.SetMaxOpenConns(1)
		if _, err := db.ExecContext(ctx, "PRAGMA wal_autocheckpoint = 0"); err != nil {
			s.Close()
			return nil, fmt.Errorf("open store %s: %w", path, err)
		}
		s.ephemeral = true
	}
	return s, nil
}

// Checkpoint copies the write-ahead log into the database, as far as
// readers allow, so that the next writer starts the log over. Hooks never
// checkpoint (Options.Ephemeral); the reconciler does, after each round,
// off the scheduler's path. PASSIVE: it never waits for or blocks anyone.
func (s *DB) Checkpoint(ctx context.Context) error {
	var busy, logged, moved int
	if err := s.db.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &logged, &moved); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// dsn builds the connection string. Each pragma is set on every pooled
// connection by the driver:
//   - _txlock=immediate: a deferred transaction that reads and then writes
//     fails at once with SQLITE_BUSY when another writer is active, whatever
//     the busy timeout; immediate takes the write lock up front and waits.
//   - _busy_timeout: the reconciler, the CLI and an admin may write at
//     once; wait rather than fail.
//   - WAL: readers never block the writer; synchronous=NORMAL is durable
//     across a crash of the process in WAL mode.
//   - foreign keys on: allocations name real nodes and Trainers.
func dsn(path string, o Options, txlock string) string {
	v := url.Values{}
	v.Set("_busy_timeout", strconv.FormatInt(o.BusyTimeout.Milliseconds(), 10))
	v.Set("_txlock", txlock)
	v.Set("_foreign_keys", "1")
	if o.ReadOnly {
		v.Set("mode", "ro")
	} else {
		v.Set("_journal_mode", "WAL")
		v.Set("_synchronous", "NORMAL")
	}
	return "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + v.Encode()
}

// prepare checks the connection's pragmas and brings the schema up to
// date. Where processes open a new database at once (the reconciler's
// service and a command, on a fresh install), one can find it locked
// without SQLite's busy handler waiting: the switch to WAL and the first
// migration each need the database alone. That is tried again, for as
// long as a lock is waited for (BusyTimeout): six processes creating one
// database at once failed in 4 of 150 tries before, none since
// (TestOpenRacingCreators does it with six handles of one process).
func (s *DB) prepare(ctx context.Context, o Options) error {
	deadline := time.Now().Add(o.BusyTimeout)
	for {
		err := s.check(ctx, o.ReadOnly)
		if err == nil && !o.ReadOnly {
			err = s.migrate(ctx)
		}
		if err == nil || !isBusy(err) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// isBusy reports SQLite's "database is locked" (SQLITE_BUSY, or
// SQLITE_LOCKED within a process).
func isBusy(err error) bool {
	var e sqlite3.Error
	return errors.As(err, &e) && (e.Code == sqlite3.ErrBusy || e.Code == sqlite3.ErrLocked)
}

// check reads the pragmas back: a database that silently fell back from
// WAL would make hooks block each other.
func (s *DB) check(ctx context.Context, readOnly bool) error {
	var mode string
	if err := s.db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return err
	}
	if !readOnly && !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("%w (journal_mode=%s): is it on a network filesystem?", errNotWAL, mode)
	}
	var fk int
	if err := s.db.QueryRowContext(ctx, "PRAGMA foreign_keys").Scan(&fk); err != nil {
		return err
	}
	if fk != 1 {
		return errors.New("foreign keys are off")
	}
	return nil
}

// Close closes the database.
func (s *DB) Close() error {
	defer func() {
		for _, f := range s.onClose {
			f()
		}
		s.onClose = nil
	}()
	if s.ephemeral {
		return nil // see Options.Ephemeral
	}
	err := s.db.Close()
	if err2 := s.rdb.Close(); err == nil {
		err = err2
	}
	return err
}

// OnClose has Close run f once the database is closed (a lock its opener
// holds for as long as the handle lives, say).
func (s *DB) OnClose(f func()) { s.onClose = append(s.onClose, f) }

// Path returns the database file's path.
func (s *DB) Path() string { return s.path }

// SQL returns a read handle, for ad-hoc queries (the admin's own SQL).
func (s *DB) SQL() *sql.DB { return s.rdb }

type migration struct {
	version int
	name    string
	sql     string
}

func migrations() ([]migration, error) {
	files, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, f := range files {
		base := filepath.Base(f)
		n, err := strconv.Atoi(strings.SplitN(base, "_", 2)[0])
		if err != nil {
			return nil, fmt.Errorf("migration %s: name must start with a number", base)
		}
		b, err := migrationFS.ReadFile(f)
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: n, name: base, sql: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	return out, nil
}

// ErrNewerSchema says the database was written by a newer bftrainer than
// this one; it is not written.
var ErrNewerSchema = errors.New("database schema newer than this bftrainer")

// migrate applies the embedded migrations not yet applied, in order, each
// in its own transaction.
func (s *DB) migrate(ctx context.Context) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	var have int
	err = s.db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&have)
	if err != nil {
		return err
	}
	if last := ms[len(ms)-1].version; have > last {
		// Written by a newer bftrainer (a downgrade): writing it with an
		// older schema's statements could lose what the newer one keeps.
		return fmt.Errorf("%w: the database is at schema version %d, this bftrainer knows up to %d: run the version that wrote it, or a newer one", ErrNewerSchema, have, last)
	} else if have == last {
		return nil
	}
	for _, m := range ms {
		if m.version <= have {
			continue
		}
		if err := s.tx(ctx, func(tx *sql.Tx) error {
			// Re-read inside the write lock: another process may have
			// migrated meanwhile.
			var cur int
			if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&cur); err != nil {
				return err
			}
			if cur >= m.version {
				return nil
			}
			if _, err := tx.ExecContext(ctx, m.sql); err != nil {
				return fmt.Errorf("migration %s: %w", m.name, err)
			}
			_, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", m.version))
			return err
		}); err != nil {
			return err
		}
	}
	return nil
}

// SchemaVersion returns the schema version of the database.
func (s *DB) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	err := s.db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v)
	return v, err
}

// tx runs fn in one immediate transaction, committed if fn returns nil.
func (s *DB) tx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(TimeFormat)
}

func parseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("bad time %q: %w", s, err)
	}
	return t, nil
}
