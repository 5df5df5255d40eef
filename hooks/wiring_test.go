package hooks

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// labConfig is a real slurmctld's `scontrol show config` (Slurm 22.05,
// saved by internal/lab/slurm's TestSlurmDoctor), its hooks pointed at
// hook.
func labConfig(t *testing.T, hook string) map[string]string {
	t.Helper()
	b, err := os.ReadFile("testdata/scontrol-show-config.txt")
	if err != nil {
		t.Fatal(err)
	}
	cfg := ParseSlurmConfig(b)
	if got, want := cfg["PrologFlags"], "Alloc"; got != want {
		t.Fatalf("PrologFlags = %q, want %q (parse)", got, want)
	}
	for _, h := range slurmHooks {
		cfg[h.key] = hook
	}
	return cfg
}

func mustHook(t *testing.T) string {
	t.Helper()
	hook := filepath.Join(t.TempDir(), "bftrainer")
	if err := os.WriteFile(hook, []byte("\x7fELF stand-in"), 0o755); err != nil {
		t.Fatal(err)
	}
	return hook
}

func findings(fs []Finding) map[string]Finding {
	m := map[string]Finding{}
	for _, f := range fs {
		m[f.Name] = f
	}
	return m
}

// TestCheckSlurmConfig: the lab's configuration is all ok; each broken
// setting fails (or warns) its own check with a fix, and only that one.
func TestCheckSlurmConfig(t *testing.T) {
	hook := mustHook(t)
	dir := filepath.Dir(hook)
	wrapper := filepath.Join(dir, "site-prolog")
	if err := os.WriteFile(wrapper, []byte("#!/bin/sh\n"+hook+"; exec /etc/slurm/site-prolog\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other-prolog")
	if err := os.WriteFile(other, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	prologD := filepath.Join(dir, "prolog.d")
	if err := os.Mkdir(prologD, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(hook, filepath.Join(prologD, "00-bftrainer")); err != nil {
		t.Fatal(err)
	}
	groups := func(u string) ([]string, error) {
		switch u {
		case "slurm":
			return []string{"slurm"}, nil
		case "member":
			return []string{"member", "bftrainer"}, nil
		}
		return nil, errors.New("unknown user " + u)
	}
	for _, tc := range []struct {
		name   string
		set    map[string]string
		group  string
		check  string // the one check not ok; "" for none
		status string
		says   string
	}{
		{name: "the lab's wiring", group: "bftrainer"},
		{name: "a prolog.d glob holding a link", set: map[string]string{"Prolog": prologD + "/*"}},
		{name: "a wrapper script naming the hook", set: map[string]string{"PrologSlurmctld": wrapper}},
		{name: "Contain implies Alloc", set: map[string]string{"PrologFlags": "Contain,X11"}},
		{name: "SlurmUser in the database's group", set: map[string]string{"SlurmUser": "member(64030)"}, group: "bftrainer"},
		{name: "no PrologFlags", set: map[string]string{"PrologFlags": "(null)"},
			check: "slurm.PrologFlags", status: Fail, says: "without Alloc"},
		{name: "a hook that does not exist", set: map[string]string{"Epilog": filepath.Join(dir, "gone")},
			check: "slurm.Epilog", status: Fail, says: "no such file"},
		{name: "a hook not set", set: map[string]string{"EpilogSlurmctld": "(null)"},
			check: "slurm.EpilogSlurmctld", status: Fail, says: "not set"},
		{name: "another program", set: map[string]string{"Prolog": other},
			check: "slurm.Prolog", status: Fail, says: "does not run bftrainer's hook"},
		{name: "a glob matching nothing", set: map[string]string{"Prolog": dir + "/none.d/*"},
			check: "slurm.Prolog", status: Fail, says: "matches no file"},
		{name: "a timeout within twice the deadline", set: map[string]string{"PrologEpilogTimeout": "4"},
			check: "slurm.PrologEpilogTimeout", status: Fail, says: "not above twice hooks.deadline"},
		{name: "no timeout", set: map[string]string{"PrologEpilogTimeout": "65534"},
			check: "slurm.PrologEpilogTimeout", status: Warn, says: "waits forever"},
		{name: "SlurmUser not in the database's group", set: map[string]string{"SlurmUser": "slurm(64030)"}, group: "bftrainer",
			check: "slurm.SlurmUser", status: Fail, says: "not in the database's group bftrainer"},
		{name: "SlurmUser unknown here", set: map[string]string{"SlurmUser": "nobody2(1)"}, group: "bftrainer",
			check: "slurm.SlurmUser", status: Fail, says: "unknown user"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := labConfig(t, hook)
			for k, v := range tc.set {
				cfg[k] = v
			}
			got := CheckSlurmConfig(cfg, Want{Hook: hook, Deadline: 2 * time.Second, Group: tc.group, Groups: groups})
			if len(got) != 7 {
				t.Fatalf("%d findings, want 7: %+v", len(got), got)
			}
			for _, f := range got {
				if f.Name == tc.check {
					if f.Status != tc.status || !strings.Contains(f.Detail, tc.says) || f.Hint == "" {
						t.Errorf("%s: %s %q (fix %q), want %s saying %q and a fix", f.Name, f.Status, f.Detail, f.Hint, tc.status, tc.says)
					}
				} else if f.Status != OK {
					t.Errorf("%s: %s %q, want ok", f.Name, f.Status, f.Detail)
				}
			}
			if tc.check != "" {
				if _, ok := findings(got)[tc.check]; !ok {
					t.Errorf("no %s finding", tc.check)
				}
			}
		})
	}
}

// TestSchedulersWiring: Slurm and Grid Engine read their configuration;
// LSF and PBS do not (doctor warns).
func TestSchedulersWiring(t *testing.T) {
	for _, s := range Builtin() {
		if got, want := s.Wiring != nil, s.Name == Slurm || s.Name == nameGridEngine; got != want {
			t.Errorf("%s: has Wiring %v, want %v", s.Name, got, want)
		}
	}
}

// TestCheckGridEngineQueues: the line contrib/gridengine gives, a wrapper
// naming the hook, host-specific values (a warning), and the ways a
// queue's hooks go wrong. (The format is a real cell's: internal/lab/
// gridengine TestGridEngineDoctor.)
func TestCheckGridEngineQueues(t *testing.T) {
	hook := mustHook(t)
	wrapper := filepath.Join(filepath.Dir(hook), "site-prolog")
	if err := os.WriteFile(wrapper, []byte("#!/bin/sh\n"+hook+" hook gridengine prolog \"$@\"; exec /opt/site/prolog \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	guide := "root@" + hook + " hook gridengine prolog $host $job_id $job_owner"
	for _, tc := range []struct {
		name, prolog, status, says string
	}{
		{"the guide's line", guide, OK, ""},
		{"a wrapper naming the hook", "root@" + wrapper + " $host $job_id", OK, ""},
		{"a line continued", "root@" + hook + " hook gridengine \\\n                      prolog $host", OK, ""},
		{"host-specific values", guide + ",[gel1=NONE]", Warn, ""},
		{"none", "NONE", Fail, "has no prolog"},
		{"as the job's owner", hook + " hook gridengine prolog $host", Fail, "not root"},
		{"the wrong context", "root@" + hook + " hook gridengine epilog $host", Fail, "without \"hook gridengine prolog\""},
		{"not there", "root@/nonexistent/bftrainer hook gridengine prolog", Fail, "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := "qname                 all.q\nprolog                " + tc.prolog + "\nepilog                root@" + hook + " hook gridengine epilog $host\n"
			got := findings(CheckGridEngineQueues(map[string][]byte{"all.q": []byte(q)}, Want{Hook: hook}))
			if f := got["gridengine.all.q.prolog"]; f.Status != tc.status || !strings.Contains(f.Detail, tc.says) || (f.Status != OK) != (f.Hint != "") {
				t.Errorf("prolog %q: %+v, want %s saying %q", tc.prolog, f, tc.status, tc.says)
			}
			if f := got["gridengine.all.q.epilog"]; f.Status != OK {
				t.Errorf("epilog: %+v, want ok", f)
			}
		})
	}
}
