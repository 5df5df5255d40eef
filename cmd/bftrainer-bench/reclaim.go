package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/bftrainer/bftrainer/internal/lab"
	"github.com/bftrainer/bftrainer/internal/lab/slurm"
	"github.com/bftrainer/bftrainer/store"
	"github.com/bftrainer/bftrainer/trainer"
	"github.com/bftrainer/bftrainer/trainer/trainertest"
	"github.com/bftrainer/bftrainer/trainer/wire"
)

// reclaimCommand times the node prolog's reclaim as slurmd runs it (the
// real binary, exec to exit, with the prolog's environment) against a
// Trainer that plays one of trainertest.Escapes, started by the real
// node agent as a throwaway user; then looks at /proc for anything of the
// Trainer's. Once with cgroup containment, once degraded:
//
//	reclaim escape=<kind> containment=<cgroup|degraded> survived=<n> ms=<hook> kill_ms=<the kill alone> runs=<n>
//	reclaim procs=300 env_mb=1.9 containment=… survived=<n> ms=… kill_ms=…
//	reclaim empty containment=… ms=…              (a node with nothing of ours: the common prolog)
//	reclaim stages containment=… <stage>_ms=…    (where the kill's time goes, summed over the runs above)
//
// ms is the hook's whole time, from its exec to its exit, as the
// scheduler waits for it; kill_ms the agent's kill as its report says.
// survived counts the Trainer's processes alive after the hook returned
// (the escape's own pids and every process of its owner): any other
// number than 0 is a failure of the containment.
type reclaimCommand struct {
	stdout, stderr io.Writer
}

func (c *reclaimCommand) Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("reclaim", flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	bin := fs.String("bftrainer", "", "bftrainer binary (default: beside bftrainer-bench, else bin/bftrainer)")
	runs := fs.Int("runs", 3, "reclaims per escape kind (the median is printed)")
	procs := fs.Int("procs", 300, "processes of the large-environment Trainer")
	envMB := fs.Float64("env-mb", 1.9, "environment of each of them, MB")
	modes := fs.String("modes", "cgroup,degraded", "containment modes to measure")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(c.stderr, "bftrainer-bench: reclaim: skipped: needs root (the node agent starts Trainers as another user)")
		return nil
	}
	b, err := rescaleBinary(*bin)
	if err != nil {
		return err
	}
	u, err := slurm.NewUser("bftr")
	if err != nil {
		return fmt.Errorf("reclaim: %w", err)
	}
	defer u.Remove()
	for _, mode := range strings.Split(*modes, ",") {
		if err := c.mode(ctx, b, u, mode, *runs, *procs, *envMB); err != nil {
			return fmt.Errorf("reclaim %s: %w", mode, err)
		}
	}
	return nil
}

// mode measures every escape with one containment mode.
func (c *reclaimCommand) mode(ctx context.Context, bin string, u *slurm.User, mode string, runs, procs int, envMB float64) error {
	e, err := newReclaimEnv(bin, mode, "")
	if err != nil {
		return err
	}
	defer e.remove()
	got := e.containment()
	if mode == "cgroup" && got != wire.Cgroup {
		fmt.Fprintf(c.stderr, "bftrainer-bench: reclaim: cgroup mode skipped: this node is %s\n", got)
		return nil
	}
	label := strings.SplitN(got, " ", 2)[0]
	stages := map[string]float64{}
	for _, esc := range trainertest.Escapes {
		if esc.Storm {
			continue // unbounded without pids.max; the tests run it
		}
		var ms, kill []float64
		survived := 0
		for range runs {
			r, err := e.once(ctx, u, esc)
			if err != nil {
				return fmt.Errorf("%s: %w", esc.Kind, err)
			}
			ms, kill = append(ms, r.ms), append(kill, r.rep.Ms)
			survived = max(survived, r.survived)
			for k, v := range r.rep.Stages {
				stages[k] += v
			}
		}
		fmt.Fprintf(c.stdout, "reclaim escape=%s containment=%s survived=%d ms=%.1f kill_ms=%.1f runs=%d\n",
			esc.Kind, label, survived, store.Quantile(ms, 0.5), store.Quantile(kill, 0.5), runs)
	}
	r, err := e.once(ctx, u, trainertest.ManyEnv(procs, int(envMB*(1<<20))))
	if err != nil {
		return fmt.Errorf("many: %w", err)
	}
	fmt.Fprintf(c.stdout, "reclaim procs=%d env_mb=%.1f containment=%s survived=%d ms=%.1f kill_ms=%.1f\n",
		procs, envMB, label, r.survived, r.ms, r.rep.Ms)
	var empty []float64
	for range 20 {
		ms, _, err := e.hook(ctx, "prolog_slurmd")
		if err != nil {
			return err
		}
		empty = append(empty, ms)
		if _, _, err := e.hook(ctx, "epilog_slurmd"); err != nil {
			return err
		}
	}
	fmt.Fprintf(c.stdout, "reclaim empty containment=%s ms=%.1f runs=%d\n", label, store.Quantile(empty, 0.5), len(empty))
	var parts []string
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range stages {
			if !yield(k) {
				return
			}
		}
	}) {
		parts = append(parts, fmt.Sprintf("%s_ms=%.1f", strings.ReplaceAll(k, ".", "_"), stages[k]))
	}
	fmt.Fprintf(c.stdout, "reclaim stages containment=%s %s\n", label, strings.Join(parts, " "))
	return nil
}

