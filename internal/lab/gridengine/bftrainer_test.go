package gridengine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/internal/lab"
	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/sidecar"
	"github.com/bftrainer/bftrainer/store"
	"github.com/bftrainer/bftrainer/trainer/agent"
	"github.com/bftrainer/bftrainer/trainer/trainertest"
)

// install is bftrainer wired into the cell as a site would wire it
// (contrib/gridengine): the binary as the queue's prolog and epilog, run as
// root on the job's master host; the reconciler as a service on the
// qmaster's host (`reconcile --watch`); exec Trainers started through the
// local transport (every host of the cell is this machine). Everything of
// it is below one temporary directory, and its registry below /dev/shm
// (tmpfs, as /run/bftrainer is on a site).
type install struct {
	cell     *Cell
	dir      string
	bin      string
	config   string
	db       string
	hooksLog string
	registry string
	work     string
	tag      string // every Trainer's name starts with it
	// cgroups is the install's own cgroup subtree (trainer.cgroup_root),
	// removed at the end; "" where there is no cgroup2 mount.
	cgroups string
	service *service
	// planLead, when set, has the reconciler read the scheduler's plan
	// (the cell's schedule file, every second) and move Trainers off
	// hosts reserved within it.
	planLead time.Duration
}

// hookLine is the queue's prolog or epilog line for context, as
// contrib/gridengine/README.md gives it.
func (in *install) hookLine(context string) string {
	return in.bin + " hook gridengine " + context + " $host $job_id $job_owner"
}

