package journal

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bftrainer/bftrainer/store"
)

// Result counts what one Ingest did.
type Result struct {
	Records  int // records recorded (or found recorded already) and removed
	Added    int // events added to the history; a record ingested twice adds none
	Bad      int // bad files moved aside or removed
	Unlisted int // of them, not given a row each (over the error budget), counted instead
	Left     int // records left for the next Ingest (more than one batch)
	InFlight int // temporary files of hooks still writing
}

// Source is the events' source of the error rows Ingest writes.
const Source = "journal"

// file is one directory entry Ingest looks at.
type file struct {
	dir, name string
	info      fs.FileInfo // lstat
	rec       Record
	bad       string // why it is not a record; "" for a good one
	huge      bool   // bad and too large to keep: removed
}

func (f *file) path() string { return filepath.Join(f.dir, f.name) }

// Ingest records the journal's records in the history exactly once, in
// the hooks' order, then removes their files; it moves bad files aside,
// with an error row each up to the error budget. It is the first step of
// every reconciler round: the caller is the database's single writer, but
// two Ingests at once would still record every record once. When the
// database cannot be written, nothing is removed and the next call
// retries. A Result with Left > 0 asks for another call soon.
func (j *Journal) Ingest(ctx context.Context, db *store.DB, now time.Time) (Result, error) {
	j.defaults()
	var res Result
	var errs []error
	var good, bad []*file
	for _, dir := range j.dirs() {
		g, b, inflight, err := j.scan(dir, now)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("journal %s: %w", dir, err))
			}
			continue
		}
		good, bad, res.InFlight = append(good, g...), append(bad, b...), res.InFlight+inflight
	}
	// Records by name (the hooks' order, across both directories), one
	// batch at a time; abandoned temporary files (".tmp-") have no time in
	// their name and sort first, to be read for theirs.
	slices.SortFunc(good, func(a, b *file) int { return cmp.Compare(a.name, b.name) })
	if len(good) > j.maxBatch {
		res.Left, good = len(good)-j.maxBatch, good[:j.maxBatch]
	}
	owners := newOwners()
	var recs []*file
	for _, f := range good {
		err := j.read(f, owners)
		var b badFile
		switch {
		case err == nil:
			recs = append(recs, f)
		case errors.As(err, &b):
			f.bad = b.reason
			if strings.HasPrefix(f.name, tmpPrefix) {
				f.bad = "left by a hook that died while writing it: " + f.bad
			}
			bad = append(bad, f)
		case errors.Is(err, os.ErrNotExist):
			// Gone meanwhile (another Ingest).
		default:
			// Not the file's fault (out of file descriptors, the user
			// database unreachable): it stays for the next call.
			res.Left++
			errs = append(errs, fmt.Errorf("journal: %w", err))
		}
	}
	slices.SortStableFunc(recs, func(a, b *file) int {
		return cmp.Or(cmp.Compare(a.rec.At.UnixNano(), b.rec.At.UnixNano()), bytes.Compare(a.rec.ID[:], b.rec.ID[:]))
	})
	slices.SortFunc(bad, func(a, b *file) int { return cmp.Compare(a.path(), b.path()) })
	if len(recs) == 0 && len(bad) == 0 && j.budget().Carried() == 0 {
		return res, errors.Join(errs...)
	}

	var evs []store.Event
	for _, f := range recs {
		evs = append(evs, f.rec.events()...)
	}
	rows, listed, carry, err := j.errorRows(ctx, db, bad, now)
	if err != nil {
		return res, errors.Join(append(errs, err)...)
	}
	all := append(evs, rows...)
	if _, err := db.AppendOnce(ctx, all...); err != nil {
		// Nothing removed: the next round retries.
		return res, errors.Join(append(errs, fmt.Errorf("ingest journal: %w", err))...)
	}
	if j.afterCommit != nil {
		if err := j.afterCommit(); err != nil {
			return res, err
		}
	}
	res.Records, res.Bad, res.Unlisted = len(recs), len(bad), len(bad)-listed
	for _, e := range all[:len(evs)] {
		if e.ID != 0 { // set when inserted
			res.Added++
		}
	}
	for _, f := range recs {
		if err := os.Remove(f.path()); err != nil && !errors.Is(err, os.ErrNotExist) {
			// Recorded: a later Ingest finds it recorded and removes it.
			errs = append(errs, fmt.Errorf("journal: %w", err))
		}
	}
	for i, f := range bad {
		if i < listed && !f.huge {
			if moveAside(f, now) == nil {
				continue
			}
		}
		os.RemoveAll(f.path()) // never follows a link
	}
	j.budget().Save(carry)
	for _, dir := range j.dirs() {
		trimBad(dir)
	}
	return res, errors.Join(errs...)
}

