package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/store"
	"github.com/bftrainer/bftrainer/trainer/trainertest"
)

// benchRescale measures what a membership change costs a real Trainer,
// under stock torchrun and under bftrainer's elastic launcher (and, with
// -launchers …,mpi,mpi-elastic, the mpi launcher's restart path and the
// MPI fast path, both running contrib/trainer/mpi_torch.py), in one run,
// through the real bftrainer binary: node join/leave, trainer submit, the
// reconciler, the runner and its launchers (local transport: every "node"
// is this machine) and the Slurm prolog hook. Debian's torch 1.13 on CPU
// with gloo runs contrib/trainer/train.py. The scenario of each pass:
//
//	start on 1 node
//	up       1 → 3  two nodes join
//	down     3 → 2  a second Trainer, worth far more per node, is submitted:
//	                the plan gives it one of the first one's nodes
//	reclaim  2 → 1  the node's own prolog kills, then the leave is recorded
//	up       1 → 4  three nodes join
//
// -n passes per launcher, alternating launchers so both see the same load.
// It prints one line per change, then the medians, then their ratio:
//
//	rescale-event launcher=elastic pass=1 direction=up from=1 to=3 seconds_lost=0.071 recovery=1.903 redone=0 measured=0.066
//	rescale launcher=elastic direction=up n=6 seconds_lost=0.066 recovery=1.870 measured=0.061
//	rescale-ratio direction=up torchrun/elastic=64.1
//
// seconds_lost is the training time the change cost, read from train.py's
// progress log: from the completion of the last step before it (s) to the
// completion of step s+1 after it, minus one ordinary step at the new size.
// Steps redone from a checkpoint count as lost; time the old group keeps
// training while newcomers start does not. recovery is the wall time from
// the action (the command that records the change, or the prolog) to the
// first step at the new size; redone the steps trained twice; measured
// the launcher's own measure, as recorded in the history (cost events:
// elastic and mpi-elastic the runtime's, mpi its restart's); hook_ms the prolog's kill. Needs root. -python-exe is
// the interpreter with torch that runs everything (torchrun, the stores,
// train.py): Debian's /usr/bin/python3 by default, another torch's (2.x on a
// GPU machine) for the device check.
func benchRescale(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("rescale", flag.ContinueOnError)
	bin := fs.String("bftrainer", "", "the bftrainer binary (default: beside bftrainer-bench, else bin/bftrainer)")
	contrib := fs.String("contrib", "contrib/trainer", "directory with train.py and fast_torchrun.py")
	python := fs.String("python", "python", "directory with the bftrainer_elastic package")
	shim := fs.Bool("shim", false, "torchrun: use fast_torchrun.py (1 s × 5 rendezvous keep-alive) instead of stock torchrun")
	passes := fs.Int("n", 3, "passes of the scenario per launcher")
	which := fs.String("launchers", "torchrun,elastic", "launchers to measure, comma-separated (torchrun, elastic; mpi: the restart path, mpi-elastic: the fast path, both contrib/trainer/mpi_torch.py under -mpi)")
	mpirun := fs.String("mpi", "", "mpi, mpi-elastic: the MPI launcher (mpirun.openmpi, mpiexec.hydra; default: found on PATH)")
	exe := fs.String("python-exe", "/usr/bin/python3", "the interpreter with torch: torchrun, the stores and train.py")
	prefix := fs.String("node-prefix", "n", "the nodes' names: `PREFIX`1, PREFIX2, … (the scenario's node prolog kills every Trainer process naming its node on this machine: a run beside other tests needs names of its own)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	// make bench runs every command: a machine without root or torch
	// skips this one and says why, as the slurm command does.
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "bftrainer-bench: rescale: skipped: needs root (the runner starts Trainer processes as their owner)")
		return nil
	}
	if err := trainertest.HavePythonTorch(*exe); err != nil {
		fmt.Fprintf(os.Stderr, "bftrainer-bench: rescale: skipped: %v\n", err)
		return nil
	}
	b, err := rescaleBinary(*bin)
	if err != nil {
		return err
	}
	cdir, err := filepath.Abs(*contrib)
	if err != nil {
		return err
	}
	pdir, err := filepath.Abs(*python)
	if err != nil {
		return err
	}
	launchers := strings.Split(*which, ",")
	for _, l := range launchers {
		if !slices.Contains([]string{"torchrun", "elastic", "mpi", "mpi-elastic"}, l) {
			return fmt.Errorf("rescale: launcher %q: want torchrun, elastic, mpi or mpi-elastic", l)
		}
	}
	var all []rescaleEvent
	for i := 1; i <= *passes; i++ {
		for _, l := range launchers {
			evs, err := rescalePass(ctx, rescaleSetup{bin: b, contrib: cdir, python: pdir, exe: *exe, shim: *shim, launcher: l, pass: i, prefix: *prefix, mpirun: *mpirun})
			if err != nil {
				return err
			}
			all = append(all, evs...)
		}
	}
	medians := map[string]float64{}
	for _, l := range launchers {
		for _, d := range []string{"up", "down", "reclaim"} {
			var lost, rec, meas []float64
			for _, e := range all {
				if e.launcher == l && e.direction == d {
					lost, rec = append(lost, e.lost), append(rec, e.recovery)
					if e.measured >= 0 {
						meas = append(meas, e.measured)
					}
				}
			}
			if len(lost) == 0 {
				continue
			}
			medians[l+" "+d] = medianF(lost)
			line := fmt.Sprintf("rescale launcher=%s direction=%s n=%d seconds_lost=%.3f recovery=%.3f", l, d, len(lost), medianF(lost), medianF(rec))
			if len(meas) > 0 {
				line += fmt.Sprintf(" measured=%.3f", medianF(meas))
			}
			fmt.Println(line)
		}
	}
	for _, d := range []string{"up", "down", "reclaim"} {
		tr, okT := medians["torchrun "+d]
		for _, l := range launchers {
			if x, ok := medians[l+" "+d]; ok && okT && l != "torchrun" && x > 0 {
				fmt.Printf("rescale-ratio direction=%s torchrun/%s=%.1f\n", d, l, tr/x)
			}
		}
	}
	return nil
}