// newInstall builds bftrainer with its configuration's path compiled in
// (Grid Engine passes its hooks no environment of ours), writes the
// configuration, makes it the queue's prolog and epilog and starts the
// reconciler service. Cleanup stops the service and kills every process
// of the install, and gives the queue back the recorder's hooks.
func newInstall(t *testing.T, c *Cell, rec *Recorder, opts ...func(*install)) *install {
	t.Helper()
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "bftge-bft.")
	if err != nil {
		t.Fatal(err)
	}
	shm, err := os.MkdirTemp("/dev/shm", "bftge.")
	if err != nil {
		shm = filepath.Join(dir, "run")
	}
	in := &install{cell: c, dir: dir, bin: filepath.Join(dir, "bin", "bftrainer"), config: filepath.Join(dir, "etc", "bftrainer.toml"),
		db: filepath.Join(dir, "db", "bftrainer.db"), hooksLog: filepath.Join(dir, "log", "hooks.log"),
		registry: filepath.Join(shm, "nodes"), work: filepath.Join(dir, "work"), tag: fmt.Sprintf("ge%d", os.Getpid()%10000)}
	if m, err := agent.CgroupMount(); err == nil {
		in.cgroups = filepath.Join(m, "bftrainer-lab-"+in.tag)
	}
	for _, o := range opts {
		o(in)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("bftrainer:\n%s", in.debug(ctx))
		}
		if err := in.stop(); err != nil {
			t.Error(err)
		}
		if _, err := os.Stat(in.cgroups); in.cgroups != "" && err == nil {
			cg, err := agent.OpenCgroups(in.cgroups)
			if err == nil {
				err = cg.RemoveAll(10 * time.Second)
			}
			if err != nil {
				t.Error(err)
			}
		}
		if err := c.SetHooks(ctx, rec.Command("prolog"), rec.Command("epilog")); err != nil {
			t.Error(err)
		}
		os.RemoveAll(dir)
		os.RemoveAll(shm)
	})
	for _, d := range []string{filepath.Dir(in.bin), filepath.Dir(in.config), in.work, in.registry} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Now()
	build := exec.CommandContext(ctx, "go", "build", "-ldflags",
		lab.BuildFlags(filepath.Join(dir, "builtin"), in.config, filepath.Join(dir, "log", "fallback-hooks.log")),
		"-o", in.bin, "./cmd/bftrainer")
	build.Dir = trainertest.RepoRoot(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	t.Logf("bftrainer built in %v", time.Since(t0).Round(time.Millisecond))
	if err := os.WriteFile(in.config, []byte(in.configText()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.SetHooks(ctx, in.hookLine("prolog"), in.hookLine("epilog")); err != nil {
		t.Fatal(err)
	}
	// The service runs where the site's would, on the qmaster's host (its
	// qhost reaches the qmaster there).
	svc, err := startService(c.Command(context.Background(), in.bin, "reconcile", "--watch", "--interval", "1s"),
		filepath.Join(dir, "log", "reconciler.log"))
	if err != nil {
		t.Fatal(err)
	}
	in.service = svc
	return in
}

func (in *install) configText() string {
	plan, schedule := "", ""
	if in.planLead > 0 {
		plan = fmt.Sprintf("plan_every = \"1s\"\nplan_lead = %q\n", in.planLead.String())
		schedule = fmt.Sprintf("schedule = %q\n", in.cell.ScheduleFile())
	}
	return fmt.Sprintf(`# Written by internal/lab/gridengine for its test cell.
database = %q
spool = %q

[pool]
solver = "exact"
tfwd = 60.0

[hooks]
deadline = "2s"
log = %q
scheduler = "gridengine"
# The reconciler is the service on the qmaster's host: Grid Engine's hooks
# run on compute nodes.
spawn_reconciler = "never"

[reconciler]
idle_wait = "60s"
poll = "200ms"
interval = "1s"
%s
[scheduler]
qhost = "/usr/bin/qhost"
qacct = "/usr/bin/qacct"
%s
[trainer]
transport = "local"
registry = %q
log_dir = %q
state_dir = %q
controller = "127.0.0.1"
command_timeout = "30s"
kill_wait = "5s"
cgroup_root = %q
allow_root_owner = true
`, in.db, filepath.Join(in.dir, "spool"), in.hooksLog, plan, schedule, in.registry, filepath.Join(in.dir, "log", "trainers"), filepath.Join(in.dir, "runner"), in.cgroups)
}

// run runs the CLI as root on the qmaster's host.
func (in *install) run(ctx context.Context, args ...string) (string, error) {
	return in.cell.Output(ctx, in.bin, args...)
}

// stop kills the service and then, by PID, every process of the install:
// its binary (node agents, supervisors) and its Trainers' processes.
func (in *install) stop() error {
	if in.service != nil {
		if err := in.service.kill(); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids, err := in.procs()
		if err != nil || len(pids) == 0 {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes of bftrainer survived SIGKILL: %v", pids)
		}
		for _, p := range pids {
			syscall.Kill(p, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// procs returns the live processes of the install: its binary, and every
// process whose run token names one of its Trainers.
func (in *install) procs() ([]int, error) {
	var pids []int
	err := eachProc(func(pid int, env []byte) {
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if exe == in.bin || bytes.Contains(env, []byte("\x00BFTRAINER_RUN="+in.tag+"-")) || bytes.HasPrefix(env, []byte("BFTRAINER_RUN="+in.tag+"-")) {
			pids = append(pids, pid)
		}
	})
	return pids, err
}

// trainerProcs returns, per node, the live processes whose run token
// (BFTRAINER_RUN=TRAINER/NODE/NONCE) names one of the install's Trainers.
func (in *install) trainerProcs() (map[string]map[string][]int, error) {
	out := map[string]map[string][]int{} // node → Trainer → pids
	err := eachProc(func(pid int, env []byte) {
		for _, kv := range bytes.Split(env, []byte{0}) {
			v, ok := bytes.CutPrefix(kv, []byte("BFTRAINER_RUN="))
			if !ok {
				continue
			}
			f := strings.Split(string(v), "/")
			if len(f) != 3 || !strings.HasPrefix(f[0], in.tag+"-") {
				return
			}
			if out[f[1]] == nil {
				out[f[1]] = map[string][]int{}
			}
			out[f[1]][f[0]] = append(out[f[1]][f[0]], pid)
			return
		}
	})
	return out, err
}

// eachProc calls fn with every live process's pid and environment.
func eachProc(fn func(pid int, env []byte)) error {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return err
	}
	self := os.Getpid()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self || pid == 1 {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || zombie(pid) {
			continue
		}
		fn(pid, env)
	}
	return nil
}

func (in *install) events(ctx context.Context, f store.Filter) ([]store.Event, error) {
	return lab.Events(ctx, in.db, f)
}

// poolNodes returns the pool's nodes as the last round saved them.
func (in *install) poolNodes(ctx context.Context) (map[string]pool.Node, error) {
	return lab.PoolNodes(ctx, in.db)
}

// submitSleeper submits an exec Trainer of one node whose program is a
// small process tree (a shell and two sleeps): cheap, and real to kill.
func (in *install) submitSleeper(ctx context.Context, short string) (string, error) {
	name := in.tag + "-" + short
	_, err := in.run(ctx, "trainer", "submit", "--name", name, "--launcher", "exec", "--min", "1", "--max", "1",
		"--curve", "1:10", "--workdir", in.work, "--", "/bin/sh", "-c", "sleep 100000 & exec sleep 100000")
	return name, err
}

// mismatch describes how the cell's hosts, the pool and the Trainers'
// processes disagree: every host qhost says is exactly idle must be idle
// in the pool, and the other way round; a host the pool lends to a
// Trainer runs that Trainer's processes and no other's; a host it does not
// lend runs none. "" when they agree.
func (in *install) mismatch(ctx context.Context) (string, error) {
	nodes, err := in.poolNodes(ctx)
	if err != nil {
		return "", err
	}
	idle, err := in.cell.IdleHosts(ctx)
	if err != nil {
		return "", err
	}
	procs, err := in.trainerProcs()
	if err != nil {
		return "", err
	}
	return lab.Mismatch(in.cell.Hosts, nodes, idle, procs, "qhost"), nil
}

// poll is lab.Poll for a state the reconciler service brings about: its
// error says when the service has exited (its log is in the failure's
// dump).
func (in *install) poll(ctx context.Context, timeout time.Duration, cond func() (bool, error)) error {
	return lab.Poll(ctx, timeout, func() (bool, error) {
		if in.service != nil && !in.service.running() {
			return false, fmt.Errorf("the reconciler service exited: %v", in.service.err)
		}
		return cond()
	})
}

// waitAgree waits, at most timeout, until mismatch is empty and the pool
// lends each of the held hosts to a Trainer. (An idle host that no round
// has given a Trainer yet agrees too: a scenario that needs a Trainer
// there names the host, or it would race the reconciler's next round.)
func (in *install) waitAgree(ctx context.Context, timeout time.Duration, held ...string) error {
	var last string
	err := in.poll(ctx, timeout, func() (bool, error) {
		d, err := in.mismatch(ctx)
		if err != nil {
			return false, err
		}
		for _, h := range held {
			if tr, err := in.held(ctx, h); err != nil || tr == "" {
				d = strings.TrimPrefix(d+"; "+h+": no Trainer yet", "; ")
			}
		}
		last = d
		return d == "", nil
	})
	if err != nil {
		return fmt.Errorf("the cell, the pool and the Trainers disagree (%s): %w", last, err)
	}
	return nil
}

// held returns the Trainer the pool lends a host to ("" for none).
func (in *install) held(ctx context.Context, host string) (string, error) {
	nodes, err := in.poolNodes(ctx)
	if err != nil {
		return "", err
	}
	if n := nodes[host]; n.State == pool.Idle {
		return n.Trainer, nil
	}
	return "", nil
}

// debug is what a failed scenario needs: the hooks' log, the history.
func (in *install) debug(ctx context.Context) string {
	var b strings.Builder
	if l, err := os.ReadFile(in.hooksLog); err == nil {
		fmt.Fprintf(&b, "==> %s <==\n%s\n", in.hooksLog, l)
	}
	if out, err := in.run(ctx, "history", "--limit", "60", "--format", "csv"); err == nil {
		fmt.Fprintf(&b, "==> bftrainer history --limit 60 <==\n%s", out)
	}
	if out, err := in.run(ctx, "status"); err == nil {
		fmt.Fprintf(&b, "==> bftrainer status <==\n%s", out)
	}
	if in.service != nil {
		b.WriteString(in.service.report())
	}
	return b.String()
}

// jobEvents returns the history of one main job, by kind; the hooks'
// calls by context.
func (in *install) jobEvents(ctx context.Context, job string) (map[store.Kind][]store.Event, error) {
	evs, err := in.events(ctx, store.Filter{Job: job})
	if err != nil {
		return nil, err
	}
	out := map[store.Kind][]store.Event{}
	for _, e := range evs {
		k := e.Kind
		if k == store.KindHook {
			k += store.Kind(" " + e.Context)
		}
		out[k] = append(out[k], e)
	}
	return out, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// containment is how a kill found the processes, from its report.
func containment(kill store.Event) string {
	var rep struct {
		Containment string `json:"containment"`
	}
	if json.Unmarshal(kill.Detail, &rep) != nil || rep.Containment == "" {
		return "unknown"
	}
	return rep.Containment
}

// auditTolerance is TestBftrainer's audit's --tolerance: Grid Engine's
// start_time is the job's dispatch, before its prolog runs (measured on
// this cell with both cores saturated: the prolog up to 1.03 s after the
// whole-second start, docs/history.md); 5 s keeps a clean job clean on a
// loaded CI machine.
const auditTolerance = 5 * time.Second

// TestBftrainer wires bftrainer into the cell and runs its scenarios in
// order on one exec Trainer per host: a main job reclaims a Trainer's
// host, the finished job returns it, a 2-host job reclaims both hosts from
// its master host's prolog alone, sync repairs a missed prolog, and the
// audit against qacct and qstat finds that missed prolog and nothing else.
func TestBftrainer(t *testing.T) {
	c, rec := cell(t)
	ctx := context.Background()
	t.Logf("cell started in %v", c.Started.Round(time.Millisecond))
	began := time.Now()
	in := newInstall(t, c, rec)
	out, err := in.run(ctx, "sync", "--scheduler", "gridengine")
	if err != nil {
		t.Fatal(err)
	}
	if want := "joined 2 gel[1-2]\n"; !strings.HasPrefix(out, want) {
		t.Fatalf("sync printed %q, want it to start with %q", out, want)
	}
	for _, s := range []string{"a", "b"} {
		if _, err := in.submitSleeper(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if err := in.waitAgree(ctx, time.Minute, c.Hosts...); err != nil {
		t.Fatal(err)
	}

	// 1. Reclaim: a main job on gel2; its prolog (on gel2, the job's master
	// and only host) kills the Trainer there before the job starts.
	var main, wide, missed *Job
	host := c.Hosts[1]
	reclaimed := t.Run("1-reclaim", func(t *testing.T) {
		tr := must[string](t)(in.held(ctx, host))
		if tr == "" {
			t.Fatalf("no Trainer on %s to reclaim", host)
		}
		main = must[*Job](t)(c.Submit(ctx, JobSpec{Name: "main", Hosts: []string{host}, Held: true}))
		r := must[lab.Report](t)(main.WaitChecked(ctx, time.Minute))
		if p := r.Procs[host]; p != "none" {
			t.Errorf("the main job found Trainer processes on %s: %s", host, p)
		}
		evs := must[map[store.Kind][]store.Event](t)(in.jobEvents(ctx, main.ID))
		pro, leave, kills := evs["hook prolog"], evs[store.KindLeave], evs[store.KindKill]
		if len(pro) != 1 || len(leave) != 1 || !slices.Equal(leave[0].Nodes, []string{host}) {
			t.Fatalf("job %s: prolog %d, leave %v; want one prolog, one leave of %s", main.ID, len(pro), leave, host)
		}
		if len(kills) != 1 || kills[0].Value < 1 || kills[0].Error != "" || !slices.Equal(kills[0].Nodes, []string{host}) {
			t.Fatalf("job %s: kills %+v, want one kill on %s", main.ID, kills, host)
		}
		t.Logf("reclaim on %s (job %s): prolog start to the Trainer's processes gone %.1f ms (the kill itself %.1f ms, containment %s); prolog start to the job's first line %.0f ms; qsub to first line %.0f ms",
			host, main.ID, ms(kills[0].At.Sub(pro[0].At)), kills[0].Ms, containment(kills[0]), ms(r.First.Sub(pro[0].At)), ms(r.First.Sub(main.Submitted)))
		if p := must[map[string]map[string][]int](t)(in.trainerProcs())[host]; len(p) > 0 {
			t.Errorf("Trainer processes came back on %s while the main job holds it: %v", host, p)
		}
		// The service folds the leave at its next round: the pool stops
		// lending the host (nothing was left to stop there).
		if err := in.poll(ctx, 30*time.Second, func() (bool, error) {
			got, err := in.held(ctx, host)
			return got == "", err
		}); err != nil {
			t.Errorf("the pool still lends %s to %s: %v", host, tr, err)
		}
	})

	// 2. Return: the job ends; its epilog releases the host, which joins
	// once qhost says it is exactly idle; the Trainer grows back onto it.
	t.Run("2-return", func(t *testing.T) {
		if !reclaimed {
			t.Skip("needs 1-reclaim")
		}
		released := time.Now()
		if err := main.Release(); err != nil {
			t.Fatal(err)
		}
		recs := must[[]Record](t)(main.WaitEnded(ctx, time.Minute))
		if bad := Normal(recs, must[lab.Report](t)(main.Report()), []string{host}); bad != "" {
			t.Errorf("main job %s: %s", main.ID, bad)
		}
		if err := in.waitAgree(ctx, time.Minute, host); err != nil {
			t.Fatal(err)
		}
		if must[string](t)(in.held(ctx, host)) == "" {
			t.Fatalf("%s joined but no Trainer grew back onto it", host)
		}
		evs := must[map[store.Kind][]store.Event](t)(in.jobEvents(ctx, main.ID))
		epi := evs["hook epilog"]
		if len(epi) != 1 || len(evs[store.KindRelease]) != 1 {
			t.Fatalf("job %s: %d epilogs, %d releases recorded; want one each", main.ID, len(epi), len(evs[store.KindRelease]))
		}
		end := epi[0].At.Add(time.Duration(epi[0].Ms * float64(time.Millisecond)))
		n := must[map[string]pool.Node](t)(in.poolNodes(ctx))[host]
		if n.Since.Before(end) {
			t.Errorf("%s joined at %s, before its epilog ended at %s", host, n.Since.Format("15:04:05.000"), end.Format("15:04:05.000"))
		}
		t.Logf("return of %s: epilog ended %.0f ms after the release, the host idle in the pool %.0f ms after the epilog, the Trainer back on it %.1f s after the release",
			host, ms(end.Sub(released)), ms(n.Since.Sub(end)), time.Since(released).Seconds())
	})

	// 3. A 2-host job: Grid Engine runs its prolog on the master host only.
	// That one call kills on both hosts — its own from the local registry,
	// the other through its node agent — before the job starts, so the job
	// finds nothing of ours anywhere. The reconciler's round, which would
	// be the only reclaim otherwise, comes later: its times are logged.
	t.Run("3-parallel", func(t *testing.T) {
		if err := in.waitAgree(ctx, time.Minute, c.Hosts...); err != nil {
			t.Fatal(err)
		}
		j := must[*Job](t)(c.Submit(ctx, JobSpec{Name: "wide", Hosts: c.Hosts, Held: true}))
		wide = j
		r := must[lab.Report](t)(j.WaitChecked(ctx, time.Minute))
		for _, h := range c.Hosts {
			if p := r.Procs[h]; p != "none" {
				t.Errorf("the 2-host job found Trainer processes on %s: %s", h, p)
			}
		}
		evs := must[map[store.Kind][]store.Event](t)(in.jobEvents(ctx, j.ID))
		pro := evs["hook prolog"]
		if len(pro) != 1 || !slices.Equal(pro[0].Nodes, c.Hosts) {
			t.Fatalf("job %s: prolog calls %+v, want one naming %v", j.ID, pro, c.Hosts)
		}
		killed := map[string]store.Event{}
		for _, k := range evs[store.KindKill] {
			if k.Error != "" || k.Value < 1 {
				t.Errorf("kill %+v", k)
			}
			killed[k.Nodes[0]] = k
		}
		for i, h := range c.Hosts {
			k, ok := killed[h]
			if !ok {
				t.Errorf("the prolog on %s killed nothing on %s", c.Hosts[0], h)
				continue
			}
			how := "from the local registry"
			if i > 0 {
				how = "through its node agent"
			}
			t.Logf("2-host job %s: %s (%s): prolog start to the Trainer's processes gone %.1f ms (the kill %.1f ms, containment %s)",
				j.ID, h, how, ms(k.At.Sub(pro[0].At)), k.Ms, containment(k))
		}
		t.Logf("2-host job %s: prolog start to the job's first line %.0f ms", j.ID, ms(r.First.Sub(pro[0].At)))
		// What the reconciler alone would have taken on the slave host
		// (the service's round after the prolog, its runner's action
		// there): it finds the launch already gone.
		if err := in.poll(ctx, 30*time.Second, func() (bool, error) {
			acts, err := in.events(ctx, store.Filter{Since: pro[0].At, Kinds: []store.Kind{store.KindAction}, Node: c.Hosts[1]})
			if err != nil || len(acts) == 0 {
				return false, err
			}
			t.Logf("2-host job %s: the reconciler's runner on %s (%s) at prolog start +%.0f ms (service interval 1 s)",
				j.ID, c.Hosts[1], acts[0].Context, ms(acts[0].At.Sub(pro[0].At)))
			return true, nil
		}); err != nil {
			t.Errorf("the reconciler never acted on %s after the reclaim: %v", c.Hosts[1], err)
		}
		if err := j.Release(); err != nil {
			t.Fatal(err)
		}
		recs := must[[]Record](t)(j.WaitEnded(ctx, time.Minute))
		if bad := Normal(recs, must[lab.Report](t)(j.Report()), c.Hosts); bad != "" {
			t.Errorf("2-host job %s: %s", j.ID, bad)
		}
		// The epilog lifted both hosts' fences: the Trainers grow back.
		if err := in.waitAgree(ctx, time.Minute, c.Hosts...); err != nil {
			t.Fatal(err)
		}
		for _, h := range c.Hosts {
			if must[string](t)(in.held(ctx, h)) == "" {
				t.Errorf("no Trainer grew back onto %s", h)
			}
		}
	})

	// 4. A missed prolog (the queue's prolog off for one job): the job
	// runs beside the Trainer, and the pool still lends the host. `sync`
	// sees qhost's busy host and takes it: the reconciler stops the
	// Trainer there. The epilog, back on, returns it.
	t.Run("4-sync", func(t *testing.T) {
		if err := in.waitAgree(ctx, time.Minute, c.Hosts...); err != nil {
			t.Fatal(err)
		}
		h := c.Hosts[0]
		if err := c.SetHooks(ctx, "", in.hookLine("epilog")); err != nil {
			t.Fatal(err)
		}
		j := must[*Job](t)(c.Submit(ctx, JobSpec{Name: "missed", Hosts: []string{h}, Held: true}))
		missed = j
		r := must[lab.Report](t)(j.WaitChecked(ctx, time.Minute))
		if err := c.SetHooks(ctx, in.hookLine("prolog"), in.hookLine("epilog")); err != nil {
			t.Fatal(err)
		}
		// The pool lends the host past the job's start by more than the
		// audit's tolerance (5 s below; qacct's start is whole seconds,
		// and before the job's first line): the audit (5) must find the
		// late leave the missed prolog left.
		time.Sleep(time.Until(r.First.Add(auditTolerance + time.Second)))
		d := must[string](t)(in.mismatch(ctx))
		if d == "" {
			t.Fatal("the pool agrees with qhost: the missed prolog was not missed")
		}
		t.Logf("before sync: %s", d)
		out := must[string](t)(in.run(ctx, "sync", "--scheduler", "gridengine"))
		if !strings.HasPrefix(out, "joined 0 \nleft 1 "+h+"\n") {
			t.Errorf("sync printed %q, want %s left", out, h)
		}
		if err := in.waitAgree(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := j.Release(); err != nil {
			t.Fatal(err)
		}
		must[[]Record](t)(j.WaitEnded(ctx, time.Minute))
		if err := in.waitAgree(ctx, time.Minute, h); err != nil {
			t.Fatal(err)
		}
		if must[string](t)(in.held(ctx, h)) == "" {
			t.Errorf("no Trainer grew back onto %s", h)
		}
	})

	// 5. The audit, against Grid Engine's own accounting: qacct for the
	// ended jobs, qstat for a 2-host job still running (qacct lists a job
	// once it ended). The jobs of 1 and 3 and the running one are clean;
	// the job of 4, whose prolog was off, ran beside a Trainer on a host
	// the pool had not left by its start.
	t.Run("5-audit", func(t *testing.T) {
		if missed == nil || main == nil || wide == nil {
			t.Skip("needs 1-reclaim, 3-parallel and 4-sync")
		}
		if err := in.waitAgree(ctx, time.Minute, c.Hosts...); err != nil {
			t.Fatal(err)
		}
		running := must[*Job](t)(c.Submit(ctx, JobSpec{Name: "running", Hosts: c.Hosts, Held: true}))
		must[lab.Report](t)(running.WaitChecked(ctx, time.Minute))
		defer func() {
			if err := running.Release(); err == nil {
				running.WaitEnded(ctx, time.Minute)
			}
		}()
		cmd := c.Command(ctx, in.bin, "audit", "--since", began.Format(time.RFC3339Nano), "--tolerance", auditTolerance.String(), "--format", "json")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Fatalf("audit: %v, want exit status 1 (the missed prolog):\n%s%s", err, stdout.String(), stderr.String())
		}
		t.Logf("audit: %s", strings.TrimSpace(stderr.String()))
		var r struct {
			Jobs       int                      `json:"jobs"`
			Checked    int                      `json:"jobs_on_pool"`
			Nodes      int                      `json:"pool_nodes"`
			Violations []sidecar.AuditViolation `json:"violations"`
		}
		if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
			t.Fatalf("audit --format json: %v:\n%s", err, stdout.String())
		}
		if r.Jobs != 4 || r.Checked != 4 || r.Nodes != 2 {
			t.Errorf("audit checked %d jobs, %d on the pool's %d nodes; want jobs %s, %s, %s and %s (running), 4 on 2",
				r.Jobs, r.Checked, r.Nodes, main.ID, wide.ID, missed.ID, running.ID)
		}
		late := false
		for _, v := range r.Violations {
			if v.Job != missed.ID || v.Node != c.Hosts[0] {
				t.Errorf("violation %+v: want only job %s's, on %s", v, missed.ID, c.Hosts[0])
			}
			late = late || v.Kind == sidecar.AuditLateLeave
		}
		if !late {
			t.Errorf("no %s for job %s: %+v", sidecar.AuditLateLeave, missed.ID, r.Violations)
		}
		t.Logf("audit: %d violation(s) (job %s had its prolog off): %+v", len(r.Violations), missed.ID, r.Violations)
	})

	// Nothing was swallowed on the way: no hook logged an error, and none
	// recorded one.
	if l, err := os.ReadFile(in.hooksLog); err == nil && len(l) > 0 {
		t.Errorf("the hooks logged:\n%s", l)
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Error(err)
	}
	errs := must[[]store.Event](t)(in.events(ctx, store.Filter{Kinds: []store.Kind{store.KindError}}))
	for _, e := range errs {
		t.Errorf("error recorded: %s %s %s", e.Source, e.Context, e.Error)
	}
}