// reclaimEnv is one configuration: its directories, its cgroup subtree,
// the node it kills.
type reclaimEnv struct {
	bin, dir, config, node string
	removeCgroups          func()
	job                    int
}

// newReclaimEnv writes a configuration for one containment mode; extra
// are more lines of its [trainer] table.
func newReclaimEnv(bin, mode, extra string) (*reclaimEnv, error) {
	dir, err := os.MkdirTemp("", "bftrainer-bench-reclaim")
	if err != nil {
		return nil, err
	}
	for d := dir; d != filepath.Dir(d) && strings.HasPrefix(d, os.TempDir()+"/"); d = filepath.Dir(d) {
		os.Chmod(d, 0o755) // the Trainer's owner writes its escape directory below
	}
	cg, remove := benchCgroups("reclaim")
	containment := "auto"
	if mode != "cgroup" {
		containment = "off"
	}
	e := &reclaimEnv{bin: bin, dir: dir, config: filepath.Join(dir, "bftrainer.toml"), node: "bench-" + wire.NewRun()[:8], removeCgroups: remove}
	conf := localConfig(dir, cg, fmt.Sprintf("containment = %q\n", containment)) + extra
	if err := os.WriteFile(e.config, []byte(conf), 0o644); err != nil {
		e.remove()
		return nil, err
	}
	// The history the hooks record their kills in (node hooks never
	// create a database).
	join := exec.Command(e.bin, "node", "join", "--no-reconcile", e.node)
	join.Env = []string{"BFTRAINER_CONFIG=" + e.config}
	if out, err := join.CombinedOutput(); err != nil {
		e.remove()
		return nil, fmt.Errorf("create the database: %v: %s", err, out)
	}
	return e, nil
}

func (e *reclaimEnv) remove() {
	e.removeCgroups()
	os.RemoveAll(e.dir)
}

// agent is the node agent of the binary under test, as the runner calls
// it.
func (e *reclaimEnv) agent() trainer.AgentClient {
	return trainer.AgentClient{T: trainer.Local{Argv: []string{e.bin, "--config", e.config}}}
}

// containment asks the node agent for its mode.
func (e *reclaimEnv) containment() string {
	mode, err := e.agent().Containment(context.Background(), e.node)
	if err != nil {
		return "unknown"
	}
	return mode
}

// reclaimRun is one reclaim: the hook's time, its kill's report, and
// what of the Trainer survived it.
type reclaimRun struct {
	ms       float64
	rep      wire.KillReport
	survived int
}

