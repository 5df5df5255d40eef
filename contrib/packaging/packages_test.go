// Package packaging holds how bftrainer's .deb and .rpm are built
// (nfpm.yaml, the maintainer scripts, tmpfiles.d; `make packages`) and the
// test that builds both and checks them with Debian's and RPM's own tools.
package packaging

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
)

// debEntries lists a .deb's data with dpkg-deb: each path (without the
// leading ".") and its permissions as ls spells them (drwxrws---).
func debEntries(t *testing.T, deb string) map[string]string {
	t.Helper()
	out := run(t, "dpkg-deb", "--contents", deb)
	m := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if len(f) < 6 {
			t.Fatalf("dpkg-deb --contents: %q", l)
		}
		p := strings.TrimSuffix(strings.TrimPrefix(f[5], "."), "/")
		if p != "" {
			m[p] = f[0]
		}
	}
	return m
}

// rpmEntries lists an .rpm's files with rpm, as debEntries does, and
// those it marks as configuration, with their flags.
func rpmEntries(t *testing.T, rpm string) (files map[string]string, config []string) {
	t.Helper()
	out := run(t, "rpm", "-qp", "--qf", `[%{FILEMODES:perms} %{FILEFLAGS:fflags}| %{FILENAMES}\n]`, rpm)
	files = map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		head, p, ok := strings.Cut(sc.Text(), "| ")
		if !ok {
			t.Fatalf("rpm -qp: %q", sc.Text())
		}
		f := strings.Fields(head)
		files[p] = f[0]
		if len(f) > 1 && strings.Contains(f[1], "c") {
			config = append(config, p+" "+f[1])
		}
	}
	return files, config
}

// run runs a program and returns its standard output, failing the test
// with its standard error when it fails.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}

// built is the packages `make packages` made for this test binary, once:
// TestPackages checks them, TestInstalledPackage installs the .deb.
var built struct {
	sync.Once
	dir, deb, rpm string
	err           error
}

