package main

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/bftrainer/bftrainer/sidecar"
)

// TestExplainReadOnly: a database on a read-only filesystem is not a
// matter of permissions (root is refused too): the hint says read-only
// (the pilot's read-only fault got the permissions hint).
func TestExplainReadOnly(t *testing.T) {
	cfg := Config{Database: "/var/lib/bftrainer/bftrainer.db"}
	for _, tc := range []struct {
		errno syscall.Errno
		want  string
	}{{syscall.EROFS, "read-only"}, {syscall.EACCES, "only root"}} {
		err := explain(cfg, fmt.Errorf("open store: %w%.0w", tc.errno, sidecar.ErrNotWritable))
		var h hintError
		if !errors.As(err, &h) || !strings.Contains(h.hint, tc.want) {
			t.Errorf("%v: hint %q, want one saying %q", tc.errno, h.hint, tc.want)
		}
	}
}
