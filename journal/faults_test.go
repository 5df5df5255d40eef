package journal

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bftrainer/bftrainer/store"
)

// mountTmpfs mounts a tmpfs with the given options under a temporary
// directory, unmounted at cleanup.
func mountTmpfs(tb testing.TB, opts string) string {
	tb.Helper()
	dir := filepath.Join(tb.TempDir(), "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, opts); err != nil {
		if errors.Is(err, syscall.EPERM) {
			tb.Skipf("cannot mount a tmpfs (needs root): %v", err)
		}
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			unix.Unmount(dir, unix.MNT_DETACH)
		}
	})
	return dir
}

func remount(tb testing.TB, dir string, flags uintptr) {
	tb.Helper()
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_REMOUNT|flags, ""); err != nil {
		tb.Fatal(err)
	}
}

// fill uses up the filesystem at dir: its bytes, or its inodes.
func fill(tb testing.TB, dir string, inodes bool) {
	tb.Helper()
	if inodes {
		for i := 0; ; i++ {
			f, err := os.Create(filepath.Join(dir, "inode-"+itoa(i)))
			if err != nil {
				if errors.Is(err, syscall.ENOSPC) {
					return
				}
				tb.Fatal(err)
			}
			f.Close()
		}
	}
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return
			}
			tb.Fatal(err)
		}
	}
}

// unfill gives the space back.
func unfill(tb testing.TB, dir string) {
	tb.Helper()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if n := e.Name(); n == "filler" || len(n) > 6 && n[:6] == "inode-" {
			os.Remove(filepath.Join(dir, n))
		}
	}
}

// faultSetup is the database and its journal on one small filesystem,
// the fallback on another (as /run is).
func faultSetup(t *testing.T, opts string) (mnt string, j *Journal, db *store.DB) {
	t.Helper()
	mnt = mountTmpfs(t, opts)
	db = mustOpen(t, filepath.Join(mnt, "bftrainer.db"))
	j = &Journal{Dir: filepath.Join(mnt, "journal"), Fallback: filepath.Join(t.TempDir(), "fallback")}
	for _, d := range []string{j.Dir, j.Fallback} {
		if err := Create(d, -1); err != nil {
			t.Fatal(err)
		}
	}
	return mnt, j, db
}

// checkAll checks that jobs 0..n-1 are recorded exactly once and that
// both directories are empty.
func checkAll(t *testing.T, j *Journal, db *store.DB, n int) {
	t.Helper()
	counts := jobCounts(t, db)
	for i := range n {
		if c := counts[itoa(i)]; c != [2]int{1, 1} {
			t.Errorf("job %d recorded %v times (hook, leave), want once each", i, c)
		}
	}
	if len(counts) != n {
		t.Errorf("%d jobs recorded, want %d", len(counts), n)
	}
	if left := append(entries(t, j.Dir), entries(t, j.Fallback)...); len(left) != 0 {
		t.Errorf("files left: %v", left)
	}
}

// TestFullFilesystem: with the database's filesystem full (bytes, or
// inodes), a hook's record goes to the fallback and the hook is told why;
// no temporary file is left; without a fallback the hook gets ENOSPC at
// once. Once there is room again, one ingest records everything once.
func TestFullFilesystem(t *testing.T) {
	for _, tt := range []struct {
		name   string
		opts   string
		inodes bool
	}{
		{"bytes", "size=2m", false},
		{"inodes", "size=8m,nr_inodes=64", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			mnt, j, db := faultSetup(t, tt.opts)
			mustWrite(t, j, hookRecord("0", t0))
			fill(t, mnt, tt.inodes)
			for i := 1; i < 5; i++ {
				w := mustWrite(t, j, hookRecord(itoa(i), t0.Add(time.Duration(i)*time.Second)))
				if !errors.Is(w.Primary, syscall.ENOSPC) || filepath.Dir(w.Path) != j.Fallback {
					t.Fatalf("write %d on a full filesystem: %+v; want it in the fallback, Primary ENOSPC", i, w)
				}
			}
			if _, err := (&Journal{Dir: j.Dir}).Write(hookRecord("99", t0)); !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("write without fallback: %v, want ENOSPC", err)
			}
			if left := entries(t, j.Dir); len(left) != 1 {
				t.Fatalf("journal holds %v, want only the first record (no temporary file)", left)
			}
			// Ingest while full: it may fail (SQLite cannot grow) but loses
			// nothing.
			res, err := j.Ingest(context.Background(), db, t0.Add(time.Minute))
			t.Logf("ingest while full: %+v, %v", res, err)
			unfill(t, mnt)
			mustIngest(t, j, db, t0.Add(time.Minute))
			checkAll(t, j, db, 5)
		})
	}
}

