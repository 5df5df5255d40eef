package devicecheck

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/bftrainer/bftrainer/internal/lab"
	"github.com/bftrainer/bftrainer/trainer/trainertest"
)

// parts are the results the script prints, every one of them on every
// machine: a part that went missing fails the test.
var parts = []string{"env", "torchrun-flags", "store", "python-cpu", "python-cuda", "rescale-elastic", "rescale-torchrun",
	"gpu-reclaim-cgroup", "gpu-reclaim-degraded"}

// gpuParts need a GPU: without one they must skip, saying why.
var gpuParts = []string{"python-cuda", "gpu-reclaim-cgroup", "gpu-reclaim-degraded"}

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// mustBinaries builds bftrainer and bftrainer-bench once, as make
// device-check-build does (the bftrainer binary's built-in paths moved
// below their directory, as every test's).
func mustBinaries(tb testing.TB) string {
	tb.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "bftrainer-devicecheck")
		if buildErr != nil {
			return
		}
		root := trainertest.RepoRoot(tb)
		for _, b := range [][]string{
			{"build", "-tags", "urfave_cli_no_docs", "-ldflags", lab.BuildFlags(filepath.Join(binDir, "builtin"), "", ""), "-o", filepath.Join(binDir, "bftrainer"), "./cmd/bftrainer"},
			{"build", "-o", filepath.Join(binDir, "bftrainer-bench"), "./cmd/bftrainer-bench"},
		} {
			c := exec.Command("go", b...)
			c.Dir = root
			if out, err := c.CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("go %s: %v\n%s", strings.Join(b, " "), err, out)
				return
			}
		}
	})
	if buildErr != nil {
		tb.Fatal(buildErr)
	}
	return binDir
}

var resultLine = regexp.MustCompile(`^device check=([a-z0-9-]+) (ok|fail|skip)(?: (.*))?$`)

// TestDeviceCheck runs the script as CI's machine has it — Debian's torch,
// no GPU — and makes each result line a subtest: ok passes, fail fails,
// skip skips with the script's reason (make test lists it). Every part
// must report, and on a machine without nvidia-smi every GPU part must
// skip.
func TestDeviceCheck(t *testing.T) {
	if testing.Short() {
		t.Skip("the device check runs for minutes")
	}
	if os.Getenv("PYTHON") == "" {
		trainertest.NeedTorch(t)
	}
	bin := mustBinaries(t)
	out := t.TempDir()
	root := trainertest.RepoRoot(t)
	c := exec.Command("/bin/bash", filepath.Join(root, "internal", "devicecheck", "device-check.sh"), out)
	// Three times the device's budgets: CI's two cores are shared with
	// the other packages' tests.
	c.Env = append(os.Environ(), "BIN="+bin, "OUT="+out, "DEVICE_CHECK_BUDGET_SCALE=3")
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	err := c.Run()
	t.Logf("device-check.sh: %v; stderr: %s", err, stderr.String())

	printed := bytes.Clone(stdout.Bytes())
	got := map[string][2]string{}
	sc := bufio.NewScanner(bytes.NewReader(printed))
	for sc.Scan() {
		m := resultLine.FindStringSubmatch(sc.Text())
		if m == nil {
			t.Errorf("not a result line: %q", sc.Text())
			continue
		}
		if _, dup := got[m[1]]; dup {
			t.Errorf("%s reported twice", m[1])
		}
		got[m[1]] = [2]string{m[2], m[3]}
	}
	saved, rerr := os.ReadFile(filepath.Join(out, "results.txt"))
	if rerr != nil || !bytes.Equal(saved, printed) {
		t.Errorf("results.txt differs from stdout (%v):\n%s\nstdout:\n%s", rerr, saved, printed)
	}
	anyFail := false
	for _, p := range parts {
		r, ok := got[p]
		if !ok {
			t.Errorf("no result for %s", p)
			continue
		}
		anyFail = anyFail || r[0] == "fail"
		t.Run(p, func(t *testing.T) {
			switch r[0] {
			case "fail":
				log, _ := os.ReadFile(filepath.Join(out, logOf(p)))
				t.Errorf("%s; %s:\n%s", r[1], logOf(p), tail(log, 4000))
			case "skip":
				if r[1] == "" {
					t.Errorf("skipped without a reason")
				}
				t.Skip(r[1])
			default:
				t.Log(r[1])
			}
		})
	}
	if _, err := exec.LookPath("nvidia-smi"); err != nil {
		for _, p := range gpuParts {
			if r := got[p]; r[0] != "skip" {
				t.Errorf("%s: %s %s on a machine without a GPU, want skip", p, r[0], r[1])
			}
		}
	}
	if wantErr := anyFail; (err != nil) != wantErr {
		t.Errorf("the script exited %v, with a failed part: %v", err, anyFail)
	}
	for p := range got {
		if !slices.Contains(parts, p) {
			t.Errorf("unknown part %s: add it to parts", p)
		}
	}
}

