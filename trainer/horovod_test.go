package trainer

import (
	"os"
	"path/filepath"
	"testing"
)

// TestHorovodSeenHandshake: the seen file says "acted on" only once the
// discovery script printed the current host file twice in a row (the
// second run of Horovod's discovery loop proves the first one's result was
// applied), and a change of the host file starts it over.
func TestHorovodSeenHandshake(t *testing.T) {
	dir := t.TempDir()
	const tr = "hv1"
	host := HostFile(dir, tr)
	seen := seenFile(dir, tr)
	if err := os.MkdirAll(filepath.Dir(host), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(content string) {
		t.Helper()
		if err := makeSeen(seen, "root"); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(host, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	read := func(want string) {
		t.Helper()
		b, err := ReadHosts(dir, tr)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != want {
			t.Fatalf("ReadHosts printed %q, want %q", b, want)
		}
	}
	seenIs := func(want string) {
		t.Helper()
		b, err := os.ReadFile(seen)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != want {
			t.Fatalf("seen file %q, want %q", b, want)
		}
	}
	a, b := "n1:1\nn2:1\n", "n1:1\n"
	write(a)
	seenIs("")
	read(a)
	seenIs(a) // printed once: not yet known to be acted on
	read(a)
	seenIs(a + seenAgain)
	read(a)
	seenIs(a + seenAgain)

	// A change empties it; a late write of the old content does not count.
	write(b)
	seenIs("")
	if err := os.WriteFile(seen, []byte(a+seenAgain), 0o644); err != nil {
		t.Fatal(err)
	}
	read(b)
	seenIs(b)
	read(b)
	seenIs(b + seenAgain)

	// Back to an earlier content: the earlier reads count for nothing.
	write(a)
	seenIs("")
	read(a)
	seenIs(a)
}
