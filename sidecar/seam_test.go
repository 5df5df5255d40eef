package sidecar

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
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

// TestToyScheduler: a toy scheduler registered beside the built-in ones is
// detected from its hook environment, its calls are recorded, the round
// folds them (the release waits for the toy's listing to say idle), and
// sync reads its listing.
func TestToyScheduler(t *testing.T) {
	ctx := context.Background()
	db := MustDB(t)
	listing := filepath.Join(t.TempDir(), "nodes")
	write := func(s string) {
		if err := os.WriteFile(listing, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	reg := append(hooks.Builtin(), toyScheduler(listing))
	q := hooks.Query{Listing: reg[len(reg)-1].Listing}
	r := &Reconciler{DB: db, Pool: pool.Config{TFwd: 10}, Scheduler: q, IdleWait: time.Hour}

	hook := func(env map[string]string) {
		t.Helper()
		in := hooks.Input{Env: hooks.MapEnv(env)}
		s, err := reg.Choose("", in)
		if err != nil || s.Name != "toy" {
			t.Fatalf("detected %q, %v; want toy", s.Name, err)
		}
		call, err := s.Parse(in)
		if err != nil {
			t.Fatal(err)
		}
		h := &Hook{Open: func(context.Context) (*store.DB, error) {
			return store.Open(ctx, db.Path(), store.Options{})
		}}
		if err := h.Handle(ctx, call); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Round(ctx); err != nil {
			t.Fatal(err)
		}
	}
	state := func(node string) pool.NodeState {
		t.Helper()
		snap, err := db.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(snap.State.Nodes, func(n pool.Node) bool { return n.Name == node })
		if i < 0 {
			return ""
		}
		return snap.State.Nodes[i].State
	}

	write("a idle\nb idle\n")
	if _, _, err := Sync(ctx, db, pool.Config{}, q, time.Now(), "root"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Round(ctx); err != nil {
		t.Fatal(err)
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
	if _, err := r.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if got := state("a"); got != pool.Idle {
		t.Fatalf("once the toy lists it idle a is %q, want idle", got)
	}
	evs, err := db.Events(ctx, store.Filter{Kinds: []string{store.KindLeave, store.KindRelease}, Job: "9"})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || evs[0].Source != "toy" || evs[1].Source != "toy" {
		t.Fatalf("recorded %+v, want a leave and a release from toy", evs)
	}
}
