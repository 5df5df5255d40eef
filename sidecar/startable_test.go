package sidecar

import (
	"errors"
	"strings"
	"testing"

	"github.com/bftrainer/bftrainer/store"
	"github.com/bftrainer/bftrainer/trainer"
)

// TestStartableUnknownOwner: an owner this machine does not know (looked
// up for real) can never run a Trainer: refused with a hint, before its
// launcher is looked at; a known one with a configured launcher passes.
func TestStartableUnknownOwner(t *testing.T) {
	ls, err := trainer.Builtin().Build(func(string, any) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	o := &StartOptions{Local: true, Launchers: ls}
	launch := store.Launch{Launcher: trainer.Exec, Spec: []byte(`{"argv":["/bin/true"],"workdir":"/"}`)}
	var cs *CannotStart
	if err := o.check("no-such-user-bft27", launch); !errors.As(err, &cs) || !strings.Contains(err.Error(), `owner "no-such-user-bft27": not a user here`) || cs.Hint == "" {
		t.Fatalf("unknown owner: %v", err)
	}
	if err := o.check("nobody", launch); err != nil {
		t.Fatalf("nobody, exec, workdir /: %v", err)
	}
	if err := o.check("nobody", store.Launch{Launcher: "mpi-nonesuch"}); !errors.As(err, &cs) || !strings.Contains(err.Error(), "not configured here") {
		t.Fatalf("a launcher not configured: %v", err)
	}
}
