package sidecar

import (
	"bytes"
	"context"
	"errors"
	"log"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/hooks"
	"github.com/bftrainer/bftrainer/journal"
	"github.com/bftrainer/bftrainer/store"
	"github.com/bftrainer/bftrainer/trainer/wire"
)

// fakeKiller is the node agent one layer up: it records the nodes it was
// asked to kill on, and blocks or panics when told to.
type fakeKiller struct {
	mu      sync.Mutex
	killed  []string
	cleaned []string
	block   chan struct{}
	panics  bool
	nothing bool // nothing of ours on the node: the kill finds nothing
}

func (k *fakeKiller) KillAll(ctx context.Context, node string, fence bool) (wire.KillReport, error) {
	k.mu.Lock()
	k.killed = append(k.killed, node)
	k.mu.Unlock()
	if k.panics {
		panic("agent bug")
	}
	if k.block != nil {
		<-k.block
	}
	if k.nothing {
		return wire.KillReport{Node: node, Containment: "cgroup", Clean: true}, nil
	}
	return wire.KillReport{Node: node, Procs: []wire.KilledProc{{PID: 4242, Why: "token", Signal: "SIGKILL"}}}, nil
}

func (k *fakeKiller) Clean(ctx context.Context, node string) (wire.KillReport, error) {
	k.mu.Lock()
	k.cleaned = append(k.cleaned, node)
	k.mu.Unlock()
	return wire.KillReport{Node: node}, nil
}

func (k *fakeKiller) nodes() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.killed...)
}

func (k *fakeKiller) cleanedNodes() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Sorted(slices.Values(k.cleaned))
}

var prologN1 = map[string]string{"SLURM_SCRIPT_CONTEXT": "prolog_slurmd", "SLURM_JOB_ID": "3", "SLURMD_NODENAME": "n1", "SLURM_NODELIST": "n[1-2]"}

