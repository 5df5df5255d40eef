package trainer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/trainer/trainertest"
	"github.com/bftrainer/bftrainer/trainer/wire"
)

// TestRunSecret: a run secret is 64 fresh hex digits, and the control
// proof is the one python/bftrainer_elastic/protocol.py computes (the
// same HMAC on both sides of the wire).
func TestRunSecret(t *testing.T) {
	a, b := newRunSecret(), newRunSecret()
	if a == b || len(a) != 64 || strings.Trim(a, "0123456789abcdef") != "" {
		t.Fatalf("secrets %q %q, want 64 fresh hex digits", a, b)
	}
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("needs python3")
	}
	root := trainertest.RepoRoot(t)
	out, err := exec.Command(py, "-c", `import sys; sys.path.insert(0, sys.argv[1])
from bftrainer_elastic import protocol as p
print(p.control_mac(sys.argv[2], "ab"*16, 3, "MEMBERS 2 a b"))`, filepath.Join(root, "python"), a).Output()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := controlMAC(deriveKey(a, "control"), strings.Repeat("ab", 16), 3, "MEMBERS 2 a b"), strings.TrimSpace(string(out)); got != want {
		t.Fatalf("go proof %s, python proof %s", got, want)
	}
}

// TestElasticNeighbour: another user against a running elastic Trainer of
// a first one, both throwaway accounts, through the real launcher and node
// agent (which hand the run secret over in environments only). The
// neighbour knows the ports, pids and worker ids and holds one control
// request as it went over the wire; python/tests/adversary.py tries the
// control channel, the store, workers of its own and the victim's files
// and environments. Everything is refused or comes to nothing; the secret
// is in no command line, no action note and no file but the runner's
// root-only state; the Trainer trains on to the parameters of an
// undisturbed run, with no membership but its runner's.
func TestElasticNeighbour(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real torch workers")
	}
	trainertest.NeedTorch(t)
	victim, attacker := trainertest.MustUser(t, "bftv"), trainertest.MustUser(t, "bfta")
	r, a := elasticRunner(t)
	root := trainertest.RepoRoot(t)
	ctx := context.Background()
	xdir, vdir := neighbourDirs(t, "bft-neighbour-", 0o700, victim.UID)
	const steps, batch = 600, 12
	spec, _ := json.Marshal(Spec{Workdir: vdir, Env: map[string]string{"PYTHONDONTWRITEBYTECODE": "1"}, Argv: []string{"/usr/bin/python3",
		filepath.Join(root, "python/tests/elastic_worker.py"), "--steps", fmt.Sprint(steps), "--batch", fmt.Sprint(batch), "--sleep", "0.05",
		"--log", filepath.Join(vdir, "progress.log"), "--out", filepath.Join(vdir, "params.pt")}})
	id := "nb-" + wire.NewRun()[:6]
	n1, n2 := a.N("n1"), a.N("n2")
	w := Want{ID: id, Owner: victim.Name, Launcher: Elastic, Spec: spec, Min: 1, Max: 2, Nodes: []string{n1, n2}}
	t.Cleanup(func() { r.Apply(context.Background(), nil) })
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
	var st elasticState
	json.Unmarshal(s.Trainers[id].State, &st)
	if st.Epoch == 0 || len(st.Members) != 2 || st.Secret == "" {
		t.Fatalf("the Trainer did not start on both nodes: %+v\n%s", st, notes.String())
	}
	if fi, err := os.Stat(r.statePath()); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("runner state: %v %v, want mode 0600", fi.Mode(), err)
	}
	// What the neighbour learns: ports (ss), pids (ps), ids (stolen), and
	// one request as it went over the wire (sniffed).
	pids := map[string]int{}
	var files []string
	for _, n := range []string{wire.ControllerNode, n1, n2} {
		sts, err := r.list(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range sts {
			if e.Trainer == id {
				pids[n] = e.PID
				files = append(files, e.Log)
			}
		}
	}
	c, err := dialControl(ctx, st.Control, st.Secret)
	if err != nil {
		t.Fatal(err)
	}
	captured := controlMAC(c.key, c.nonce, c.seq, "STATUS") + " STATUS"
	c.seq++
	if _, err := c.send(captured); err != nil {
		t.Fatalf("the owner's own request: %v", err)
	}
	c.close()
	info, _ := json.Marshal(map[string]any{"store_port": st.Store, "control_port": st.Control, "ids": st.Members, "pids": pids,
		"captured": captured, "vdir": vdir, "files": append(files, filepath.Join(vdir, "progress.log"))})
	if err := os.WriteFile(filepath.Join(xdir, "info.json"), info, 0o644); err != nil {
		t.Fatal(err)
	}
	// The secret: in the environments of the store and the workers (their
	// owner's), on no command line.
	for n, pid := range pids {
		cmdline, err1 := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		environ, err2 := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err1 != nil || err2 != nil {
			t.Fatalf("%s: %v %v", n, err1, err2)
		}
		if bytes.Contains(cmdline, []byte(st.Secret)) || !bytes.Contains(environ, []byte(secretEnv+"="+st.Secret)) {
			t.Fatalf("%s (pid %d): the secret is on its command line, or not in its environment", n, pid)
		}
	}

	cmd := exec.Command("/usr/bin/python3", filepath.Join(root, "python/tests/adversary.py"), "attack", xdir)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/", "OMP_NUM_THREADS=1", "PYTHONDONTWRITEBYTECODE=1", "PYTHONPATH=" + filepath.Join(root, "python")}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(attacker.UID), Gid: uint32(attacker.GID)}}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the attacks: %v\n%s", err, out)
	}
	var res struct {
		ControlBare    []string             `json:"control_bare"`
		ControlForged  []string             `json:"control_forged"`
		ControlReplay  []string             `json:"control_replay"`
		StoreRead      map[string]*string   `json:"store_read"`
		StoreWait      []any                `json:"store_wait"`
		WorkerNoSecret []any                `json:"worker_no_secret"`
		WorkerOwn      []any                `json:"worker_own_secret"`
		WorkerStolen   []any                `json:"worker_stolen_id"`
		Files          map[string][2]string `json:"files"`
	}
	b, err := os.ReadFile(filepath.Join(xdir, "attack.json"))
	if err == nil {
		err = json.Unmarshal(b, &res)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the neighbour got: %s", b)
	if bytes.Contains(b, []byte(st.Secret)) {
		t.Fatal("the secret reached the neighbour")
	}
	for _, replies := range [][]string{res.ControlBare, res.ControlForged, res.ControlReplay} {
		for _, reply := range replies {
			if !strings.HasPrefix(reply, "ERR authentication failed") {
				t.Fatalf("a control request without proof got %q", reply)
			}
		}
	}
	for k, v := range res.StoreRead {
		if v != nil {
			t.Fatalf("the neighbour read %s: %q", k, *v)
		}
	}
	for name, got := range map[string][]any{"wait": res.StoreWait, "worker without secret": res.WorkerNoSecret,
		"worker with its own secret": res.WorkerOwn, "worker with a stolen id": res.WorkerStolen} {
		if len(got) != 2 || got[0] != "refused" {
			t.Fatalf("%s: %v", name, got)
		}
	}
	for path, got := range res.Files {
		if got[0] != "refused" || !strings.Contains(got[1], "PermissionError") {
			t.Fatalf("%s: %v", path, got)
		}
	}

	// The victim: its membership its runner's, trained to the end, to the
	// parameters of an undisturbed run.
	c, err = dialControl(ctx, st.Control, st.Secret)
	if err != nil {
		t.Fatal(err)
	}
	now, err := c.status()
	c.close()
	if err != nil || now.Epoch != st.Epoch || strings.Join(now.Members, " ") != strings.Join(st.Members, " ") || now.Finished != nil {
		t.Fatalf("after the attacks: %+v %v, want epoch %d of %v still training (raise steps if it finished)", now, err, st.Epoch, st.Members)
	}
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
	out, err := exec.Command("/usr/bin/python3", "-c", `import sys, torch
sys.path.insert(0, sys.argv[1])
from elastic_worker import reference
got, want = torch.load(sys.argv[2]), reference(int(sys.argv[3]), int(sys.argv[4]))
print(max((got[k] - want[k]).abs().max().item() for k in want))`, filepath.Join(root, "python/tests"), filepath.Join(vdir, "params.pt"),
		fmt.Sprint(steps), fmt.Sprint(batch)).CombinedOutput()
	var diff float64
	if _, serr := fmt.Sscan(string(out), &diff); err != nil || serr != nil || diff > 1e-9 {
		t.Fatalf("parameters against an undisturbed run: %v %s", err, out)
	}
	for _, act := range r.Apply(ctx, nil) {
		fmt.Fprintln(&notes, act.Op, act.Node, act.Note, act.Err)
	}
	if strings.Contains(notes.String(), st.Secret) {
		t.Fatal("an action note holds the secret")
	}
}