// scan lists a journal directory: record files and abandoned temporary
// files to read, entries that are bad by their name or type alone, and
// the count of temporary files still being written.
func (j *Journal) scan(dir string, now time.Time) (good, bad []*file, inflight int, err error) {
	if err := checkDir(dir); err != nil {
		return nil, nil, 0, err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, 0, err
	}
	for _, e := range ents {
		info, err := e.Info()
		if err != nil {
			continue // gone meanwhile
		}
		f := &file{dir: dir, name: e.Name(), info: info}
		name := e.Name()
		switch _, _, isRecord := parseName(name); {
		case !info.Mode().IsRegular():
			f.bad = fmt.Sprintf("not a regular file (%v)", info.Mode().Type())
			bad = append(bad, f)
		case strings.HasPrefix(name, tmpPrefix):
			if now.Sub(info.ModTime()) < j.tempAge {
				inflight++
				continue
			}
			good = append(good, f)
		case isRecord:
			good = append(good, f)
		default:
			f.bad = "not a journal file name"
			f.huge = info.Size() > MaxRecord
			bad = append(bad, f)
		}
	}
	return good, bad, inflight, nil
}

// badFile is what makes a file bad: its content or its metadata, not a
// failure to read it.
type badFile struct{ reason string }

func (b badFile) Error() string { return b.reason }

func badf(format string, a ...any) error { return badFile{fmt.Sprintf(format, a...)} }

// read reads one record file, without following links and without
// believing anything its name or content says that the file system does
// not confirm. A badFile error condemns the file; any other leaves it for
// a later try.
func (j *Journal) read(f *file, owners *owners) error {
	fd, err := os.OpenFile(f.path(), os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return badf("a symbolic link")
		}
		return err
	}
	defer fd.Close()
	fi, err := fd.Stat()
	if err != nil {
		return err
	}
	f.info = fi
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return errors.New("no owner information")
	}
	may, err := owners.may(st.Uid, f.dir)
	if err != nil {
		return err
	}
	switch {
	case !fi.Mode().IsRegular():
		return badf("not a regular file (%v)", fi.Mode().Type())
	case st.Nlink != 1:
		return badf("%d links: a record has one", st.Nlink)
	case !may:
		return badf("owned by uid %d, who may not write the journal", st.Uid)
	case fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 || fi.Mode().Perm()&^0o644 != 0:
		return badf("mode %v: a record is %v", fi.Mode(), fs.FileMode(fileMode))
	case fi.Size() > MaxRecord:
		f.huge = true
		return badf("%d bytes, more than %d", fi.Size(), MaxRecord)
	}
	b, err := io.ReadAll(io.LimitReader(fd, MaxRecord+1))
	if err != nil {
		return err
	}
	if len(b) > MaxRecord {
		f.huge = true
		return badf("more than %d bytes", MaxRecord)
	}
	rec, err := decode(b)
	if err != nil {
		if len(b) == 0 {
			return badf("empty (a power loss before the record reached the disk?)")
		}
		return badFile{err.Error()}
	}
	if at, id, ok := parseName(f.name); ok {
		if id != rec.ID || at != rec.At.UnixNano() {
			return badf("record %s at %d does not match its name", rec.ID, rec.At.UnixNano())
		}
	} else if f.name != tmpPrefix+rec.ID.String() {
		return badf("record %s does not match its temporary name", rec.ID)
	}
	f.rec = rec
	return nil
}

// owners decides who may have written a record: root, us, the
// directory's owner and the members of its group.
type owners struct {
	dirs  map[string]*syscall.Stat_t
	users map[[2]uint32]bool
}

func newOwners() *owners {
	return &owners{dirs: map[string]*syscall.Stat_t{}, users: map[[2]uint32]bool{}}
}

func (o *owners) may(uid uint32, dir string) (bool, error) {
	if uid == 0 || int(uid) == os.Geteuid() {
		return true, nil
	}
	st, ok := o.dirs[dir]
	if !ok {
		fi, err := os.Lstat(dir)
		if err != nil {
			return false, err
		}
		if st, ok = fi.Sys().(*syscall.Stat_t); !ok {
			return false, errors.New("no owner information")
		}
		o.dirs[dir] = st
	}
	if uid == st.Uid {
		return true, nil
	}
	key := [2]uint32{uid, st.Gid}
	if v, ok := o.users[key]; ok {
		return v, nil
	}
	v, err := inGroup(uid, st.Gid)
	if err != nil {
		return false, err
	}
	o.users[key] = v
	return v, nil
}

