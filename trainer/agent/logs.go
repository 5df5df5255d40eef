package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/bftrainer/bftrainer/trainer/registry"
	"github.com/bftrainer/bftrainer/trainer/wire"
	"golang.org/x/sys/unix"
)

// ErrNotOwner is a log directory or file that belongs to someone else
// than the run's owner: a name reused by another user never reaches the
// first user's output.
var ErrNotOwner = errors.New("belongs to another user")

// openLog opens the program's output, LOGDIR/TRAINER/RUN/NODE.log, for
// appending, and returns it with its run directory. LOGDIR and
// LOGDIR/TRAINER are root's; RUN is new for every run of a Trainer (a
// reused name is a new run) and given to its owner when root creates it,
// with the log in it: nothing that existed before is ever given to anyone.
// Every open below LOGDIR/TRAINER is relative to a directory descriptor,
// never follows a symbolic link and checks what it opened.
func (a *Agent) openLog(l wire.Launch, own owner) (path string, f *os.File, runDir string, err error) {
	if err := registry.EnsureRoot(a.LogDir); err != nil {
		return "", nil, "", fmt.Errorf("log directory: %w", err)
	}
	td := filepath.Join(a.LogDir, l.Trainer)
	if err := os.Mkdir(td, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", nil, "", fmt.Errorf("log directory: %w", err)
	}
	if err := registry.EnsureRoot(td); err != nil {
		return "", nil, "", fmt.Errorf("log directory: %w", err)
	}
	runDir = filepath.Join(td, l.Run)
	created := true
	if err := os.Mkdir(runDir, 0o700); errors.Is(err, os.ErrExist) {
		created = false
	} else if err != nil {
		return "", nil, "", fmt.Errorf("log directory: %w", err)
	}
	dfd, err := unix.Open(runDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", nil, "", fmt.Errorf("log directory %s: %w", runDir, err)
	}
	defer unix.Close(dfd)
	var st unix.Stat_t
	if err := unix.Fstat(dfd, &st); err != nil {
		return "", nil, "", fmt.Errorf("log directory %s: %w", runDir, err)
	}
	// Root's: another agent's landing of the same run made it and has
	// not handed it over yet (the nodes of a run start at once, and share
	// LOGDIR where it is on a shared filesystem, as in the lab). It is
	// this run's — RUN is new for every run and only root creates in
	// LOGDIR/TRAINER — so it is handed over here too (the same owner).
	handOver := created || st.Uid == 0
	if !handOver && int(st.Uid) != own.uid {
		return "", nil, "", fmt.Errorf("log directory %s: owned by uid %d, not by %s: %w", runDir, st.Uid, l.Owner, ErrNotOwner)
	}
	name := l.Node + ".log"
	f, err = openOwned(dfd, runDir, name, own)
	if err != nil {
		return "", nil, "", err
	}
	if handOver && own.switchTo {
		// Our files are in it: now it may be the owner's.
		err := unix.Fchown(dfd, own.uid, own.gid)
		if err == nil {
			err = unix.Fchmod(dfd, 0o700)
		}
		if err != nil {
			f.Close()
			return "", nil, "", fmt.Errorf("log directory %s: %w", runDir, err)
		}
	}
	return filepath.Join(runDir, name), f, runDir, nil
}

// openOwned opens dir/name for appending: created (and given to the owner)
// when it does not exist, else only if it is a plain file of the owner's
// with one link (not another's file linked in).
func openOwned(dfd int, dir, name string, own owner) (*os.File, error) {
	const flags = unix.O_WRONLY | unix.O_APPEND | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err := unix.Openat(dfd, name, flags|unix.O_CREAT|unix.O_EXCL, 0o600)
	created := err == nil
	if errors.Is(err, unix.EEXIST) {
		fd, err = unix.Openat(dfd, name, flags, 0)
	}
	if err != nil {
		return nil, fmt.Errorf("log %s/%s: %w", dir, name, err)
	}
	f := os.NewFile(uintptr(fd), filepath.Join(dir, name))
	if created {
		if own.switchTo {
			if err := f.Chown(own.uid, own.gid); err != nil {
				f.Close()
				return nil, fmt.Errorf("log: %w", err)
			}
		}
		return f, nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("log: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 || int(st.Uid) != own.uid {
		f.Close()
		return nil, fmt.Errorf("log %s: not a plain file of the owner's (uid %d, %d links): %w", f.Name(), st.Uid, st.Nlink, ErrNotOwner)
	}
	return f, nil
}

// writeNodeFile writes the Trainer's node list, one per line, beside the
// log (RUN/NODE.nodes): a new file of the owner's renamed into place.
func writeNodeFile(runDir string, l wire.Launch, own owner) (string, error) {
	dfd, err := unix.Open(runDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("node file: %w", err)
	}
	defer unix.Close(dfd)
	name := l.Node + ".nodes"
	tmp := "." + name + "-" + wire.NewRun()
	fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return "", fmt.Errorf("node file: %w", err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	_, err = f.WriteString(strings.Join(l.Nodes, "\n") + "\n")
	if err == nil && own.switchTo {
		err = f.Chown(own.uid, own.gid)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(dfd, tmp, dfd, name)
	}
	if err != nil {
		unix.Unlinkat(dfd, tmp, 0)
		return "", fmt.Errorf("node file: %w", err)
	}
	return filepath.Join(runDir, name), nil
}
