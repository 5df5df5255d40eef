package journal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Written says where a record went.
type Written struct {
	ID   ID
	Path string // the record's file
	// Primary is why Dir did not take the record, when Fallback did: for
	// the hook's log, the event itself is safe.
	Primary error
}

// Write puts one record in the journal, or in the fallback when the
// journal cannot take it, and returns once it is there. The error is
// non-nil only when neither took it; it wraps the system's reason
// (syscall.ENOSPC, syscall.EROFS, ErrUnsafe, os.ErrNotExist, …).
func (j *Journal) Write(r Record) (Written, error) {
	b, err := encode(&r)
	if err != nil {
		return Written{ID: r.ID}, err
	}
	name := recordName(r.At, r.ID)
	w := Written{ID: r.ID}
	var errs []error
	for _, dir := range j.dirs() {
		path, err := writeFile(dir, r.ID, name, b, j.Sync)
		if err == nil {
			w.Path, w.Primary = path, errors.Join(errs...)
			return w, nil
		}
		errs = append(errs, fmt.Errorf("journal %s: %w", dir, err))
	}
	if len(errs) == 0 {
		return w, errors.New("journal: no directory configured")
	}
	return w, errors.Join(errs...)
}

// WriteFallback puts r in Fallback only, and returns once it is there:
// for a hook whose Write has not returned by its deadline (the journal's
// filesystem hung, the process starved), so that the record is safe
// before the process exits. r must carry the ID its Write chose (Write
// keeps a non-zero one): the same record in both directories, or written
// twice, is ingested once, by ID. Without a Fallback, or a zero ID, it
// writes nothing and says so.
func (j *Journal) WriteFallback(r Record) (Written, error) {
	w := Written{ID: r.ID}
	if r.ID == (ID{}) {
		return w, errors.New("journal: fallback write of a record without its id")
	}
	if j.Fallback == "" {
		return w, errors.New("journal: no fallback configured")
	}
	b, err := encode(&r)
	if err != nil {
		return w, err
	}
	path, err := writeFile(j.Fallback, r.ID, recordName(r.At, r.ID), b, j.Sync)
	if err != nil {
		return w, fmt.Errorf("journal %s: %w", j.Fallback, err)
	}
	w.Path = path
	return w, nil
}

// writeFile writes b under a temporary name in dir, then renames it to
// name. The temporary file is created exclusively and without following
// links; nothing else in dir is opened. Plain system calls: an os.File
// would start the runtime's poller, a tenth of a millisecond of a hook
// process's life.
func writeFile(dir string, id ID, name string, b []byte, sync bool) (string, error) {
	if err := checkDir(dir); err != nil {
		return "", err
	}
	tmp := filepath.Join(dir, tmpPrefix+id.String())
	fd, err := unix.Open(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, fileMode)
	if err != nil {
		return "", &os.PathError{Op: "create", Path: tmp, Err: err}
	}
	err = writeAll(fd, b)
	if err == nil && sync {
		err = unix.Fsync(fd)
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	path := filepath.Join(dir, name)
	if err == nil {
		err = unix.Rename(tmp, path)
	}
	if err != nil {
		unix.Unlink(tmp)
		return "", &os.PathError{Op: "write", Path: tmp, Err: err}
	}
	if sync {
		// The record is in place whatever this says; only its surviving
		// a power loss is in doubt, and writing it again would not help.
		syncDir(dir)
	}
	return path, nil
}

func writeAll(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Fsync(fd)
}
