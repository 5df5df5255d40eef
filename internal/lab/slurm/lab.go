// Package slurm is test infrastructure: it owns a real Slurm cluster on one
// machine and drives bftrainer against it, for the end-to-end tests in this
// directory (slurm_test.go: go test -v -timeout 30m ./internal/lab/slurm/,
// as root) and for `bftrainer-bench slurm`. What sysadmins install is in
// contrib/slurm.
//
// The cluster is lab.sh's (beside this file): one munged, one slurmctld
// and one stock `slurmd -N NODE` per node, everything in one private
// directory. On top of it this package builds bftrainer (or takes one a
// package installed: ClusterOptions.Installed) as the hook of all four
// Slurm hook points (Prolog, Epilog, PrologSlurmctld, EpilogSlurmctld),
// writes its configuration, submits main jobs that
// check for Trainer processes on their own nodes, and reads back what
// happened: the jobs' output and state, sinfo, slurmctld's log and
// bftrainer's history. Everything it starts it stops by PID.
//
// It needs root and Debian's slurmctld, slurmd, slurm-client and munge
// packages; Need says what is missing.
package slurm

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bftrainer/bftrainer/hooks"
	"github.com/bftrainer/bftrainer/internal/atomicfile"
	"github.com/bftrainer/bftrainer/internal/lab"
)

