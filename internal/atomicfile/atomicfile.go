// Package atomicfile writes a file whole or not at all: a temporary file
// in the same directory, renamed over the old one. It imports nothing of
// the module, so every package may use it — trainer, journal and sidecar
// in production, the labs in tests — without crossing the layering
// internal/layout checks.
package atomicfile

import (
	"os"
	"path/filepath"
)

// WriteFile writes b to path with mode, whole or not at all: readers see
// the old file or the new one, never part of one. The temporary file,
// ".tmp-<name>-<random>" beside path, is removed on failure; with sync it
// is synced before the rename (state that must survive a power cut).
func WriteFile(path string, b []byte, mode os.FileMode, sync bool) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil && sync {
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
