package sidecar

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/hooks"
	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/store"
	"github.com/bftrainer/bftrainer/trainer"
	"github.com/bftrainer/bftrainer/trainer/agent"
	"github.com/bftrainer/bftrainer/trainer/wire"
)

// toyScheduler is a scheduler that exists only here: registered in this
// one place, it must work through the whole path with nothing else knowing
// it. Its hooks say TOY_HOOK=start|end with TOY_JOB and TOY_NODES
// ("a,b"), or TOY_HOOK=prolog with TOY_NODE, the node-local prolog; its
// listing is a program printing "NODE STATE" lines; TOY_JOB is in every
// process of its jobs.
func toyScheduler(listing string) hooks.Scheduler {
	return hooks.Scheduler{
		Name:       "toy",
		Contrib:    "contrib/toy",
		JobMarkers: []string{"TOY_JOB"},
		Detect: func(in hooks.Input) bool {
			_, ok := in.Env("TOY_HOOK")
			return ok
		},
		Parse: func(in hooks.Input) (hooks.Call, error) {
			c := hooks.Call{Scheduler: "toy"}
			c.Context, _ = in.Env("TOY_HOOK")
			switch c.Context {
			case "start":
				c.Action = hooks.Reclaim
			case "end":
				c.Action = hooks.Release
			case "prolog":
				c.Action = hooks.KillLocal
				c.Local, _ = in.Env("TOY_NODE")
			default:
				return c, fmt.Errorf("toy: unknown hook %q", c.Context)
			}
			c.JobID, _ = in.Env("TOY_JOB")
			nodes, _ := in.Env("TOY_NODES")
			c.Nodes = strings.Split(nodes, ",")
			return c, nil
		},
		Listing: &hooks.Listing{Key: "toyls", Program: "/bin/cat",
			Args: func([]string) []string { return []string{listing} },
			Parse: func(out []byte) (map[string]string, error) {
				st := map[string]string{}
				sc := bufio.NewScanner(bytes.NewReader(out))
				for sc.Scan() {
					if n, s, ok := strings.Cut(sc.Text(), " "); ok {
						st[n] = s
					}
				}
				return st, sc.Err()
			}},
	}
}

// TestToyScheduler: a toy scheduler registered beside the built-in ones,
// in this one place, goes through the whole path of the core: its hook
// environment is detected and decoded, the calls are recorded and folded
// by a round (the release waits for the toy's listing to say idle), and
// sync reads its listing.
func TestToyScheduler(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	listing := filepath.Join(dir, "nodes")
	write := func(s string) {
		if err := os.WriteFile(listing, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	o := Options{
		Database:   filepath.Join(dir, "b.db"),
		Pool:       pool.Config{TFwd: 10},
		Schedulers: append(hooks.Builtin(), toyScheduler(listing)),
		Scheduler:  "toy",
		IdleWait:   time.Hour,
		Hook:       HookOptions{Log: log.New(&testWriter{t}, "", 0)},
	}
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	// The hooks' core is configured with no scheduler: it detects the toy.
	o.Scheduler = ""
	hc, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	hook := func(env map[string]string) {
		t.Helper()
		hc.Hook(ctx, hooks.MapEnv(env), nil)
		if err := c.Reconcile(ctx, false); err != nil {
			t.Fatal(err)
		}
	}
	state := func(node string) pool.NodeState {
		t.Helper()
		pv, err := c.Preview(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		n, _ := pv.Pool.Node(node)
		return n.State
	}

	write("a idle\nb idle\n")
	joined, left, err := c.Sync(ctx, "", false)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(joined, []string{"a", "b"}) || len(left) != 0 {
		t.Fatalf("sync joined %v and left %v, want a and b joined", joined, left)
	}
	if got := state("a"); got != pool.Idle {
		t.Fatalf("after sync a is %q, want idle", got)
	}
	hook(map[string]string{"TOY_HOOK": "start", "TOY_JOB": "9", "TOY_NODES": "a"})
	if got := state("a"); got != pool.Busy {
		t.Fatalf("after the toy's start hook a is %q, want busy", got)
	}
	write("a completing\nb idle\n")
	hook(map[string]string{"TOY_HOOK": "end", "TOY_JOB": "9", "TOY_NODES": "a"})
	if got := state("a"); got != pool.Pending {
		t.Fatalf("released while the toy lists it completing: a is %q, want pending", got)
	}
	write("a idle\nb idle\n")
	if err := c.Reconcile(ctx, false); err != nil {
		t.Fatal(err)
	}
	if got := state("a"); got != pool.Idle {
		t.Fatalf("once the toy lists it idle a is %q, want idle", got)
	}
	evs, err := c.Events(ctx, store.Filter{Kinds: []store.Kind{store.KindHook, store.KindLeave, store.KindRelease}, Job: "9"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range evs {
		got = append(got, string(e.Kind)+" "+e.Source+" "+e.Context)
	}
	want := []string{"hook toy start", "leave toy start", "hook toy end", "release toy end"}
	if !slices.Equal(got, want) {
		t.Fatalf("recorded %q, want %q", got, want)
	}
}

// TestToySchedulerJobSpared: the toy's job marker, declared in its value
// alone, reaches the node agent the way the binary wires it (the
// registry's JobMarkers): in the toy's node prolog the agent kills a
// Trainer process of the node and spares the main job started from inside
// it, which carries the Trainer's run token and the toy's marker. An
// agent built without the toy's markers kills that job too: the marker is
// what spares it. Degraded containment: the run token and the marker are
// all the agent has to go on.
func TestToySchedulerJobSpared(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	schedulers := append(hooks.Builtin(), toyScheduler(filepath.Join(dir, "nodes")))
	agentFor := func(markers []string) *agent.Agent {
		return trainer.NewNodeAgent(trainer.AgentSettings{Registry: filepath.Join(dir, "registry"),
			Containment: trainer.ContainOff, JobMarkers: markers})
	}
	token := wire.NewToken("t1", "a").String()
	start := func(env ...string) *exec.Cmd {
		t.Helper()
		c := exec.Command("/bin/sleep", "600")
		c.Env = append([]string{wire.RunEnv + "=" + token}, env...)
		c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Process.Kill(); c.Wait() })
		return c
	}
	alive := func(c *exec.Cmd) bool {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.Process.Pid))
		_, after, _ := strings.Cut(string(st), ") ")
		return err == nil && !strings.HasPrefix(after, "Z")
	}
	worker := start()
	job := start("TOY_JOB=9")

	c, err := New(Options{Database: filepath.Join(dir, "b.db"), Pool: pool.Config{TFwd: 10}, Schedulers: schedulers,
		Hook: HookOptions{Killer: agentFor(schedulers.JobMarkers()), Log: log.New(&testWriter{t}, "", 0)}})
	if err != nil {
		t.Fatal(err)
	}
	c.Hook(ctx, hooks.MapEnv(map[string]string{"TOY_HOOK": "prolog", "TOY_JOB": "9", "TOY_NODE": "a"}), nil)
	if alive(worker) {
		t.Fatal("the toy's prolog left the Trainer's process on a")
	}
	if !alive(job) {
		t.Fatal("the toy's prolog killed the toy's job, which carries its marker")
	}
	rep, err := agentFor(hooks.Builtin().JobMarkers()).KillAll(ctx, "a", false)
	if err != nil {
		t.Fatal(err)
	}
	if alive(job) {
		t.Fatalf("an agent without the toy's marker spared its job: the marker is not what spared it (%s)", rep)
	}
}

// testWriter sends a logger's lines to the test log.
type testWriter struct{ t *testing.T }

func (w *testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}
