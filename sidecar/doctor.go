package sidecar

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bftrainer/bftrainer/alloc/milp"
	"github.com/bftrainer/bftrainer/hooks"
	"github.com/bftrainer/bftrainer/trainer"
	"github.com/bftrainer/bftrainer/trainer/wire"
)

// Doctor: does a site's wiring work? Everything bftrainer relies on and
// cannot check on its own path — the hooks fail open by design, so a
// wrong slurm.conf, a journal the controller hooks cannot write, cgroup
// v1 on a node or a service that is not enabled shows only as a harvest
// of zero weeks later — checked in one go, one line per check.

// Statuses of a DoctorCheck.
const (
	DoctorOK   = hooks.OK
	DoctorWarn = hooks.Warn
	DoctorFail = hooks.Fail
)

// DoctorCheck is one checked thing: its name ("slurm.PrologFlags",
// "path.journal", "node.n01.cgroup"), its status, what was found, and,
// unless ok, the fix.
type DoctorCheck struct {
	Check  string `json:"check"`
	Status string `json:"status"`
	Detail string `json:"detail"`
	Hint   string `json:"hint,omitempty"`
}

// DoctorReport is every check, in order, and how many of each status.
type DoctorReport struct {
	Checks []DoctorCheck `json:"checks"`
	OK     int           `json:"ok"`
	Warn   int           `json:"warn"`
	Fail   int           `json:"fail"`
}

func (r *DoctorReport) add(check, status, detail, hint string) {
	if status == DoctorOK {
		hint = ""
	}
	r.Checks = append(r.Checks, DoctorCheck{Check: check, Status: status, Detail: detail, Hint: hint})
	switch status {
	case DoctorOK:
		r.OK++
	case DoctorWarn:
		r.Warn++
	default:
		r.Fail++
	}
}

// NodeDoctor asks a node's agent what doctor checks there
// (trainer.AgentClient over the configured transport).
type NodeDoctor interface {
	Doctor(ctx context.Context, node, hook string) (wire.NodeCheck, error)
}

// Systemd units doctor checks (contrib/slurm/).
const (
	ReconcileUnit = "bftrainer-reconcile.service"
	SyncTimer     = "bftrainer-sync.timer"
)

// DoctorOptions are what doctor checks beyond the core's own options.
type DoctorOptions struct {
	// Hook is bftrainer's hook binary, as the scheduler runs it (the
	// running binary, by default: cmd resolves it). The scheduler's hooks
	// must lead to it, and it must be on every node.
	Hook string
	// Version is this binary's version: the nodes' must be the same.
	Version string

	// HookLog, Registry and LogDir are hooks.log, trainer.registry and
	// trainer.log_dir (the core's own paths are in Options).
	HookLog, Registry, LogDir string

	// Systemctl is the systemctl program; "": "systemctl" where systemd
	// runs (/run/systemd/system), else the units are not checked (a
	// warning says why). Set, it is used whatever runs here.
	Systemctl string
	// Recent is how long ago the sync timer may last have fired; 0: 30
	// minutes (it fires every 10).
	Recent time.Duration

	// Agent reaches the nodes' agents; nil: the transport is "none", the
	// nodes are not checked.
	Agent NodeDoctor
	// Nodes are the nodes to check; nil: Sample of the scheduler's nodes,
	// spread over its listing. Sample 0 means 3.
	Nodes  []string
	Sample int
	// MaxSkew is the clock skew allowed between a node and this host; 0:
	// 1 s (the audit's tolerance is 2 s).
	MaxSkew time.Duration

	// Launchers are the launchers, by name; those that say what they need
	// (trainer.Requirer) are checked. A missing program fails for those
	// in Configured (the site set their table, and starts Trainers), and
	// warns for the others (built from defaults).
	Launchers  map[string]trainer.Launcher
	Configured map[string]bool
	// RunTimeout bounds each program doctor runs; 0: 30 s.
	RunTimeout time.Duration
}

