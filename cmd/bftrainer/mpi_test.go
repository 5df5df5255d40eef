package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/store"
	"github.com/bftrainer/bftrainer/trainer"
	"github.com/bftrainer/bftrainer/trainer/agent"
	"github.com/bftrainer/bftrainer/trainer/trainertest"
	"github.com/bftrainer/bftrainer/trainer/wire"
)

// mpiCase is one MPI implementation and the example that runs on it.
type mpiCase struct {
	name    string
	command string // the site's launcher
	script  string // contrib/trainer/…
	need    func(tb testing.TB)
}

// needPython skips unless /usr/bin/python3 imports the module.
func needPython(module, pkg string) func(testing.TB) {
	return func(tb testing.TB) {
		tb.Helper()
		if out, err := exec.Command("/usr/bin/python3", "-c", "import "+module).CombinedOutput(); err != nil {
			tb.Skipf("needs %s for /usr/bin/python3 (apt-get install %s): %v %s", module, pkg, err, lastLine(string(out)))
		}
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	return s[strings.LastIndex(s, "\n")+1:]
}

// mpiCases: Open MPI runs the mpi4py example (Debian's mpi4py is built
// for Open MPI: under MPICH's mpiexec each of its ranks would be a world
// of one), MPICH's Hydra the torch one (ranks from PMI_RANK/PMI_SIZE,
// gloo).
var mpiCases = []mpiCase{
	{name: "openmpi", command: "mpirun.openmpi", script: "mpi_sgd.py", need: needPython("mpi4py, numpy", "python3-mpi4py")},
	{name: "mpich", command: "mpiexec.hydra", script: "mpi_torch.py", need: func(tb testing.TB) { trainertest.NeedTorch(tb) }},
}

// TestMPITrainer drives an MPI Trainer (launcher mpi, the restart path)
// through the product's real path — node join/leave, trainer submit and
// cancel, the reconciler, the runner over a real sshd to loopback nodes,
// the Slurm prolog's reclaim — on real Open MPI (mpirun, mpi4py) and real
// MPICH (Hydra's mpiexec, torch over gloo): 1 → 3 nodes; a planned shrink
// to 2 (a Trainer worth more takes a node: the ranks are told, checkpoint
// and exit); the reclaim of rank 0's node; a regrowth to 3. After each
// change every rank steps at the new world size, rank r on the job's r-th
// host in the order the Trainer holds its nodes; once the change's round
// returned (the bound), no process of the Trainer runs on a node outside
// the new world nor carries an older MPI job; after the reclaim's prolog
// returned nothing of it is left on the node. The final weights equal a
// run at a fixed size of one rank (deterministic data order) within 1e-9.
func TestMPITrainer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real MPI jobs over ssh (about a minute each)")
	}
	for _, c := range mpiCases {
		t.Run(c.name, func(t *testing.T) {
			path, err := exec.LookPath(c.command)
			if err != nil {
				t.Skipf("needs %s (apt-get install openmpi-bin mpich)", c.command)
			}
			c.command = path
			c.need(t)
			testMPITrainer(t, c)
		})
	}
}

