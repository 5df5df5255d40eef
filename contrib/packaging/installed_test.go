package packaging

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/internal/lab/slurm"
	"github.com/bftrainer/bftrainer/store"
	"github.com/bftrainer/bftrainer/trainer/trainertest"
)

// DisposableEnv, set to 1, says this machine is a throwaway one (.ci/run
// sets it on its fresh CI machine): TestInstalledPackage may install the
// .deb with dpkg, add the scheduler's user to the package's group, and
// purge it all again. Never set it on a machine that matters.
const DisposableEnv = "BFTRAINER_DISPOSABLE_MACHINE"

// The package's own paths: what it installs or its scripts make, and what
// bftrainer makes below them at run time (the database, the registry).
// Before the test none may exist; after the purge none may be left.
var ownPaths = []string{
	"/usr/bin/bftrainer", "/usr/lib/bftrainer", "/usr/share/doc/bftrainer", "/etc/bftrainer",
	"/var/lib/bftrainer", "/var/log/bftrainer", "/var/spool/bftrainer", "/run/bftrainer",
	"/usr/lib/tmpfiles.d/bftrainer.conf", "/usr/lib/systemd/system/bftrainer-reconcile.service",
}

// TestInstalledPackage is issue 21's CI proof of the .deb: on a
// disposable machine (DisposableEnv=1, root, no bftrainer installed) it
// installs the .deb with dpkg -i, checks what its scripts made (the
// group, the directories' groups and modes), runs one Slurm lab scenario
// on the installed bftrainer — /usr/bin/bftrainer as Slurm's four hooks,
// /etc/bftrainer/bftrainer.toml, the package's database, journal,
// spool, logs and registry, SlurmUser in the package's group, the
// package's units — then removes it (configuration and database kept),
// purges it (the database kept unless asked), removes the database by
// hand as the postrm says, and fails if anything else is left.
//
// systemd is not PID 1 on the CI machine (nor in a container): the test
// runs what the installed units say — each unit file's ExecStart, as its
// User and Group, with its Environment — and what the installed
// tmpfiles.d entry says, not systemd itself.
func TestInstalledPackage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the packages, installs the .deb and starts a Slurm lab")
	}
	if os.Getenv(DisposableEnv) != "1" {
		t.Skipf("installs and purges the .deb on this machine: only where %s=1 says it is disposable (.ci/run sets it)", DisposableEnv)
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root (dpkg -i)")
	}
	for _, prog := range []string{"make", "go", "strip", "gzip", "dpkg", "dpkg-deb", "dpkg-query", "usermod", "gpasswd", "groupdel"} {
		if _, err := exec.LookPath(prog); err != nil {
			t.Skipf("%s is not installed: %v", prog, err)
		}
	}
	if st := dpkgStatus(); st != "" {
		t.Skipf("a bftrainer package is on this machine already (dpkg: %s): not touched", st)
	}
	for _, p := range ownPaths {
		if _, err := os.Lstat(p); err == nil {
			t.Skipf("%s exists already (a bftrainer installed otherwise?): not touched", p)
		}
	}
	_, groupBefore := lookupGroup("bftrainer")
	deb, _ := buildPackages(t)
	contents := debEntries(t, deb)

	// Whatever happens below, the machine is left as it was: purged, the
	// database and the run directory gone, the group removed if we made
	// it. Registered first, so it runs last (after the lab is down).
	t.Cleanup(func() {
		if dpkgStatus() != "" {
			cmd := exec.Command("dpkg", "--purge", "bftrainer")
			cmd.Env = append(os.Environ(), "BFTRAINER_PURGE_DATABASE=yes")
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("cleanup: dpkg --purge: %v\n%s", err, b)
			}
		}
		os.RemoveAll("/var/lib/bftrainer")
		os.RemoveAll("/run/bftrainer")
		if _, ok := lookupGroup("bftrainer"); ok && !groupBefore {
			exec.Command("groupdel", "bftrainer").Run()
		}
	})

	started := time.Now()
	t.Logf("# dpkg -i %s\n%s", filepath.Base(deb), run(t, "dpkg", "-i", deb))
	t.Logf("installed: %s", dpkgStatus())
	gr, ok := lookupGroup("bftrainer")
	if !ok {
		t.Fatal("the package made no bftrainer group")
	}
	// The postinst gives the directories the group and the guide's modes.
	for p, want := range map[string]string{
		"/usr/bin/bftrainer":            "-rwxr-xr-x root:root",
		"/etc/bftrainer/bftrainer.toml": "-rw-r--r-- root:root",
		"/var/lib/bftrainer":            "drwxr-sr-x root:bftrainer",
		"/var/lib/bftrainer/journal":    "drwxrws--- root:bftrainer",
		"/var/log/bftrainer":            "drwxrwsr-x root:bftrainer",
		"/var/log/bftrainer/hooks.log":  "-rw-rw---- root:bftrainer",
		"/var/spool/bftrainer":          "drwx-wx-wt root:root",
	} {
		if got := statLine(p); got != want {
			t.Errorf("%s: %s, want %s", p, got, want)
		}
	}
	t.Logf("group %s (gid %s); %s", gr.Name, gr.Gid, strings.TrimSpace(run(t, "/usr/bin/bftrainer", "--version")))

	t.Run("slurm-lab", func(t *testing.T) { installedLab(t, contents) })

	// Remove: the binary and the units go; the configuration, the
	// database (where the lab made one) and the logs stay.
	_, err := os.Stat("/var/lib/bftrainer/bftrainer.db")
	hadDB := err == nil
	t.Logf("# dpkg -r bftrainer\n%s", run(t, "dpkg", "-r", "bftrainer"))
	left := leftover()
	t.Logf("left after dpkg -r (dpkg: %s):\n%s", dpkgStatus(), strings.Join(left, "\n"))
	for _, p := range []string{"/usr/bin/bftrainer", "/usr/lib/systemd/system/bftrainer-reconcile.service"} {
		if slices.Contains(left, p) {
			t.Errorf("dpkg -r left %s", p)
		}
	}
	keep := []string{"/etc/bftrainer/bftrainer.toml", "/var/log/bftrainer/hooks.log"}
	if hadDB {
		keep = append(keep, "/var/lib/bftrainer/bftrainer.db")
	}
	for _, p := range keep {
		if !slices.Contains(left, p) {
			t.Errorf("dpkg -r did not keep %s", p)
		}
	}

	// Purge: the configuration, logs, spool and run directory go; the
	// database is kept (it was not asked for), and the group.
	cmd := exec.Command("dpkg", "--purge", "bftrainer")
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "BFTRAINER_PURGE_DATABASE=") })
	b, err := cmd.CombinedOutput()
	t.Logf("# dpkg --purge bftrainer\n%s", b)
	if err != nil {
		t.Fatalf("dpkg --purge: %v", err)
	}
	left = leftover()
	t.Logf("left after dpkg --purge (dpkg: %q):\n%s", dpkgStatus(), strings.Join(left, "\n"))
	if st := dpkgStatus(); st != "" {
		t.Errorf("after the purge dpkg still knows bftrainer: %s", st)
	}
	for _, p := range left {
		if !strings.HasPrefix(p, "/var/lib/bftrainer") && p != "group bftrainer" {
			t.Errorf("the purge left %s", p)
		}
	}
	if hadDB && !slices.Contains(left, "/var/lib/bftrainer/bftrainer.db") {
		t.Errorf("the purge removed the database without BFTRAINER_PURGE_DATABASE=yes")
	}
	// What the postrm tells the admin to do by hand, and the group.
	if err := os.RemoveAll("/var/lib/bftrainer"); err != nil {
		t.Error(err)
	}
	if !groupBefore {
		run(t, "groupdel", "bftrainer")
	}
	left = leftover()
	t.Logf("left after removing /var/lib/bftrainer and the group by hand: %q", left)
	if len(left) > 0 {
		t.Errorf("still left: %v", left)
	}
	t.Logf("install, lab scenario, remove and purge took %.1f s", time.Since(started).Seconds())
}

