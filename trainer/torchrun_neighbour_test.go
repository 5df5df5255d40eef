package trainer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/trainer/trainertest"
	"github.com/bftrainer/bftrainer/trainer/wire"
)

// TestTorchrunNeighbour: a second, unprivileged user against a running
// torchrun Trainer of a first (real torchrun agents, the c10d store, torch
// on CPU, through the runner and the local node agent), as
// python/tests/torchrun_adversary.py: it reads every process's command
// line and environment it can, every file it can under the runner's
// state, the agent's registry and logs and the victim's work tree, and
// finds the store's port where anyone can (/proc/net/tcp); it never
// learns the rendezvous id. Its reads of guessed rendezvous keys find
// nothing, and its joins with guessed ids (the Trainer's name — the old
// scheme —, a random one) form rendezvous of their own: the victim's
// rendezvous (read by root with the real id) keeps its round and its one
// participant though it has room for a second, and the victim trains to
// its end at world size 1 without a restart. What stays open is shown
// too: the store takes the attacker's own keys and tells it how many
// keys it holds (docs/trainers.md, "Who can reach a torchrun Trainer").
func TestTorchrunNeighbour(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real torchrun Trainer")
	}
	trainertest.NeedTorch(t)
	victim, attacker := trainertest.MustUser(t, "bftv"), trainertest.MustUser(t, "bfta")
	r, a := testRunner(t)
	root := trainertest.RepoRoot(t)
	lo := 29400 + rand.IntN(9)*10
	ls, err := Builtin().Build(func(name string, v any) error {
		if s, ok := v.(*TorchrunSettings); ok {
			s.Command = []string{"/usr/bin/python3", filepath.Join(root, "contrib/trainer/fast_torchrun.py")}
			s.StorePorts = fmt.Sprintf("%d-%d", lo, lo+9)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	r.Launchers = ls
	// As installed: the state and the agent's directories are reachable
	// by all (0755); what is the owner's or root's is so by its own mode,
	// not by a test directory nobody may enter.
	for _, d := range []string{filepath.Dir(r.StateDir), filepath.Dir(filepath.Dir(a.Config.LogDir))} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	xdir, vdir := neighbourDirs(t, "bft-tneighbour-", 0o755, victim.UID)
	const steps = 400
	log := filepath.Join(vdir, "progress.log")
	spec, _ := json.Marshal(Spec{Workdir: vdir, Env: map[string]string{"PYTHONDONTWRITEBYTECODE": "1"}, Argv: []string{"/usr/bin/python3",
		filepath.Join(root, "contrib/trainer/train.py"), "--steps", fmt.Sprint(steps), "--ckpt-dir", filepath.Join(vdir, "ckpt"),
		"--log", log, "--sleep", "0.1", "--pg-timeout", "10"}})
	id := "tn-" + wire.NewRun()[:6]
	n1 := a.N("n1")
	// Room for one more node: a join under the victim's id would be let in.
	w := Want{ID: id, Owner: victim.Name, Launcher: Torchrun, Spec: spec, Min: 1, Max: 2, Nodes: []string{n1}}
	t.Cleanup(func() { r.Apply(context.Background(), nil) })
	ctx := context.Background()
	var notes bytes.Buffer
	for _, act := range r.Apply(ctx, []Want{w}) {
		if act.Err != nil {
			t.Fatalf("%s on %s: %v", act.Op, act.Node, act.Err)
		}
		fmt.Fprintln(&notes, act.Op, act.Node, act.Note)
	}
	s, err := r.load()
	if err != nil {
		t.Fatal(err)
	}
	var st torchState
	json.Unmarshal(s.Trainers[id].State, &st)
	if st.RunID == "" || st.Port == 0 {
		t.Fatalf("no store: %+v\n%s", st, notes.String())
	}
	trainertest.WaitFor(t, 90*time.Second, "the victim's first steps", func() bool {
		steps, _ := trainertest.ReadSteps(log)
		return len(steps) >= 5
	})
	inspect := func() string {
		out, err := exec.Command("/usr/bin/python3", filepath.Join(root, "python/tests/torchrun_adversary.py"), "inspect",
			strconv.Itoa(st.Port), st.RunID).CombinedOutput()
		if err != nil {
			t.Fatalf("inspect: %v\n%s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	before := inspect()
	var rdzv struct {
		Complete     bool     `json:"complete"`
		Participants []string `json:"participants"`
	}
	if err := json.Unmarshal([]byte(before), &rdzv); err != nil || !rdzv.Complete || len(rdzv.Participants) != 1 {
		t.Fatalf("the victim's rendezvous: %s (%v), want complete with one participant", before, err)
	}

	info, _ := json.Marshal(map[string]any{"trainer": id, "uid": victim.UID, "store_port": st.Port,
		"roots": []string{r.StateDir, filepath.Dir(a.Config.LogDir), vdir}})
	if err := os.WriteFile(filepath.Join(xdir, "info.json"), info, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/usr/bin/python3", filepath.Join(root, "python/tests/torchrun_adversary.py"), "attack", xdir)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/", "OMP_NUM_THREADS=1", "PYTHONDONTWRITEBYTECODE=1"}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(attacker.UID), Gid: uint32(attacker.GID)}}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the attacks: %v\n%s", err, out)
	}
	var res struct {
		Procs map[string]struct {
			Cmdline string `json:"cmdline"`
			Environ []any  `json:"environ"`
		} `json:"procs"`
		Ports       []int            `json:"ports"`
		Files       []string         `json:"files"`
		Refused     int              `json:"files_refused"`
		Stores      map[string][]any `json:"stores"`
		GuessedKeys map[string][]any `json:"guessed_keys"`
		KeysBefore  []any            `json:"keys_before"`
		Joins       map[string][]any `json:"joins"`
		OwnKey      []any            `json:"own_key"`
		OwnKeyRead  []any            `json:"own_key_read"`
		Dirs        []string         `json:"dirs"`
		KeysAfter   []any            `json:"keys_after"`
	}
	b, err := os.ReadFile(filepath.Join(xdir, "attack.json"))
	if err == nil {
		err = json.Unmarshal(b, &res)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the neighbour got: %s", b)
	after := inspect()
	t.Logf("the victim's rendezvous before the attacks: %s; after: %s", before, after)

	// Nothing the neighbour could read holds the id: no command line, no
	// file, no answer.
	read, err := os.ReadFile(filepath.Join(xdir, "read.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte(st.RunID)) || bytes.Contains(read, []byte(st.RunID)) {
		t.Fatal("the rendezvous id reached the neighbour")
	}
	if len(res.Procs) < 3 { // the store, the agent, its worker
		t.Fatalf("the neighbour saw %d processes of the victim's, want its store, agent and worker", len(res.Procs))
	}
	sawAgent := false
	for pid, p := range res.Procs {
		if strings.Contains(p.Cmdline, "fast_torchrun.py") {
			sawAgent = true
		}
		if len(p.Environ) != 2 || p.Environ[0] != "refused" || !strings.Contains(fmt.Sprint(p.Environ[1]), "PermissionError") {
			t.Fatalf("process %s (%s): its environment read gave %v", pid, p.Cmdline, p.Environ)
		}
	}
	if !sawAgent || len(res.Files) == 0 || res.Refused == 0 {
		t.Fatalf("the search was not a search: agent seen %v, %d files read, %d refused", sawAgent, len(res.Files), res.Refused)
	}
	for _, f := range res.Files {
		if strings.HasPrefix(f, r.StateDir) && (filepath.Base(f) == "runner.json" || strings.Contains(f, "/env/")) ||
			strings.HasPrefix(f, a.Config.LogDir+"/") {
			t.Fatalf("the neighbour read %s", f)
		}
	}
	found := false
	for _, p := range res.Ports {
		found = found || p == st.Port
	}
	if !found {
		t.Fatalf("the store's port %d is not among the victim's listening ports %v the neighbour found", st.Port, res.Ports)
	}
	// Guessed keys: absent; joins: their own rendezvous of one.
	for g, got := range res.GuessedKeys {
		if len(got) != 2 || got[0] != "refused" || !strings.Contains(fmt.Sprint(got[1]), "imeout") {
			t.Fatalf("guessed key torch.rendezvous.%s: %v, want none (a get that times out)", g, got)
		}
	}
	if len(res.OwnKeyRead) != 2 || res.OwnKeyRead[0] != "ok" || res.OwnKeyRead[1] != float64(1024) {
		t.Fatalf("the control: the neighbour's own key read back %v, want its 1024 bytes", res.OwnKeyRead)
	}
	for g, got := range res.Joins {
		m, _ := got[1].(map[string]any)
		if got[0] != "ok" || m["world"] != float64(1) || m["rank"] != float64(0) {
			t.Fatalf("join as %q: %v, want a rendezvous of its own (rank 0 of 1)", g, got)
		}
	}
	if before != after {
		t.Fatalf("the victim's rendezvous changed: %s → %s", before, after)
	}
	// Open, and shown: the store takes keys of anyone's and counts them.
	k0, _ := res.KeysBefore[1].(float64)
	k1, _ := res.KeysAfter[1].(float64)
	if res.OwnKey[0] != "ok" || k1 <= k0 {
		t.Fatalf("the store refused the neighbour's own key (%v; keys %v → %v): update docs/trainers.md", res.OwnKey, res.KeysBefore, res.KeysAfter)
	}
	t.Logf("open: the store took the neighbour's keys (%v → %v keys); the victim's ports answering as a TCPStore: %v", k0, k1, res.Stores)

	// The victim trains to its end, at world size 1, never restarted.
	var exit *Exit
	trainertest.WaitFor(t, 180*time.Second, "the end", func() bool {
		exits, _ := r.Check(ctx)
		if len(exits) > 0 {
			exit = &exits[0]
		}
		return exit != nil
	})
	if exit.Status != Finished {
		t.Fatalf("ended %+v", exit)
	}
	got, err := trainertest.ReadSteps(log)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	done := false
	for _, s := range got {
		if s.World != 1 || s.Restart != 0 {
			t.Fatalf("a step at world %d, restart %d: the victim's group changed", s.World, s.Restart)
		}
		seen[s.Step] = true
		done = done || (s.Done && s.Step == steps)
	}
	if !done || len(seen) != steps {
		t.Fatalf("the victim trained %d distinct steps, done %v; want %d", len(seen), done, steps)
	}
	for _, act := range r.Apply(ctx, nil) {
		fmt.Fprintln(&notes, act.Op, act.Node, act.Note, act.Err)
	}
	if strings.Contains(notes.String(), st.RunID) {
		t.Fatal("an action note holds the rendezvous id")
	}
}
