package main

import (
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/bftrainer/bftrainer/trainer/trainertest"
)

// TestMakeInstall runs `make install` into a staging directory (DESTDIR)
// with every directory variable moved, as a package build does, and
// checks the tree it creates: the binary on a bin directory users have on
// PATH, the paths compiled into it and written into the installed
// configuration, the directories' modes (the spool sticky and
// unlistable), the configuration never overwritten, and the HiGHS driver
// when npm is here.
func TestMakeInstall(t *testing.T) {
	if testing.Short() {
		t.Skip("builds bftrainer with make")
	}
	for _, prog := range []string{"make", "go", "sed"} {
		if _, err := exec.LookPath(prog); err != nil {
			t.Skipf("%s is not installed: %v", prog, err)
		}
	}
	root := trainertest.RepoRoot(t)
	dest, build, npmCache := t.TempDir(), t.TempDir(), t.TempDir()
	group, err := user.LookupGroupId(strconv.Itoa(os.Getgid()))
	if err != nil {
		t.Fatal(err)
	}
	vars := []string{"DESTDIR=" + dest, "OUT=" + build, "PREFIX=/opt/bft", "SYSCONFDIR=/opt/bft/etc",
		"LOCALSTATEDIR=/srv/bft/var", "RUNSTATEDIR=/srv/bft/run", "GROUP=" + group.Name}
	install := func() string {
		t.Helper()
		cmd := exec.Command("make", append([]string{"-C", root, "--no-print-directory", "install"}, vars...)...)
		// npm's cache in the test's own directory: the test writes nowhere
		// else (the driver's package comes from the registry).
		cmd.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false", "npm_config_cache="+npmCache)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make install: %v\n%s", err, out)
		}
		return string(out)
	}
	out := install()

	for _, c := range []struct {
		path string
		mode fs.FileMode
	}{
		{"opt/bft/bin", fs.ModeDir | 0o755},
		{"opt/bft/bin/bftrainer", 0o755},
		{"opt/bft/etc/bftrainer", fs.ModeDir | 0o755},
		{"opt/bft/etc/bftrainer/bftrainer.toml", 0o644},
		{"srv/bft/var/lib/bftrainer", fs.ModeDir | 0o755},
		{"srv/bft/var/lib/bftrainer/journal", fs.ModeDir | fs.ModeSetgid | 0o770},
		{"srv/bft/var/log/bftrainer", fs.ModeDir | 0o755},
		{"srv/bft/var/spool/bftrainer", fs.ModeDir | fs.ModeSticky | 0o733},
		{"opt/bft/lib/bftrainer/python/bftrainer_elastic/__init__.py", 0o644},
	} {
		fi, err := os.Lstat(filepath.Join(dest, c.path))
		if err != nil {
			t.Fatalf("make install did not create %s: %v\n%s", c.path, err, out)
		}
		if got := fi.Mode() & (fs.ModeType | fs.ModePerm | fs.ModeSticky | fs.ModeSetgid); got != c.mode {
			t.Errorf("%s: mode %v, want %v", c.path, got, c.mode)
		}
	}
	if fi, err := os.Stat(filepath.Join(dest, "srv/bft/var/lib/bftrainer/journal")); err == nil {
		if gid := fi.Sys().(*syscall.Stat_t).Gid; strconv.Itoa(int(gid)) != group.Gid {
			t.Errorf("the journal's group is %d, want GROUP's, %s", gid, group.Gid)
		}
	}
	if _, err := os.Stat(filepath.Join(dest, "opt/bft/sbin")); err == nil {
		t.Errorf("make install created sbin/: the binary belongs on users' PATH, in bin/")
	}

	// The installed configuration names the moved directories, and loads.
	conf := filepath.Join(dest, "opt/bft/etc/bftrainer/bftrainer.toml")
	cfg, err := loadConfig(conf, true)
	if err != nil {
		t.Fatalf("the installed configuration does not load: %v", err)
	}
	for key, c := range map[string]struct{ got, want string }{
		"database":          {cfg.Database, "/srv/bft/var/lib/bftrainer/bftrainer.db"},
		"spool":             {cfg.Spool, "/srv/bft/var/spool/bftrainer"},
		"hooks.log":         {cfg.Hooks.Log, "/srv/bft/var/log/bftrainer/hooks.log"},
		"trainer.registry":  {cfg.Trainer.Registry, "/srv/bft/run/bftrainer/nodes"},
		"trainer.log_dir":   {cfg.Trainer.LogDir, "/srv/bft/var/log/bftrainer/trainers"},
		"trainer.state_dir": {cfg.Trainer.StateDir, "/srv/bft/var/lib/bftrainer/runner"},
	} {
		if c.got != c.want {
			t.Errorf("installed %s = %q, want %q", key, c.got, c.want)
		}
	}
	if b, _ := os.ReadFile(conf); !strings.Contains(string(b), `pythonpath = "/opt/bft/lib/bftrainer/python"`) {
		t.Errorf("the installed configuration does not point the elastic launcher at the installed runtime (PREFIX/lib/bftrainer/python)")
	}
	// The binary has the same paths compiled in: with no configuration
	// file at its compiled-in path (/opt/bft/etc/… outside DESTDIR) it
	// runs on them.
	bin := filepath.Join(dest, "opt/bft/bin/bftrainer")
	cmd := exec.Command(bin, "config")
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	printed, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("installed bftrainer config: %v\n%s", err, printed)
	}
	for _, want := range []string{`database = "/srv/bft/var/lib/bftrainer/bftrainer.db"`, `spool = "/srv/bft/var/spool/bftrainer"`,
		`registry = "/srv/bft/run/bftrainer/nodes"`} {
		if !strings.Contains(string(printed), want) {
			t.Errorf("the installed binary's defaults lack %s:\n%s", want, printed)
		}
	}
	help, _ := exec.Command(bin, "--help").Output()
	if !strings.Contains(string(help), "Configuration: /opt/bft/etc/bftrainer/bftrainer.toml") {
		t.Errorf("the installed binary's help does not name its configuration file:\n%s", help)
	}
	// Its hook help gives the snippets with the path it is installed at.
	help, _ = exec.Command(bin, "hook", "--help").Output()
	if !strings.Contains(string(help), "Prolog=/opt/bft/bin/bftrainer ") || strings.Contains(string(help), "/usr/local/bin/bftrainer") {
		t.Errorf("the installed binary's hook help does not name its own path:\n%s", help)
	}

	// The manual pages, with the same paths as the help.
	for page, want := range map[string]string{
		"bftrainer.8":      "Configuration: /opt/bft/etc/bftrainer/bftrainer.toml",
		"bftrainer-hook.8": "Prolog=/opt/bft/bin/bftrainer ",
	} {
		b, err := os.ReadFile(filepath.Join(dest, "opt/bft/share/man/man8", page))
		if err != nil || !strings.Contains(string(b), want) || strings.Contains(string(b), "/usr/local/bin/bftrainer") {
			t.Errorf("installed man page %s (%v) does not say %q, as the help does:\n%s", page, err, want, b)
		}
	}

	// A second install keeps an edited configuration.
	if err := os.WriteFile(conf, []byte("# edited\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	install()
	if b, _ := os.ReadFile(conf); string(b) != "# edited\n" {
		t.Errorf("make install overwrote the configuration: %q", b)
	}

	// The HiGHS driver, where npm is.
	highs := filepath.Join(dest, "opt/bft/libexec/bftrainer/highs-wasm")
	if _, err := exec.LookPath("npm"); err != nil {
		if !strings.Contains(out, "npm not found") {
			t.Errorf("without npm, make install should say the HiGHS driver is not installed:\n%s", out)
		}
		t.Logf("npm is not installed: the HiGHS driver part is not checked")
		return
	}
	if _, err := os.Stat(filepath.Join(highs, "node_modules", "highs", "package.json")); err != nil {
		t.Fatalf("the HiGHS driver's npm package is not installed: %v\n%s", err, out)
	}
	if fi, err := os.Stat(filepath.Join(highs, "bftrainer-highs.mjs")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("the HiGHS driver: %v %v", fi, err)
	}
	if got, err := os.Readlink(filepath.Join(dest, "opt/bft/bin/bftrainer-highs")); err != nil || got != "/opt/bft/libexec/bftrainer/highs-wasm/bftrainer-highs.mjs" {
		t.Errorf("bin/bftrainer-highs links to %q (%v), want the installed driver", got, err)
	}
	if _, err := exec.LookPath("node"); err == nil {
		v, err := exec.Command("node", filepath.Join(highs, "bftrainer-highs.mjs"), "--version").CombinedOutput()
		if err != nil || !strings.Contains(string(v), "HiGHS") {
			t.Errorf("the installed HiGHS driver does not run: %v\n%s", err, v)
		}
	}
}

// TestContribNamesInstalledPath: the hooks' snippets and guides (contrib/,
// docs/, and each scheduler's usage as `bftrainer hook --help` shows it)
// call the binary where `make install` puts it by default, $(PREFIX)/bin,
// or where the packages put it (contrib/packaging/nfpm.yaml), so that a
// sysadmin who copies them gets a hook that exists.
func TestContribNamesInstalledPath(t *testing.T) {
	const installed = "/usr/local/bin/bftrainer" // the Makefile's PREFIX and BINDIR
	const packaged = "/usr/bin/bftrainer"        // the packages' dst
	nfpm, err := os.ReadFile(filepath.Join(trainertest.RepoRoot(t), "contrib", "packaging", "nfpm.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(nfpm), "dst: "+packaged+"\n") {
		t.Fatalf("contrib/packaging/nfpm.yaml no longer installs %s: update this test and the paths it checks", packaged)
	}
	mk, err := os.ReadFile(filepath.Join(trainertest.RepoRoot(t), "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"PREFIX        ?= /usr/local\n", "BINDIR        ?= $(PREFIX)/bin\n"} {
		if !strings.Contains(string(mk), want) {
			t.Fatalf("the Makefile no longer says %q: update this test and the paths it checks", want)
		}
	}
	texts := map[string]string{"bftrainer hook --help": schedulerUsage()}
	root := trainertest.RepoRoot(t)
	for _, dir := range []string{"contrib", "docs"} {
		filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			if strings.Contains(path, "/contrib/packaging/") {
				return nil // the packages' own paths (PREFIX=/usr), checked by their test
			}
			b, err := os.ReadFile(path)
			if err == nil {
				texts[strings.TrimPrefix(path, root+"/")] = string(b)
			}
			return nil
		})
	}
	binPath := regexp.MustCompile(`/usr(/[\w.-]+)*/s?bin/bftrainer\b`)
	for name, text := range texts {
		for _, loc := range binPath.FindAllStringIndex(text, -1) {
			if loc[1] < len(text) && strings.ContainsRune("-_.", rune(text[loc[1]])) {
				continue // bftrainer-highs, bftrainer.toml, …
			}
			if got := text[loc[0]:loc[1]]; got != installed && got != packaged {
				t.Errorf("%s calls %s; make install puts bftrainer in %s, the packages in %s", name, got, installed, packaged)
			}
		}
	}
}

// TestReadmeReplay runs the README's Summit replay as written, from the
// checkout's root, where ../shared/data is (it skips, saying so, where the
// data is not).
func TestReadmeReplay(t *testing.T) {
	root := trainertest.RepoRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```sh\n(bftrainer replay \\\\\n.*?)\n```").FindSubmatch(readme)
	if m == nil {
		t.Fatal("README.md has no replay example (a sh block starting \"bftrainer replay \\\")")
	}
	args := strings.Fields(strings.ReplaceAll(string(m[1]), "\\\n", " "))
	data := filepath.Join(root, "..", "shared", "data")
	if _, err := os.Stat(data); err != nil {
		t.Skipf("../shared/data is not beside this checkout: %v", err)
	}
	for i, a := range args {
		if strings.HasPrefix(a, "../shared/data/") {
			args[i] = filepath.Join(root, a)
		}
	}
	var out, errs strings.Builder
	if code := run(args, &out, &errs); code != 0 {
		t.Fatalf("%s: exit %d\n%s", strings.Join(args, " "), code, errs.String())
	}
	if !strings.Contains(out.String(), " 1000/1000 ") {
		t.Fatalf("the README's replay did not finish the 1000 Trainers:\n%s", out.String())
	}
}
