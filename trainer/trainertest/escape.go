package trainertest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Escape is a trick a Trainer program may play to outlive the kill of
// its node (issue 10's table and more). Its Script runs as the Trainer's
// program (/bin/sh -c), with ESC_DIR naming a directory the owner may
// write: it writes the pid of every process that should die with the
// Trainer to ESC_DIR/pids, one per line, then creates ESC_DIR/ready.
type Escape struct {
	Kind   string
	Script string
	// Storm: a fork storm, run only where a pids limit contains it.
	Storm bool
	// Exits: the main program ends by itself (0 or not) and leaves its
	// children behind; it writes ready itself.
	Exits bool
	// Ready: the script writes ready itself and runs on.
	Ready bool
	// Pids is how many pids the trick writes (some from background
	// processes): the program waits for them before it is ready.
	Pids int
}

// zeroEnv is Python that zeroes its own environment in memory, as
// /proc/PID/environ reads it (between env_start and env_end of
// /proc/self/stat).
const zeroEnv = `import ctypes, os, time
f = open("/proc/self/stat").read().rsplit(")", 1)[1].split()
start, end = int(f[47]), int(f[48])
ctypes.memset(start, 0, end - start)
time.sleep(600)
`

// setpgidRename is Python that leaves its group and renames itself.
const setpgidRename = `import ctypes, os, sys, time
os.setpgid(0, 0)
ctypes.CDLL(None).prctl(15, b"kworker/0:1", 0, 0, 0)
open(sys.argv[1], "a").write("%d\n" % os.getpid())
time.sleep(600)
`

// Escapes are the tricks, each a kind a test and the reclaim bench run.
var Escapes = []Escape{
	{Kind: "setsid-env-i", Pids: 1, Script: `setsid env -i /bin/sleep 600 & echo $! >> "$ESC_DIR/pids"`},
	{Kind: "setsid-env-zeroed", Pids: 1, Script: `setsid /usr/bin/python3 -c '` + zeroEnv + `' & echo $! >> "$ESC_DIR/pids"`},
	{Kind: "env-i-main-exits-0", Pids: 1, Exits: true, Script: `env -i /bin/sleep 600 & echo $! >> "$ESC_DIR/pids"; touch "$ESC_DIR/ready"; exit 0`},
	{Kind: "popen-env-main-exits-3", Pids: 1, Exits: true, Script: `exec /usr/bin/python3 -c 'import os, subprocess, sys
p = subprocess.Popen(["/bin/sleep", "600"], env={"X": "1"})
open(os.environ["ESC_DIR"] + "/pids", "a").write("%d\n" % p.pid)
open(os.environ["ESC_DIR"] + "/ready", "w").close()
sys.exit(3)'`},
	{Kind: "setsid-child", Pids: 1, Script: `setsid /bin/sleep 600 & echo $! >> "$ESC_DIR/pids"`},
	{Kind: "double-fork", Pids: 1, Script: `(setsid sh -c 'sleep 600 & echo $! >> "$ESC_DIR/pids"' &)`},
	{Kind: "setpgid-rename", Pids: 1, Script: `/usr/bin/python3 -c '` + setpgidRename + `' "$ESC_DIR/pids" &`},
	{Kind: "ignore-term-hup-int", Pids: 1, Script: `trap "" TERM HUP INT; sh -c 'trap "" TERM HUP INT; echo $$ >> "$ESC_DIR/pids"; while :; do sleep 1; done' &`},
	{Kind: "reparented-to-init", Pids: 1, Script: `(sleep 600 & echo $! >> "$ESC_DIR/pids") ; sleep 0`},
	{Kind: "fork-storm", Storm: true, Script: `/usr/bin/python3 -c 'import os, time
open(os.environ["ESC_DIR"] + "/ready", "w").close()
deadline = time.time() + 120
while time.time() < deadline:
    try:
        os.fork()
    except OSError:
        time.sleep(0.01)
' &`},
}

