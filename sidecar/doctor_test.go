package sidecar

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/trainer"
	"github.com/bftrainer/bftrainer/trainer/wire"
)

// site is a controller's wiring in a temporary directory, made the way
// contrib/slurm/README.md section 3 says, with every check doctor can
// pass here passing: the scheduler's configuration (the Slurm lab's test,
// internal/lab/slurm TestSlurmDoctor) is off, systemd is a fake
// systemctl, the nodes are fake agents unless a test gives a real one.
type site struct {
	dir     string
	o       Options
	d       DoctorOptions
	now     time.Time
	enabled map[string]string // unit: is-enabled's word
	agent   *fakeAgent
}

// fakeAgent is a node agent's answer, for the checks one layer up.
type fakeAgent struct {
	check wire.NodeCheck
	err   error
}

func (a *fakeAgent) Doctor(_ context.Context, _, hook string) (wire.NodeCheck, error) {
	c := a.check
	c.Hook, c.HookOK = hook, true
	c.Time = time.Now()
	if a.check.Time != (time.Time{}) {
		c.Time = a.check.Time
	}
	return c, a.err
}

func newSite(t *testing.T) *site {
	t.Helper()
	dir := t.TempDir()
	s := &site{dir: dir, now: time.Now(), enabled: map[string]string{ReconcileUnit: "enabled", SyncTimer: "enabled"}}
	mk := func(p string, mode uint32) string {
		p = filepath.Join(dir, p)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		chmod(t, p, mode)
		return p
	}
	state := mk("lib", 0o2755)
	db := filepath.Join(state, "bftrainer.db")
	if err := os.WriteFile(db, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	hook := filepath.Join(dir, "bftrainer")
	if err := os.WriteFile(hook, []byte("stand-in"), 0o755); err != nil {
		t.Fatal(err)
	}
	hookLog := filepath.Join(mk("log", 0o2775), "hooks.log")
	if err := os.WriteFile(hookLog, nil, 0o660); err != nil {
		t.Fatal(err)
	}
	chmod(t, hookLog, 0o660)
	s.o = Options{
		Database: db, Journal: mk("lib/journal", 0o2770), JournalFallback: mk("run/journal", 0o2770),
		Spool:    mk("spool", 0o1733),
		Listings: map[string]string{"scontrol": ""},
	}
	s.agent = &fakeAgent{check: wire.NodeCheck{Containment: wire.Cgroup, CgroupV2: true, Kill: true, Pids: true, Version: "1.2.3"}}
	s.d = DoctorOptions{
		Hook: hook, Version: "1.2.3", HookLog: hookLog,
		Registry: mk("run/nodes", 0o755), LogDir: mk("log/trainers", 0o755),
		Systemctl: s.systemctl(t),
		Agent:     s.agent, Nodes: []string{"n01"},
	}
	return s
}

// systemctl writes a fake systemctl answering is-enabled from s.enabled
// (read when it runs) and show with an active service and a timer that
// fired a minute before the site was made.
func (s *site) systemctl(t *testing.T) string {
	t.Helper()
	p := filepath.Join(s.dir, "systemctl")
	script := `#!/bin/sh
case $1 in
is-enabled) w=$(cat "` + s.dir + `/enabled.$2" 2>/dev/null) || w=not-found; echo "$w"; [ "$w" = enabled ] ;;
show) case $2 in
	*.service) echo ActiveState=active; echo "ActiveEnterTimestamp=Wed 2026-12-02 01:00:00 UTC" ;;
	*.timer) echo "LastTriggerUSec=$(cat "` + s.dir + `/last")" ;;
	esac ;;
esac
`
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// doctor runs doctor on the site and returns its report.
func (s *site) doctor(t *testing.T) *DoctorReport {
	t.Helper()
	for u, w := range s.enabled {
		if err := os.WriteFile(filepath.Join(s.dir, "enabled."+u), []byte(w), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	last := s.now.Add(-time.Minute).UTC().Format("Mon 2006-01-02 15:04:05 MST")
	if err := os.WriteFile(filepath.Join(s.dir, "last"), []byte(last), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := New(s.o)
	if err != nil {
		t.Fatal(err)
	}
	r := c.Doctor(context.Background(), s.d)
	for _, ch := range r.Checks {
		t.Logf("%-4s %-28s %s  %s", ch.Status, ch.Check, ch.Detail, ch.Hint)
	}
	return r
}

// TestDoctorClean: a site wired as the guide says has no fail, and
// checks each part.
func TestDoctorClean(t *testing.T) {
	r := newSite(t).doctor(t)
	if r.Fail != 0 {
		t.Fatalf("%d fail(s) on a clean site", r.Fail)
	}
	seen := map[string]string{}
	for _, c := range r.Checks {
		seen[c.Check] = c.Status
	}
	for _, k := range []string{"path.database", "path.journal", "path.journal_fallback", "path.spool", "path.registry", "path.log_dir",
		"path.hooks_log", "systemd." + ReconcileUnit, "systemd." + SyncTimer, "node.n01.cgroup", "node.n01.hook", "node.n01.clock", "solver"} {
		if seen[k] != DoctorOK {
			t.Errorf("%s: %q, want ok", k, seen[k])
		}
	}
	if got, want := seen["slurm.scontrol"], DoctorWarn; got != want {
		t.Errorf("slurm.scontrol, switched off: %q, want %q", got, want)
	}
}

// TestDoctorFails: each misconfiguration gives its check's fail line, with
// a fix, and no other fail (cmd's exit status 1 follows from Fail > 0).
func TestDoctorFails(t *testing.T) {
	for _, tc := range []struct {
		name, check, says string
		break_            func(t *testing.T, s *site)
	}{
		{"the journal not writable by SlurmUser's group", "path.journal", "not writable by its group",
			func(t *testing.T, s *site) { chmod(t, s.o.Journal, 0o2750) }},
		{"a world-writable journal", "path.journal_fallback", "others can write",
			func(t *testing.T, s *site) { chmod(t, s.o.JournalFallback, 0o2777) }},
		{"a spool without its sticky bit", "path.spool", "want drwx-wx-wt",
			func(t *testing.T, s *site) { chmod(t, s.o.Spool, 0o733) }},
		{"a node agent reporting cgroup v1", "node.n01.cgroup", "no cgroup v2",
			func(t *testing.T, s *site) {
				s.agent.check.CgroupV2, s.agent.check.Kill, s.agent.check.Containment = false, false, "degraded (no cgroup2 filesystem mounted)"
			}},
		{"a kernel without cgroup.kill", "node.n01.cgroup", "without cgroup.kill",
			func(t *testing.T, s *site) { s.agent.check.Kill = false }},
		{"a node on another version", "node.n01.hook", "runs bftrainer 1.2.2",
			func(t *testing.T, s *site) { s.agent.check.Version = "1.2.2" }},
		{"a node that cannot be reached", "node.n01", "connection refused",
			func(t *testing.T, s *site) { s.agent.err = errors.New("ssh n01: connection refused") }},
		{"clock skew injected", "node.n01.clock", "off this host's",
			func(t *testing.T, s *site) { s.agent.check.Time = time.Now().Add(5 * time.Second) }},
		{"the sync timer not enabled", "systemd." + SyncTimer, "bftrainer-sync.timer is disabled",
			func(t *testing.T, s *site) { s.enabled[SyncTimer] = "disabled" }},
		{"the reconciler service not installed", "systemd." + ReconcileUnit, "not-found",
			func(t *testing.T, s *site) { delete(s.enabled, ReconcileUnit) }},
		{"the solver missing", "solver", "pool.solver cbc",
			func(t *testing.T, s *site) {
				s.o.Solver, s.o.SolverSettings.Path = "cbc", filepath.Join(s.dir, "no", "cbc")
			}},
		{"a configured launcher's interpreter missing", "launcher.elastic", "python with the elastic runtime",
			func(t *testing.T, s *site) {
				var kind trainer.Kind
				for _, k := range trainer.Builtin() {
					if k.Name == trainer.Elastic {
						kind = k
					}
				}
				l, err := kind.New(func(v any) error {
					v.(*trainer.ElasticSettings).Python = filepath.Join(s.dir, "no", "python3")
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				s.d.Launchers = map[string]trainer.Launcher{"elastic": l}
				s.d.Configured = map[string]bool{"elastic": true}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSite(t)
			tc.break_(t, s)
			r := s.doctor(t)
			var fails []DoctorCheck
			for _, c := range r.Checks {
				if c.Status == DoctorFail {
					fails = append(fails, c)
				}
			}
			if len(fails) != 1 || r.Fail != 1 {
				t.Fatalf("fails %+v (count %d), want one, of %s", fails, r.Fail, tc.check)
			}
			if f := fails[0]; f.Check != tc.check || !strings.Contains(f.Detail, tc.says) || f.Hint == "" {
				t.Errorf("fail %s %q (fix %q), want %s saying %q and a fix", f.Check, f.Detail, f.Hint, tc.check, tc.says)
			}
		})
	}
}

// TestDoctorNoSystemd: where systemd is not PID 1 and no systemctl is
// given, doctor warns once instead of checking the units.
func TestDoctorNoSystemd(t *testing.T) {
	if _, err := os.Stat("/run/systemd/system"); err == nil {
		t.Skip("systemd runs here")
	}
	s := newSite(t)
	s.d.Systemctl = ""
	r := s.doctor(t)
	var got []DoctorCheck
	for _, c := range r.Checks {
		if strings.HasPrefix(c.Check, "systemd") {
			got = append(got, c)
		}
	}
	if len(got) != 1 || got[0].Status != DoctorWarn || !strings.Contains(got[0].Detail, "systemd not running here") {
		t.Fatalf("systemd checks %+v, want one warning: systemd not running here", got)
	}
}

// TestDoctorRealAgent asks the real node agent (in process, as
// `node-agent doctor` runs it) about this machine: the hook is there, the
// version and the clock agree; a hook path that is not there fails.
func TestDoctorRealAgent(t *testing.T) {
	s := newSite(t)
	a := trainer.NewNodeAgent(trainer.AgentSettings{Registry: s.d.Registry, Version: s.d.Version})
	s.d.Agent = inProcess{a.Doctor}
	seen := map[string]DoctorCheck{}
	for _, c := range s.doctor(t).Checks {
		seen[c.Check] = c
	}
	for _, k := range []string{"node.n01.hook", "node.n01.clock"} {
		if seen[k].Status != DoctorOK {
			t.Errorf("%s: %+v, want ok", k, seen[k])
		}
	}
	s.d.Hook = filepath.Join(s.dir, "no", "bftrainer")
	for _, c := range s.doctor(t).Checks {
		if c.Check == "node.n01.hook" && (c.Status != DoctorFail || !strings.Contains(c.Detail, "no such file")) {
			t.Errorf("a missing hook: %+v, want a fail", c)
		}
	}
}

type inProcess struct{ f func(string) wire.NodeCheck }

func (p inProcess) Doctor(_ context.Context, _, hook string) (wire.NodeCheck, error) {
	return p.f(hook), nil
}

// chmod sets the octal mode m, setgid and sticky bits included (os.Chmod
// takes those as os.ModeSetgid and os.ModeSticky), past the umask.
func chmod(t *testing.T, p string, m uint32) {
	t.Helper()
	if err := syscall.Chmod(p, m); err != nil {
		t.Fatal(err)
	}
}

// TestSample spreads the sample over the sorted nodes.
func TestSample(t *testing.T) {
	got := strings.Join(sample([]string{"n5", "n1", "n3", "n2", "n4"}, 3), ",")
	if want := "n1,n3,n5"; got != want {
		t.Fatalf("sample = %s, want %s", got, want)
	}
	if got, want := strings.Join(sample([]string{"b", "a"}, 3), ","), "a,b"; got != want {
		t.Fatalf("sample = %s, want %s", got, want)
	}
}
