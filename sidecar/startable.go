package sidecar

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/bftrainer/bftrainer/store"
	"github.com/bftrainer/bftrainer/trainer"
)

// StartOptions are what a submission is checked against before it is
// taken: whether its Trainer could ever start here. A submission that
// cannot is refused at once (CannotStart), rather than accepted and shown
// running while every round's start fails.
type StartOptions struct {
	// AllowRootOwner is trainer.allow_root_owner: the node agents run
	// a root-owned Trainer (tests only); otherwise they refuse it.
	AllowRootOwner bool
	// Local is true when the nodes are this machine (trainer.transport
	// = "local"): a working directory missing here is missing there.
	// Over ssh only what exists here is checked (a shared filesystem).
	Local bool
	// Launchers are the launchers the runner is built with, by name.
	Launchers map[string]trainer.Launcher
	// Lookup finds a user; nil: os/user.Lookup.
	Lookup func(name string) (*user.User, error)
}

// CannotStart is a submission refused because its Trainer could never
// start: Hint says what to do.
type CannotStart struct {
	Err  error
	Hint string
}

func (e *CannotStart) Error() string { return e.Err.Error() }
func (e *CannotStart) Unwrap() error { return e.Err }

// controllerPrograms is a launcher that runs programs on the controller
// (a rendezvous store, a driver): a submission needs them found here.
type controllerPrograms interface{ ControllerPrograms() []string }

// check says why a Trainer owned by owner and launched as launch could
// never start here, or nil as far as this machine can tell.
func (o *StartOptions) check(owner string, launch store.Launch) error {
	lookup := o.Lookup
	if lookup == nil {
		lookup = user.Lookup
	}
	u, err := lookup(owner)
	if err != nil {
		return &CannotStart{Err: fmt.Errorf("owner %q: not a user here: %w", owner, err),
			Hint: "a Trainer runs as its owner on the nodes: submit as a user known to this machine and the nodes"}
	}
	if u.Uid == "0" && !o.AllowRootOwner {
		return &CannotStart{Err: fmt.Errorf("owner %q: the node agents refuse to run a Trainer as root", owner),
			Hint: "submit as the ordinary user the Trainer should run as (e.g. sudo -u USER bftrainer trainer submit …); trainer.allow_root_owner is for tests"}
	}
	l, ok := o.Launchers[launch.Launcher]
	if !ok {
		have := make([]string, 0, len(o.Launchers))
		for n := range o.Launchers {
			have = append(have, n)
		}
		slices.Sort(have)
		return &CannotStart{Err: fmt.Errorf("launcher %q is not configured here", launch.Launcher),
			Hint: fmt.Sprintf("use one of %s (--launcher)", strings.Join(have, ", "))}
	}
	if cp, ok := l.(controllerPrograms); ok {
		for _, prog := range cp.ControllerPrograms() {
			if _, err := exec.LookPath(prog); err != nil {
				return &CannotStart{Err: fmt.Errorf("launcher %q: %w", launch.Launcher, err),
					Hint: fmt.Sprintf("install it, or set its path in [trainer.launcher.%s] of the configuration (bftrainer doctor checks it)", launch.Launcher)}
			}
		}
	}
	var spec trainer.Spec
	if err := json.Unmarshal(launch.Spec, &spec); err != nil || spec.Workdir == "" {
		return nil // the launch spec's own check speaks of it
	}
	return o.checkWorkdir(u, spec.Workdir)
}

// checkWorkdir says why u could not work in dir, as far as this machine
// can tell: missing (when the nodes are this machine), not a directory,
// or a directory on its path u may not enter.
func (o *StartOptions) checkWorkdir(u *user.User, dir string) error {
	hint := fmt.Sprintf("--workdir must be a directory %s can enter on every node", u.Username)
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist) && !o.Local:
		return nil // perhaps on the nodes only
	case err != nil:
		return &CannotStart{Err: fmt.Errorf("workdir %s: %w", dir, err), Hint: hint}
	case !st.IsDir():
		return &CannotStart{Err: fmt.Errorf("workdir %s: not a directory", dir), Hint: hint}
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gids, err2 := u.GroupIds()
	if err1 != nil || err2 != nil || uid == 0 {
		return nil // root enters anything; an unknown id: not checkable
	}
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && !mayEnter(fi, uint32(uid), gids) {
			return &CannotStart{Err: fmt.Errorf("workdir %s: %s may not enter %s (mode %v)", dir, u.Username, d, fi.Mode().Perm()), Hint: hint}
		}
		if d == "/" || d == "." {
			return nil
		}
	}
}

// mayEnter reports whether a user (uid, group ids) has search permission
// on a directory, by its mode bits (ACLs aside).
func mayEnter(fi os.FileInfo, uid uint32, gids []string) bool {
	sys, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return true
	}
	perm := fi.Mode().Perm()
	switch {
	case sys.Uid == uid:
		return perm&0o100 != 0
	case slices.Contains(gids, strconv.FormatUint(uint64(sys.Gid), 10)):
		return perm&0o010 != 0
	}
	return perm&0o001 != 0
}