// installedLab runs the scenario on the installed package: a 2-node lab
// (pkg1, pkg2) whose four hooks are /usr/bin/bftrainer and whose
// SlurmUser, slurm, is in the package's group (the guide's `usermod -aG
// bftrainer slurm`); the sync unit's command finds the idle nodes, the
// reconciler unit's command runs as the service; an elastic Trainer (the
// package's Python runtime) grows onto both nodes, a main job reclaims
// one, the Trainer carries on on the other, and grows back once the job
// ends.
func installedLab(t *testing.T, contents map[string]string) {
	if err := slurm.Need(); err != nil {
		t.Skip(err)
	}
	trainertest.NeedTorch(t)
	slurmUser, err := user.Lookup("slurm")
	if err != nil {
		t.Skip("needs the slurm user (Debian's slurm packages make it)")
	}
	ctx := context.Background()
	// The guide's step: SlurmUser joins the package's group, before
	// slurmctld starts (it takes its groups then).
	wasMember := inGroup(t, slurmUser, "bftrainer")
	if !wasMember {
		run(t, "usermod", "-aG", "bftrainer", "slurm")
		t.Cleanup(func() { exec.Command("gpasswd", "-d", "slurm", "bftrainer").Run() })
	}
	// The run directory, as systemd-tmpfiles makes it at boot.
	tmpfiles(t, "/usr/lib/tmpfiles.d/bftrainer.conf")

	c, err := slurm.Up(ctx, slurm.ClusterOptions{Repo: trainertest.RepoRoot(t), Nodes: 2, Prefix: "pkg", SlurmUser: "slurm",
		Installed: &slurm.Installed{Bin: "/usr/bin/bftrainer", Config: "/etc/bftrainer/bftrainer.toml"}, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Down(context.Background(), false); err != nil {
			t.Errorf("stopping the lab: %v", err)
		}
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("debug:\n%s", c.Debug(context.Background()))
		}
	})
	// Every path the lab uses is one the package made.
	for what, p := range map[string]string{"database directory": filepath.Dir(c.In.DB), "journal": c.In.Journal,
		"spool": c.In.Spool, "hooks' log directory": filepath.Dir(c.In.HooksLog), "elastic runtime": filepath.Join(c.In.ElasticPath(), "bftrainer_elastic")} {
		if _, ok := contents[p]; !ok {
			t.Errorf("the lab's %s %s is not in the package", what, p)
		}
	}
	t.Logf("installed paths: hooks %s, configuration %s, database %s, journal %s, spool %s, hooks' log %s, registry %s, elastic runtime %s",
		c.Lab.Hook, c.In.Config, c.In.DB, c.In.Journal, c.In.Spool, c.In.HooksLog, c.In.Registry, c.In.ElasticPath())

	// The sync timer's service, once (as at boot): the idle nodes join.
	syncCmd := unitCommand(t, ctx, "/usr/lib/systemd/system/bftrainer-sync.service")
	out, err := syncCmd.Output()
	if err != nil {
		t.Fatalf("%s: %v", syncCmd, err)
	}
	t.Logf("bftrainer-sync.service (%s): %s", syncCmd, strings.TrimSpace(string(out)))
	if !strings.HasPrefix(string(out), "joined 2 pkg[1-2]\n") {
		t.Fatalf("sync printed %q", out)
	}
	// The reconciler's service, for the rest of the scenario.
	service := unitCommand(t, ctx, "/usr/lib/systemd/system/bftrainer-reconcile.service")
	if err := service.Start(); err != nil {
		t.Fatal(err)
	}
	t.Logf("bftrainer-reconcile.service: %s (pid %d)", service, service.Process.Pid)
	t.Cleanup(func() {
		service.Process.Signal(syscall.SIGTERM) // systemctl stop, KillMode=process
		service.Wait()
	})

	both := slices.Clone(c.Lab.Nodes)
	submitted := time.Now()
	tr, err := c.SubmitElastic(ctx, "pkg", 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	r, err := slurm.WaitRounds(ctx, tr.Log, submitted, 3, 3*time.Minute, slurm.OnNodes(both...))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("harvest: the elastic Trainer trains at world 2 on %v, %.1f s after its submission", r.Nodes, r.At.Sub(submitted).Seconds())

	main, err := c.Lab.Submit(ctx, slurm.JobSpec{Nodes: 1, Held: true})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := main.WaitChecked(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Lab.Job(ctx, main.ID)
	if err != nil {
		t.Fatal(err)
	}
	onMain, err := info.Nodes()
	if err != nil || len(onMain) != 1 {
		t.Fatalf("main job %s runs on %v (%v)", main.ID, onMain, err)
	}
	if p := rep.Procs[onMain[0]]; p != "none" {
		t.Errorf("the main job found Trainer processes on its node %s: %s", onMain[0], p)
	}
	kills, err := c.In.Events(ctx, store.Filter{Kinds: []store.Kind{store.KindKill}, Job: main.ID})
	if err != nil {
		t.Fatal(err)
	}
	var killed []string
	for _, k := range kills {
		if k.Error != "" {
			t.Errorf("kill on %v: %s", k.Nodes, k.Error)
		}
		killed = append(killed, fmt.Sprintf("%v: %.0f group(s) in %.1f ms", k.Nodes, k.Value, k.Ms))
	}
	rest := slices.DeleteFunc(slices.Clone(both), func(n string) bool { return n == onMain[0] })
	rd, err := slurm.WaitRounds(ctx, tr.Log, rep.First, 3, 2*time.Minute, slurm.OnNodes(rest...))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("reclaim: main job %s on %v, first line %.0f ms after sbatch, found no Trainer process there; node prolog kills %v; the Trainer trains at world 1 on %v, %.1f s after the job started",
		main.ID, onMain, float64(main.StartDelay(rep).Microseconds())/1000, killed, rd.Nodes, rd.At.Sub(rep.First).Seconds())

	released := time.Now()
	if err := main.Release(); err != nil {
		t.Fatal(err)
	}
	info, err = main.WaitEnded(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	end, err := main.Report()
	if err != nil {
		t.Fatal(err)
	}
	if bad := slurm.Normal(info, end); bad != "" {
		t.Errorf("main job %s: %s", main.ID, bad)
	}
	rg, err := slurm.WaitRounds(ctx, tr.Log, released, 3, 2*time.Minute, slurm.OnNodes(both...))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("return: the Trainer trains at world 2 again on %v, %.1f s after the main job was let go", rg.Nodes, rg.At.Sub(released).Seconds())

	// The controller's hooks ran as slurm and wrote the package's journal
	// through its group; the service recorded them.
	hooks, err := c.HookEvents(ctx, main.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"prolog_slurmctld", "epilog_slurmctld", "prolog_slurmd", "epilog_slurmd"} {
		if len(hooks[k]) != 1 {
			t.Errorf("%s recorded %d times for job %s, want 1", k, len(hooks[k]), main.ID)
		}
		for _, e := range hooks[k] {
			if e.Error != "" {
				t.Errorf("%s: %s", k, e.Error)
			}
		}
	}
	if b, _ := os.ReadFile(c.In.HooksLog); strings.Contains(string(b), "record hook") {
		t.Errorf("the hooks could not record:\n%s", b)
	}
	if bad, err := c.Lab.Drained(ctx); err != nil || len(bad) > 0 {
		t.Errorf("nodes drained or down: %v %v", bad, err)
	}
	if err := c.Cancel(ctx, tr.Name); err != nil {
		t.Error(err)
	}
	doctor(t, c)
}

// doctor runs the installed `bftrainer doctor`, the Slurm guide's last
// step, on the lab: slurm.conf's wiring (scontrol show config), SlurmUser
// in the database's group, the package's paths and modes, the nodes, the
// solver and launchers are all ok. systemd's checks are one warning
// where systemd does not run; a node's cgroup check depends on this
// machine (a hybrid cgroup hierarchy fails it) and is only shown.
func doctor(t *testing.T, c *slurm.Cluster) {
	out, err := c.In.Run(context.Background(), "doctor", "--format", "json")
	var r struct {
		Checks         []struct{ Check, Status, Detail, Hint string }
		OK, Warn, Fail int
	}
	if jerr := json.Unmarshal([]byte(out), &r); jerr != nil || len(r.Checks) == 0 {
		t.Fatalf("bftrainer doctor --format json: %v, %v:\n%s", err, jerr, out)
	}
	var lines []string
	for _, ch := range r.Checks {
		lines = append(lines, fmt.Sprintf("%-4s %s: %s", ch.Status, ch.Check, ch.Detail))
		switch {
		case ch.Check == "systemd" || strings.HasPrefix(ch.Check, "systemd."):
			if ch.Status == "fail" {
				t.Errorf("doctor: %s fails where systemd does not run: %s", ch.Check, ch.Detail)
			}
		case strings.HasPrefix(ch.Check, "node.") && strings.HasSuffix(ch.Check, ".cgroup"):
		case ch.Status != "ok":
			t.Errorf("doctor: %s %s: %s (fix: %s)", ch.Status, ch.Check, ch.Detail, ch.Hint)
		}
	}
	t.Logf("bftrainer doctor: %d ok, %d warn, %d fail\n%s", r.OK, r.Warn, r.Fail, strings.Join(lines, "\n"))
}

// unitCommand is what systemd would run for a service unit: its
// ExecStart, as its User and Group, with its Environment only.
func unitCommand(t *testing.T, ctx context.Context, unit string) *exec.Cmd {
	t.Helper()
	f, err := os.Open(unit)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var exec0, usr, grp string
	var env []string
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(l, "[") {
			section = l
			continue
		}
		k, v, ok := strings.Cut(l, "=")
		if section != "[Service]" || !ok || strings.HasPrefix(l, "#") {
			continue
		}
		switch k {
		case "ExecStart":
			exec0 = v
		case "User":
			usr = v
		case "Group":
			grp = v
		case "Environment":
			if strings.ContainsAny(v, `"'\$%`) {
				t.Fatalf("%s: Environment=%s needs systemd's quoting, which this reader does not do", unit, v)
			}
			env = append(env, strings.Fields(v)...)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	args := strings.Fields(exec0)
	if len(args) == 0 || !filepath.IsAbs(args[0]) || strings.ContainsAny(exec0, `"'\$%;`) {
		t.Fatalf("%s: ExecStart=%q is not a plain absolute command line", unit, exec0)
	}
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Env = env
	cmd.Dir = "/"
	cmd.Stderr = &prefixWriter{t: t, prefix: filepath.Base(unit) + ": "}
	if usr == "" {
		usr = "root"
	}
	u, err := user.Lookup(usr)
	if err != nil {
		t.Fatalf("%s: User=%s: %v", unit, usr, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if grp != "" {
		g, err := user.LookupGroup(grp)
		if err != nil {
			t.Fatalf("%s: Group=%s: %v", unit, grp, err)
		}
		gid, _ = strconv.Atoi(g.Gid)
	}
	if uid != 0 || gid != 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	}
	return cmd
}

// prefixWriter logs a command's standard error, line by line.
type prefixWriter struct {
	t      *testing.T
	prefix string
}

func (w *prefixWriter) Write(b []byte) (int, error) {
	for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		w.t.Log(w.prefix + l)
	}
	return len(b), nil
}

// tmpfiles makes what a tmpfiles.d file's "d" lines say (the only type
// bftrainer's uses), with systemd-tmpfiles where it is installed.
func tmpfiles(t *testing.T, conf string) {
	t.Helper()
	if p, err := exec.LookPath("systemd-tmpfiles"); err == nil {
		if b, err := exec.Command(p, "--create", conf).CombinedOutput(); err != nil {
			t.Fatalf("systemd-tmpfiles --create %s: %v\n%s", conf, err, b)
		}
		t.Logf("systemd-tmpfiles --create %s", conf)
		return
	}
	b, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if f[0] != "d" || len(f) < 5 {
			t.Fatalf("%s: %q: only d lines are read here", conf, l)
		}
		mode, err := strconv.ParseUint(f[2], 8, 32)
		if err != nil {
			t.Fatalf("%s: %q: %v", conf, l, err)
		}
		u, err1 := user.Lookup(f[3])
		g, err2 := user.LookupGroup(f[4])
		if err := errors.Join(err1, err2, os.MkdirAll(f[1], 0o755)); err != nil {
			t.Fatalf("%s: %q: %v", conf, l, err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(g.Gid)
		perm := fs.FileMode(mode & 0o777)
		if mode&0o2000 != 0 {
			perm |= fs.ModeSetgid
		}
		if mode&0o1000 != 0 {
			perm |= fs.ModeSticky
		}
		if err := errors.Join(os.Chown(f[1], uid, gid), os.Chmod(f[1], perm)); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("made %s's directories (no systemd-tmpfiles here)", conf)
}

// dpkgStatus is dpkg's status of the bftrainer package ("install ok
// installed", "deinstall ok config-files", …) and version; "" when dpkg
// knows no such package (never installed, or purged).
func dpkgStatus() string {
	out, err := exec.Command("dpkg-query", "-W", "-f", "${Status} ${Version}", "bftrainer").Output()
	if err != nil {
		return ""
	}
	s := strings.TrimSpace(string(out))
	if strings.HasPrefix(s, "unknown ok not-installed") {
		return ""
	}
	return s
}

// leftover lists what of the package is on the machine: each of its own
// paths that exists, and everything below it, and its group.
func leftover() []string {
	var left []string
	for _, p := range ownPaths {
		filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err == nil {
				left = append(left, path)
			}
			return nil
		})
	}
	sort.Strings(left)
	if _, ok := lookupGroup("bftrainer"); ok {
		left = append(left, "group bftrainer")
	}
	return left
}

func lookupGroup(name string) (*user.Group, bool) {
	g, err := user.LookupGroup(name)
	return g, err == nil
}

// inGroup reports whether u is a member of group.
func inGroup(t *testing.T, u *user.User, group string) bool {
	t.Helper()
	g, ok := lookupGroup(group)
	if !ok {
		return false
	}
	ids, err := u.GroupIds()
	if err != nil {
		t.Fatal(err)
	}
	return slices.Contains(ids, g.Gid)
}

// statLine is a path's permissions and owners as ls spells them, or
// stat's error.
func statLine(p string) string {
	out, err := exec.Command("stat", "-c", "%A %U:%G", p).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("stat: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out))
}
