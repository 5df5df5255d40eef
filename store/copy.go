package store

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"time"

	"github.com/mattn/go-sqlite3"
)

// Copying a whole database, for the reconciler's stand-in (sidecar's
// standin.go): while the database's filesystem is read-only, rounds run on
// a copy on another filesystem, and the copy replaces the database's
// content once it can be written again.

// CopyFile writes the database at src, read in one transaction, to the new
// file dst (SQLite's VACUUM INTO), with mode: a consistent copy whatever
// else reads or writes src meanwhile. src is opened read-only, so its
// filesystem may be; dst must not exist.
func CopyFile(ctx context.Context, src, dst string, mode os.FileMode) error {
	if mode == 0 {
		mode = 0o640
	}
	db, err := sql.Open(driverName, dsn(src, Options{ReadOnly: true, BusyTimeout: 5 * time.Second}, "deferred"))
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "VACUUM INTO ?", dst); err != nil {
		return fmt.Errorf("copy %s into %s: %w", src, dst, err)
	}
	if err := os.Chmod(dst, mode); err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	return nil
}

// Absorb replaces this database's content with the database at path's, in
// one write transaction (SQLite's online backup): a reader sees all of the
// old content or all of the new, and a crash leaves the old. Both must
// have one schema (the same migrations).
func (s *DB) Absorb(ctx context.Context, path string) error {
	src, err := Open(ctx, path, Options{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("absorb: %w", err)
	}
	defer src.Close()
	mine, err := s.version(ctx)
	if err != nil {
		return fmt.Errorf("absorb: %w", err)
	}
	theirs, err := src.version(ctx)
	if err != nil {
		return fmt.Errorf("absorb %s: %w", path, err)
	}
	if mine != theirs {
		return fmt.Errorf("absorb %s: its schema is version %d, this database's %d", path, theirs, mine)
	}
	sc, err := src.rdb.Conn(ctx)
	if err != nil {
		return fmt.Errorf("absorb %s: %w", path, err)
	}
	defer sc.Close()
	dc, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("absorb: %w", err)
	}
	defer dc.Close()
	err = dc.Raw(func(d any) error {
		return sc.Raw(func(r any) error {
			b, err := d.(*sqlite3.SQLiteConn).Backup("main", r.(*sqlite3.SQLiteConn), "main")
			if err != nil {
				return err
			}
			// One step copies every page under one write lock; a writer
			// holding the lock now makes it busy: tried again, for as
			// long as a writer waits for the lock.
			deadline := time.Now().Add(5 * time.Second)
			for {
				done, err := b.Step(-1)
				if done {
					return b.Finish()
				}
				if err != nil && (!isBusy(err) || time.Now().After(deadline)) {
					b.Finish()
					return err
				}
				select {
				case <-ctx.Done():
					b.Finish()
					return ctx.Err()
				case <-time.After(10 * time.Millisecond):
				}
			}
		})
	})
	if err != nil {
		return fmt.Errorf("absorb %s: %w", path, err)
	}
	// What this handle's last save wrote is no longer what is there.
	s.mem.mu.Lock()
	s.mem.last = nil
	s.mem.mu.Unlock()
	return nil
}

// version is the schema's: the migrations applied (user_version).
func (s *DB) version(ctx context.Context) (int, error) {
	var v int
	err := s.rdb.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v)
	return v, err
}