// Doctor checks the site's wiring, in five parts: the scheduler's own
// configuration (its Wiring), the paths and their modes, the systemd
// units, a sample of nodes through their agents, and the solver and
// launchers' programs. It never changes anything.
func (c *Core) Doctor(ctx context.Context, o DoctorOptions) *DoctorReport {
	if o.Recent <= 0 {
		o.Recent = 30 * time.Minute
	}
	if o.Sample <= 0 {
		o.Sample = 3
	}
	if o.MaxSkew <= 0 {
		o.MaxSkew = time.Second
	}
	if o.RunTimeout <= 0 {
		o.RunTimeout = 30 * time.Second
	}
	r := &DoctorReport{}
	c.doctorScheduler(ctx, o, r)
	c.doctorPaths(o, r)
	c.doctorSystemd(ctx, o, r)
	c.doctorNodes(ctx, o, r)
	c.doctorPrograms(ctx, o, r)
	return r
}

func (c *Core) scheduler() (hooks.Scheduler, bool) {
	if c.o.Scheduler != "" {
		return c.o.Schedulers.Lookup(c.o.Scheduler)
	}
	return c.o.Schedulers.Default()
}

// program is a scheduler program's configured path, or its default.
func (c *Core) program(key, def string) string {
	if p, set := c.o.Listings[key]; set {
		return p
	}
	return def
}

// databaseGroup is the group the database (else its directory) has: the
// journal's, which the controller hooks write.
func (c *Core) databaseGroup() string {
	for _, p := range []string{c.o.Database, filepath.Dir(c.o.Database)} {
		if st, err := os.Stat(p); err == nil {
			return groupName(st)
		}
	}
	return ""
}

func groupName(st fs.FileInfo) string {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	id := strconv.FormatUint(uint64(sys.Gid), 10)
	if g, err := user.LookupGroupId(id); err == nil {
		return g.Name
	}
	return id
}

func (c *Core) doctorScheduler(ctx context.Context, o DoctorOptions, r *DoctorReport) {
	s, ok := c.scheduler()
	if !ok {
		r.add("scheduler", DoctorFail, fmt.Sprintf("unknown scheduler %q", c.o.Scheduler), "set hooks.scheduler")
		return
	}
	if s.Wiring == nil {
		r.add(s.Name+".config", DoctorWarn, fmt.Sprintf("doctor does not read %s's configuration (Slurm's and Grid Engine's only)", s.Name),
			"check the hooks by hand against "+s.Contrib+"/README.md")
		return
	}
	name := s.Name + "." + s.Wiring.Key
	prog := c.program(s.Wiring.Key, s.Wiring.Program)
	if prog == "" {
		r.add(name, DoctorWarn, fmt.Sprintf("[scheduler] %s is off: the scheduler's configuration is not checked", s.Wiring.Key),
			fmt.Sprintf("set [scheduler] %s to its program (%s)", s.Wiring.Key, s.Wiring.Program))
		return
	}
	if _, err := exec.LookPath(prog); err != nil {
		r.add(name, DoctorFail, err.Error(), fmt.Sprintf("install %s here, or set [scheduler] %s", filepath.Base(prog), s.Wiring.Key))
		return
	}
	want := hooks.Want{Hook: o.Hook, Deadline: c.o.Hook.Deadline, Group: c.databaseGroup()}
	ctx, cancel := context.WithTimeout(ctx, o.RunTimeout)
	defer cancel()
	findings, err := s.Wiring.Check(ctx, prog, want)
	if err != nil {
		r.add(name, DoctorFail, err.Error(), "is the controller up, and its configuration readable here?")
		return
	}
	for _, f := range findings {
		r.add(f.Name, f.Status, f.Detail, f.Hint)
	}
}

