package layout

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/bftrainer/bftrainer"

// goList runs `go list` with a template over pkg and returns its lines.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("needs the go command")
	}
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v", args, err)
	}
	return strings.Fields(string(out))
}

// ours keeps the module's own packages, without the module prefix.
func ours(pkgs []string) []string {
	var out []string
	for _, p := range pkgs {
		if rest, ok := strings.CutPrefix(p, module+"/"); ok {
			out = append(out, rest)
		}
	}
	return out
}

// TestImports: the layering as DESIGN.md draws it, on the packages'
// non-test imports — alloc is pure; pool knows alloc only; trainer (the
// launchers and the node agent) knows no scheduler; cmd talks to the
// node agent only through trainer's client and constructor;
// internal/atomicfile, which trainer, journal and sidecar share, is a
// leaf.
func TestImports(t *testing.T) {
	tests := []struct {
		name  string
		args  []string // go list arguments printing one package per line
		allow []string // of ours; nil: none
	}{
		{"alloc imports nothing of ours", []string{"-deps", "-f", "{{.ImportPath}}", "./alloc"}, []string{"alloc"}},
		{"pool imports only alloc", []string{"-deps", "-f", "{{.ImportPath}}", "./pool"}, []string{"alloc", "pool"}},
		{"internal/atomicfile imports nothing of ours", []string{"-deps", "-f", "{{.ImportPath}}", "./internal/atomicfile"}, []string{"internal/atomicfile"}},
		{"cmd/bftrainer imports no trainer/agent", []string{"-f", `{{join .Imports "\n"}}`, "./cmd/bftrainer"},
			[]string{"accounting", "alloc", "alloc/milp", "hooks", "names", "pool", "sidecar", "sim", "store", "trainer"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, p := range ours(goList(t, tt.args...)) {
				if !slices.Contains(tt.allow, p) {
					t.Errorf("imports %s", p)
				}
			}
		})
	}
	t.Run("trainer imports no hooks", func(t *testing.T) {
		for _, p := range ours(goList(t, "-deps", "-f", "{{.ImportPath}}", "./trainer/...")) {
			if p == "hooks" || strings.HasPrefix(p, "sidecar") {
				t.Errorf("trainer/... depends on %s", p)
			}
		}
	})
}

// TestAgentArgv: no package outside trainer/ builds the node agent's
// command line — its operations are trainer.AgentClient's calls — and
// only cmd/bftrainer's node-agent command (which parses nothing: it hands
// its arguments to the agent) names it.
func TestAgentArgv(t *testing.T) {
	ops := map[string]bool{"node-agent": true, "kill-all": true, "unfence": true, "--fence": true}
	root := "../.."
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel == "trainer" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") && rel != "." || d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, _ := strconv.Unquote(lit.Value)
			if ops[s] && !(rel == filepath.Join("cmd", "bftrainer", "runner.go") && s == "node-agent") {
				t.Errorf("%s: %q: the node agent's command line is trainer.AgentClient's", fset.Position(lit.Pos()), s)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
