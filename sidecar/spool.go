package sidecar

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bftrainer/bftrainer/journal"
	"github.com/bftrainer/bftrainer/names"
	"github.com/bftrainer/bftrainer/store"
)

// spool is how unprivileged users reach the database they may not write:
// they drop a request file in a directory with the sticky bit (mode 1733,
// as cron and at do), and the privileged reconciler ingests it. The
// request's author is the file's owner, which the kernel proves; nothing
// the file says about its author is believed.
type spool struct {
	Dir string
	// RunnerState is where submissions' environment values are sealed
	// (sealEnv); "": dropped.
	RunnerState string
}

// spoolRequest is one spooled request.
type spoolRequest struct {
	Kind    store.Kind      `json:"kind"` // submit, cancel, progress, exit
	Trainer string          `json:"trainer"`
	Value   float64         `json:"value,omitempty"`
	Detail  json.RawMessage `json:"detail,omitempty"`
	At      time.Time       `json:"at"`
}

// maxRequest bounds a request file: a submission with a long curve and
// command is a few kilobytes.
const maxRequest = 1 << 20

// SpoolMode is the spool directory's mode: anyone may create files, only
// owners may remove or rename theirs, nobody but root may list it.
const SpoolMode = os.ModeSticky | 0o733

// put writes a request atomically (a hidden temporary file renamed into
// place, so the reconciler never reads half a request) and returns its
// path.
func (s *spool) put(r spoolRequest) (string, error) {
	if s.Dir == "" {
		// Not the working directory, where no reconciler would look.
		return "", errors.New("spool: no spool directory is configured (path.spool)")
	}
	b, err := json.Marshal(r)
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp(s.Dir, ".tmp-*")
	if err != nil {
		return "", fmt.Errorf("spool: %w", err)
	}
	tmp := f.Name()
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(tmp)
		return "", fmt.Errorf("spool: %w", err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("spool: %w", err)
	}
	name := filepath.Join(s.Dir, fmt.Sprintf("%d-%d-%s.req", time.Now().UnixNano(), os.Getpid(), strings.TrimPrefix(filepath.Base(tmp), ".tmp-")))
	if err := os.Rename(tmp, name); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("spool: %w", err)
	}
	return name, nil
}

// maxIngest bounds the requests one round reads; more are left for the
// next round, which the reconciler runs at once.
const maxIngest = 1000

// budget bounds the error rows of bad requests: anyone may drop a file in
// the spool, and junk must not become a permanent error stream. What is
// over budget is counted beside the spool (SPOOL.bad, root's).
func (s *spool) budget() journal.Budget {
	return journal.Budget{Source: "spool", Carry: filepath.Join(filepath.Clean(s.Dir)+".bad", ".unlisted"), What: "bad requests in the spool"}
}

// ingest turns complete request files, at most maxIngest, into events
// attributed to their owners, then removes the files. Bad files are
// removed, with an error row each within the error budget; temporary
// files older than an hour are removed. more reports files left for
// another call.
func (s *spool) ingest(ctx context.Context, db *store.DB, now time.Time) (more bool, err error) {
	if err := s.checkDir(); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return false, err
	}
	ents, err := os.ReadDir(s.Dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return false, fmt.Errorf("read spool: %w", err)
	}
	var names []string
	for _, e := range ents {
		n := e.Name()
		if strings.HasPrefix(n, ".tmp-") {
			if fi, err := e.Info(); err == nil && now.Sub(fi.ModTime()) > time.Hour {
				os.Remove(filepath.Join(s.Dir, n))
			}
			continue
		}
		if strings.HasSuffix(n, ".req") {
			names = append(names, n)
		}
	}
	slices.Sort(names) // names start with the time they were written
	if len(names) > maxIngest {
		names, more = names[:maxIngest], true
	}
	var evs, bad []store.Event
	var done []string
	for _, n := range names {
		path := filepath.Join(s.Dir, n)
		ev, err := readRequest(path, now)
		if err == nil {
			err = sealEnv(s.RunnerState, &ev)
		}
		if err != nil {
			bad = append(bad, store.Event{At: now, Kind: store.KindError, Source: "spool", Context: n, Error: err.Error()})
		} else {
			evs = append(evs, ev)
		}
		done = append(done, path)
	}
	b := s.budget()
	rows, _, carry, err := b.Rows(ctx, db, bad, now)
	if err != nil {
		return false, err
	}
	if all := append(evs, rows...); len(all) > 0 {
		if _, err := db.Append(ctx, all...); err != nil {
			return false, err // files stay; the next round retries
		}
	}
	for _, p := range done {
		os.Remove(p)
	}
	b.Save(carry)
	return more, nil
}

