package trainer

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"testing"
)

// TestMain lets the test binary be bftrainer's node agent, the way the
// real binary is: "TESTBIN --agent FILE node-agent ARGS…" runs the agent
// with the configuration in FILE (JSON of agentConfig), and "TESTBIN
// node-agent supervise" is the supervisor Start re-executes. The local
// and ssh transports under test then run the very code they run in
// production.
func TestMain(m *testing.M) {
	if i := slices.Index(os.Args, "node-agent"); i > 0 {
		os.Exit(agentMain(os.Args[1:i], os.Args[i+1:]))
	}
	os.Exit(m.Run())
}

// agentConfig is the test agent's configuration file.
type agentConfig struct {
	Registry  string
	LogDir    string
	AllowRoot bool
}

func agentMain(prefix, args []string) int {
	a := &NodeAgent{}
	if len(prefix) == 2 && prefix[0] == "--agent" {
		b, err := os.ReadFile(prefix[1])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		var c agentConfig
		if err := json.Unmarshal(b, &c); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		a.Registry, a.LogDir, a.AllowRootOwner = Registry{Dir: c.Registry}, c.LogDir, c.AllowRoot
	}
	if err := a.Main(context.Background(), args, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "bftrainer: %v\n", err)
		return 1
	}
	return 0
}

// testAgent is an agent on temporary directories, and the command that
// runs it as a separate process (for the transports).
type testAgent struct {
	*NodeAgent
	Argv []string // TESTBIN --agent FILE
}

// MustAgent returns a node agent for tests. Trainer programs run as the
// current user when it is not root, else as root (allowed here).
func MustAgent(tb testing.TB) testAgent {
	tb.Helper()
	dir := tb.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	c := agentConfig{Registry: dir + "/registry", LogDir: dir + "/logs", AllowRoot: true}
	b, _ := json.Marshal(c)
	file := dir + "/agent.json"
	if err := os.WriteFile(file, b, 0o644); err != nil {
		tb.Fatal(err)
	}
	a := &NodeAgent{Registry: Registry{Dir: c.Registry}, LogDir: c.LogDir, Self: self, AllowRootOwner: true}
	return testAgent{NodeAgent: a, Argv: []string{self, "--agent", file}}
}