// sbinPath is the PATH of every command this package runs: Slurm's and
// munge's daemons live in /usr/sbin, which a non-login root shell may
// lack.
const sbinPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Need returns why a lab cannot run here, or nil: it needs root and the
// Slurm and munge programs.
func Need() error {
	if os.Geteuid() != 0 {
		return errors.New("needs root (munged and slurmd run as root, hooks kill as root)")
	}
	var missing []string
	for _, p := range []string{"munged", "munge", "unmunge", "slurmctld", "slurmd", "sinfo", "sbatch", "srun",
		"scontrol", "squeue", "scancel", "setsid", "flock", "runuser"} {
		if _, err := lookPath(p); err != nil {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("needs %s (Debian: apt-get install slurmctld slurmd slurm-client munge, or internal/lab/slurm/lab.sh install-deps)",
			strings.Join(missing, ", "))
	}
	return nil
}

// lookPath finds a program on sbinPath.
func lookPath(name string) (string, error) {
	for _, d := range filepath.SplitList(sbinPath) {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found in %s", name, sbinPath)
}

// Options says what cluster to start.
type Options struct {
	Nodes     int           // number of nodes; 0 means 6
	Prefix    string        // node names Prefix1..PrefixN; "" means "n"
	Hook      string        // absolute path set as all four hooks; "" for none
	Scavenger bool          // a preemptible scavenger partition beside main
	SlurmUser string        // SlurmUser (the controller hooks run as it); "" means root
	Extra     []string      // slurm.conf lines appended last (later lines win)
	Timeout   time.Duration // readiness bound; 0 means 60 s
	// Accounting starts slurmdbd on a private MariaDB, as sites run it, so
	// that sacct answers (NeedAccounting says whether it can).
	Accounting bool
}

// NeedAccounting reports what a lab with Options.Accounting needs and this
// machine lacks, as an error; nil when it has everything.
func NeedAccounting() error {
	var missing []string
	for _, p := range []string{"mariadbd", "mariadb-install-db", "mariadb", "slurmdbd", "sacct", "sacctmgr"} {
		if _, err := lookPath(p); err != nil {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("needs %s for accounting (Debian: apt-get install mariadb-server slurmdbd)", strings.Join(missing, ", "))
	}
	return nil
}

// Lab is a running cluster.
type Lab struct {
	Script string   // lab.sh
	Dir    string   // its private directory
	Conf   string   // SLURM_CONF
	Nodes  []string // node names, in order
	Hook   string   // the hook program the cluster was started with
}

// LabScript is lab.sh in the module at repo.
func LabScript(repo string) string { return filepath.Join(repo, "internal", "lab", "slurm", "lab.sh") }

// startLab starts a cluster in dir (a short path: Slurm's unix sockets live
// below it) with lab.sh and waits until every node is exactly idle. On
// failure lab.sh has already stopped what it started; the error carries
// its log tails.
func startLab(ctx context.Context, script, dir string, o Options) (*Lab, error) {
	if o.Nodes <= 0 {
		o.Nodes = 6
	}
	if o.Prefix == "" {
		o.Prefix = "n"
	}
	if o.Timeout <= 0 {
		o.Timeout = 60 * time.Second
	}
	args := []string{"start", dir, "-n", strconv.Itoa(o.Nodes), "--prefix", o.Prefix, "-q",
		"-t", strconv.Itoa(int(o.Timeout / time.Second))}
	if o.Hook != "" {
		args = append(args, "--hook", o.Hook)
	}
	if o.Scavenger {
		args = append(args, "--scavenger")
	}
	if o.SlurmUser != "" {
		args = append(args, "--slurm-user", o.SlurmUser)
	}
	if o.Accounting {
		args = append(args, "--accounting")
	}
	// Millisecond timestamps in slurmctld's log: the scavenger partition's
	// preemptions are timed from it.
	for _, e := range append([]string{"LogTimeFormat=iso8601_ms"}, o.Extra...) {
		args = append(args, "--extra", e)
	}
	l := &Lab{Script: script, Dir: dir, Conf: filepath.Join(dir, "etc", "slurm.conf"), Hook: o.Hook}
	for i := 1; i <= o.Nodes; i++ {
		l.Nodes = append(l.Nodes, fmt.Sprintf("%s%d", o.Prefix, i))
	}
	if _, err := l.script(ctx, args...); err != nil {
		return nil, fmt.Errorf("start lab: %w", err)
	}
	return l, nil
}

// script runs lab.sh and returns its standard output; the error carries
// its standard error (log tails on a failed start).
func (l *Lab) script(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "/bin/bash", append([]string{l.Script}, args...)...)
	cmd.Env = cleanEnv(nil)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// lab.sh stops what it started on TERM; a cancelled context must not
	// SIGKILL it halfway through a start.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 30 * time.Second
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("lab.sh %s: %w\n%s", args[0], err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// Stop cancels the jobs and stops every process the lab started (lab.sh
// stop finds them by its token, even those that left their process
// group). It is safe to call twice.
func (l *Lab) Stop(ctx context.Context) error {
	_, err := l.script(ctx, "stop", l.Dir, "-q", "-t", "5")
	return err
}

// cleanEnv is this process's environment without any Slurm setting of
// another cluster (or of a job this test runs inside), with sbinPath, and
// with extra last.
func cleanEnv(extra []string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "PATH" || strings.HasPrefix(k, "BFTRAINER_") {
			continue
		}
		skip := false
		for _, p := range []string{"SLURM_", "SBATCH_", "SRUN_", "SALLOC_", "SQUEUE_", "SINFO_", "SCONTROL_", "SCANCEL_"} {
			skip = skip || strings.HasPrefix(k, p)
		}
		if !skip {
			env = append(env, kv)
		}
	}
	return append(append(env, "PATH="+sbinPath), extra...)
}

// Env is the environment of a Slurm client command for this cluster.
func (l *Lab) Env() []string { return cleanEnv([]string{"SLURM_CONF=" + l.Conf}) }

// Command returns a Slurm client command for this cluster, run from the
// jobs directory (job output lands there).
func (l *Lab) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = l.Env()
	cmd.Dir = l.JobsDir()
	return cmd
}

// Output runs a Slurm client command and returns its standard output; the
// error carries its standard error.
func (l *Lab) Output(ctx context.Context, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := l.Command(ctx, name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// JobsDir is where job scripts and output go (mode 1777, kept across
// starts).
func (l *Lab) JobsDir() string { return filepath.Join(l.Dir, "jobs") }

// NodeStates returns sinfo's compact state of every node; "idle" means
// exactly idle (not completing, not drained, responding), read the way
// bftrainer's sync reads it.
func (l *Lab) NodeStates(ctx context.Context) (map[string]string, error) {
	s, _ := hooks.Builtin().Lookup(hooks.Slurm)
	out, err := l.Output(ctx, "sinfo", s.Listing.Args(nil)...)
	if err != nil {
		return nil, err
	}
	return s.Listing.Parse([]byte(out))
}

// IdleNodes returns the exactly idle nodes, sorted.
func (l *Lab) IdleNodes(ctx context.Context) ([]string, error) {
	st, err := l.NodeStates(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for n, s := range st {
		if s == "idle" {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}

// WaitIdle waits, at most timeout, until every node is exactly idle.
func (l *Lab) WaitIdle(ctx context.Context, timeout time.Duration) error {
	_, err := l.script(ctx, "wait-idle", l.Dir, strconv.Itoa(max(1, int(timeout/time.Second))))
	return err
}

// Drained returns every node that is drained, draining or down, with its
// state and reason: a hook that failed would have drained its node.
func (l *Lab) Drained(ctx context.Context) ([]string, error) {
	out, err := l.Output(ctx, "sinfo", "-h", "-N", "-o", "%N %t %E")
	if err != nil {
		return nil, err
	}
	var bad []string
	seen := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || seen[f[0]] {
			continue
		}
		if st := strings.TrimRight(f[1], "*~#!%$@^-"); strings.HasPrefix(st, "drain") || st == "drng" || st == "down" || st == "fail" || st == "failg" {
			seen[f[0]] = true
			bad = append(bad, sc.Text())
		}
	}
	return bad, sc.Err()
}

// SetHooks points all four hooks at path ("" removes them) in slurm.conf
// and tells slurmctld and the slurmds to re-read it. The slurmds take the
// change asynchronously: callers that must know it has arrived check it
// with a job (Install.SetHooks does).
func (l *Lab) SetHooks(ctx context.Context, path string) error {
	var add []string
	if path != "" {
		add = []string{"Prolog=" + path, "Epilog=" + path, "PrologSlurmctld=" + path, "EpilogSlurmctld=" + path}
	}
	if err := l.rewriteConf(ctx, []string{"Prolog", "Epilog", "PrologSlurmctld", "EpilogSlurmctld"}, add); err != nil {
		return err
	}
	l.Hook = path
	return nil
}

// rewriteConf rewrites slurm.conf without the lines of the keys in drop,
// with add appended, and issues `scontrol reconfigure`.
func (l *Lab) rewriteConf(ctx context.Context, drop, add []string) error {
	b, err := os.ReadFile(l.Conf)
	if err != nil {
		return err
	}
	var lines []string
	for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		if k, _, _ := strings.Cut(line, "="); !slices.Contains(drop, k) {
			lines = append(lines, line)
		}
	}
	lines = append(lines, add...)
	if err := atomicfile.WriteFile(l.Conf, []byte(strings.Join(lines, "\n")+"\n"), 0o644, false); err != nil {
		return err
	}
	_, err = l.Output(ctx, "scontrol", "reconfigure")
	return err
}

// StopNode stops a node's slurmd (SIGTERM, or SIGKILL: a crash).
func (l *Lab) StopNode(ctx context.Context, node string, kill bool) error {
	args := []string{"stop-node", l.Dir, node, "-q"}
	if kill {
		args = append(args, "--kill")
	}
	_, err := l.script(ctx, args...)
	return err
}

// StartNode starts a node's slurmd again and waits until it has
// registered and is exactly idle.
func (l *Lab) StartNode(ctx context.Context, node string) error {
	_, err := l.script(ctx, "start-node", l.Dir, node, "-q", "-t", "60")
	return err
}

// Logs returns the tails of the daemons' logs, for a failed test's
// report.
func (l *Lab) Logs(lines int) string {
	cmd := exec.Command("/bin/bash", l.Script, "logs", l.Dir, strconv.Itoa(lines))
	cmd.Env = cleanEnv(nil)
	out, _ := cmd.CombinedOutput()
	return string(out)
}

// CtldLog returns slurmctld's log.
func (l *Lab) CtldLog() (string, error) {
	b, err := os.ReadFile(filepath.Join(l.Dir, "log", "slurmctld.log"))
	return string(b), err
}

// ActiveJobs returns the ids of the jobs squeue lists (pending, running,
// completing).
func (l *Lab) ActiveJobs(ctx context.Context) ([]string, error) {
	out, err := l.Output(ctx, "squeue", "-h", "-o", "%i")
	if err != nil {
		return nil, err
	}
	return strings.Fields(out), nil
}

// CancelAll cancels every job and waits, at most timeout, until squeue
// lists none.
func (l *Lab) CancelAll(ctx context.Context, timeout time.Duration) error {
	ids, err := l.ActiveJobs(ctx)
	if err != nil || len(ids) == 0 {
		return err
	}
	if _, err := l.Output(ctx, "scancel", ids...); err != nil {
		return err
	}
	return Poll(ctx, timeout, func() (bool, error) {
		ids, err := l.ActiveJobs(ctx)
		return len(ids) == 0, err
	})
}

// JobInfo is `scontrol -o show job`'s fields of one job.
type JobInfo map[string]string

// Job returns a job's fields. Finished jobs stay visible for MinJobAge
// (300 s by default).
func (l *Lab) Job(ctx context.Context, id string) (JobInfo, error) {
	out, err := l.Output(ctx, "scontrol", "-o", "show", "job", id)
	if err != nil {
		return nil, err
	}
	info := JobInfo{}
	for _, f := range strings.Fields(out) {
		if k, v, ok := strings.Cut(f, "="); ok {
			if _, dup := info[k]; !dup {
				info[k] = v
			}
		}
	}
	if info["JobId"] != id {
		return nil, fmt.Errorf("scontrol show job %s: unexpected answer %q", id, out)
	}
	return info, nil
}

// Poll is lab.Poll: cond every 100 ms until it reports true, returns an
// error, or timeout passes (an error saying so).
func Poll(ctx context.Context, timeout time.Duration, cond func() (bool, error)) error {
	return lab.Poll(ctx, timeout, cond)
}
