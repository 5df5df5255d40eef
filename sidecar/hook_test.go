package sidecar

import (
	"bytes"
	"context"
	"errors"
	"log"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/hooks"
	"github.com/bftrainer/bftrainer/store"
)

// fakeKiller is the node agent one layer up: it records the nodes it was
// asked to kill on, and blocks or panics when told to.
type fakeKiller struct {
	mu     sync.Mutex
	killed []string
	block  chan struct{}
	panics bool
}

func (k *fakeKiller) KillLocal(ctx context.Context, node string) (KillResult, error) {
	k.mu.Lock()
	k.killed = append(k.killed, node)
	k.mu.Unlock()
	if k.panics {
		panic("agent bug")
	}
	if k.block != nil {
		<-k.block
	}
	return KillResult{Killed: 1}, nil
}

func (k *fakeKiller) CleanLocal(ctx context.Context, node string) (KillResult, error) {
	return KillResult{}, nil
}

func (k *fakeKiller) nodes() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.killed...)
}

var prologN1 = map[string]string{"SLURM_SCRIPT_CONTEXT": "prolog_slurmd", "SLURM_JOB_ID": "3", "SLURMD_NODENAME": "n1", "SLURM_NODELIST": "n[1-2]"}

// TestHookFailsOpen: whatever goes wrong, Hook returns within its
// deadline, logs why, still kills on its node, and never creates a
// database on a compute node.
func TestHookFailsOpen(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name    string
		killer  *fakeKiller
		cfgErr  error
		env     map[string]string
		logs    string
		killed  bool
		created bool
	}{
		{"node prolog, no database here", &fakeKiller{}, nil, prologN1, "", true, false},
		{"configuration did not load", &fakeKiller{}, errors.New("config: toml: bad"), prologN1, "config: toml: bad", true, false},
		{"the kill hangs", &fakeKiller{block: make(chan struct{})}, nil, prologN1, "deadline 200ms exceeded", true, false},
		{"the kill panics", &fakeKiller{panics: true}, nil, prologN1, "panic: agent bug", true, false},
		{"a node name that could reach a shell", &fakeKiller{}, nil,
			map[string]string{"SLURM_SCRIPT_CONTEXT": "prolog_slurmd", "SLURM_JOB_ID": "3", "SLURMD_NODENAME": "n1;reboot"}, "n1;reboot", false, false},
		{"controller prolog, config broken: nothing recorded", &fakeKiller{}, errors.New("config: bad"),
			map[string]string{"SLURM_SCRIPT_CONTEXT": "prolog_slurmctld", "SLURM_JOB_ID": "3", "SLURM_JOB_NODELIST": "n1"}, "config: bad", false, false},
		{"controller prolog: recorded", &fakeKiller{}, nil,
			map[string]string{"SLURM_SCRIPT_CONTEXT": "prolog_slurmctld", "SLURM_JOB_ID": "3", "SLURM_JOB_NODELIST": "n1"}, "", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			db := filepath.Join(t.TempDir(), "b.db")
			c, err := New(Options{Database: db, Killer: tt.killer, ConfigErr: tt.cfgErr, HookDeadline: 200 * time.Millisecond,
				HookLog: log.New(&logs, "", 0)})
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() { c.Hook(ctx, hooks.MapEnv(tt.env), nil); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Hook did not return")
			}
			if tt.killer.block != nil {
				close(tt.killer.block)
			}
			if got := strings.Join(tt.killer.nodes(), ","); (got == "n1") != tt.killed {
				t.Fatalf("killed on %q, want a kill on n1: %v", got, tt.killed)
			}
			if tt.logs == "" && logs.Len() > 0 || !strings.Contains(logs.String(), tt.logs) {
				t.Fatalf("hook log %q, want %q", logs.String(), tt.logs)
			}
			if _, err := os.Stat(db); (err == nil) != tt.created {
				t.Fatalf("database exists: %v, want %v", err == nil, tt.created)
			}
		})
	}
}

// TestHookRecordsOnce: a node prolog where the database exists records the
// hook and the kill, in one write.
func TestHookRecordsOnce(t *testing.T) {
	ctx := context.Background()
	db := MustDB(t)
	k := &fakeKiller{}
	c, err := New(Options{Database: db.Path(), Killer: k})
	if err != nil {
		t.Fatal(err)
	}
	c.Hook(ctx, hooks.MapEnv(prologN1), []string{"slurm"})
	evs, err := db.Events(ctx, store.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || evs[0].Kind != store.KindHook || evs[1].Kind != store.KindKill || evs[0].ID+1 != evs[1].ID {
		t.Fatalf("events %+v, want the hook and its kill", evs)
	}
	if !strings.Contains(string(evs[0].Detail), `"killed":1`) {
		t.Fatalf("hook detail %s does not say what it killed", evs[0].Detail)
	}
}
