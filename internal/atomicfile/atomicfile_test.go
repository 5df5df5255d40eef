package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

// TestWriteFile: the file is replaced whole with its mode, and nothing
// temporary is left beside it.
func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state")
	if err := os.WriteFile(path, []byte("old, longer than the new\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, []byte("new\n"), 0o600, true); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != "new\n" {
		t.Errorf("content %q, want %q", b, "new\n")
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	if es, _ := os.ReadDir(dir); len(es) != 1 {
		t.Errorf("%d files in the directory, want only the one written", len(es))
	}
}

// TestWriteFileFails: a write that cannot happen leaves the old file as
// it was and no temporary file.
func TestWriteFileFails(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub") // a directory: the rename over it fails
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(path, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, []byte("new"), 0o644, false); err == nil {
		t.Fatal("renamed over a non-empty directory")
	}
	es, _ := os.ReadDir(dir)
	if len(es) != 1 || !es[0].IsDir() {
		t.Errorf("directory holds %v, want only sub/", es)
	}
}