func logOf(part string) string {
	switch {
	case strings.HasPrefix(part, "gpu-reclaim"):
		return "gpu-reclaim.log"
	case strings.HasPrefix(part, "rescale"):
		return "rescale.log"
	case part == "torchrun-flags":
		return "env.log"
	}
	return part + ".log"
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// TestGPUReclaimStandIn rehearses the device check's GPU reclaim
// (bftrainer-bench gpu) where there is no GPU: the Trainer holds a stand-in
// device file instead of /dev/nvidia0, and the memory reader says 2548
// MiB while any process holds that file open (fuser), 500 once none does,
// as nvidia-smi would once the driver released a killed process's
// context. The real node agent, prolog and kill report do the rest, in
// both containment modes: the holder is named, its process gone, the
// "memory" back.
func TestGPUReclaimStandIn(t *testing.T) {
	if testing.Short() {
		t.Skip("builds both binaries")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root (the node agent starts the Trainer as a throwaway user)")
	}
	fuser, err := exec.LookPath("fuser")
	if err != nil {
		t.Skip("needs fuser (psmisc) for the stand-in memory reader")
	}
	bin := mustBinaries(t)
	devs := t.TempDir()
	trainertest.OpenUp(t, devs)
	dev := filepath.Join(devs, "nvidia0")
	if err := os.WriteFile(dev, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dev, 0o666) // whatever the umask: open to the Trainer's owner
	smi := filepath.Join(t.TempDir(), "smi")
	script := fmt.Sprintf("#!/bin/sh\nif %s -s %s 2>/dev/null; then echo 2548; else echo 500; fi\n", fuser, dev)
	if err := os.WriteFile(smi, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	holder := `exec 3<` + dev + `; echo $$ > "$ESC_DIR/pids"; touch "$ESC_DIR/ready"; exec /bin/sleep 3600`
	c := exec.Command(filepath.Join(bin, "bftrainer-bench"), "gpu", "-bftrainer", filepath.Join(bin, "bftrainer"), "-gib", "2",
		"-smi", smi, "-device-glob", filepath.Join(devs, "nvidia*"), "-holder", holder)
	c.Dir = trainertest.RepoRoot(t)
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	if err := c.Run(); err != nil {
		t.Fatalf("bftrainer-bench gpu: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want a line per mode, got:\n%s", stdout.String())
	}
	field := regexp.MustCompile(`(\w+)=(\S+)`)
	for i, mode := range []string{"cgroup", "degraded"} {
		kv := map[string]string{}
		for _, m := range field.FindAllStringSubmatch(lines[i], -1) {
			kv[m[1]] = m[2]
		}
		if kv["containment"] != mode {
			t.Errorf("line %d: %s, want containment=%s", i, lines[i], mode)
			continue
		}
		if kv["skipped"] != "" {
			t.Logf("%s: skipped: %s", mode, lines[i])
			continue
		}
		if kv["survived"] != "0" || kv["idle_mib"] != "500" || kv["held_mib"] != "2048" ||
			!strings.HasSuffix(kv["holders"], ":"+dev) || kv["gone_ms"] == "never" || kv["mem_idle_ms"] == "never" {
			t.Errorf("%s: %s", mode, lines[i])
		}
		t.Log(lines[i])
	}
}