// doctorPaths checks the paths and modes contrib/slurm/README.md section
// 3 (and make install) give.
func (c *Core) doctorPaths(o DoctorOptions, r *DoctorReport) {
	group := c.databaseGroup()
	// The database: root's, never writable by others (only root writes
	// it; the hooks write the journal).
	if st, err := os.Stat(c.o.Database); err != nil {
		r.add("path.database", DoctorWarn, err.Error(), "bftrainer sync, as root, creates it")
	} else if st.Mode().Perm()&0o002 != 0 {
		r.add("path.database", DoctorFail, fmt.Sprintf("%s is writable by everyone (%s)", c.o.Database, st.Mode().Perm()), "chmod o-w "+c.o.Database)
	} else {
		r.add("path.database", DoctorOK, fmt.Sprintf("%s %s group %s", c.o.Database, st.Mode().Perm(), group), "")
	}
	for _, j := range []struct{ name, dir string }{{"path.journal", c.o.Journal}, {"path.journal_fallback", c.o.JournalFallback}} {
		if j.dir != "" {
			checkJournal(r, j.name, j.dir, group)
		}
	}
	if c.o.Spool != "" {
		want := fs.ModeDir | fs.ModeSticky | 0o733
		switch st, err := os.Stat(c.o.Spool); {
		case err != nil:
			r.add("path.spool", DoctorFail, err.Error(), "install -d -m 1733 -o root "+c.o.Spool)
		case st.Mode()&(fs.ModeDir|fs.ModeSticky|fs.ModePerm) != want:
			r.add("path.spool", DoctorFail, fmt.Sprintf("%s is %s, want drwx-wx-wt (1733): users' requests are proved by their files' owners", c.o.Spool, st.Mode()), "chmod 1733 "+c.o.Spool)
		default:
			r.add("path.spool", DoctorOK, c.o.Spool+" "+st.Mode().String(), "")
		}
	}
	for _, d := range []struct{ name, dir, made string }{
		{"path.registry", o.Registry, "the node agent makes it at the first start"},
		{"path.log_dir", o.LogDir, "the node agent makes it at the first start"},
	} {
		if d.dir == "" {
			continue
		}
		switch st, err := os.Stat(d.dir); {
		case err != nil:
			r.add(d.name, DoctorWarn, err.Error(), d.made)
		case st.Mode().Perm()&0o002 != 0:
			r.add(d.name, DoctorFail, fmt.Sprintf("%s is writable by everyone (%s)", d.dir, st.Mode()), "chmod o-w "+d.dir)
		default:
			r.add(d.name, DoctorOK, d.dir+" "+st.Mode().String(), "")
		}
	}
	if o.HookLog != "" {
		fix := fmt.Sprintf("install -m 0660 -o root -g %s /dev/null %s", cmpOr(group, "SLURMUSER'S_GROUP"), o.HookLog)
		switch st, err := os.Stat(o.HookLog); {
		case err != nil:
			r.add("path.hooks_log", DoctorWarn, err.Error()+": hooks running as an unprivileged SlurmUser cannot create it", fix)
		case st.Mode().Perm()&0o002 != 0:
			r.add("path.hooks_log", DoctorFail, fmt.Sprintf("%s is writable by everyone (%s)", o.HookLog, st.Mode()), "chmod o-w "+o.HookLog)
		case group != "" && groupName(st) != group || st.Mode().Perm()&0o020 == 0:
			r.add("path.hooks_log", DoctorWarn, fmt.Sprintf("%s is %s group %s: hooks running as SlurmUser may not write it", o.HookLog, st.Mode().Perm(), groupName(st)), fix)
		default:
			r.add("path.hooks_log", DoctorOK, fmt.Sprintf("%s %s group %s", o.HookLog, st.Mode().Perm(), groupName(st)), "")
		}
	}
	if m := c.o.MetricsFile; m != "" {
		switch st, err := os.Stat(m); {
		case err == nil:
			r.add("path.metrics", DoctorOK, fmt.Sprintf("%s written %s ago", m, c.o.Now().Sub(st.ModTime()).Round(time.Second)), "")
		case errors.Is(err, fs.ErrNotExist):
			if _, derr := os.Stat(filepath.Dir(m)); derr != nil {
				r.add("path.metrics", DoctorFail, derr.Error(), "make the directory of metrics.textfile (node_exporter's textfile directory)")
			} else {
				r.add("path.metrics", DoctorWarn, m+" not written yet", "the reconciler writes it every round: is it running?")
			}
		default:
			r.add("path.metrics", DoctorFail, err.Error(), "")
		}
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// checkJournal: the hooks' journal is the database's group's, 2770 — the
// controller hooks (SlurmUser, in that group) write it, nobody else can.
func checkJournal(r *DoctorReport, name, dir, group string) {
	st, err := os.Stat(dir)
	if err != nil {
		r.add(name, DoctorWarn, err.Error(), "the reconciler makes it at its start (bftrainer sync, as root, does too)")
		return
	}
	g := groupName(st)
	fix := fmt.Sprintf("chgrp %s %s && chmod 2770 %s", cmpOr(group, "SLURMUSER'S_GROUP"), dir, dir)
	switch p := st.Mode().Perm(); {
	case p&0o070 != 0o070:
		r.add(name, DoctorFail, fmt.Sprintf("%s is %s: not writable by its group %s, so the controller hooks (SlurmUser) cannot record a job", dir, st.Mode(), g), fix)
	case group != "" && g != group:
		r.add(name, DoctorFail, fmt.Sprintf("%s has group %s, the database %s", dir, g, group), fix)
	case p&0o007 != 0:
		r.add(name, DoctorFail, fmt.Sprintf("%s is %s: others can write or list the hooks' records", dir, st.Mode()), "chmod o-rwx "+dir)
	default:
		r.add(name, DoctorOK, fmt.Sprintf("%s %s group %s", dir, st.Mode(), g), "")
	}
}

// doctorSystemd checks the reconciler service (enabled and running) and
// the sync timer (enabled and fired recently).
func (c *Core) doctorSystemd(ctx context.Context, o DoctorOptions, r *DoctorReport) {
	prog := o.Systemctl
	if prog == "" {
		if _, err := os.Stat("/run/systemd/system"); err != nil {
			r.add("systemd", DoctorWarn, "systemd not running here: the reconciler service and the sync timer are not checked",
				"run them as the site runs services (contrib/slurm/README.md, section 5)")
			return
		}
		prog = "systemctl"
	}
	systemctl := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, o.RunTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, prog, args...)
		cmd.WaitDelay = time.Second
		out, err := cmd.Output()
		return strings.TrimSpace(string(out)), err
	}
	props := func(unit string, keys ...string) map[string]string {
		args := []string{"show", unit}
		for _, k := range keys {
			args = append(args, "-p", k)
		}
		out, _ := systemctl(args...)
		m := map[string]string{}
		for _, l := range strings.Split(out, "\n") {
			if k, v, ok := strings.Cut(l, "="); ok {
				m[k] = v
			}
		}
		return m
	}
	for _, u := range []string{ReconcileUnit, SyncTimer} {
		name := "systemd." + u
		short := strings.TrimSuffix(u, ".service")
		// is-enabled exits non-zero for anything but enabled; its word
		// says what instead.
		if state, _ := systemctl("is-enabled", u); state != "enabled" {
			r.add(name, DoctorFail, fmt.Sprintf("%s is %s", u, cmpOr(state, "not installed")),
				"systemctl enable --now "+short+" (contrib/slurm/README.md, section 5)")
			continue
		}
		if u == ReconcileUnit {
			p := props(u, "ActiveState", "ActiveEnterTimestamp")
			if p["ActiveState"] != "active" {
				r.add(name, DoctorFail, fmt.Sprintf("%s is enabled but %s", u, cmpOr(p["ActiveState"], "unknown")), "systemctl start "+short+"; journalctl -u "+short)
				continue
			}
			r.add(name, DoctorOK, "enabled, active since "+cmpOr(p["ActiveEnterTimestamp"], "(not said)"), "")
			continue
		}
		last := props(u, "LastTriggerUSec")["LastTriggerUSec"]
		at, err := parseSystemdTime(last)
		switch {
		case err != nil:
			r.add(name, DoctorWarn, fmt.Sprintf("enabled, never fired (LastTriggerUSec=%s)", last), "systemctl start "+short+"; systemctl list-timers "+u)
		case c.o.Now().Sub(at) > o.Recent:
			r.add(name, DoctorWarn, fmt.Sprintf("enabled, last fired %s ago (%s)", c.o.Now().Sub(at).Round(time.Second), last), "systemctl list-timers "+u+"; journalctl -u bftrainer-sync")
		default:
			r.add(name, DoctorOK, fmt.Sprintf("enabled, last fired %s ago", c.o.Now().Sub(at).Round(time.Second)), "")
		}
	}
}