// Program is the Trainer's whole program for an escape: the trick, then
// (unless the trick's main program exits) the main program running on.
func (e Escape) Program() string {
	switch {
	case e.Exits, e.Ready:
		return e.Script
	case e.Storm:
		return e.Script + "\nexec /bin/sleep 600\n" // the storm says ready before it starts
	}
	// The background processes' own writes may come after ours: wait
	// for them (at most 10 s) before saying ready.
	return e.Script + fmt.Sprintf(`
i=0
while [ "$(grep -c . "$ESC_DIR/pids" 2>/dev/null || echo 0)" -lt %d ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done
echo $$ >> "$ESC_DIR/pids"
touch "$ESC_DIR/ready"
exec /bin/sleep 600
`, e.Pids)
}

// EscapeDir makes the directory an escape writes to, owned by uid.
func EscapeDir(tb testing.TB, uid, gid int) string {
	tb.Helper()
	d := filepath.Join(tb.TempDir(), "esc")
	if err := os.Mkdir(d, 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.Chown(d, uid, gid); err != nil {
		tb.Fatal(err)
	}
	OpenUp(tb, d)
	return d
}

// WaitEscape waits until the escape said it is ready and returns the
// pids it wrote.
func WaitEscape(tb testing.TB, dir string, timeout time.Duration) []int {
	tb.Helper()
	WaitFor(tb, timeout, "the escape to be ready", func() bool {
		_, err := os.Stat(filepath.Join(dir, "ready"))
		return err == nil
	})
	return EscapePIDs(dir)
}

// EscapePIDs reads the pids an escape wrote.
func EscapePIDs(dir string) []int {
	b, _ := os.ReadFile(filepath.Join(dir, "pids"))
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// Alive returns those of pids that run (a zombie does not).
func Alive(pids []int) []int {
	var out []int
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i > 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X' {
			out = append(out, pid)
		}
	}
	return out
}

// UIDProcs returns the live processes of a user, from /proc: what a
// Trainer's owner (a throwaway user) still runs.
func UIDProcs(uid int) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
				if f := strings.Fields(rest); len(f) > 0 && f[0] == strconv.Itoa(uid) {
					pids = append(pids, pid)
				}
			}
		}
	}
	return Alive(pids)
}

// OpenUp makes dir and its parents up to the temporary root traversable
// by everyone (t.TempDir makes them 0700): Trainer programs run as their
// owners.
func OpenUp(tb testing.TB, dir string) {
	tb.Helper()
	root := os.TempDir()
	for d := dir; strings.HasPrefix(d, root) && d != root; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			tb.Fatal(err)
		}
		if err := os.Chmod(d, fi.Mode().Perm()|0o755); err != nil {
			tb.Fatal(err)
		}
	}
}

// ManyEnv is n processes (each in a session of its own, out of the
// Trainer's group) with an environment of size bytes each, split in
// variables below the kernel's 128 KiB bound on one string: the /proc scan
// of a degraded kill must read them all within a hook's deadline.
func ManyEnv(n, size int) Escape {
	return Escape{Kind: fmt.Sprintf("procs-%d-env-%d", n, size), Ready: true, Script: fmt.Sprintf(`exec /usr/bin/python3 -c 'import os, subprocess
d, n, size = os.environ["ESC_DIR"], %d, %d
env = dict(os.environ)
chunk = 96 * 1024
for i in range(size // chunk + 1):
    env["BIG%%d" %% i] = "x" * min(chunk, size - i * chunk)
pids = [subprocess.Popen(["/bin/sleep", "600"], env=env, start_new_session=True).pid for _ in range(n)]
open(d + "/pids", "w").write("".join("%%d\n" %% p for p in pids))
open(d + "/ready", "w").close()
os.execv("/bin/sleep", ["sleep", "600"])'`, n, size)}
}

// Fill writes to path until its filesystem is full (a full registry).
func Fill(tb testing.TB, path string) {
	tb.Helper()
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				tb.Fatal(err)
			}
			return
		}
	}
}