func testMPITrainer(t *testing.T, c mpiCase) {
	root := trainertest.RepoRoot(t)
	e := newTrainerEnv(t, "ssh", 4, fmt.Sprintf("allow_root_owner = true\n[trainer.launcher.mpi]\ncommand = [%q]\nssh = [\"ssh\", \"-F\", \"@SSH_CONFIG@\"]\ndrain = \"30s\"\n", c.command))
	a, b := uniq("mpi"), uniq("hi")
	killLeftovers(t, a)
	killLeftovers(t, b)
	log := filepath.Join(e.work, "progress.log")
	out := filepath.Join(e.work, "weights.txt")
	script := filepath.Join(root, "contrib/trainer", c.script)
	// The job runs until the test asks it to finish (--finish-file, once
	// the scenario is over), not for a number of steps guessed to outlast
	// the scenario on a loaded machine.
	const batch = 96
	finish := filepath.Join(e.work, "finish")
	args := []string{script, "--batch", fmt.Sprint(batch), "--ckpt-every", "5"}
	state := func() (hosts []string, job string) {
		t.Helper()
		var st struct {
			Trainers map[string]struct {
				Run   string          `json:"run"`
				State json.RawMessage `json:"state"`
			} `json:"trainers"`
		}
		b, err := os.ReadFile(filepath.Join(e.dir, "runner", "runner.json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &st); err != nil {
			t.Fatal(err)
		}
		rec := st.Trainers[a]
		var ms struct {
			Hosts []string `json:"hosts"`
			Gen   int      `json:"gen"`
		}
		json.Unmarshal(rec.State, &ms)
		return ms.Hosts, fmt.Sprintf("%s-%d", rec.Run, ms.Gen)
	}
	// contained: right after the round that made a change returned, every
	// process of the Trainer runs on a host of the new job (or is its
	// driver on the controller) and carries the new job.
	contained := func(what string) {
		t.Helper()
		hosts, job := state()
		for _, p := range tokenProcs(t, func(tk wire.Token, _ agent.Proc) bool { return tk.Trainer == a }) {
			tk, _ := p.Token()
			if tk.Node != wire.ControllerNode && !slices.Contains(hosts, tk.Node) {
				t.Fatalf("%s: pid %d (%s) runs on %s, outside the new world %v", what, p.PID, p.Comm, tk.Node, hosts)
			}
			if got := procEnv(p.PID, trainer.MPIJobEnv); got != "" && got != job {
				t.Fatalf("%s: pid %d (%s) on %s belongs to MPI job %s, the job now is %s", what, p.PID, p.Comm, tk.Node, got, job)
			}
		}
	}
	// settled waits until two steps after since ran at world n, rank r
	// on the job's r-th host, and returns the hosts.
	settled := func(n int, since time.Time) []string {
		t.Helper()
		deadline := time.Now().Add(180 * time.Second)
		for {
			hosts, _ := state()
			byStep := map[int]map[int]string{}
			full := 0
			for _, s := range readSteps(t, log) {
				if s.Done {
					t.Fatalf("the job finished before the scenario did (step %d)", s.Step)
				}
				if !s.At.After(since) || s.World != n {
					continue
				}
				if len(hosts) != n || s.Rank >= n || s.Node != hosts[s.Rank] {
					t.Fatalf("step %d: rank %d of %d on %s, the job's hosts are %v", s.Step, s.Rank, s.World, s.Node, hosts)
				}
				if byStep[s.Step] == nil {
					byStep[s.Step] = map[int]string{}
				}
				byStep[s.Step][s.Rank] = s.Node
				if len(byStep[s.Step]) == n {
					full++
				}
			}
			if full >= 2 {
				return hosts
			}
			if time.Now().After(deadline) {
				t.Fatalf("no two steps at world %d within 180 s; last lines: %+v", n, lastSteps(readSteps(t, log), 8))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	submit := append([]string{"submit", "--launcher", "mpi", "--name", a, "--min", "1", "--max", "3", "--curve", "1:100,2:10000,3:10100",
		"--rescale-up", "1", "--rescale-down", "1", "--workdir", e.work,
		"--env", "PYTHONDONTWRITEBYTECODE=1", "--env", "BFTRAINER_PROGRESS_INTERVAL=1",
		"--env", "OMPI_ALLOW_RUN_AS_ROOT=1", "--env", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1", "--", "/usr/bin/python3"},
		append(slices.Clone(args), "--steps", "1000000", "--ckpt-dir", filepath.Join(e.work, "ckpt"), "--log", log, "--out", out, "--sleep", "0.05", "--finish-file", finish)...)
	type change struct {
		name      string
		at        time.Time
		hosts     []string
		firstStep time.Time
	}
	var changes []*change
	step := func(name string, n int, do func()) []string {
		t.Helper()
		ch := &change{name: name, at: time.Now()}
		do()
		contained(name)
		ch.hosts = settled(n, ch.at)
		for _, s := range readSteps(t, log) {
			if s.At.After(ch.at) && s.World == n {
				ch.firstStep = s.At
				break
			}
		}
		changes = append(changes, ch)
		return ch.hosts
	}

	step("start on 1", 1, func() {
		e.run(t, "node", "join", "n1")
		e.run(t, append([]string{"trainer"}, submit...)...)
	})
	step("grow 1→3", 3, func() { e.run(t, "node", "join", "n2", "n3") })
	// A Trainer worth far more per node than A's third takes one of A's
	// nodes: a planned shrink, the ranks told to checkpoint and exit.
	held := step("shrink 3→2", 2, func() {
		e.run(t, "trainer", "submit", "--launcher", "exec", "--name", b, "--min", "1", "--max", "1", "--curve", "1:100000",
			"--workdir", e.work, "--", "/bin/sleep", "600")
	})
	// The reclaim of rank 0's node: its own prolog kills (nothing of the
	// Trainer is left there when it returns), then the leave.
	rank0 := held[0]
	step("reclaim "+rank0+" (rank 0)", 1, func() {
		e.hook(t, "prolog_slurmd", rank0, "101")
		if procs := tokenProcs(t, func(tk wire.Token, _ agent.Proc) bool { return tk.Trainer == a && tk.Node == rank0 }); len(procs) > 0 {
			t.Fatalf("after the prolog on %s returned, Trainer processes survive there: %+v", rank0, procs)
		}
		e.run(t, "node", "leave", "--job", "101", rank0)
	})
	// One round: n4 recorded without a plan, then the cancel's round
	// gives A both n4 and B's node.
	step("grow again", 3, func() {
		e.run(t, "node", "join", "--no-reconcile", "n4")
		e.run(t, "trainer", "cancel", b)
	})
	// The job finishes at its next step; on a machine CI may load (Open
	// MPI's ranks spin in their collectives): wait while it steps, fail
	// once it has not stepped for 3 minutes.
	if err := os.WriteFile(finish, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for stepped, last := time.Now(), len(readSteps(t, log)); !strings.Contains(e.run(t, "trainer", "list", "--all", "--format", "csv"), a+",root,finished,"); {
		if n := len(readSteps(t, log)); n > last {
			stepped, last = time.Now(), n
		} else if time.Since(stepped) > 3*time.Minute {
			t.Fatalf("the Trainer stopped stepping (%d step lines, none for 3 min) before it finished; list:\n%s", n, e.run(t, "trainer", "list", "--all"))
		}
		time.Sleep(time.Second)
		e.run(t, "reconcile", "--no-scheduler")
	}
	if procs := tokenProcs(t, func(tk wire.Token, _ agent.Proc) bool { return tk.Trainer == a }); len(procs) > 0 {
		t.Fatalf("processes of the finished Trainer survive: %+v", procs)
	}

	// The model equals a run at a fixed size (one rank, the same launcher,
	// no bftrainer) to the same step: its "done" lines' (steps redone
	// after a reclaim may have gone beyond it before).
	steps := -1
	for _, s := range readSteps(t, log) {
		if s.Done {
			steps = s.Step
		}
	}
	if steps < 0 {
		t.Fatal("no done line in the progress log")
	}
	ref := filepath.Join(t.TempDir(), "ref.txt")
	refArgs := append([]string{"-n", "1", "/usr/bin/python3"}, append(slices.Clone(args), "--steps", fmt.Sprint(steps), "--ckpt-dir", filepath.Dir(ref), "--out", ref)...)
	cmd := exec.Command(c.command, refArgs...)
	cmd.Env = append(os.Environ(), "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1", "OMP_NUM_THREADS=1")
	if o, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("reference run: %v\n%s", err, o)
	}
	maxDiff := sameWeights(t, out, ref, "the final weights")

	// The history: the measured restarts (R_up / R_down / reclaim), the
	// progress reports, the launcher's command line.
	ctx := context.Background()
	db := e.openDB(t)
	costs, err := db.Events(ctx, store.Filter{Trainer: a, Kinds: []store.Kind{store.KindCost}})
	if err != nil {
		t.Fatal(err)
	}
	dirs := map[string]int{}
	for _, ev := range costs {
		var d struct{ Direction string }
		json.Unmarshal(ev.Detail, &d)
		dirs[d.Direction]++
	}
	if dirs[trainer.Up] < 2 || dirs[trainer.Down] < 1 || dirs[trainer.Reclaim] < 1 {
		t.Errorf("measured costs by direction %v: want ≥ 2 up, ≥ 1 down, ≥ 1 reclaim", dirs)
	}
	reports, err := db.Events(ctx, store.Filter{Trainer: a, Kinds: []store.Kind{store.KindProgress}})
	if err != nil || len(reports) < 3 || reports[len(reports)-1].Value != float64(steps*batch) {
		t.Errorf("progress reports: %d (%v), want ≥ 3, the last %d samples", len(reports), err, steps*batch)
	}
	show := e.run(t, "trainer", "show", a)
	if !strings.Contains(show, c.command) || !strings.Contains(show, "mpi-rsh") && !strings.Contains(show, filepath.Join("mpi", "rsh")) {
		t.Errorf("trainer show does not show the launcher's command line:\n%s", show)
	}
	for _, ch := range changes {
		t.Logf("%-22s world %d on %v: first step %.2f s after the action", ch.name, len(ch.hosts), ch.hosts, ch.firstStep.Sub(ch.at).Seconds())
	}
	t.Logf("final weights within %g of the fixed-size run's", maxDiff)
}

// procEnv is one variable of a process's environment ("" when unset or
// unreadable).
func procEnv(pid int, name string) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return ""
	}
	for _, kv := range bytes.Split(b, []byte{0}) {
		if k, v, ok := strings.Cut(string(kv), "="); ok && k == name {
			return v
		}
	}
	return ""
}

// readWeights reads a weights file, one number a line.
// sameWeights fails the test unless the weights written to out equal
// the fixed-size reference run's (ref) within 1e-9, and returns how far
// apart they are; what names them.
func sameWeights(t *testing.T, out, ref, what string) float64 {
	t.Helper()
	got, want := readWeights(t, out), readWeights(t, ref)
	if len(got) != len(want) || len(got) == 0 {
		t.Fatalf("weights: %d values, the reference %d", len(got), len(want))
	}
	maxDiff := 0.0
	for i := range got {
		maxDiff = max(maxDiff, math.Abs(got[i]-want[i]))
	}
	if maxDiff > 1e-9 {
		t.Fatalf("%s differ from a fixed-size run's by %g (> 1e-9):\n%v\n%v", what, maxDiff, got, want)
	}
	return maxDiff
}

func readWeights(tb testing.TB, path string) []float64 {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	var out []float64
	for _, f := range strings.Fields(string(b)) {
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}