// TestReadOnlyFilesystem: with the database's filesystem read-only, a
// hook's record goes to the fallback; the ingest fails and removes
// nothing; once writable, everything is recorded once.
func TestReadOnlyFilesystem(t *testing.T) {
	mnt, j, db := faultSetup(t, "size=8m")
	mustWrite(t, j, hookRecord("0", t0))
	mustWrite(t, j, hookRecord("1", t0.Add(time.Second)))
	// A remount refuses while files are open for writing (the kernel's
	// errors=remount-ro does not ask): close the database first.
	db.Close()
	remount(t, mnt, unix.MS_RDONLY)
	for i := 2; i < 5; i++ {
		w := mustWrite(t, j, hookRecord(itoa(i), t0.Add(time.Duration(i)*time.Second)))
		if !errors.Is(w.Primary, syscall.EROFS) || filepath.Dir(w.Path) != j.Fallback {
			t.Fatalf("write %d on a read-only filesystem: %+v; want it in the fallback, Primary EROFS", i, w)
		}
	}
	if ro, err := store.Open(context.Background(), db.Path(), store.Options{}); err != nil {
		t.Logf("open on a read-only filesystem: %v", err)
	} else {
		_, err := j.Ingest(context.Background(), ro, t0.Add(time.Minute))
		ro.Close()
		if err == nil {
			t.Fatal("ingest into a read-only database succeeded")
		}
		t.Logf("ingest while read-only: %v", err)
	}
	if n := len(entries(t, j.Dir)) + len(entries(t, j.Fallback)); n != 5 {
		t.Fatalf("%d files after the failed ingest, want all 5", n)
	}
	remount(t, mnt, 0)
	db = mustOpen(t, db.Path())
	mustIngest(t, j, db, t0.Add(time.Minute))
	checkAll(t, j, db, 5)
}

// TestCorruptDatabase: a hook writes its record whatever state the
// database is in; ingest into a corrupt database fails and removes
// nothing; into the database that replaces it, everything is recorded
// once.
func TestCorruptDatabase(t *testing.T) {
	j := mustJournal(t)
	j.Fallback = ""
	path := filepath.Join(t.TempDir(), "bftrainer.db")
	db := mustOpen(t, path)
	mustWrite(t, j, hookRecord("0", t0))
	mustIngest(t, j, db, t0)
	db.Close()
	// Garbage over every page after the header.
	junk := make([]byte, 64<<10)
	for i := range junk {
		junk[i] = byte(i*7 + 3)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt(junk, 100)
	f.Close()
	os.Remove(path + "-wal")
	os.Remove(path + "-shm")
	for i := 1; i < 5; i++ {
		mustWrite(t, j, hookRecord(itoa(i), t0.Add(time.Duration(i)*time.Second)))
	}
	if bad, err := store.Open(context.Background(), path, store.Options{}); err != nil {
		t.Logf("open corrupt database: %v", err)
	} else {
		_, err := j.Ingest(context.Background(), bad, t0.Add(time.Minute))
		bad.Close()
		if err == nil {
			t.Fatal("ingest into a corrupt database succeeded")
		}
		t.Logf("ingest into the corrupt database: %v", err)
	}
	if n := len(entries(t, j.Dir)); n != 4 {
		t.Fatalf("%d files after the failed ingest, want 4", n)
	}
	// The admin moves the corrupt file aside; a new database takes over.
	os.Rename(path, path+".corrupt")
	db = mustOpen(t, path)
	mustIngest(t, j, db, t0.Add(time.Minute))
	counts := jobCounts(t, db)
	for i := 1; i < 5; i++ {
		if c := counts[itoa(i)]; c != [2]int{1, 1} {
			t.Errorf("job %d recorded %v times, want once each", i, c)
		}
	}
	if left := entries(t, j.Dir); len(left) != 0 {
		t.Errorf("files left: %v", left)
	}
}
