package slurm

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/sidecar"
	"github.com/bftrainer/bftrainer/trainer/trainertest"
)

// TestSlurmDoctor runs doctor's scheduler checks against a real slurmctld,
// as `scontrol show config` reports its running configuration: a lab
// wired as contrib/slurm/README.md says (the four hooks at one binary,
// PrologFlags=Alloc, PrologEpilogTimeout=120, SlurmUser root) has every
// Slurm check ok; then slurm.conf is broken one way at a time and
// reconfigured, and doctor gives the fail line of that check, and only
// that one. The bftrainer binary itself, on a controller laid out as the
// guide's section 3 says, exits 0 on the clean wiring and 1, with the
// fail line, without PrologFlags=Alloc.
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

	bin := doctorBinary(t, dir, scontrol)
	t.Run("clean", func(t *testing.T) {
		for k, c := range slurmChecks(t) {
			if c.Status != sidecar.DoctorOK {
				t.Errorf("%s: %s %q, want ok", k, c.Status, c.Detail)
			}
		}
		code, out := bin(t)
		if code != 0 || strings.Count(out, "\nok    slurm.") != 7 {
			t.Errorf("bftrainer doctor: exit %d, want 0 and seven ok lines for Slurm", code)
		}
		// The nodes, sampled from sinfo, asked through the node agent
		// over the transport (local: every lab node is this machine).
		for _, n := range l.Nodes {
			for _, c := range []string{"hook", "clock"} {
				if !strings.Contains(out, "\nok    node."+n+"."+c+" ") {
					t.Errorf("no ok line for node.%s.%s", n, c)
				}
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
		code, out := bin(t)
		if code != 1 || !strings.Contains(out, "\nfail  slurm.PrologFlags ") || strings.Count(out, "\nfail ") != 1 {
			t.Errorf("bftrainer doctor: exit %d, want 1 and one fail line, slurm.PrologFlags", code)
		}
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

// doctorBinary builds bftrainer and lays out a controller in dir as
// contrib/slurm/README.md section 3 says (SlurmUser root: no group
// steps; transport local: the lab's nodes are this machine), and
// returns a function running `bftrainer doctor` there: its
// exit status and stdout (with a leading newline, for line matching).
func doctorBinary(t *testing.T, dir, scontrol string) func(t *testing.T) (int, string) {
	t.Helper()
	bin := filepath.Join(dir, "bin", "bftrainer")
	build := exec.Command("go", "build", "-tags", "urfave_cli_no_docs", "-o", bin, "./cmd/bftrainer")
	build.Dir = trainertest.RepoRoot(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	mk := func(p string, mode uint32) string {
		p = filepath.Join(dir, p)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	state, logs := mk("db", 0o2755), mk("log", 0o755)
	mk("db/journal", 0o2770)
	hookLog := filepath.Join(logs, "hooks.log")
	for _, f := range []string{hookLog, filepath.Join(state, "bftrainer.db")} {
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Chmod(hookLog, 0o660); err != nil {
		t.Fatal(err)
	}
	systemctl := filepath.Join(dir, "systemctl")
	if err := os.WriteFile(systemctl, []byte(`#!/bin/sh
case $1 in
is-enabled) echo enabled ;;
show) echo ActiveState=active; echo "LastTriggerUSec=$(date -u '+%a %Y-%m-%d %H:%M:%S UTC')" ;;
esac
`), 0o755); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "bftrainer.toml")
	if err := os.WriteFile(config, []byte(`database = "`+filepath.Join(state, "bftrainer.db")+`"
journal_fallback = "`+mk("run/journal", 0o2770)+`"
spool = "`+mk("spool", 0o1733)+`"
[hooks]
log = "`+hookLog+`"
[scheduler]
scontrol = "`+scontrol+`"
sinfo = "`+filepath.Join(filepath.Dir(scontrol), "sinfo")+`"
[trainer]
transport = "local"
registry = "`+mk("run/nodes", 0o755)+`"
log_dir = "`+mk("log/trainers", 0o755)+`"
`), 0o644); err != nil {
		t.Fatal(err)
	}
	return func(t *testing.T) (int, string) {
		t.Helper()
		// The hook is the stand-in the lab's slurm.conf names; the units
		// a fake systemctl says are enabled, active and recent.
		cmd := exec.Command(bin, "--config", config, "doctor", "--hook", filepath.Join(dir, "bftrainer"), "--systemctl", systemctl)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		t.Logf("bftrainer doctor:\n%s%s", out, stderr.String())
		var ee *exec.ExitError
		switch {
		case err == nil:
			return 0, "\n" + string(out)
		case errors.As(err, &ee):
			return ee.ExitCode(), "\n" + string(out)
		}
		t.Fatal(err)
		return -1, ""
	}
}
