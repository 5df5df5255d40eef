package trainer

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Proc is one process as seen in /proc.
type Proc struct {
	PID, PPID, PGID, SID int
	State                byte   // R, S, D, Z, T, X, …
	Comm                 string // the executable's short name
	Run                  string // value of BFTRAINER_RUN, if set
	Host                 string // value of HOROVOD_HOSTNAME, if set
}

// Dead reports a process that is gone but for its process table entry:
// a zombie waits for its parent to reap it and can neither run nor hold
// anything but its pid.
func (p Proc) Dead() bool { return p.State == 'Z' || p.State == 'X' }

// Token parses the process's run token; ok is false when it has none or
// a malformed one.
func (p Proc) Token() (Token, bool) {
	if p.Run == "" {
		return Token{}, false
	}
	t, err := ParseToken(p.Run)
	return t, err == nil
}

// procRoot is where the process table is read; tests never change it,
// it only names the one place.
const procRoot = "/proc"

// Procs reads the process table. Processes that exit while it is read are
// skipped. Reading another user's environment needs root (or the same
// user): without it Run and Host stay empty for those processes.
func Procs() ([]Proc, error) {
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", procRoot, err)
	}
	out := make([]Proc, 0, len(ents))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		p, ok := readProc(pid)
		if ok {
			out = append(out, p)
		}
	}
	return out, nil
}

// readProc reads one process; ok is false when it is gone.
func readProc(pid int) (Proc, bool) {
	dir := procRoot + "/" + strconv.Itoa(pid)
	stat, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return Proc{}, false
	}
	p, ok := parseStat(stat)
	if !ok {
		return Proc{}, false
	}
	// A zombie's environment is gone with its memory; it needs no look.
	if !p.Dead() {
		if env, err := os.ReadFile(dir + "/environ"); err == nil {
			p.Run = envValue(env, RunEnv)
			p.Host = envValue(env, HostEnv)
		}
	}
	return p, true
}

// parseStat reads "pid (comm) state ppid pgrp session …". comm may hold
// spaces and parentheses, so the fields start after the last ')'.
func parseStat(b []byte) (Proc, bool) {
	open := bytes.IndexByte(b, '(')
	end := bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return Proc{}, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b[:open])))
	if err != nil {
		return Proc{}, false
	}
	f := strings.Fields(string(b[end+1:]))
	if len(f) < 4 || len(f[0]) != 1 {
		return Proc{}, false
	}
	p := Proc{PID: pid, Comm: string(b[open+1 : end]), State: f[0][0]}
	var e1, e2, e3 error
	p.PPID, e1 = strconv.Atoi(f[1])
	p.PGID, e2 = strconv.Atoi(f[2])
	p.SID, e3 = strconv.Atoi(f[3])
	return p, e1 == nil && e2 == nil && e3 == nil
}

// envValue finds key's value in a NUL-separated environment block.
func envValue(env []byte, key string) string {
	prefix := []byte(key + "=")
	for len(env) > 0 {
		i := bytes.IndexByte(env, 0)
		var kv []byte
		if i < 0 {
			kv, env = env, nil
		} else {
			kv, env = env[:i], env[i+1:]
		}
		if bytes.HasPrefix(kv, prefix) {
			return string(kv[len(prefix):])
		}
	}
	return ""
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