// pending reports whether a complete request waits in the spool (one that
// ingest would read).
func (s *spool) pending() bool {
	if s.checkDir() != nil {
		return false
	}
	ents, err := os.ReadDir(s.Dir)
	if err != nil {
		return false
	}
	return slices.ContainsFunc(ents, func(e os.DirEntry) bool { return strings.HasSuffix(e.Name(), ".req") })
}

// errSpoolUnsafe is returned when the spool directory could let one user
// pass off a request as another's: it must belong to the reconciler's
// user, and be writable by others only with the sticky bit (which stops
// them from renaming or replacing each other's files).
var errSpoolUnsafe = errors.New("spool directory is unsafe")

// checkDir checks the spool directory before anything in it is believed.
func (s *spool) checkDir() error {
	fi, err := os.Lstat(s.Dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory: %w", s.Dir, errSpoolUnsafe)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s: no owner information: %w", s.Dir, errSpoolUnsafe)
	}
	if int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%s is owned by uid %d, not by us: %w", s.Dir, st.Uid, errSpoolUnsafe)
	}
	if fi.Mode().Perm()&0o022 != 0 && fi.Mode()&os.ModeSticky == 0 {
		return fmt.Errorf("%s is writable by others without the sticky bit (mode %v): %w", s.Dir, fi.Mode(), errSpoolUnsafe)
	}
	return nil
}

// readRequest reads one request without following links and attributes it
// to the file's owner.
func readRequest(path string, now time.Time) (store.Event, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return store.Event{}, fmt.Errorf("open request: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return store.Event{}, err
	}
	if !fi.Mode().IsRegular() {
		return store.Event{}, errors.New("request is not a regular file")
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return store.Event{}, errors.New("no owner information")
	}
	if st.Nlink != 1 {
		return store.Event{}, errors.New("request file has other links")
	}
	owner, err := userName(st.Uid)
	if err != nil {
		return store.Event{}, err
	}
	b, err := io.ReadAll(io.LimitReader(f, maxRequest+1))
	if err != nil {
		return store.Event{}, err
	}
	if len(b) > maxRequest {
		return store.Event{}, fmt.Errorf("request larger than %d bytes", maxRequest)
	}
	var r spoolRequest
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return store.Event{}, fmt.Errorf("request from %s: %w", owner, err)
	}
	switch r.Kind {
	case store.KindSubmit, store.KindCancel, store.KindProgress, store.KindExit:
	default:
		return store.Event{}, fmt.Errorf("request from %s: unknown kind %q", owner, r.Kind)
	}
	if err := names.ValidateTrainer(r.Trainer); err != nil {
		return store.Event{}, fmt.Errorf("request from %s: %w", owner, err)
	}
	at := r.At
	if at.IsZero() || at.After(now) {
		at = now
	}
	ev := store.Event{At: at, Kind: r.Kind, Source: "spool", Trainer: r.Trainer, User: owner, Detail: r.Detail}
	if r.Kind == store.KindProgress {
		ev.Value, ev.HasVal = r.Value, true
	}
	return ev, nil
}

func userName(uid uint32) (string, error) {
	u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10))
	if err != nil {
		return "", fmt.Errorf("owner uid %d: %w", uid, err)
	}
	return u.Username, nil
}
