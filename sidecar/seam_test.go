package sidecar

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/hooks"
	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/store"
)

// toyScheduler is a scheduler that exists only here: registered in this
// one place, it must work through the whole path with nothing else knowing
// it. Its hooks say TOY_HOOK=start|end with TOY_JOB and TOY_NODES
// ("a,b"); its listing is a program printing "NODE STATE" lines.
func toyScheduler(listing string) hooks.Scheduler {
	return hooks.Scheduler{
		Name:    "toy",
		Contrib: "contrib/toy",
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
		HookLog:    log.New(&testWriter{t}, "", 0),
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
	evs, err := c.Events(ctx, store.Filter{Kinds: []string{store.KindHook, store.KindLeave, store.KindRelease}, Job: "9"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range evs {
		got = append(got, e.Kind+" "+e.Source+" "+e.Context)
	}
	want := []string{"hook toy start", "leave toy start", "hook toy end", "release toy end"}
	if !slices.Equal(got, want) {
		t.Fatalf("recorded %q, want %q", got, want)
	}
}

// testWriter sends a logger's lines to the test log.
type testWriter struct{ t *testing.T }

func (w *testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}
