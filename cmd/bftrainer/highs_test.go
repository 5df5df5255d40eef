package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/bftrainer/bftrainer/alloc/milp"
)

// TestHiGHSScripts runs testdata/highs: the solver name "highs" end to
// end, with HiGHS compiled to WebAssembly through the repository's driver
// (npm ci --prefix alloc/milp/highs-wasm, as .ci/run does). The config
// names the driver in pool.solver_path; replay, which takes no path,
// finds it linked onto PATH as bftrainer-highs.
func TestHiGHSScripts(t *testing.T) {
	driver, err := filepath.Abs(filepath.Join("..", "..", "alloc", "milp", "highs-wasm", "bftrainer-highs.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	if err := (milp.HiGHS{Path: driver}).Available(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	testscript.Run(t, testscript.Params{
		Dir:         "testdata/highs",
		WorkdirRoot: t.TempDir(), // as TestScripts
		Setup: func(env *testscript.Env) error {
			if err := scriptSetup(env); err != nil {
				return err
			}
			bin := filepath.Join(env.WorkDir, "highs-bin")
			if err := os.Mkdir(bin, 0o755); err != nil {
				return err
			}
			if err := os.Symlink(driver, filepath.Join(bin, "bftrainer-highs")); err != nil {
				return err
			}
			env.Setenv("PATH", bin+string(filepath.ListSeparator)+env.Getenv("PATH"))
			f, err := os.OpenFile(filepath.Join(env.WorkDir, "bftrainer.toml"), os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			if _, err := f.WriteString("[pool]\nsolver = \"highs\"\nsolver_path = \"" + driver + "\"\n"); err != nil {
				f.Close()
				return err
			}
			return f.Close()
		},
	})
}
