package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

func TestMain(m *testing.M) {
	// The scripts' hooks run this binary: their built-in hooks.log (where
	// a hook with a broken configuration logs) is in the script's work
	// directory, not /var/log.
	if v := os.Getenv("BFTRAINER_TEST_HOOKLOG"); v != "" {
		defaultHookLog = v
	}
	// Every other built-in path too (the configuration's defaults, used
	// where a test's configuration leaves a path out or does not load): a
	// script's are in its work directory, the test process's own in a
	// temporary directory; none in /etc, /var or /run.
	builtin := os.Getenv("BFTRAINER_TEST_BUILTIN")
	if builtin == "" {
		d, err := os.MkdirTemp("", "bftrainer-builtin")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		builtinTmp, builtin = d, d // removed by cleanup.Run
	}
	setBuiltin(builtin)
	testscript.Main(cleanup{m}, map[string]func(){
		"bftrainer": func() {
			code := run(os.Args, os.Stdout, os.Stderr)
			if builtinTmp != "" {
				os.RemoveAll(builtinTmp)
			}
			os.Exit(code)
		},
	})
}

// builtinTmp is the test process's built-in paths' directory.
var builtinTmp string

// cleanup removes the binary MustBuild made, and builtinTmp, once the
// tests have run.
type cleanup struct{ m *testing.M }

func (c cleanup) Run() int {
	code := c.m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	if builtinTmp != "" {
		os.RemoveAll(builtinTmp)
	}
	return code
}

// TestScripts runs the golden tests of the real binary in
// testdata/script: each sets a scheduler's hook environment or runs a
// command, and asserts stdout, stderr and the exit code.
func TestScripts(t *testing.T) {
	// WorkdirRoot: the scripts' work directories in the test's own
	// temporary directory (testscript's default, a go-test-script* in
	// /tmp, is left behind when -run selects some scripts only).
	testscript.Run(t, testscript.Params{Dir: "testdata/script", Setup: scriptSetup, WorkdirRoot: t.TempDir(),
		Cmds: map[string]func(*testscript.TestScript, bool, []string){"exits": exits}})
}

// exits N PROGRAM [ARGS…] runs the program like exec and fails unless it
// exits with status N: 1 (failure) and 2 (bad usage) are part of the CLI's
// contract, which "! exec" alone does not tell apart.
func exits(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: exits N PROGRAM [ARGS…]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("exits: %q is not a status", args[0])
	}
	got := 0
	var ee *exec.ExitError
	switch err := ts.Exec(args[1], args[2:]...); {
	case errors.As(err, &ee):
		got = ee.ExitCode()
	case err != nil:
		ts.Fatalf("exits: %v", err)
	}
	if got != want {
		ts.Fatalf("exit status %d, want %d", got, want)
	}
}

// scriptSetup writes a config per test, in its own work directory. Its
// scheduler has no listing (sinfo turned off): a release joins at once. A
// script that needs a PATH with bftrainer alone on it (no cbc, no highs)
// sets PATH=$BFTBIN.
func scriptSetup(env *testscript.Env) error {
	for _, dir := range filepath.SplitList(env.Getenv("PATH")) {
		if _, err := os.Stat(filepath.Join(dir, "bftrainer")); err == nil {
			env.Setenv("BFTBIN", dir)
			break
		}
	}
	env.Setenv("BFTRAINER_CONFIG", env.WorkDir+"/bftrainer.toml")
	env.Setenv("BFTRAINER_TEST_HOOKLOG", env.WorkDir+"/fallback-hooks.log")
	env.Setenv("BFTRAINER_TEST_BUILTIN", env.WorkDir+"/builtin")
	conf := `database = "` + env.WorkDir + `/db/bftrainer.db"
spool = "` + env.WorkDir + `/spool"
[hooks]
log = "` + env.WorkDir + `/hooks.log"
spawn_reconciler = "never"
[scheduler]
sinfo = ""
squeue = ""
[trainer]
registry = "` + env.WorkDir + `/registry"
log_dir = "` + env.WorkDir + `/trainer-logs"
state_dir = "` + env.WorkDir + `/runner"
`
	// metrics.toml: the same, with the Prometheus metrics file on.
	metrics := conf + `[metrics]
textfile = "` + env.WorkDir + `/textfile/bftrainer.prom"
`
	if err := os.WriteFile(env.WorkDir+"/metrics.toml", []byte(metrics), 0o644); err != nil {
		return err
	}
	return os.WriteFile(env.WorkDir+"/bftrainer.toml", []byte(conf), 0o644)
}

// setBuiltin moves the binary's built-in paths below dir, as
// lab.BuildFlags does for a built binary.
func setBuiltin(dir string) {
	defaultConfig = filepath.Join(dir, "etc", "bftrainer", "bftrainer.toml")
	localStateDir = filepath.Join(dir, "var")
	runStateDir = filepath.Join(dir, "run")
}