// TestHookFailsOpen: whatever goes wrong, Hook returns within its
// deadline, logs why, still kills on its node, records only into a
// journal that exists (never on a compute node, never with a
// configuration that did not load), and logs a record no journal took
// whole.
func TestHookFailsOpen(t *testing.T) {
	ctx := context.Background()
	ctl := map[string]string{"SLURM_SCRIPT_CONTEXT": "prolog_slurmctld", "SLURM_JOB_ID": "3", "SLURM_JOB_NODELIST": "n1"}
	tests := []struct {
		name     string
		killer   *fakeKiller
		cfgErr   error
		env      map[string]string
		journal  string // "yes": the journal exists (the controller); "no": not; "blocked": cannot be made (a file in its path)
		logs     string
		killed   bool
		recorded bool
	}{
		{"node prolog, no journal here", &fakeKiller{}, nil, prologN1, "no", "", true, false},
		{"configuration did not load", &fakeKiller{}, errors.New("config: toml: bad"), prologN1, "yes", "config: toml: bad", true, false},
		{"the kill hangs", &fakeKiller{block: make(chan struct{})}, nil, prologN1, "no", "deadline 200ms exceeded", true, false},
		{"the kill panics", &fakeKiller{panics: true}, nil, prologN1, "no", "panic: agent bug", true, false},
		{"a node name that could reach a shell", &fakeKiller{}, nil,
			map[string]string{"SLURM_SCRIPT_CONTEXT": "prolog_slurmd", "SLURM_JOB_ID": "3", "SLURMD_NODENAME": "n1;reboot"}, "no", "n1;reboot", false, false},
		{"controller prolog, config broken: nothing recorded", &fakeKiller{}, errors.New("config: bad"), ctl, "yes", "config: bad", false, false},
		{"controller prolog: recorded", &fakeKiller{}, nil, ctl, "yes", "", false, true},
		{"controller prolog, no journal yet", &fakeKiller{}, nil, ctl, "no", "", false, os.Geteuid() == 0},
		{"controller prolog, no journal possible: the record logged whole", &fakeKiller{}, nil, ctl, "blocked",
			`record hook: journal ` /* then the reason and the record */, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			dir := t.TempDir()
			db, jdir := filepath.Join(dir, "b.db"), filepath.Join(dir, "journal")
			switch tt.journal {
			case "yes":
				if err := journal.Create(jdir, -1); err != nil {
					t.Fatal(err)
				}
			case "blocked":
				jdir = filepath.Join(dir, "file", "journal")
				if err := os.WriteFile(filepath.Dir(jdir), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			c, err := New(Options{Database: db, Journal: jdir, Hook: HookOptions{Killer: tt.killer, ConfigErr: tt.cfgErr,
				Deadline: 200 * time.Millisecond, Log: log.New(&logs, "", 0)}})
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
			if _, err := os.Stat(db); err == nil {
				t.Fatal("a hook created the database")
			}
			files, _ := os.ReadDir(jdir)
			if (len(files) > 0) != tt.recorded {
				t.Fatalf("%d files in the journal, want a record: %v", len(files), tt.recorded)
			}
			if tt.journal == "blocked" && !strings.Contains(logs.String(), `"kind":"leave"`) {
				t.Fatalf("the record was not logged whole: %s", logs.String())
			}
		})
	}
}

// TestHookRecordsOnce: a node prolog where the journal exists records the
// hook and the kill in one record, which one ingest turns into two
// consecutive events, the hook's timestamps kept.
func TestHookRecordsOnce(t *testing.T) {
	ctx := context.Background()
	db := MustDB(t)
	k := &fakeKiller{}
	started := time.Now().Add(-time.Second).Truncate(time.Microsecond)
	c, err := New(Options{Database: db.Path(), Hook: HookOptions{Killer: k, Started: started}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.createJournal(); err != nil {
		t.Fatal(err)
	}
	c.Hook(ctx, hooks.MapEnv(prologN1), []string{"slurm"})
	if evs, _ := db.Events(ctx, store.Filter{}); len(evs) != 0 {
		t.Fatalf("the hook wrote the database: %+v", evs)
	}
	if res, err := c.journal.Ingest(ctx, db, time.Now()); err != nil || res.Records != 1 {
		t.Fatalf("ingest: %+v %v, want one record", res, err)
	}
	evs, err := db.Events(ctx, store.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || evs[0].Kind != store.KindHook || evs[1].Kind != store.KindKill || evs[0].ID+1 != evs[1].ID {
		t.Fatalf("events %+v, want the hook and its kill", evs)
	}
	if !evs[0].At.Equal(started) {
		t.Fatalf("hook event at %v, want the hook's start %v", evs[0].At, started)
	}
	if !strings.Contains(string(evs[0].Detail), `"killed":1`) {
		t.Fatalf("hook detail %s does not say what it killed", evs[0].Detail)
	}
}

// TestHookRecordsEmptyKill: a node prolog that finds nothing of ours still
// records its kill (value 0, its time and report), so that every
// reclaim's time is in the history; an epilog's clean-up that finds
// nothing records none.
func TestHookRecordsEmptyKill(t *testing.T) {
	ctx := context.Background()
	db := MustDB(t)
	c, err := New(Options{Database: db.Path(), Hook: HookOptions{Killer: &fakeKiller{nothing: true}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.createJournal(); err != nil {
		t.Fatal(err)
	}
	c.Hook(ctx, hooks.MapEnv(prologN1), []string{"slurm"})
	epilog := map[string]string{"SLURM_SCRIPT_CONTEXT": "epilog_slurmd", "SLURM_JOB_ID": "3", "SLURMD_NODENAME": "n1", "SLURM_NODELIST": "n[1-2]"}
	c.Hook(ctx, hooks.MapEnv(epilog), []string{"slurm"})
	if _, err := c.journal.Ingest(ctx, db, time.Now()); err != nil {
		t.Fatal(err)
	}
	kills, err := db.Events(ctx, store.Filter{Kinds: []store.Kind{store.KindKill}})
	if err != nil {
		t.Fatal(err)
	}
	if len(kills) != 1 || kills[0].Context != "prolog_slurmd" || !kills[0].HasVal || kills[0].Value != 0 || !kills[0].HasMs || kills[0].Job != "3" {
		t.Fatalf("kill events %+v, want the prolog's one, value 0", kills)
	}
	if !strings.Contains(string(kills[0].Detail), `"clean":true`) {
		t.Fatalf("kill detail %s lacks the report", kills[0].Detail)
	}
}

// gridEngineProlog is a Grid Engine prolog's environment on g1, the master
// host of a job on g1, g2 and g3 (hooks/testdata/gridengine has the real
// ones); its PE hostfile is served by geFiles.
var gridEngineProlog = map[string]string{"SGE_JOB_SPOOL_DIR": "/spool/g1/active_jobs/5.1", "JOB_ID": "5",
	"SGE_TASK_ID": "undefined", "HOSTNAME": "g1", "USER": "alice", "PE_HOSTFILE": "/spool/g1/active_jobs/5.1/pe_hostfile"}

func geFiles(path string) ([]byte, error) {
	if path == "/spool/g1/active_jobs/5.1/pe_hostfile" {
		return []byte("g1 1 q@g1 UNDEFINED\ng2 1 q@g2 UNDEFINED\ng3 1 q@g3 UNDEFINED\n"), nil
	}
	return nil, os.ErrNotExist
}

// TestHookOnlyHook: a job-level hook that is the only one its scheduler
// runs for the job (Grid Engine's prolog, on the master host) kills on
// every node of the job before it records: the master host from the local
// registry, the others through their node agents; its epilog cleans up
// on all of them. Without a remote killer the other nodes are left to the
// reconciler; a remote kill that hangs (ignoring its context) never holds
// the job beyond the deadline, the local kill still happens, and the
// job's leave is recorded all the same. Like a node hook, it records
// only where the journal exists.
func TestHookOnlyHook(t *testing.T) {
	ctx := context.Background()
	epilog := maps.Clone(gridEngineProlog)
	epilog["SGE_JOBEXIT_STAT"] = "0"
	for _, tt := range []struct {
		name           string
		env            map[string]string
		remote         *fakeKiller
		noDB           bool
		local, remotes string // nodes killed (cleaned, for the epilog)
		events         string // kinds recorded, in order
		logs           string
	}{
		{"prolog", gridEngineProlog, &fakeKiller{}, false, "g1", "g2,g3", "hook leave kill kill kill", ""},
		{"prolog without remote killer", gridEngineProlog, nil, false, "g1", "", "hook leave kill", ""},
		{"prolog, a remote kill hangs", gridEngineProlog, &fakeKiller{block: make(chan struct{})}, false, "g1", "g2,g3", "hook leave kill", "no answer within"},
		{"prolog on a node without the database", gridEngineProlog, &fakeKiller{}, true, "g1", "g2,g3", "", ""},
		{"epilog cleans up", epilog, &fakeKiller{}, false, "g1", "g2,g3", "hook release", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			db := filepath.Join(t.TempDir(), "b.db")
			var sdb *store.DB
			if !tt.noDB {
				sdb = MustDB(t)
				db = sdb.Path()
			}
			local := &fakeKiller{}
			o := Options{Database: db, Hook: HookOptions{Killer: local, Deadline: 300 * time.Millisecond, ReadFile: geFiles,
				Log: log.New(&logs, "", 0)}}
			if tt.remote != nil {
				o.Hook.RemoteKiller = tt.remote
			}
			c, err := New(o)
			if err != nil {
				t.Fatal(err)
			}
			if !tt.noDB {
				if err := c.createJournal(); err != nil {
					t.Fatal(err)
				}
			}
			done := make(chan struct{})
			go func() { c.Hook(ctx, hooks.MapEnv(tt.env), []string{"gridengine"}); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Hook did not return")
			}
			if tt.remote != nil && tt.remote.block != nil {
				close(tt.remote.block)
			}
			got, gotRemote := local.nodes(), []string(nil)
			if tt.remote != nil {
				gotRemote = slices.Sorted(slices.Values(tt.remote.nodes()))
			}
			if _, ok := tt.env["SGE_JOBEXIT_STAT"]; ok {
				got = local.cleanedNodes()
				if tt.remote != nil {
					gotRemote = tt.remote.cleanedNodes()
				}
			}
			if strings.Join(got, ",") != tt.local || strings.Join(gotRemote, ",") != tt.remotes {
				t.Fatalf("local %v, remote %v; want %s and %s", got, gotRemote, tt.local, tt.remotes)
			}
			if tt.logs == "" && logs.Len() > 0 || !strings.Contains(logs.String(), tt.logs) {
				t.Fatalf("hook log %q, want %q", logs.String(), tt.logs)
			}
			if tt.noDB {
				if _, err := os.Stat(db); err == nil {
					t.Fatal("a compute node's hook created a database")
				}
				if _, err := os.Stat(c.o.Journal); err == nil {
					t.Fatal("a compute node's hook created a journal")
				}
				return
			}
			if tt.events == "" {
				return
			}
			if _, err := c.journal.Ingest(ctx, sdb, time.Now()); err != nil {
				t.Fatal(err)
			}
			evs, err := c.Events(ctx, store.Filter{})
			if err != nil {
				t.Fatal(err)
			}
			var kinds []string
			for _, e := range evs {
				kinds = append(kinds, string(e.Kind))
				if e.Kind == store.KindKill && (len(e.Nodes) != 1 || e.Job != "5" || e.Source != "gridengine") {
					t.Errorf("kill event %+v, want one node of job 5", e)
				}
				if e.Kind == store.KindLeave && strings.Join(e.Nodes, ",") != "g1,g2,g3" {
					t.Errorf("leave of %v, want the job's three nodes", e.Nodes)
				}
			}
			if got := strings.Join(kinds, " "); got != tt.events {
				t.Fatalf("recorded %q, want %q", got, tt.events)
			}
		})
	}
}
