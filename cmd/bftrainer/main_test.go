package main

import (
	"os"
	"path/filepath"
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
	testscript.Main(cleanup{m}, map[string]func(){
		"bftrainer": func() { os.Exit(run(os.Args, os.Stdout, os.Stderr)) },
	})
}

// cleanup removes the binary MustBuild made once the tests have run.
type cleanup struct{ m *testing.M }

func (c cleanup) Run() int {
	code := c.m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	return code
}

// TestScripts runs the golden tests of the real binary in
// testdata/script: each sets a scheduler's hook environment or runs a
// command, and asserts stdout, stderr and the exit code.
func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{Dir: "testdata/script", Setup: scriptSetup})
}

// scriptSetup writes a config per test, in its own work directory. Its
// scheduler has no listing (sinfo turned off): a release joins at once.
func scriptSetup(env *testscript.Env) error {
	env.Setenv("BFTRAINER_CONFIG", env.WorkDir+"/bftrainer.toml")
	env.Setenv("BFTRAINER_TEST_HOOKLOG", env.WorkDir+"/fallback-hooks.log")
	return os.WriteFile(env.WorkDir+"/bftrainer.toml", []byte(`database = "`+env.WorkDir+`/db/bftrainer.db"
spool = "`+env.WorkDir+`/spool"
[hooks]
log = "`+env.WorkDir+`/hooks.log"
spawn_reconciler = "never"
[scheduler]
sinfo = ""
[trainer]
registry = "`+env.WorkDir+`/registry"
log_dir = "`+env.WorkDir+`/trainer-logs"
state_dir = "`+env.WorkDir+`/runner"
`), 0o644)
}
