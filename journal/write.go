package journal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
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

// writeFile writes b under a temporary name in dir, then renames it to
// name. The temporary file is created exclusively and without following
// links; nothing else in dir is opened.
func writeFile(dir string, id ID, name string, b []byte, sync bool) (string, error) {
	if err := checkDir(dir); err != nil {
		return "", err
	}
	tmp := filepath.Join(dir, tmpPrefix+id.String())
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, fileMode)
	if err != nil {
		return "", err
	}
	_, err = f.Write(b)
	if err == nil && sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	path := filepath.Join(dir, name)
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return "", err
	}
	if sync {
		// The record is in place whatever this says; only its surviving
		// a power loss is in doubt, and writing it again would not help.
		syncDir(dir)
	}
	return path, nil
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
