package slurm

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/sidecar"
)

// TestSlurmDoctor runs doctor's scheduler checks against a real slurmctld,
// as `scontrol show config` reports its running configuration: a lab
// wired as contrib/slurm/README.md says (the four hooks at one binary,
// PrologFlags=Alloc, PrologEpilogTimeout=120, SlurmUser root) has every
// Slurm check ok; then slurm.conf is broken one way at a time and
// reconfigured, and doctor gives the fail line of that check, and only
// that one (a fail is doctor's exit status 1: cmd/bftrainer's
// TestDoctorExit).
func TestSlurmDoctor(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real Slurm cluster")
	}
	if err := Need(); err != nil {
		t.Skip(err)
	}
	ctx := context.Background()
	script, err := filepath.Abs("lab.sh")
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "lab")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// The hook: a stand-in binary (no job runs here, so no hook is
	// called); doctor checks where slurm.conf's hooks lead.
	hook := filepath.Join(dir, "bftrainer")
	if err := os.WriteFile(hook, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := startLab(ctx, script, dir, Options{Nodes: 2, Prefix: "dlab", Hook: hook})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Stop(context.Background()); err != nil {
			t.Errorf("stop the lab: %v", err)
		}
	})
	scontrol, err := lookPath("scontrol")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("SLURM_CONF", l.Conf)
	if out := os.Getenv("BFTRAINER_SAVE_SCONTROL"); out != "" {
		// How hooks/testdata/scontrol-show-config.txt was made.
		b, err := l.Output(ctx, "scontrol", "show", "config")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(out, []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	core, err := sidecar.New(sidecar.Options{
		Database: filepath.Join(dir, "db", "bftrainer.db"),
		Listings: map[string]string{"scontrol": scontrol},
		Hook:     sidecar.HookOptions{Deadline: 2 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	// slurmChecks runs doctor and returns its Slurm lines by check.
	slurmChecks := func(t *testing.T) map[string]sidecar.DoctorCheck {
		t.Helper()
		r := core.Doctor(ctx, sidecar.DoctorOptions{Hook: hook})
		got := map[string]sidecar.DoctorCheck{}
		for _, c := range r.Checks {
			if strings.HasPrefix(c.Check, "slurm.") {
				got[c.Check] = c
				t.Logf("%-4s %s: %s", c.Status, c.Check, c.Detail)
			}
		}
		for _, k := range []string{"Prolog", "Epilog", "PrologSlurmctld", "EpilogSlurmctld", "PrologFlags", "PrologEpilogTimeout", "SlurmUser"} {
			if _, ok := got["slurm."+k]; !ok {
				t.Fatalf("no slurm.%s check in %+v", k, r.Checks)
			}
		}
		return got
	}
	// failsOnly checks that exactly the check named fails, with a fix.
	failsOnly := func(t *testing.T, got map[string]sidecar.DoctorCheck, name, detail string) {
		t.Helper()
		for k, c := range got {
			switch {
			case k == name && (c.Status != sidecar.DoctorFail || c.Hint == "" || !strings.Contains(c.Detail, detail)):
				t.Errorf("%s: %s %q (fix %q), want a fail saying %q and a fix", k, c.Status, c.Detail, c.Hint, detail)
			case k != name && c.Status != sidecar.DoctorOK:
				t.Errorf("%s: %s %q, want ok", k, c.Status, c.Detail)
			}
		}
	}

	t.Run("clean", func(t *testing.T) {
		for k, c := range slurmChecks(t) {
			if c.Status != sidecar.DoctorOK {
				t.Errorf("%s: %s %q, want ok", k, c.Status, c.Detail)
			}
		}
	})
	t.Run("no PrologFlags=Alloc", func(t *testing.T) {
		if err := l.rewriteConf(ctx, []string{"PrologFlags"}, nil); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := l.rewriteConf(ctx, nil, []string{"PrologFlags=Alloc"}); err != nil {
				t.Fatal(err)
			}
		}()
		failsOnly(t, slurmChecks(t), "slurm.PrologFlags", "without Alloc")
	})
	t.Run("hook path that does not exist", func(t *testing.T) {
		gone := filepath.Join(dir, "no", "bftrainer")
		if err := l.rewriteConf(ctx, []string{"Prolog"}, []string{"Prolog=" + gone}); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := l.rewriteConf(ctx, []string{"Prolog"}, []string{"Prolog=" + hook}); err != nil {
				t.Fatal(err)
			}
		}()
		failsOnly(t, slurmChecks(t), "slurm.Prolog", "no such file or directory")
	})
}