// TestMain removes the packages' build directory after the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// buildPackages builds the .deb and the .rpm with `make packages` (the
// first call; later ones return the same files) and returns their paths.
func buildPackages(t *testing.T) (deb, rpm string) {
	t.Helper()
	built.Do(func() {
		root, err := filepath.Abs("../..")
		if err != nil {
			built.err = err
			return
		}
		if built.dir, err = os.MkdirTemp("", "bftrainer-packages."); err != nil {
			built.err = err
			return
		}
		cmd := exec.Command("make", "-C", root, "--no-print-directory", "packages", "OUT="+built.dir)
		cmd.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false")
		if b, err := cmd.CombinedOutput(); err != nil {
			built.err = fmt.Errorf("make packages: %w\n%s", err, b)
			return
		}
		debs, _ := filepath.Glob(filepath.Join(built.dir, "packages", "*.deb"))
		rpms, _ := filepath.Glob(filepath.Join(built.dir, "packages", "*.rpm"))
		if len(debs) != 1 || len(rpms) != 1 {
			built.err = fmt.Errorf("make packages made %v and %v, want one .deb and one .rpm", debs, rpms)
			return
		}
		built.deb, built.rpm = debs[0], rpms[0]
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.deb, built.rpm
}

// TestPackages builds the .deb and the .rpm with `make packages`, and
// checks that lintian finds no error in the .deb, that the .rpm holds
// the same files and package directories with the same modes, the
// configuration as a conffile and as %config(noreplace), the guide's
// directory modes, a man page per page in man/, and its scripts.
func TestPackages(t *testing.T) {
	if testing.Short() {
		t.Skip("builds bftrainer and both packages")
	}
	for _, prog := range []string{"make", "go", "strip", "gzip", "dpkg-deb", "rpm", "lintian"} {
		if _, err := exec.LookPath(prog); err != nil {
			t.Skipf("%s is not installed (apt-get install lintian rpm; .ci/run does): %v", prog, err)
		}
	}
	deb, rpm := buildPackages(t)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}

	// lintian: no error (warnings are listed in the log).
	lint := exec.Command("lintian", "--fail-on", "error", deb)
	b, err := lint.CombinedOutput()
	if err != nil {
		t.Errorf("lintian finds errors in the .deb: %v\n%s", err, b)
	}
	t.Logf("lintian %s:\n%s", filepath.Base(deb), b)

	// The same files, and the .rpm's directories, with the same modes (the
	// .deb lists every parent directory too: /usr, /var/lib, …).
	d := debEntries(t, deb)
	r, config := rpmEntries(t, rpm)
	var paths []string
	for p := range d {
		paths = append(paths, p)
	}
	for p := range r {
		if _, ok := d[p]; !ok {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	for _, p := range paths {
		dm, inDeb := d[p]
		rm, inRPM := r[p]
		switch {
		case inDeb && strings.HasPrefix(dm, "d") && !inRPM:
			// A parent directory the .deb lists.
		case !inRPM:
			t.Errorf("%s is in the .deb, not in the .rpm", p)
		case !inDeb:
			t.Errorf("%s is in the .rpm, not in the .deb", p)
		case dm != rm:
			t.Errorf("%s: mode %s in the .deb, %s in the .rpm", p, dm, rm)
		}
	}

	// What the issue asks for, where it belongs.
	for p, want := range map[string]string{
		"/usr/bin/bftrainer":                                      "-rwxr-xr-x",
		"/etc/bftrainer/bftrainer.toml":                           "-rw-r--r--",
		"/usr/lib/bftrainer/python/bftrainer_elastic/__init__.py": "-rw-r--r--",
		"/usr/lib/systemd/system/bftrainer-reconcile.service":     "-rw-r--r--",
		"/usr/lib/systemd/system/bftrainer-sync.timer":            "-rw-r--r--",
		"/usr/lib/systemd/system/bftrainer-sync.service":          "-rw-r--r--",
		"/usr/lib/systemd/system/bftrainer-journal.path":          "-rw-r--r--",
		"/usr/lib/systemd/system/bftrainer-reconcile-now.service": "-rw-r--r--",
		"/usr/lib/tmpfiles.d/bftrainer.conf":                      "-rw-r--r--",
		"/usr/share/man/man8/bftrainer.8.gz":                      "-rw-r--r--",
		"/usr/share/man/man8/bftrainer-trainer-submit.8.gz":       "-rw-r--r--",
		"/usr/share/doc/bftrainer/copyright":                      "-rw-r--r--",
		"/var/lib/bftrainer":                                      "drwxr-sr-x",
		"/var/lib/bftrainer/journal":                              "drwxrws---",
		"/var/log/bftrainer":                                      "drwxrwsr-x",
		"/var/spool/bftrainer":                                    "drwx-wx-wt",
	} {
		if got := d[p]; got != want {
			t.Errorf("the .deb has %s with mode %q, want %q", p, got, want)
		}
	}
	pages, _ := filepath.Glob(filepath.Join(root, "man", "*.8"))
	var packaged int
	for p := range d {
		if strings.HasPrefix(p, "/usr/share/man/man8/") && strings.HasSuffix(p, ".8.gz") {
			packaged++
		}
	}
	if len(pages) == 0 || packaged != len(pages) {
		t.Errorf("the .deb has %d man pages, man/ %d", packaged, len(pages))
	}
	if got := strings.TrimSpace(run(t, "dpkg-deb", "--info", deb, "conffiles")); got != "/etc/bftrainer/bftrainer.toml" {
		t.Errorf(".deb conffiles: %q, want the configuration only", got)
	}
	if got, want := strings.Join(config, ","), "/etc/bftrainer/bftrainer.toml cn"; got != want {
		t.Errorf(".rpm configuration files: %q, want %q (%%config(noreplace))", got, want)
	}

	// The units name the packaged binary; the scripts make the group and
	// keep the database on purge unless asked.
	unit := run(t, "sh", "-c", `dpkg-deb --fsys-tarfile "$1" | tar -xOf - ./usr/lib/systemd/system/bftrainer-reconcile.service`, "sh", deb)
	if !strings.Contains(unit, "ExecStart=/usr/bin/bftrainer reconcile --watch") {
		t.Errorf("the packaged reconciler unit does not run /usr/bin/bftrainer:\n%s", unit)
	}
	scripts := run(t, "rpm", "-qlp", "--scripts", rpm)
	for _, want := range []string{"preinstall scriptlet", "groupadd --system bftrainer", "postinstall scriptlet",
		"chgrp \"$2\" \"$3\"", "preuninstall scriptlet", "postuninstall scriptlet", `"${BFTRAINER_PURGE_DATABASE:-}" = yes`} {
		if !strings.Contains(scripts, want) {
			t.Errorf("rpm -qlp --scripts lacks %q:\n%s", want, scripts)
		}
	}
	for _, s := range []string{"preinst", "postinst", "prerm", "postrm"} {
		got := run(t, "dpkg-deb", "--info", deb, s)
		want, err := os.ReadFile(filepath.Join("scripts", s))
		if err != nil || got != string(want) {
			t.Errorf("the .deb's %s is not scripts/%s (%v)", s, s, err)
		}
	}
}
