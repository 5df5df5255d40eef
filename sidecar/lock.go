package sidecar

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// fileLock is an exclusive flock(2) on a file beside the database. The kernel
// drops it when the holder exits, even by kill -9: no stale lock survives
// a crash.
type fileLock struct{ f *os.File }

// tryLock takes the lock without waiting; ok is false if another process
// holds it.
func tryLock(path string) (l *fileLock, ok bool, err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, false, fmt.Errorf("lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("lock %s: %w", path, err)
	}
	return &fileLock{f: f}, true, nil
}

// Unlock releases the lock.
func (l *fileLock) Unlock() {
	if l != nil && l.f != nil {
		unix.Flock(int(l.f.Fd()), unix.LOCK_UN)
		l.f.Close()
		l.f = nil
	}
}