// parseSystemdTime reads systemctl show's timestamps ("Wed 2026-12-02
// 01:50:00 UTC"; "n/a" for never).
func parseSystemdTime(s string) (time.Time, error) {
	for _, layout := range []string{"Mon 2006-01-02 15:04:05 MST", "Mon 2006-01-02 15:04:05 -0700"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("timestamp %q", s)
}

// doctorNodes asks a sample of nodes' agents: cgroup v2 with cgroup.kill
// and the pids controller, the hook binary there and of the same
// version, the clock.
func (c *Core) doctorNodes(ctx context.Context, o DoctorOptions, r *DoctorReport) {
	if o.Agent == nil {
		r.add("nodes", DoctorWarn, "trainer.transport is none: no node checked", "set trainer.transport (ssh, as root) to check the nodes")
		return
	}
	nodes := o.Nodes
	if len(nodes) == 0 {
		q, _ := c.listing("")
		if q == nil {
			r.add("nodes", DoctorWarn, "no node listing to sample nodes from", "name the nodes to check")
			return
		}
		states, err := q.NodeStates(ctx, nil)
		if err != nil {
			r.add("nodes", DoctorFail, err.Error(), "is the scheduler's node listing installed and answering?")
			return
		}
		for n := range states {
			nodes = append(nodes, n)
		}
		nodes = sample(nodes, o.Sample)
	}
	for _, n := range nodes {
		c.doctorNode(ctx, o, r, n)
	}
}

// sample returns k of nodes spread evenly over their sorted order.
func sample(nodes []string, k int) []string {
	slices.Sort(nodes)
	if len(nodes) <= k {
		return nodes
	}
	out := make([]string, k)
	for i := range out {
		out[i] = nodes[i*(len(nodes)-1)/max(k-1, 1)]
	}
	return out
}

func (c *Core) doctorNode(ctx context.Context, o DoctorOptions, r *DoctorReport, node string) {
	pre := "node." + node + "."
	ctx, cancel := context.WithTimeout(ctx, o.RunTimeout)
	defer cancel()
	sent := c.o.Now()
	nc, err := o.Agent.Doctor(ctx, node, o.Hook)
	back := c.o.Now()
	if err != nil {
		r.add("node."+node, DoctorFail, err.Error(), "check trainer.transport: root must reach the node's agent (bftrainer node-agent doctor)")
		return
	}
	switch {
	case !nc.CgroupV2:
		r.add(pre+"cgroup", DoctorFail, "no cgroup v2 (cgroup v1 or none): every kill there is degraded, processes may escape",
			"boot the node with the unified hierarchy (systemd.unified_cgroup_hierarchy=1)")
	case !nc.Kill:
		r.add(pre+"cgroup", DoctorFail, "cgroup v2 without cgroup.kill (Linux before 5.14): every kill there is degraded", "a kernel of 5.14 or later")
	case !nc.Pids:
		r.add(pre+"cgroup", DoctorWarn, "cgroup v2, but no pids controller for the Trainers' subtree: trainer.pids_max is not enforced",
			"enable +pids in the parent's cgroup.subtree_control (a unit with Delegate=yes)")
	case nc.Containment != wire.Cgroup:
		r.add(pre+"cgroup", DoctorWarn, "containment "+nc.Containment, "docs/trainers.md, \"Containment\"")
	default:
		r.add(pre+"cgroup", DoctorOK, "cgroup v2, cgroup.kill, pids", "")
	}
	switch {
	case o.Hook != "" && !nc.HookOK:
		r.add(pre+"hook", DoctorFail, "hook "+o.Hook+": "+nc.HookErr, "install the same bftrainer package on "+node)
	case nc.Version != o.Version:
		r.add(pre+"hook", DoctorFail, fmt.Sprintf("the node runs bftrainer %s, this host %s", nc.Version, o.Version), "install the same bftrainer package on "+node)
	default:
		r.add(pre+"hook", DoctorOK, fmt.Sprintf("%s, version %s", cmpOr(o.Hook, "agent"), nc.Version), "")
	}
	// The node's clock against the middle of the call; the call's half
	// length is the uncertainty.
	mid := sent.Add(back.Sub(sent) / 2)
	skew := nc.Time.Sub(mid)
	slack := back.Sub(sent) / 2
	if math.Abs(float64(skew)) > float64(o.MaxSkew+slack) {
		r.add(pre+"clock", DoctorFail, fmt.Sprintf("clock %s off this host's (±%s): the history's times and the audit disagree", skew.Round(time.Millisecond), slack.Round(time.Millisecond)),
			"run chrony (or ntpd) on the node and the controller")
		return
	}
	r.add(pre+"clock", DoctorOK, fmt.Sprintf("skew %s (±%s)", skew.Round(time.Millisecond), slack.Round(time.Millisecond)), "")
}

// doctorPrograms checks the configured solver's program and what each
// launcher needs.
func (c *Core) doctorPrograms(ctx context.Context, o DoctorOptions, r *DoctorReport) {
	if ms, ok := c.solver.(milp.Solver); ok {
		if err := ms.Backend.Available(); err != nil {
			r.add("solver", DoctorFail, fmt.Sprintf("pool.solver %s: %v", ms.Name(), err), "install it, set pool.solver_path, or choose pool.solver = \"adaptive\" (built in)")
		} else {
			r.add("solver", DoctorOK, "pool.solver "+ms.Name(), "")
		}
	} else {
		r.add("solver", DoctorOK, "pool.solver "+c.solver.Name()+" (built in)", "")
	}
	names := make([]string, 0, len(o.Launchers))
	for n := range o.Launchers {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		req, ok := o.Launchers[n].(trainer.Requirer)
		if !ok {
			continue
		}
		for _, q := range req.Requires() {
			name := "launcher." + n
			if err := runRequirement(ctx, q, o.RunTimeout); err != nil && o.Configured[n] {
				r.add(name, DoctorFail, q.What+": "+err.Error(), q.Hint)
			} else if err != nil {
				r.add(name, DoctorWarn, q.What+": "+err.Error()+" ([trainer.launcher."+n+"] not configured: its defaults)", q.Hint)
			} else {
				r.add(name, DoctorOK, q.What, "")
			}
		}
	}
}

func runRequirement(ctx context.Context, q trainer.Requirement, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, q.Argv[0], q.Argv[1:]...)
	cmd.Env = append(os.Environ(), q.Env...)
	cmd.WaitDelay = time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		if last := lines[len(lines)-1]; last != "" {
			return fmt.Errorf("%w: %s", err, last)
		}
		return err
	}
	return nil
}
