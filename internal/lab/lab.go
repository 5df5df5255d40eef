// Package lab holds what every scheduler lab of the tests shares (the
// Grid Engine cell in lab/gridengine; the Slurm cluster's lab can use it
// too): the main job's scripts and the report they write, bounded waits
// on a condition, where the schedulers' programs are found, and
// read-only looks at bftrainer's history and pool.
//
// A main job is the scheduler's own job in a scenario: it says when it
// started, runs a check on every node it holds (which names the live
// bftrainer Trainer processes it finds there: there must be none), holds
// its nodes for a while or until released, and says when it ended. Each
// lab launches it its own way (srun, qrsh -inherit) from MainScript.
package lab

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/bftrainer/bftrainer/internal/atomicfile"
	"github.com/bftrainer/bftrainer/trainer/trainertest"
)

// MainScript is a main job's script, with launch the shell lines that run
// "$BFT_CHECK" once on every node of the job (srun, qrsh -inherit). Its
// first line is the moment it started and the host its script runs on;
// after the checks it holds its nodes (BFT_HOLD seconds, or until the
// file BFT_RELEASE exists, at most 10 minutes) and says when it ends.
func MainScript(launch string) string {
	return `#!/bin/sh
echo "first $(date +%s.%N) host=$(hostname)"
` + launch + `
echo "checked $(date +%s.%N)"
if [ -n "${BFT_RELEASE:-}" ]; then
	i=0
	while [ ! -e "$BFT_RELEASE" ] && [ $i -lt 6000 ]; do sleep 0.1; i=$((i + 1)); done
else
	sleep "${BFT_HOLD:-0}"
fi
echo "end $(date +%s.%N)"
`
}

// CheckScript runs on each node of a main job, node being the shell
// expression of the node's name there ($SLURMD_NODENAME, $(hostname)): a
// live process whose bftrainer run token (BFTRAINER_RUN=TRAINER/NODE/…,
// inherited by every descendant, even one that called setsid) names this
// node is a Trainer process still running where the main job runs.
// Zombies have no environment left and are not counted. It runs as the
// job's owner, who may not read other users' environments: a root job
// sees every process.
func CheckScript(node string) string {
	return `#!/bin/sh
n=` + node + `
procs=$(grep -alz "^BFTRAINER_RUN=[^/]*/$n/" /proc/[0-9]*/environ 2>/dev/null | sed 's|^/proc/||; s|/environ$||' | tr '\n' ',')
procs=${procs%,}
echo "check node=$n procs=${procs:-none}"
`
}

// WriteOnce writes an executable script unless the file already holds
// exactly body (jobs running now may be reading it).
func WriteOnce(path, body string) error {
	if b, err := os.ReadFile(path); err == nil && string(b) == body {
		return nil
	}
	return atomicfile.WriteFile(path, []byte(body), 0o755, false)
}

// ReleaseFile returns a fresh path in dir for a held job's BFT_RELEASE:
// the job ends once the file exists.
func ReleaseFile(dir string) string {
	b := make([]byte, 6)
	rand.Read(b)
	return filepath.Join(dir, "release-"+hex.EncodeToString(b))
}

// Report is what a main job wrote.
type Report struct {
	First, Checked, End time.Time
	Host                string            // where its script ran (the master node)
	Procs               map[string]string // node → Trainer processes it found there ("none", or pids)
}

// ReadReport reads a main job's output so far.
func ReadReport(path string) (Report, error) {
	r := Report{Procs: map[string]string{}}
	f, err := os.Open(path)
	if err != nil {
		return r, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 2 {
			continue
		}
		kv := map[string]string{}
		for _, f := range fs[1:] {
			if k, v, ok := strings.Cut(f, "="); ok {
				kv[k] = v
			}
		}
		switch fs[0] {
		case "first", "checked", "end":
			t, err := trainertest.ParseUnix(fs[1])
			if err != nil {
				return r, fmt.Errorf("%s: %q: %w", path, sc.Text(), err)
			}
			switch fs[0] {
			case "first":
				r.First, r.Host = t, kv["host"]
			case "checked":
				r.Checked = t
			default:
				r.End = t
			}
		case "check":
			r.Procs[kv["node"]] = kv["procs"]
		}
	}
	return r, sc.Err()
}

// Abnormal returns what was not normal in a main job's report, given the
// nodes it held: it must have started and ended, and checked exactly
// those nodes and found no Trainer process on any.
func (r Report) Abnormal(nodes []string) []string {
	var bad []string
	if r.First.IsZero() || r.End.IsZero() {
		bad = append(bad, "no first or end line")
	}
	for _, n := range nodes {
		switch p, ok := r.Procs[n]; {
		case !ok:
			bad = append(bad, n+" not checked")
		case p != "none":
			bad = append(bad, "Trainer processes on "+n+": "+p)
		}
	}
	for n := range r.Procs {
		if !slices.Contains(nodes, n) {
			bad = append(bad, "checked "+n+", which the job does not hold")
		}
	}
	return bad
}

// SbinPath is the PATH of the labs' commands and daemons: the
// schedulers' daemons live in /usr/sbin, which a non-login root shell
// may lack.
const SbinPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// LookPath finds an executable program on SbinPath.
func LookPath(name string) (string, error) {
	for _, d := range filepath.SplitList(SbinPath) {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found in %s", name, SbinPath)
}

// Poll calls cond every 100 ms until it reports true, returns an error,
// or timeout passes (an error saying so, with cond's last error).
func Poll(ctx context.Context, timeout time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		ok, err := cond()
		if ok && err == nil {
			return nil
		}
		last = err
		if time.Now().After(deadline) {
			if last != nil {
				return fmt.Errorf("not reached after %v: %w", timeout, last)
			}
			return fmt.Errorf("not reached after %v", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