// inGroup tells whether the user uid is in the group gid; an unknown
// user is in none.
func inGroup(uid, gid uint32) (bool, error) {
	u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10))
	if err != nil {
		if errors.As(err, new(user.UnknownUserIdError)) {
			return false, nil
		}
		return false, fmt.Errorf("owner uid %d: %w", uid, err)
	}
	g := strconv.FormatUint(uint64(gid), 10)
	if u.Gid == g {
		return true, nil
	}
	gids, err := u.GroupIds()
	if err != nil {
		return false, fmt.Errorf("groups of %s: %w", u.Username, err)
	}
	return slices.Contains(gids, g), nil
}

// budget is the journal's error budget for its bad files.
func (j *Journal) budget() Budget {
	return Budget{Source: Source, Limit: j.errorBudget, Window: j.errorWindow,
		Carry: filepath.Join(badPath(j.Dir), unlistedFile), What: "bad files in the journal"}
}

// errorRows are the error rows for the bad files, within the budget.
func (j *Journal) errorRows(ctx context.Context, db *store.DB, bad []*file, now time.Time) (rows []store.Event, listed, carry int, err error) {
	evs := make([]store.Event, len(bad))
	for i, f := range bad {
		evs[i] = badRow(f, now)
	}
	rows, listed, carry, err = j.budget().Rows(ctx, db, evs, now)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("ingest journal: %w", err)
	}
	return rows, listed, carry, nil
}

func badRow(f *file, now time.Time) store.Event {
	var uid, ino uint64
	if st, ok := f.info.Sys().(*syscall.Stat_t); ok {
		uid, ino = uint64(st.Uid), st.Ino
	}
	d, _ := json.Marshal(map[string]any{"dir": f.dir, "file": f.name, "size": f.info.Size(), "uid": uid,
		"mode": f.info.Mode().String(), "mtime": f.info.ModTime().UTC()})
	return store.Event{At: now, Kind: store.KindError, Source: Source, Context: f.name, Detail: d,
		Error: "bad journal file " + f.name + ": " + f.bad,
		// The same file seen again (a crash before it was moved aside)
		// gets no second row.
		Origin: fmt.Sprintf("bad.%d.%d.%s", ino, f.info.ModTime().UnixNano(), f.name)}
}

// badPath is where the bad files of the journal dir go: beside it, not
// in it, so that an empty journal is an empty directory (a service can be
// started by its being not empty).
func badPath(dir string) string { return filepath.Clean(dir) + badSuffix }

// ownDir tells the journal's own bad-file directory from an entry
// someone else made under that name.
func ownDir(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && fi.IsDir() && int(st.Uid) == os.Geteuid() && fi.Mode().Perm()&0o077 == 0
}

// moveAside moves a bad file beside the journal, named by when it was
// moved.
func moveAside(f *file, now time.Time) error {
	dir := badPath(f.dir)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	if fi, err := os.Lstat(dir); err != nil || !ownDir(fi) {
		return fmt.Errorf("%s is not ours", dir)
	}
	return os.Rename(f.path(), filepath.Join(dir, fmt.Sprintf("%019d-%s", now.UnixNano(), f.name)))
}

// trimBad keeps the newest keepBad bad files of dir.
func trimBad(dir string) {
	dir = badPath(dir)
	if fi, err := os.Lstat(dir); err != nil || !ownDir(fi) {
		return
	}
	ents, err := os.ReadDir(dir) // sorted by name: oldest first
	if err != nil {
		return
	}
	var moved []string
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), ".") {
			moved = append(moved, e.Name())
		}
	}
	for _, n := range moved[:max(0, len(moved)-keepBad)] {
		os.RemoveAll(filepath.Join(dir, n))
	}
}

// unlistedFile, among the journal's bad files, counts bad files not yet
// given a row, across Ingests (Budget.Carry).
const unlistedFile = ".unlisted"

// Backlog counts the records waiting in the journal and its fallback and
// returns the oldest one's time, for status.
func (j *Journal) Backlog() (n int, oldest time.Time, err error) {
	var first int64
	for _, dir := range j.dirs() {
		if err := checkDir(dir); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			return n, oldest, fmt.Errorf("journal %s: %w", dir, err)
		}
		ents, err := os.ReadDir(dir)
		if err != nil {
			return n, oldest, fmt.Errorf("journal %s: %w", dir, err)
		}
		for _, e := range ents {
			if at, _, ok := parseName(e.Name()); ok {
				n++
				if first == 0 || at < first {
					first = at
				}
			}
		}
	}
	if n > 0 {
		oldest = time.Unix(0, first)
	}
	return n, oldest, nil
}
