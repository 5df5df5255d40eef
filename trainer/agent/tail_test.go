package agent_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bftrainer/bftrainer/trainer/trainertest"
	"github.com/bftrainer/bftrainer/trainer/wire"
)

// TestTailAsOwner: the node agent reads a Trainer's progress log with its
// launch owner's permissions, never root's: a file only the owner may
// read is read, one only root may read is refused, and only a launch of
// the request's run on the node is answered for.
func TestTailAsOwner(t *testing.T) {
	u := trainertest.MustUser(t, "bftail")
	a := trainertest.MustAgent(t)
	a.AllowRootOwner = false
	ctx := context.Background()
	node := a.N("n1")
	l := launch(t, "t1", node, "exec sleep 300")
	l.Owner, l.Workdir = u.Name, "/"
	if _, err := a.Start(ctx, l); err != nil {
		t.Fatal(err)
	}
	defer a.KillAll(ctx, node, false)
	// The owner must reach the files and run the reader (this test
	// binary): both in directories anyone may enter, as an installed
	// bftrainer is.
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	os.Chmod(filepath.Dir(dir), 0o755)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	a.Self = filepath.Join(dir, "agent.test")
	if err := os.WriteFile(a.Self, b, 0o755); err != nil {
		t.Fatal(err)
	}
	mine, roots := filepath.Join(dir, "mine.log"), filepath.Join(dir, "roots.log")
	for _, f := range []struct {
		path string
		uid  int
	}{{mine, u.UID}, {roots, 0}} {
		if err := os.WriteFile(f.path, []byte("1795984786.5 step=1 samples=64\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(f.path, f.uid, -1); err != nil {
			t.Fatal(err)
		}
	}
	got, err := a.Tail(ctx, node, "t1", wire.TailRequest{Path: mine, Run: l.Run})
	if err != nil || string(got.Data) != "1795984786.5 step=1 samples=64\n" {
		t.Fatalf("the owner's own file: %+v %v", got, err)
	}
	if got, err := a.Tail(ctx, node, "t1", wire.TailRequest{Path: roots, Run: l.Run}); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("a file only root may read: %+v %v; want permission denied", got, err)
	}
	if got, err := a.Tail(ctx, node, "t1", wire.TailRequest{Path: filepath.Join(dir, "none"), Run: l.Run}); err != nil || !got.Missing {
		t.Fatalf("a missing file: %+v %v", got, err)
	}
	if _, err := a.Tail(ctx, node, "t1", wire.TailRequest{Path: mine, Run: "cd"}); err == nil {
		t.Fatal("a request for another run was answered")
	}
	if _, err := a.Tail(ctx, node, "t2", wire.TailRequest{Path: mine}); err == nil {
		t.Fatal("a Trainer with no launch on the node was answered")
	}
	if _, err := a.Tail(ctx, node, "t1", wire.TailRequest{Path: "relative.log", Run: l.Run}); err == nil {
		t.Fatal("a relative path was read")
	}
}