// once starts the escape as u, waits until it is ready, runs the node
// prolog and counts what survived, then runs the epilog (which lifts the
// fence).
func (e *reclaimEnv) once(ctx context.Context, u *slurm.User, esc trainertest.Escape) (reclaimRun, error) {
	esc.Script = strings.ReplaceAll(esc.Script, "600", "3600") // nothing ends by itself during a bench
	dir, err := os.MkdirTemp(e.dir, "esc")
	if err != nil {
		return reclaimRun{}, err
	}
	os.Chmod(dir, 0o755)
	if err := os.Chown(dir, u.UID, u.GID); err != nil {
		return reclaimRun{}, err
	}
	l := wire.Launch{Trainer: "bench-esc", Node: e.node, Owner: u.Name, Run: wire.NewRun(), Argv: []string{"/bin/sh", "-c", esc.Program()},
		Env: map[string]string{"ESC_DIR": dir}, Workdir: "/", Token: wire.NewToken("bench-esc", e.node).String()}
	if _, err := e.agent().Start(ctx, l); err != nil {
		return reclaimRun{}, fmt.Errorf("start: %w", err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(dir, "ready")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return reclaimRun{}, errors.New("the escape did not say ready within 60 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	pids := trainertest.EscapePIDs(dir)
	ms, rep, err := e.hook(ctx, "prolog_slurmd")
	if err != nil {
		return reclaimRun{}, err
	}
	r := reclaimRun{ms: ms, rep: rep}
	r.survived = len(trainertest.Alive(pids)) + len(trainertest.UIDProcs(u.UID))
	if _, _, err := e.hook(ctx, "epilog_slurmd"); err != nil {
		return r, err
	}
	return r, nil
}

// hook runs the binary as slurmd runs a node prolog or epilog and returns
// its time and the kill's report (recorded in the history).
func (e *reclaimEnv) hook(ctx context.Context, context_ string) (float64, wire.KillReport, error) {
	e.job++
	c := exec.CommandContext(ctx, e.bin)
	c.Env = []string{"BFTRAINER_CONFIG=" + e.config, "SLURM_SCRIPT_CONTEXT=" + context_, "SLURMD_NODENAME=" + e.node,
		fmt.Sprintf("SLURM_JOB_ID=%d", e.job), "SLURM_NODELIST=" + e.node}
	begin := time.Now()
	out, err := c.CombinedOutput()
	ms := float64(time.Since(begin).Microseconds()) / 1000
	if err != nil || len(out) > 0 {
		return ms, wire.KillReport{}, fmt.Errorf("hook %s: %v %s", context_, err, out)
	}
	if b, _ := os.ReadFile(filepath.Join(e.dir, "hooks.log")); len(b) > 0 {
		return ms, wire.KillReport{}, fmt.Errorf("hook %s logged: %s", context_, b)
	}
	var rep wire.KillReport
	// The hook left its rows in the journal: record them, as a round would.
	path := filepath.Join(e.dir, "db", "bftrainer.db")
	if err := lab.Ingest(ctx, path); err != nil {
		return ms, rep, err
	}
	db, err := store.Open(ctx, path, store.Options{ReadOnly: true})
	if err != nil {
		return ms, rep, err
	}
	defer db.Close()
	evs, err := db.Events(ctx, store.Filter{Kinds: []store.Kind{store.KindKill}, Job: fmt.Sprint(e.job)})
	if err != nil {
		return ms, rep, err
	}
	if len(evs) > 0 {
		json.Unmarshal(evs[len(evs)-1].Detail, &rep)
	}
	return ms, rep, nil
}

// localConfig is the configuration the bench's runs on this machine
// share (reclaim, rescale): the database, spool, hook log, registry, logs
// and runner state under dir, no reconciler spawned by the hooks, no
// scheduler commands, the local transport with cgroupRoot; trainer is
// more lines of [trainer] (and the tables after it).
func localConfig(dir, cgroupRoot, trainer string) string {
	return fmt.Sprintf(`database = %q
spool = %q
[hooks]
log = %q
spawn_reconciler = "never"
[scheduler]
sinfo = ""
squeue = ""
[trainer]
transport = "local"
registry = %q
log_dir = %q
state_dir = %q
cgroup_root = %q
`, filepath.Join(dir, "db", "bftrainer.db"), filepath.Join(dir, "spool"), filepath.Join(dir, "hooks.log"),
		filepath.Join(dir, "registry"), filepath.Join(dir, "logs"), filepath.Join(dir, "runner"), cgroupRoot) + trainer
}
