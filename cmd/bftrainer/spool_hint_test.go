package main

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/bftrainer/bftrainer/sidecar"
)

// TestSpoolHint: a request the spool did not take says why — a full
// filesystem, a quota, a read-only one — and only names the spool's mode
// when that is what is wrong.
func TestSpoolHint(t *testing.T) {
	cfg := defaults()
	for _, tt := range []struct {
		errno syscall.Errno
		want  string
	}{
		{syscall.ENOSPC, "is full"},
		{syscall.EDQUOT, "quota"},
		{syscall.EROFS, "read-only"},
		{syscall.EACCES, "mode 1733"},
	} {
		err := fmt.Errorf("spool: %w%.0w", &os.PathError{Op: "open", Path: cfg.Spool + "/.tmp-1", Err: tt.errno}, sidecar.ErrSpool)
		var he hintError
		if got := explain(cfg, err); !asHint(got, &he) || !strings.Contains(he.hint, tt.want) {
			t.Errorf("%v: hint %q, want it to say %q", tt.errno, he.hint, tt.want)
		}
	}
}

func asHint(err error, he *hintError) bool {
	h, ok := err.(hintError)
	*he = h
	return ok
}