// TestElasticStoreWithoutSecret: a store process started before run
// secrets (an upgrade: its state records none) cannot be talked to; the
// next round stops it and its workers and starts a new one, with a
// secret.
func TestElasticStoreWithoutSecret(t *testing.T) {
	if testing.Short() {
		t.Skip("starts store processes (torch)")
	}
	trainertest.NeedTorch(t)
	r, a := elasticRunner(t, func(s *ElasticSettings) { s.ReadyTimeout = "1s" })
	ctx := context.Background()
	spec, _ := json.Marshal(Spec{Workdir: "/", Argv: []string{"/bin/sleep", "300"}}) // never ready: nothing is published
	id := "up-" + wire.NewRun()[:6]
	w := Want{ID: id, Owner: currentUserName(t), Launcher: Elastic, Spec: spec, Min: 1, Max: 1, Nodes: []string{a.N("n1")}}
	t.Cleanup(func() { r.Apply(context.Background(), nil) })
	state := func() (*runState, elasticState) {
		t.Helper()
		s, err := r.load()
		if err != nil {
			t.Fatal(err)
		}
		var st elasticState
		json.Unmarshal(s.Trainers[id].State, &st)
		return s, st
	}
	r.Apply(ctx, []Want{w})
	s, st := state()
	if st.Secret == "" || s.Trainers[id].Roles[storeRole] == nil {
		t.Fatalf("no store with a secret: %+v", st)
	}
	old := st.Secret
	st.Secret = ""
	b, _ := json.Marshal(st)
	s.Trainers[id].State = b
	if err := r.save(s); err != nil {
		t.Fatal(err)
	}
	acts := r.Apply(ctx, []Want{w})
	got := map[string]bool{}
	for _, act := range acts {
		got[act.Op] = true
	}
	if !got["stop"] || !got["store-stop"] || !got["store-start"] {
		t.Fatalf("a store without a secret was not replaced: %v", ops(t, acts))
	}
	if _, st = state(); st.Secret == "" || st.Secret == old {
		t.Fatalf("the new store's secret: %q (the old one %q)", st.Secret, old)
	}
}

// neighbourDirs makes the attack tests' directories under a fresh
// world-searchable temporary one: x, sticky and writable by all (the
// attacker's), and the victim's own, owned by uid with mode victimMode.
func neighbourDirs(t *testing.T, prefix string, victimMode os.FileMode, uid int) (xdir, vdir string) {
	t.Helper()
	top, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(top) })
	xdir, vdir = filepath.Join(top, "x"), filepath.Join(top, "victim")
	for _, d := range []struct {
		path string
		mode os.FileMode
		uid  int
	}{{top, 0o755, 0}, {xdir, 0o1777, 0}, {vdir, victimMode, uid}} {
		err := os.MkdirAll(d.path, 0o700)
		if err == nil {
			err = os.Chmod(d.path, d.mode)
		}
		if err == nil {
			err = os.Chown(d.path, d.uid, -1)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return xdir, vdir
}
