package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/bftrainer/bftrainer/trainer/wire"
)

// Proc is one process as seen in /proc.
type Proc struct {
	PID, PPID, PGID, SID int
	UID                  int    // owner of /proc/PID: the effective uid
	State                byte   // R, S, D, Z, T, X, …
	Ticks                uint64 // start time, clock ticks since boot
	Comm                 string // the executable's short name
	Run                  string // value of BFTRAINER_RUN, if set
	Host                 string // value of HOROVOD_HOSTNAME, if set
	Job                  bool   // carries a scheduler job's variable (Agent.JobMarkers)
}

// Dead reports a process that is gone but for its process table entry:
// a zombie waits for its parent to reap it and can neither run nor hold
// anything but its pid.
func (p Proc) Dead() bool { return p.State == 'Z' || p.State == 'X' }

// Token parses the process's run token; ok is false when it has none or
// a malformed one.
func (p Proc) Token() (wire.Token, bool) {
	if p.Run == "" {
		return wire.Token{}, false
	}
	t, err := wire.ParseToken(p.Run)
	return t, err == nil
}

// procRoot is where the process table is read; tests never change it,
// it only names the one place.
const procRoot = "/proc"

// Procs reads the process table with every process's environment marks;
// Job says whether a process carries one of jobMarkers. Processes that
// exit while it is read are skipped. Reading another user's environment
// needs root (or the same user): without it Run, Host and Job stay empty
// for those processes.
func Procs(jobMarkers ...string) ([]Proc, error) {
	s := newScanner(jobMarkers)
	var out []Proc
	err := s.each(func(p *Proc) bool {
		if !p.Dead() {
			s.environ(p)
		}
		out = append(out, *p)
		return true
	})
	return out, err
}

// scanner walks /proc with buffers it reuses for every process: a node
// may run hundreds of processes with environments of megabytes, and a
// kill must read them within a prolog's deadline.
type scanner struct {
	stat []byte
	env  []byte
	st   syscall.Stat_t
	jobs [][]byte // "MARKER=" of every job marker
	// envEmpty: the last environ read found nothing (unreadable, or a
	// process in the middle of an exec, whose new environment is not
	// mapped yet)
	envEmpty bool
}

// newScanner returns a scanner that takes a process carrying one of
// jobMarkers for a scheduler job's.
func newScanner(jobMarkers []string) scanner {
	var s scanner
	for _, m := range jobMarkers {
		s.jobs = append(s.jobs, []byte(m+"="))
	}
	return s
}

// scanner returns a scanner that knows the agent's job markers.
func (a *Agent) scanner() scanner { return newScanner(a.JobMarkers) }

// each calls fn for every process whose stat could be read, until fn
// returns false.
func (s *scanner) each(fn func(p *Proc) bool) error {
	d, err := os.Open(procRoot)
	if err != nil {
		return fmt.Errorf("read %s: %w", procRoot, err)
	}
	defer d.Close()
	for {
		names, err := d.Readdirnames(256)
		for _, name := range names {
			pid, err := strconv.Atoi(name)
			if err != nil || pid <= 0 {
				continue
			}
			var p Proc
			if s.read(pid, &p) && !fn(&p) {
				return nil
			}
		}
		if errors.Is(err, io.EOF) || len(names) == 0 {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", procRoot, err)
		}
	}
}

// read fills p from /proc/PID/stat and the directory's owner; false when
// the process is gone.
func (s *scanner) read(pid int, p *Proc) bool {
	dir := procRoot + "/" + strconv.Itoa(pid)
	if syscall.Stat(dir, &s.st) != nil {
		return false
	}
	var ok bool
	if s.stat, ok = readInto(dir+"/stat", s.stat[:0]); !ok {
		return false
	}
	if !parseStat(s.stat, p) {
		return false
	}
	p.UID = int(s.st.Uid)
	return true
}

// environ fills p's environment marks, reading the whole environment
// into the reused buffer. It reports false when it could not be read.
func (s *scanner) environ(p *Proc) bool {
	var ok bool
	s.env, ok = readInto(procRoot+"/"+strconv.Itoa(p.PID)+"/environ", s.env[:0])
	s.envEmpty = !ok || len(s.env) == 0
	if !ok {
		return false
	}
	p.Run, p.Host, p.Job = marks(s.env, s.jobs)
	return true
}

// readInto reads a whole file into buf, growing it as needed, and
// returns it.
func readInto(path string, buf []byte) ([]byte, bool) {
	f, err := os.Open(path)
	if err != nil {
		return buf, false
	}
	defer f.Close()
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, make([]byte, max(4096, cap(buf)))...)[:len(buf)]
		}
		n, err := f.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) || (err == nil && n == 0) {
			return buf, true
		}
		if err != nil {
			return buf, false
		}
	}
}

var (
	runPrefix  = []byte(wire.RunEnv + "=")
	hostPrefix = []byte(wire.HostEnv + "=")
)

// marks reads our marks from a NUL-separated environment block, and
// whether it holds one of jobs ("MARKER=" each).
func marks(env []byte, jobs [][]byte) (run, host string, job bool) {
	for len(env) > 0 {
		i := bytes.IndexByte(env, 0)
		var kv []byte
		if i < 0 {
			kv, env = env, nil
		} else {
			kv, env = env[:i], env[i+1:]
		}
		if len(kv) == 0 {
			continue
		}
		switch {
		case run == "" && bytes.HasPrefix(kv, runPrefix):
			run = string(kv[len(runPrefix):])
		case host == "" && bytes.HasPrefix(kv, hostPrefix):
			host = string(kv[len(hostPrefix):])
		case !job:
			for _, m := range jobs {
				if bytes.HasPrefix(kv, m) {
					job = true
				}
			}
		}
	}
	return run, host, job
}

// parseStat reads "pid (comm) state ppid pgrp session … starttime …".
// comm may hold spaces and parentheses, so the fields start after the
// last ')'; starttime is field 22.
func parseStat(b []byte, p *Proc) bool {
	open := bytes.IndexByte(b, '(')
	end := bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return false
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil {
		return false
	}
	rest := b[end+1:]
	var f [20][]byte
	n := 0
	for n < len(f) {
		rest = bytes.TrimLeft(rest, " ")
		if len(rest) == 0 {
			break
		}
		i := bytes.IndexByte(rest, ' ')
		if i < 0 {
			i = len(rest)
		}
		f[n], rest = rest[:i], rest[i:]
		n++
	}
	if n < 4 || len(f[0]) != 1 {
		return false
	}
	*p = Proc{PID: pid, Comm: string(b[open+1 : end]), State: f[0][0]}
	var e1, e2, e3 error
	p.PPID, e1 = strconv.Atoi(string(f[1]))
	p.PGID, e2 = strconv.Atoi(string(f[2]))
	p.SID, e3 = strconv.Atoi(string(f[3]))
	if n == len(f) {
		p.Ticks, _ = strconv.ParseUint(string(f[19]), 10, 64)
	}
	return e1 == nil && e2 == nil && e3 == nil
}

// readProc reads one process with its run and host marks (not Job: its
// callers ask after a launch's own leader); ok is false when it is gone.
func readProc(pid int) (Proc, bool) {
	var s scanner
	var p Proc
	if !s.read(pid, &p) {
		return Proc{}, false
	}
	if !p.Dead() {
		s.environ(&p)
	}
	return p, true
}

// ProcStatus returns the named fields of /proc/PID/status ("Uid", "Gid",
// "Groups", …), for checking whom a process runs as.
func ProcStatus(pid int) (map[string]string, error) {
	b, err := os.ReadFile(procRoot + "/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out, nil
}
