package sidecar

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// fileLock is a flock(2) on a file beside the database (exclusive; shared
// for the stand-in's writers, standin.go). The kernel
// drops it when the holder exits, even by kill -9: no stale lock survives
// a crash.
type fileLock struct{ f *os.File }

// tryLock takes the lock without waiting; ok is false if another process
// holds it.
func tryLock(path string) (l *fileLock, ok bool, err error) {
	l, err = lockFile(path, unix.LOCK_EX, 0)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return nil, false, nil
	}
	return l, err == nil, err
}

// Unlock releases the lock.
func (l *fileLock) Unlock() {
	if l != nil && l.f != nil {
		unix.Flock(int(l.f.Fd()), unix.LOCK_UN)
		l.f.Close()
		l.f = nil
	}
}

// lockFile takes a flock(2) of the kind how (LOCK_SH or LOCK_EX) on path,
// trying every 10 ms for up to wait; an error if it is not had by then.
func lockFile(path string, how int, wait time.Duration) (*fileLock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		// A lock can be had on a file opened for reading: a writer of
		// the database's group, not root, may not create it.
		if f, err = os.Open(path); err != nil {
			return nil, fmt.Errorf("lock: %w", err)
		}
	}
	deadline := time.Now().Add(wait)
	for {
		err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		if err == nil {
			return &fileLock{f: f}, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
