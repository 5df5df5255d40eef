package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/bftrainer/bftrainer/sidecar"
)

// TestDoctorExit runs `bftrainer doctor` on a controller's paths made as
// the guide says (systemd a fake systemctl, the scheduler's configuration
// off: internal/lab/slurm's TestSlurmDoctor reads a real one): exit 0,
// one line per check; --format json says the same; then the solver
// missing, and the journal not writable by its group: each a fail line
// with its fix, and exit status 1.
func TestDoctorExit(t *testing.T) {
	dir := t.TempDir()
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
	state := mk("lib", 0o2755)
	journal := mk("lib/journal", 0o2770)
	hookLog := filepath.Join(mk("log", 0o755), "hooks.log")
	if err := os.WriteFile(hookLog, nil, 0o644); err != nil || syscall.Chmod(hookLog, 0o660) != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(state, "bftrainer.db"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	systemctl := filepath.Join(dir, "systemctl")
	if err := os.WriteFile(systemctl, []byte(`#!/bin/sh
case $1 in
is-enabled) echo enabled ;;
show) echo ActiveState=active; echo "ActiveEnterTimestamp=Wed 2026-12-02 01:00:00 UTC"; echo "LastTriggerUSec=$(date -u '+%a %Y-%m-%d %H:%M:%S UTC')" ;;
esac
`), 0o755); err != nil {
		t.Fatal(err)
	}
	config := func(extra string) string {
		p := filepath.Join(dir, "bftrainer.toml")
		text := `database = "` + filepath.Join(state, "bftrainer.db") + `"
journal_fallback = ""
spool = "` + mk("spool", 0o1733) + `"
[hooks]
log = "` + hookLog + `"
[scheduler]
scontrol = ""
[trainer]
registry = "` + mk("run/nodes", 0o755) + `"
log_dir = "` + mk("log/trainers", 0o755) + `"
# Importing torch takes seconds here: the launchers' programs are stand-ins
# (sidecar's TestDoctorFails checks a missing one).
[trainer.launcher.torchrun]
command = ["/bin/true"]
python = "/bin/true"
[trainer.launcher.elastic]
python = "/bin/true"
` + extra
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	doctor := func(t *testing.T, cfg string, args ...string) (int, string, string) {
		t.Helper()
		var out, errs bytes.Buffer
		code := run(append([]string{"bftrainer", "--config", cfg, "doctor", "--systemctl", systemctl}, args...), &out, &errs)
		t.Logf("exit %d\n%s%s", code, out.String(), errs.String())
		return code, out.String(), errs.String()
	}

	t.Run("clean", func(t *testing.T) {
		code, out, errs := doctor(t, config(""))
		if code != 0 || strings.Contains(out, "fail") {
			t.Fatalf("exit %d, want 0 and no fail line", code)
		}
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			status, _, _ := strings.Cut(l, " ")
			if status != "ok" && status != "warn" {
				t.Errorf("line %q: want ok or warn first", l)
			}
			if status == "warn" && !strings.Contains(l, " — fix: ") {
				t.Errorf("line %q: a warning without its fix", l)
			}
		}
		if !strings.Contains(out, "ok    path.journal") || !strings.Contains(out, "ok    systemd.bftrainer-sync.timer") {
			t.Errorf("no ok line for the journal and the sync timer")
		}
		if !strings.HasPrefix(errs, "bftrainer: doctor: ") || !strings.Contains(errs, ", 0 fail") {
			t.Errorf("stderr %q, want the summary line", errs)
		}
		code, js, _ := doctor(t, config(""), "--format", "json")
		var r sidecar.DoctorReport
		if err := json.Unmarshal([]byte(js), &r); err != nil || code != 0 {
			t.Fatalf("--format json: exit %d, %v", code, err)
		}
		if got, want := len(r.Checks), strings.Count(out, "\n"); got != want || r.Fail != 0 || r.OK == 0 {
			t.Errorf("json: %d checks, %d ok, %d fail; want %d, some ok, no fail", got, r.OK, r.Fail, want)
		}
	})
	// The mpi launcher's program is looked for (a warning here: the
	// transport is none, so no launcher counts as configured).
	t.Run("mpi launcher missing", func(t *testing.T) {
		missing := filepath.Join(dir, "no", "mpirun")
		_, out, _ := doctor(t, config("[trainer.launcher.mpi]\ncommand = [\""+missing+"\"]\n"))
		if !regexp.MustCompile(`(?m)^warn +launcher\.mpi +MPI launcher \(` + regexp.QuoteMeta(missing) + `\): .* — fix: install Open MPI`).MatchString(out) {
			t.Errorf("no warning for the missing MPI launcher")
		}
	})
	for _, tc := range []struct {
		name, extra, line string
		break_            func()
	}{
		{name: "solver missing", extra: "[pool]\nsolver = \"cbc\"\nsolver_path = \"" + filepath.Join(dir, "no", "cbc") + "\"\n",
			line: "fail  solver"},
		{name: "journal not writable by SlurmUser's group", line: "fail  path.journal",
			break_: func() { syscall.Chmod(journal, 0o2750) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.break_ != nil {
				tc.break_()
				defer syscall.Chmod(journal, 0o2770)
			}
			code, out, errs := doctor(t, config(tc.extra))
			if code != 1 {
				t.Errorf("exit %d, want 1", code)
			}
			var fails []string
			for _, l := range strings.Split(out, "\n") {
				if strings.HasPrefix(l, "fail") {
					fails = append(fails, l)
				}
			}
			if len(fails) != 1 || !strings.HasPrefix(fails[0], tc.line) || !strings.Contains(fails[0], " — fix: ") {
				t.Errorf("fail lines %q, want one: %s … — fix: …", fails, tc.line)
			}
			if !strings.Contains(errs, ", 1 fail") || !strings.Contains(errs, "bftrainer: the site's wiring has failing checks") {
				t.Errorf("stderr %q, want the summary and the error", errs)
			}
		})
	}
}
