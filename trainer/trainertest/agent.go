package trainertest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/trainer/agent"
	"github.com/bftrainer/bftrainer/trainer/registry"
	"github.com/bftrainer/bftrainer/trainer/wire"
)

// AgentConfig is a test node agent's configuration, in the file its
// command line names.
type AgentConfig struct {
	Registry    string
	LogDir      string
	AllowRoot   bool
	Containment string // "" (auto), "cgroup" or "off"
	CgroupRoot  string
	Limits      agent.Limits
	DeviceGlob  string
	KillWait    time.Duration
	JobMarkers  []string // the schedulers' (hooks.Registry.JobMarkers)
}

func (c AgentConfig) agent(self string) *agent.Agent {
	return &agent.Agent{Registry: registry.Registry{Dir: c.Registry}, LogDir: c.LogDir, Self: self, AllowRootOwner: c.AllowRoot,
		Containment: c.Containment, CgroupRoot: c.CgroupRoot, Limits: c.Limits, DeviceGlob: c.DeviceGlob, KillWait: c.KillWait,
		JobMarkers: c.JobMarkers}
}

// AgentMain lets a test binary be bftrainer's node agent, the way the real
// binary is: "TESTBIN --agent FILE node-agent ARGS…" runs the agent with
// the configuration in FILE (JSON of AgentConfig), and "TESTBIN node-agent
// supervise" is the supervisor Start re-executes. A TestMain calls it
// first: ran is false when the binary was not asked to be an agent. The
// local and ssh transports under test then run the very code they run in
// production.
func AgentMain() (code int, ran bool) {
	i := slices.Index(os.Args, "node-agent")
	if i <= 0 {
		return 0, false
	}
	prefix, args := os.Args[1:i], os.Args[i+1:]
	a := &agent.Agent{}
	if len(prefix) == 2 && prefix[0] == "--agent" {
		b, err := os.ReadFile(prefix[1])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1, true
		}
		var c AgentConfig
		if err := json.Unmarshal(b, &c); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1, true
		}
		self, _ := os.Executable()
		a = c.agent(self)
	}
	if err := a.Main(context.Background(), args, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "bftrainer: %v\n", err)
		return 1, true
	}
	return 0, true
}

// Agent is a node agent on temporary directories, and the command that
// runs it as a separate process (for the transports).
type Agent struct {
	*agent.Agent
	Config AgentConfig
	Argv   []string // TESTBIN --agent FILE
	suffix string
}

// N is a node name unique to this agent: "n1" becomes "n1-SUFFIX". Tests
// on one machine share its process table, and a kill takes every process
// carrying a run token for its node: two tests must never use the same
// node name.
func (a Agent) N(name string) string { return name + "-" + a.suffix }

// MustAgent returns a node agent for tests, edited by opts. Trainer
// programs run as the current user when it is not root, else as root
// (allowed here). Where this machine has a writable cgroup v2 hierarchy,
// its launches get cgroups below a subtree of the test's own, removed
// when the test ends.
func MustAgent(tb testing.TB, opts ...func(*AgentConfig)) Agent {
	tb.Helper()
	dir := tb.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	c := AgentConfig{Registry: dir + "/registry", LogDir: dir + "/logs", AllowRoot: true, CgroupRoot: TestCgroupRoot(tb)}
	for _, o := range opts {
		o(&c)
	}
	b, _ := json.Marshal(c)
	file := dir + "/agent.json"
	if err := os.WriteFile(file, b, 0o644); err != nil {
		tb.Fatal(err)
	}
	return Agent{Agent: c.agent(self), Config: c, Argv: []string{self, "--agent", file}, suffix: wire.NewRun()[:8]}
}

// TestCgroupRoot returns a fresh cgroup subtree for one test, in the
// cgroup2 mount, and removes it (killing what is left in it) when the
// test ends; "" where there is no writable one (the agent then runs
// degraded, and says why).
func TestCgroupRoot(tb testing.TB) string {
	tb.Helper()
	mount, err := agent.CgroupMount()
	if err != nil {
		tb.Logf("no cgroup containment here: %v", err)
		return ""
	}
	root := filepath.Join(mount, "bftrainer-test-"+wire.NewRun())
	cg, err := agent.OpenCgroups(root)
	if err != nil {
		tb.Logf("no cgroup containment here: %v", err)
		return ""
	}
	tb.Cleanup(func() {
		if err := cg.RemoveAll(10 * time.Second); err != nil {
			tb.Errorf("remove the test's cgroups: %v", err)
		}
	})
	return root
}

// Procs returns the live processes whose run token satisfies keep.
func Procs(tb testing.TB, keep func(wire.Token, agent.Proc) bool) []agent.Proc {
	tb.Helper()
	ps, err := agent.Procs()
	if err != nil {
		tb.Fatal(err)
	}
	var out []agent.Proc
	for _, p := range ps {
		if t, ok := p.Token(); ok && !p.Dead() && keep(t, p) {
			out = append(out, p)
		}
	}
	return out
}

// WaitFor polls cond every 20 ms until it holds or the timeout passes.
func WaitFor(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Hostile are strings a node name, a Trainer name or an argument might
// carry to break out of a remote shell.
var Hostile = []string{
	"plain",
	"",
	"two words",
	"semi;colon",
	"$(touch CANARY)",
	"`touch CANARY`",
	"${IFS}touch${IFS}CANARY",
	"new\nline; touch CANARY",
	"single'quote",
	"''",
	`double"quote`,
	`back\slash`,
	"-leading-dash",
	"--",
	"a=b",
	"~root",
	"*",
	"!history",
	"tab\there",
	"unicode é ✓",
	"'; touch CANARY; echo '",
	"&& touch CANARY",
	"| touch CANARY",
	"> CANARY",
}

// CurrentUser is the name of the user the test runs as.
func CurrentUser(tb testing.TB) string {
	tb.Helper()
	u, err := user.Current()
	if err != nil {
		tb.Fatal(err)
	}
	return u.Username
}

// Environ returns a process's environment.
func Environ(tb testing.TB, pid int) map[string]string {
	tb.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string]string{}
	for _, kv := range strings.Split(string(b), "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			out[k] = v
		}
	}
	return out
}