func rescaleBinary(flagged string) (string, error) {
	cands := []string{flagged}
	if flagged == "" {
		if self, err := os.Executable(); err == nil {
			cands = []string{filepath.Join(filepath.Dir(self), "bftrainer")}
		}
		cands = append(cands, "bin/bftrainer")
	}
	for _, c := range cands {
		if fi, err := os.Stat(c); err == nil && fi.Mode().IsRegular() {
			return filepath.Abs(c)
		}
	}
	return "", fmt.Errorf("rescale: no bftrainer binary (%s); run make build or give -bftrainer", strings.Join(cands, ", "))
}

// rescaleSetup is what one pass runs.
type rescaleSetup struct {
	bin, contrib, python string
	exe                  string // the interpreter with torch
	shim                 bool
	launcher             string
	pass                 int
	prefix               string // node names prefix1, prefix2, …
	mpirun               string // the mpi launcher's command; "": found on PATH
}

// rescaleEvent is one measured change.
type rescaleEvent struct {
	launcher, direction string
	from, to            int
	lost, recovery      float64
	redone              int
	measured            float64 // the launcher's own measure; -1 when none
	hookMs              float64
}

// rescaleRun is one pass's directory and configuration.
type rescaleRun struct {
	bin, dir, config, log string
}

func (r rescaleRun) cli(args ...string) error {
	c := exec.Command(r.bin, args...)
	c.Env = []string{"BFTRAINER_CONFIG=" + r.config, "PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	out, err := c.CombinedOutput()
	if err != nil {
		return fmt.Errorf("bftrainer %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// hook runs the node's Slurm prolog as slurmd does: no arguments, the
// scheduler's environment.
func (r rescaleRun) hook(context_, node, job string) error {
	c := exec.Command(r.bin)
	c.Env = []string{"BFTRAINER_CONFIG=" + r.config, "SLURM_SCRIPT_CONTEXT=" + context_, "SLURMD_NODENAME=" + node,
		"SLURM_JOB_ID=" + job, "SLURM_NODELIST=" + node}
	out, err := c.CombinedOutput()
	if err != nil || len(out) > 0 {
		return fmt.Errorf("hook %s on %s: %v %s", context_, node, err, out)
	}
	if b, _ := os.ReadFile(filepath.Join(r.dir, "hooks.log")); len(b) > 0 {
		return fmt.Errorf("hook %s on %s logged: %s", context_, node, b)
	}
	return nil
}

// nodes returns the nodes a Trainer holds, in the pool.
func (r rescaleRun) nodes(db string, trainer string) ([]string, error) {
	d, err := store.Open(context.Background(), db, store.Options{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer d.Close()
	t, ok, err := d.Trainer(context.Background(), trainer)
	if err != nil || !ok {
		return nil, fmt.Errorf("trainer %s: %v", trainer, err)
	}
	return alloc.Names(t.Nodes), nil
}

// costs returns the rescale costs the launcher recorded for a Trainer.
func (r rescaleRun) costs(db, trainer string) ([]float64, []string, error) {
	d, err := store.Open(context.Background(), db, store.Options{ReadOnly: true})
	if err != nil {
		return nil, nil, err
	}
	defer d.Close()
	evs, err := d.Events(context.Background(), store.Filter{Trainer: trainer, Kinds: []store.Kind{store.KindCost}})
	if err != nil {
		return nil, nil, err
	}
	var vals []float64
	var dirs []string
	for _, e := range evs {
		vals, dirs = append(vals, e.Value), append(dirs, e.Context)
	}
	return vals, dirs, nil
}

// mpiCommand is [trainer.launcher.mpi] command: [] (found on PATH) or
// the one given.
func mpiCommand(mpirun string) string {
	if mpirun == "" {
		return "[]"
	}
	return fmt.Sprintf("[%q]", mpirun)
}

// rescalePass runs the scenario once under one launcher.
// A cancelled ctx (SIGTERM, SIGINT: the device check's time limit) ends
// the wait for the next change: the pass cancels its Trainers and removes
// its cgroups on the way out, nothing of it left running.
func rescalePass(ctx context.Context, s rescaleSetup) (evs []rescaleEvent, err error) {
	dir, err := os.MkdirTemp("", "bftrainer-rescale")
	if err != nil {
		return nil, err
	}
	// A failed pass keeps its directory (the progress log, the Trainers'
	// logs, the history), and its error names it.
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w (kept %s)", err, dir)
			return
		}
		os.RemoveAll(dir)
	}()
	torchrun := fmt.Sprintf(`[%q, "-m", "torch.distributed.run"]`, s.exe)
	if s.shim {
		torchrun = fmt.Sprintf(`[%q, %q]`, s.exe, filepath.Join(s.contrib, "fast_torchrun.py"))
	}
	r := rescaleRun{bin: s.bin, dir: dir, config: filepath.Join(dir, "bftrainer.toml"), log: filepath.Join(dir, "progress.log")}
	db := filepath.Join(dir, "db", "bftrainer.db")
	cgroups, removeCgroups := benchCgroups("rescale")
	defer removeCgroups()
	ports := 29700 + rand.IntN(20)*10
	conf := localConfig(dir, cgroups, fmt.Sprintf(`controller = "127.0.0.1"
allow_root_owner = true
[trainer.launcher.torchrun]
store_ports = "%d-%d"
command = %s
python = %q
[trainer.launcher.elastic]
store_ports = "%d-%d"
python = %q
pythonpath = %q
[trainer.launcher.mpi]
ssh = []
command = %s
[trainer.launcher.mpi-elastic]
ssh = []
command = %s
store_ports = "%d-%d"
python = %q
pythonpath = %q
`, ports, ports+4, torchrun, s.exe, ports+5, ports+9, s.exe, s.python, mpiCommand(s.mpirun),
		mpiCommand(s.mpirun), ports+10, ports+14, s.exe, s.python))
	if err := os.WriteFile(r.config, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	a, b := "bench", "other"
	defer func() {
		// Whatever happened, nothing of the Trainers outlives the pass.
		for _, t := range []string{b, a} {
			if cerr := r.cli("trainer", "cancel", t); cerr != nil && err == nil && !strings.Contains(cerr.Error(), "no Trainer") {
				err = cerr
			}
		}
	}()
	say := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "bftrainer-bench: rescale: %s pass %d: %s\n", s.launcher, s.pass, fmt.Sprintf(format, args...))
	}
	rng := rand.New(rand.NewPCG(uint64(s.pass), 1))
	world, since := 0, time.Time{}
	change := func(direction string, to int, action func() error) error {
		t0 := time.Now()
		if err := action(); err != nil {
			return err
		}
		hold := 10 + rng.IntN(5) // so that kills do not line up with checkpoints
		m, err := waitChange(ctx, r.log, since, t0, world, to, hold)
		if err != nil {
			return fmt.Errorf("%s pass %d: %s to %d: %w", s.launcher, s.pass, direction, to, err)
		}
		if direction != "start" {
			evs = append(evs, rescaleEvent{launcher: s.launcher, direction: direction, from: world, to: to, lost: m.lost,
				recovery: m.recovery, redone: m.redone, measured: -1})
			say("%s %d → %d: %.3f s lost, recovered in %.3f s", direction, world, to, m.lost, m.recovery)
		}
		world, since = to, m.firstNew
		return nil
	}
	hookMs := 0.0
	node := func(i int) string { return fmt.Sprintf("%s%d", s.prefix, i) }
	steps := []struct {
		direction string
		to        int
		action    func() error
	}{
		{"start", 1, func() error {
			if err := r.cli("node", "join", node(1)); err != nil {
				return err
			}
			program := []string{s.exe, filepath.Join(s.contrib, "train.py"), "--steps", "100000000", "--print-every", "0",
				"--ckpt-dir", filepath.Join(dir, "ckpt"), "--log", r.log, "--sleep", "0.2", "--pg-timeout", "10"}
			env := []string{"--env", "PYTHONDONTWRITEBYTECODE=1"}
			if s.launcher == "mpi" || s.launcher == "mpi-elastic" {
				// The same training step (0.2 s of emulated compute, gloo),
				// launched the MPI way; the owner is root here. Under
				// mpi-elastic it runs on the elastic runtime.
				program = []string{s.exe, filepath.Join(s.contrib, "mpi_torch.py"), "--steps", "100000000",
					"--ckpt-dir", filepath.Join(dir, "ckpt"), "--log", r.log, "--sleep", "0.2", "--pg-timeout", "10"}
				env = append(env, "--env", "OMPI_ALLOW_RUN_AS_ROOT=1", "--env", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
			}
			args := append([]string{"trainer", "submit", "--launcher", s.launcher, "--name", a, "--min", "1", "--max", "4",
				"--curve", "1:100,2:200,3:300,4:400", "--rescale-up", "1", "--rescale-down", "1", "--workdir", dir}, env...)
			return r.cli(append(append(args, "--"), program...)...)
		}},
		{"up", 3, func() error { return r.cli("node", "join", node(2), node(3)) }},
		{"down", 2, func() error {
			return r.cli("trainer", "submit", "--launcher", "exec", "--name", b, "--min", "1", "--max", "1",
				"--curve", "1:100000", "--workdir", dir, "--", "/bin/sleep", "3600")
		}},
		{"reclaim", 1, func() error {
			held, err := r.nodes(db, a)
			if err != nil {
				return err
			}
			if len(held) != 2 {
				return fmt.Errorf("the first Trainer holds %v after the shrink, want 2 nodes", held)
			}
			victim := held[1] // not the first: rank 0 stays where it is
			t0 := time.Now()
			if err := r.hook("prolog_slurmd", victim, "101"); err != nil {
				return err
			}
			hookMs = float64(time.Since(t0).Microseconds()) / 1000
			return r.cli("node", "leave", "--job", "101", victim)
		}},
		{"up", 4, func() error { return r.cli("node", "join", node(4), node(5), node(6)) }},
	}
	for _, st := range steps {
		if err := change(st.direction, st.to, st.action); err != nil {
			return nil, err
		}
		if st.direction == "reclaim" {
			evs[len(evs)-1].hookMs = hookMs
		}
	}
	if s.launcher == "mpi" {
		// The restart's own measure, where the history's restarts match
		// the scenario's changes one for one.
		if vals, dirs, err := r.costs(db, a); err == nil && slices.Equal(dirs, []string{"up", "down", "reclaim", "up"}) {
			for i := range evs {
				evs[i].measured = vals[i]
			}
		}
	}
	if s.launcher == "elastic" || s.launcher == "mpi-elastic" {
		vals, dirs, err := r.costs(db, a)
		if err != nil {
			return nil, err
		}
		want := []string{"up", "down", "reclaim", "up"}
		if !slices.Equal(dirs, want) {
			return nil, fmt.Errorf("%s pass %d: the history's cost events are %v, want %v", s.launcher, s.pass, dirs, want)
		}
		for i := range evs {
			evs[i].measured = vals[i]
		}
	}
	for _, e := range evs {
		line := fmt.Sprintf("rescale-event launcher=%s pass=%d direction=%s from=%d to=%d seconds_lost=%.3f recovery=%.3f redone=%d",
			e.launcher, s.pass, e.direction, e.from, e.to, e.lost, e.recovery, e.redone)
		if e.measured >= 0 {
			line += fmt.Sprintf(" measured=%.3f", e.measured)
		}
		if e.direction == "reclaim" {
			line += fmt.Sprintf(" hook_ms=%.1f", e.hookMs)
		}
		fmt.Println(line)
	}
	return evs, nil
}

// changeCost is what one change cost, read from the progress log.
type changeCost struct {
	lost, recovery float64
	redone         int
	firstNew       time.Time
}

// waitChange waits, at most 180 s, until train.py has logged hold steps
// at the new world size after the action at t0, and measures the change
// (for the start: once hold steps ran).
func waitChange(ctx context.Context, log string, since, t0 time.Time, from, to, hold int) (changeCost, error) {
	deadline := time.Now().Add(180 * time.Second)
	for {
		lines, _ := trainertest.ReadSteps(log) // not there yet, or a line cut short: look again
		if from == 0 {
			var first time.Time
			done := completions(lines, func(s trainertest.Step) bool { return s.World == to })
			for _, s := range lines {
				if s.World == to && (first.IsZero() || s.At.Before(first)) {
					first = s.At
				}
			}
			if len(done) >= hold {
				return changeCost{firstNew: first}, nil
			}
		} else if c, ok := measureChange(lines, since, t0, from, to, hold); ok {
			return c, nil
		}
		if time.Now().After(deadline) {
			return changeCost{}, errors.New("no steps at the new size within 180 s")
		}
		if err := ctx.Err(); err != nil {
			return changeCost{}, fmt.Errorf("waiting for steps at the new size: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// completions maps each step of the kept lines to its completion time:
// when the last rank logged it.
func completions(lines []trainertest.Step, keep func(trainertest.Step) bool) map[int]time.Time {
	done := map[int]time.Time{}
	for _, s := range lines {
		if s.Done || !keep(s) {
			continue
		}
		if t, ok := done[s.Step]; !ok || s.At.After(t) {
			done[s.Step] = s.At
		}
	}
	return done
}

// measureChange is the cost of one change (see benchRescale), ok once
// hold steps at the new size are logged. since is when the previous size
// began: older lines belong to earlier sizes.
func measureChange(lines []trainertest.Step, since, t0 time.Time, from, to, hold int) (changeCost, bool) {
	var firstNew time.Time
	minNew := -1
	for _, s := range lines {
		if !s.Done && !s.At.Before(t0) && s.World == to {
			if firstNew.IsZero() || s.At.Before(firstNew) {
				firstNew = s.At
			}
			if minNew < 0 || s.Step < minNew {
				minNew = s.Step
			}
		}
	}
	if firstNew.IsZero() {
		return changeCost{}, false
	}
	old := completions(lines, func(s trainertest.Step) bool {
		return s.World == from && !s.At.Before(since) && s.At.Before(firstNew)
	})
	if len(old) == 0 {
		return changeCost{}, false
	}
	sOld := slices.Max(mapKeys(old))
	done := completions(lines, func(s trainertest.Step) bool { return s.World == to && !s.At.Before(t0) })
	target := sOld + 1
	if _, ok := done[target]; !ok {
		return changeCost{}, false
	}
	var after []int
	for st := range done {
		if st > target {
			after = append(after, st)
		}
	}
	if len(after) < hold {
		return changeCost{}, false
	}
	slices.Sort(after)
	seq := append([]int{target}, after[:hold]...)
	var periods []float64
	for i := 1; i < len(seq); i++ {
		if seq[i] == seq[i-1]+1 {
			periods = append(periods, done[seq[i]].Sub(done[seq[i-1]]).Seconds())
		}
	}
	period := 0.0
	if len(periods) > 0 {
		period = medianF(periods)
	}
	return changeCost{
		lost:     max(0, done[target].Sub(old[sOld]).Seconds()-period),
		recovery: firstNew.Sub(t0).Seconds(),
		redone:   max(0, sOld-minNew+1),
		firstNew: firstNew,
	}, true
}

func mapKeys(m map[int]time.Time) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// medianF is the median of xs (0 for none).
func medianF(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
