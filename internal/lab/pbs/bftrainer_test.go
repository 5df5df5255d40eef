package pbs

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/internal/lab"
	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/store"
	"github.com/bftrainer/bftrainer/trainer/agent"
	"github.com/bftrainer/bftrainer/trainer/trainertest"
)

// contribBin is the bftrainer path contrib/pbs's files name; the test
// puts its own build there, changing nothing else.
const contribBin = "/usr/local/bin/bftrainer"

// install is bftrainer wired into the cell as contrib/pbs/README.md says:
// the reconciler a service on the server's host (`reconcile --watch`),
// the MoMs' hook or prologue calling the binary, exec Trainers through the
// local transport (every host of the cell is this machine).
type install struct {
	cell               *Cell
	dir, bin, config   string
	db, hooksLog, work string
	registry, tag      string
	// cgroups is the install's own cgroup subtree (trainer.cgroup_root),
	// removed at the end; "" where there is no cgroup2 mount.
	cgroups     string
	service     *exec.Cmd
	serviceLog  string
	serviceDone chan struct{}
	mu          sync.Mutex
	stray       []string // reconcile processes other than the service, seen while polling
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func newInstall(t *testing.T, c *Cell) *install {
	t.Helper()
	ctx := context.Background()
	dir := must[string](t)(os.MkdirTemp("", "bftpbs-bft."))
	shm, err := os.MkdirTemp("/dev/shm", "bftpbs.")
	if err != nil {
		shm = filepath.Join(dir, "run")
	}
	in := &install{cell: c, dir: dir, bin: filepath.Join(dir, "bin", "bftrainer"), config: filepath.Join(dir, "etc", "bftrainer.toml"),
		db: filepath.Join(dir, "db", "bftrainer.db"), hooksLog: filepath.Join(dir, "log", "hooks.log"), work: filepath.Join(dir, "work"),
		registry: filepath.Join(shm, "nodes"), tag: fmt.Sprintf("pb%d", os.Getpid()%10000), serviceLog: filepath.Join(dir, "log", "reconciler.log")}
	if m, err := agent.CgroupMount(); err == nil {
		in.cgroups = filepath.Join(m, "bftrainer-lab-"+in.tag)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("bftrainer:\n%s", in.debug(ctx))
		}
		// The cell first: no MoM may call the binary once its
		// configuration is gone.
		if err := c.Stop(ctx); err != nil {
			t.Error(err)
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
		os.RemoveAll(dir)
		os.RemoveAll(shm)
	})
	for _, d := range []string{filepath.Dir(in.bin), filepath.Dir(in.config), filepath.Dir(in.hooksLog), in.work, in.registry} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Now()
	build := exec.CommandContext(ctx, "go", "build", "-ldflags",
		lab.BuildFlags(filepath.Join(dir, "builtin"), in.config, filepath.Join(dir, "log", "fallback-hooks.log")), "-o", in.bin, "./cmd/bftrainer")
	build.Dir = trainertest.RepoRoot(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	t.Logf("bftrainer built in %v", time.Since(t0).Round(time.Millisecond))
	if err := os.WriteFile(in.config, []byte(in.configText()), 0o644); err != nil {
		t.Fatal(err)
	}
	// The service runs where a site's would: on the server's host.
	f := must[*os.File](t)(os.OpenFile(in.serviceLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644))
	defer f.Close()
	in.service = c.Command(context.Background(), Server, in.bin, "reconcile", "--watch", "--interval", "1s")
	in.service.Stdout, in.service.Stderr = f, f
	in.service.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := in.service.Start(); err != nil {
		t.Fatal(err)
	}
	in.serviceDone = make(chan struct{})
	go func() { in.service.Wait(); close(in.serviceDone) }()
	return in
}

func (in *install) configText() string {
	return fmt.Sprintf(`# Written by internal/lab/pbs for its test cell.
database = %q
spool = %q

[pool]
solver = "exact"
tfwd = 60.0

[hooks]
deadline = "2s"
log = %q
scheduler = "pbs"
# The reconciler is the service on the server's host: PBS's hooks run on
# the MoMs.
spawn_reconciler = "never"

[reconciler]
idle_wait = "60s"
poll = "200ms"
interval = "1s"

plan_every = "1s"
plan_lead = "10m"

[scheduler]
pbsnodes = %q
qstat = %q

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
`, in.db, filepath.Join(in.dir, "spool"), in.hooksLog, in.cell.Bin("pbsnodes"), in.cell.Bin("qstat"), in.registry, filepath.Join(in.dir, "log", "trainers"), filepath.Join(in.dir, "runner"), in.cgroups)
}

// run runs the CLI as root on the server's host.
func (in *install) run(ctx context.Context, args ...string) (string, error) {
	return in.cell.On(ctx, Server, in.bin, args...)
}

// stop kills the service and every process of the install (its binary,
// its Trainers' processes), by PID.
func (in *install) stop() error {
	if in.service != nil && in.service.Process != nil {
		in.service.Process.Kill()
		<-in.serviceDone
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var pids []int
		eachProc(func(pid int, env []byte) {
			exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
			if exe == in.bin || bytes.Contains(append([]byte{0}, env...), []byte("\x00BFTRAINER_RUN="+in.tag+"-")) {
				pids = append(pids, pid)
			}
		})
		if len(pids) == 0 {
			return nil
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

// eachProc calls fn with every live process's pid and environment.
func eachProc(fn func(pid int, env []byte)) {
	ents, _ := os.ReadDir("/proc")
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
}

// watchStray notes every live `bftrainer reconcile` other than the
// service (a reconciler a MoM's hook would have spawned, as root). A child
// the service has forked and not yet exec'd shares its binary and its
// command line: those (parent the service) are not strays.
func (in *install) watchStray() {
	eachProc(func(pid int, _ []byte) {
		if pid == in.service.Process.Pid || ppid(pid) == in.service.Process.Pid {
			return
		}
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if exe == in.bin && slices.Contains(strings.Split(string(cmd), "\x00"), "reconcile") {
			host, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/uts", pid))
			in.mu.Lock()
			in.stray = append(in.stray, fmt.Sprintf("pid %d (parent %d, %s): %q", pid, ppid(pid), host, cmd))
			in.mu.Unlock()
		}
	})
}

// ppid returns a process's parent's pid (0 when it is gone).
func ppid(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// pid (comm) S ppid …: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

// trainerProcs returns, per node, the live processes of the install's
// Trainers (BFTRAINER_RUN=TRAINER/NODE/NONCE).
func (in *install) trainerProcs() map[string]map[string][]int {
	out := map[string]map[string][]int{}
	eachProc(func(pid int, env []byte) {
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
	return out
}

func (in *install) events(ctx context.Context, f store.Filter) ([]store.Event, error) {
	return lab.Events(ctx, in.db, f)
}

// held returns the Trainer the pool lends a host to ("" for none).
func (in *install) held(ctx context.Context, host string) (string, error) {
	nodes, err := lab.PoolNodes(ctx, in.db)
	if err != nil {
		return "", err
	}
	if n := nodes[host]; n.State == pool.Idle {
		return n.Trainer, nil
	}
	return "", nil
}

// mismatch says how the cell, the pool and the Trainers' processes
// disagree ("" when they agree): a host pbsnodes shows free with no job
// is idle in the pool and the other way round; a host the pool lends to a
// Trainer runs that Trainer's processes only; another runs none.
func (in *install) mismatch(ctx context.Context) (string, error) {
	nodes, err := lab.PoolNodes(ctx, in.db)
	if err != nil {
		return "", err
	}
	idle, err := in.cell.IdleHosts(ctx)
	if err != nil {
		return "", err
	}
	procs := in.trainerProcs()
	return lab.Mismatch(in.cell.Hosts, nodes, idle, procs, "pbsnodes"), nil
}

// poll is lab.Poll that fails once the service has exited and watches for
// stray reconcilers.
func (in *install) poll(ctx context.Context, timeout time.Duration, cond func() (bool, error)) error {
	return lab.Poll(ctx, timeout, func() (bool, error) {
		in.watchStray()
		select {
		case <-in.serviceDone:
			return false, fmt.Errorf("the reconciler service exited: %v", in.service.ProcessState)
		default:
		}
		return cond()
	})
}

// waitAgree waits until mismatch is empty and the pool lends each of the
// held hosts to a Trainer.
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

func (in *install) debug(ctx context.Context) string {
	var b strings.Builder
	for _, f := range []string{in.hooksLog, in.serviceLog} {
		if l, err := os.ReadFile(f); err == nil {
			fmt.Fprintf(&b, "==> %s <==\n%s\n", f, tail(l, 40))
		}
	}
	if out, err := in.run(ctx, "history", "--limit", "60", "--format", "csv"); err == nil {
		fmt.Fprintf(&b, "==> bftrainer history --limit 60 <==\n%s", out)
	}
	if out, err := in.cell.On(ctx, Server, in.cell.Bin("pbsnodes"), "-a"); err == nil {
		fmt.Fprintf(&b, "==> pbsnodes -a <==\n%s", out)
	}
	return b.String()
}

func tail(b []byte, n int) string {
	l := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// jobEvents returns a main job's history by kind, hook calls by
// "hook CONTEXT".
func (in *install) jobEvents(ctx context.Context, job string) (map[string][]store.Event, error) {
	evs, err := in.events(ctx, store.Filter{Job: job})
	if err != nil {
		return nil, err
	}
	out := map[string][]store.Event{}
	for _, e := range evs {
		k := string(e.Kind)
		if e.Kind == store.KindHook {
			k += " " + e.Context
		}
		out[k] = append(out[k], e)
	}
	return out, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// hookScript is contrib/pbs's file with bin for contribBin.
func hookScript(t *testing.T, name, bin string) []byte {
	b := must[[]byte](t)(os.ReadFile(filepath.Join(trainertest.RepoRoot(t), "contrib", "pbs", name)))
	if n := bytes.Count(b, []byte(contribBin)); n != 1 {
		t.Fatalf("contrib/pbs/%s names %s %d times, want once", name, contribBin, n)
	}
	return bytes.ReplaceAll(b, []byte(contribBin), []byte(bin))
}

// importHook (re)imports the site hook, calling bin.
func (in *install) importHook(t *testing.T, ctx context.Context, bin string) {
	t.Helper()
	f := filepath.Join(in.dir, "bftrainer_hook.py")
	if err := os.WriteFile(f, hookScript(t, "bftrainer_hook.py", bin), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := in.cell.Qmgr(ctx, "import hook bftrainer application/x-python default "+f); err != nil {
		t.Fatal(err)
	}
}

// reclaim submits a held main job of n nodes and checks that the hook
// calls on its primary reclaimed all its nodes before its script ran:
// the script found no Trainer process on any of them. It logs the times.
func (in *install) reclaim(t *testing.T, ctx context.Context, n int, hookCtx string) (*Job, []string) {
	t.Helper()
	if err := in.waitAgree(ctx, 90*time.Second, in.cell.Hosts...); err != nil {
		t.Fatal(err)
	}
	j := must[*Job](t)(in.cell.Submit(ctx, fmt.Sprintf("main%d", n), n, true))
	t.Cleanup(func() { j.End() }) // a failed scenario leaves no job holding nodes
	r := must[lab.Report](t)(j.WaitChecked(ctx, 90*time.Second))
	var hosts []string
	for h := range r.Procs {
		hosts = append(hosts, h)
	}
	slices.Sort(hosts)
	if len(hosts) != n {
		t.Fatalf("job %s checked %v, want %d hosts", j.ID, hosts, n)
	}
	for _, h := range hosts {
		if p := r.Procs[h]; p != "none" {
			t.Errorf("job %s found Trainer processes on %s: %s", j.ID, h, p)
		}
	}
	evs := must[map[string][]store.Event](t)(in.jobEvents(ctx, j.ID))
	var hook store.Event
	for _, e := range evs["hook "+hookCtx] {
		if e.Error == "" && (hook.At.IsZero() || e.At.Before(hook.At)) {
			hook = e
		}
	}
	if hook.At.IsZero() {
		t.Fatalf("job %s: no %s hook call recorded (%v)", j.ID, hookCtx, keys(evs))
	}
	leave := evs[string(store.KindLeave)]
	if len(leave) != 1 || !slices.Equal(sorted(leave[0].Nodes), hosts) {
		t.Fatalf("job %s: leaves %+v, want one of %v", j.ID, leave, hosts)
	}
	killed := map[string]store.Event{}
	for _, k := range evs[string(store.KindKill)] {
		if k.Error != "" {
			t.Errorf("kill %+v", k)
		}
		if k.Value >= 1 {
			killed[k.Nodes[0]] = k
		}
	}
	for _, h := range hosts {
		k, ok := killed[h]
		if !ok {
			t.Errorf("job %s: nothing killed on %s (kills %+v)", j.ID, h, evs[string(store.KindKill)])
			continue
		}
		how := "the primary's own"
		if h != r.Host {
			how = "a sister, through its node agent"
		}
		t.Logf("%d-node job %s, %s on %s (%s): hook start to the Trainer's %d processes killed %.1f ms (the kill %.1f ms)",
			n, j.ID, hookCtx, h, how, int(k.Value), ms(k.At.Sub(hook.At)), k.Ms)
	}
	t.Logf("%d-node job %s: %s start to the job's first line %.0f ms; qsub to first line %.0f ms",
		n, j.ID, hookCtx, ms(r.First.Sub(hook.At)), ms(r.First.Sub(j.Submitted)))
	return j, hosts
}

// ret ends a job and checks that its nodes come back to Trainers after the
// release; clean, that the job found no Trainer process on them.
func (in *install) ret(t *testing.T, ctx context.Context, j *Job, hosts []string, hookCtx string, clean bool) {
	t.Helper()
	released := time.Now()
	if err := j.End(); err != nil {
		t.Fatal(err)
	}
	st := must[Status](t)(j.WaitFinished(ctx, 90*time.Second))
	if st.ExitStatus == nil || *st.ExitStatus != 0 || st.RunCount != 1 {
		t.Errorf("job %s ended %+v, want exit 0 after one run", j.ID, st)
	}
	if bad := must[lab.Report](t)(j.Report()).Abnormal(hosts); len(bad) > 0 && clean {
		t.Errorf("job %s: %v", j.ID, bad)
	}
	if err := in.waitAgree(ctx, 90*time.Second, hosts...); err != nil {
		t.Fatal(err)
	}
	evs := must[map[string][]store.Event](t)(in.jobEvents(ctx, j.ID))
	if len(evs[string(store.KindRelease)]) != 1 || len(evs["hook "+hookCtx]) == 0 {
		t.Fatalf("job %s: %d releases, %d %s calls; want one release", j.ID, len(evs[string(store.KindRelease)]), len(evs["hook "+hookCtx]), hookCtx)
	}
	t.Logf("job %s returned %v: %s released at +%.0f ms, Trainers back on all of them at +%.1f s (after the job's end)",
		j.ID, hosts, hookCtx, ms(evs[string(store.KindRelease)][0].At.Sub(released)), time.Since(released).Seconds())
}

func keys[V any](m map[string]V) []string {
	var k []string
	for s := range m {
		k = append(k, s)
	}
	slices.Sort(k)
	return k
}

func sorted(s []string) []string { s = slices.Clone(s); slices.Sort(s); return s }

// TestBftrainer starts a cell of three MoMs, wires bftrainer into it as
// contrib/pbs/README.md says (first the site hook, then mom_priv's
// prologue and epilogue) with one exec Trainer per host, and runs the
// scenarios: 1-node and 3-node main jobs reclaim their nodes before their
// scripts run, and give them back when done; `sync` repairs a missed
// event; a failing hook holds, requeues and offlines nothing; no MoM ever
// starts a reconciler.
func TestBftrainer(t *testing.T) {
	if err := Need(); err != nil {
		t.Skip(err)
	}
	ctx := context.Background()
	c, err := Start(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	})
	t.Logf("cell of %v (OpenPBS at %s) started in %v", c.Hosts, c.Exec, c.Started.Round(time.Millisecond))
	in := newInstall(t, c)
	out := must[string](t)(in.run(ctx, "sync", "--scheduler", "pbs"))
	if want := "joined 3 pbs[1-3]\n"; !strings.HasPrefix(out, want) {
		t.Fatalf("sync printed %q, want it to start with %q", out, want)
	}
	for _, s := range []string{"a", "b", "c"} {
		if _, err := in.run(ctx, "trainer", "submit", "--name", in.tag+"-"+s, "--launcher", "exec", "--min", "1", "--max", "1",
			"--curve", "1:10", "--workdir", in.work, "--", "/bin/sh", "-c", "sleep 100000 & exec sleep 100000"); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []string{"create hook bftrainer event='execjob_begin,execjob_epilogue'", "set hook bftrainer alarm=10", "set hook bftrainer fail_action=none"} {
		if err := c.Qmgr(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	in.importHook(t, ctx, in.bin)

	hookOK := t.Run("hook", func(t *testing.T) {
		t.Run("1-node", func(t *testing.T) {
			j, hosts := in.reclaim(t, ctx, 1, "execjob_begin")
			in.ret(t, ctx, j, hosts, "execjob_epilogue", true)
		})
		t.Run("3-node", func(t *testing.T) {
			j, hosts := in.reclaim(t, ctx, 3, "execjob_begin")
			in.ret(t, ctx, j, hosts, "execjob_epilogue", true)
		})
		// A missed event: the hook off for one job's start. The job runs
		// beside a Trainer the pool still lends; sync sees pbsnodes' busy
		// node and takes it back; the reconciler stops the Trainer there.
		t.Run("sync", func(t *testing.T) {
			if err := in.waitAgree(ctx, 90*time.Second, c.Hosts...); err != nil {
				t.Fatal(err)
			}
			if err := c.Qmgr(ctx, "set hook bftrainer enabled=false"); err != nil {
				t.Fatal(err)
			}
			j := must[*Job](t)(c.Submit(ctx, "missed", 1, true))
			t.Cleanup(func() { j.End() })
			r := must[lab.Report](t)(j.WaitChecked(ctx, 90*time.Second))
			if err := c.Qmgr(ctx, "set hook bftrainer enabled=true"); err != nil {
				t.Fatal(err)
			}
			d := must[string](t)(in.mismatch(ctx))
			if d == "" {
				t.Fatal("the pool agrees with pbsnodes: the event was not missed")
			}
			t.Logf("before sync: %s", d)
			out := must[string](t)(in.run(ctx, "sync", "--scheduler", "pbs"))
			if !strings.Contains(out, "left 1 "+r.Host+"\n") {
				t.Errorf("sync printed %q, want %s left", out, r.Host)
			}
			t0 := time.Now()
			if err := in.waitAgree(ctx, 60*time.Second); err != nil {
				t.Fatal(err)
			}
			t.Logf("after sync: the Trainer gone from %s in %.0f ms", r.Host, ms(time.Since(t0)))
			// The job found the Trainer: nothing reclaimed its node before sync.
			in.ret(t, ctx, j, []string{r.Host}, "execjob_epilogue", false)
		})
		// A failing hook (its bftrainer missing): the job runs once, is not
		// held, no node goes offline; its Trainer stays where it was.
		t.Run("failure", func(t *testing.T) {
			if err := in.waitAgree(ctx, 90*time.Second, c.Hosts...); err != nil {
				t.Fatal(err)
			}
			in.importHook(t, ctx, in.bin+".missing")
			defer in.importHook(t, ctx, in.bin)
			j := must[*Job](t)(c.Submit(ctx, "failing", 1, true))
			t.Cleanup(func() { j.End() })
			r := must[lab.Report](t)(j.WaitChecked(ctx, 90*time.Second))
			st := must[Status](t)(j.Status(ctx))
			if st.State != "R" || st.RunCount != 1 || st.HoldTypes != "n" {
				t.Errorf("job %s under a failing hook: %+v, want running, run once, no hold", j.ID, st)
			}
			for h, n := range must[map[string]Node](t)(c.Nodes(ctx)) {
				if strings.Contains(n.State, "offline") || strings.Contains(n.State, "down") {
					t.Errorf("node %s is %s", h, n.State)
				}
			}
			t.Logf("job %s under a failing hook: %s run_count %d Hold_Types %s; found on %s: %s (nothing reclaimed)", j.ID, st.State, st.RunCount, st.HoldTypes, r.Host, r.Procs[r.Host])
			if err := j.End(); err != nil {
				t.Fatal(err)
			}
			st = must[Status](t)(j.WaitFinished(ctx, 90*time.Second))
			if st.ExitStatus == nil || *st.ExitStatus != 0 || st.RunCount != 1 {
				t.Errorf("job %s ended %+v, want exit 0 after one run", j.ID, st)
			}
		})
	})

	// Wiring 2: no site hook; contrib/pbs/prologue as mom_priv/prologue,
	// linked as epilogue. OpenPBS runs it on the mother superior only: it
	// speaks for the whole job.
	t.Run("prologue", func(t *testing.T) {
		if !hookOK {
			t.Log("(after a failed hook subtest)")
		}
		if err := c.Qmgr(ctx, "delete hook bftrainer"); err != nil {
			t.Fatal(err)
		}
		script := hookScript(t, "prologue", in.bin)
		for _, h := range c.Hosts {
			p := filepath.Join(c.Home(h), "mom_priv", "prologue")
			if err := os.WriteFile(p, script, 0o500); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("prologue", filepath.Join(c.Home(h), "mom_priv", "epilogue")); err != nil {
				t.Fatal(err)
			}
		}
		j, hosts := in.reclaim(t, ctx, 3, "prologue")
		in.ret(t, ctx, j, hosts, "epilogue", true)
	})

	// The plan: under strict ordering, job B (3 nodes, exclusive) queues
	// behind job A (1 node, exclusive, walltime 3 minutes); PBS estimates
	// B's start at A's end on all three nodes. With a 10-minute lead the
	// reconciler (reading qstat every second) moves the Trainers off B's
	// two idle nodes at once and lends them to no one; when A ends, B starts
	// and finds nothing of them, its prologue kills nothing, and those
	// Trainers are never preempted.
	t.Run("plan", func(t *testing.T) {
		if err := in.waitAgree(ctx, 90*time.Second, c.Hosts...); err != nil {
			t.Fatal(err)
		}
		if err := c.strictOrdering(); err != nil {
			t.Fatal(err)
		}
		a := must[*Job](t)(c.Submit(ctx, "first", 1, true, "place=scatter:excl", "walltime=00:03:00"))
		t.Cleanup(func() { a.End() })
		ra := must[lab.Report](t)(a.WaitChecked(ctx, 90*time.Second))
		var others []string
		for _, h := range c.Hosts {
			if h != ra.Host {
				others = append(others, h)
			}
		}
		if err := in.waitAgree(ctx, 90*time.Second, others...); err != nil {
			t.Fatal(err)
		}
		lent := map[string]string{}
		for _, h := range others {
			lent[h] = must[string](t)(in.held(ctx, h))
		}
		b := must[*Job](t)(c.Submit(ctx, "planned", 3, true, "place=scatter:excl", "walltime=00:05:00"))
		t.Cleanup(func() { b.End() })
		var moves []store.Event
		if err := in.poll(ctx, 60*time.Second, func() (bool, error) {
			var err error
			moves, err = in.events(ctx, store.Filter{Kinds: []store.Kind{store.KindMove}, Job: b.ID})
			var moved []string
			for _, m := range moves {
				moved = append(moved, m.Nodes...)
			}
			return slices.Equal(sorted(moved), others), err
		}); err != nil {
			out, _ := c.On(ctx, Server, "env", "TZ=UTC", c.Bin("qstat"), "-T")
			t.Fatalf("no moves off %v for job %s (%+v): %v\n%s", others, b.ID, moves, err, out)
		}
		// What the reconciler read: B's estimate, through hooks.PBSPlan.
		checkEstimate(t, ctx, c, a.ID, b.ID, 3, 3*time.Minute, 5*time.Minute)
		for _, m := range moves {
			if m.Trainer != lent[m.Nodes[0]] {
				t.Errorf("move of %s off %v, the node was lent to %s", m.Trainer, m.Nodes, lent[m.Nodes[0]])
			}
			t.Logf("move: %s off %v for job %s, %.1f s after its qsub", m.Trainer, m.Nodes, b.ID, m.At.Sub(b.Submitted).Seconds())
		}
		if err := in.poll(ctx, 60*time.Second, func() (bool, error) {
			procs := in.trainerProcs()
			for _, h := range others {
				if held, err := in.held(ctx, h); err != nil || held != "" || len(procs[h]) > 0 {
					return false, err
				}
			}
			return true, nil
		}); err != nil {
			t.Fatalf("the Trainers are not off %v after their moves: %v", others, err)
		}
		if err := a.End(); err != nil {
			t.Fatal(err)
		}
		rb := must[lab.Report](t)(b.WaitChecked(ctx, 90*time.Second))
		for _, h := range c.Hosts {
			if p := rb.Procs[h]; p != "none" {
				t.Errorf("job %s found Trainer processes on %s: %s", b.ID, h, p)
			}
		}
		for _, k := range must[[]store.Event](t)(in.events(ctx, store.Filter{Kinds: []store.Kind{store.KindKill}, Job: b.ID})) {
			if k.Value > 0 && k.Nodes[0] != ra.Host {
				t.Errorf("job %s's prologue killed %v processes on %v: want nothing left there", b.ID, k.Value, k.Nodes)
			}
		}
		for _, h := range others {
			if pre := must[[]store.Event](t)(in.events(ctx, store.Filter{Kinds: []store.Kind{store.KindPreempt}, Trainer: lent[h], Since: b.Submitted})); len(pre) > 0 {
				t.Errorf("%s was preempted (%d rows): want only the move", lent[h], len(pre))
			}
		}
		t.Logf("job %s began %.1f s after the last move (A ended early: the plan assumed its 3-minute walltime)", b.ID, rb.First.Sub(moves[len(moves)-1].At).Seconds())
		in.ret(t, ctx, b, c.Hosts, "epilogue", true)
	})

	if l, err := os.ReadFile(in.hooksLog); err == nil && len(l) > 0 {
		// The failing hook's calls log nothing (its binary is missing).
		t.Errorf("the hooks logged:\n%s", l)
	}
	for _, e := range must[[]store.Event](t)(in.events(ctx, store.Filter{Kinds: []store.Kind{store.KindError}})) {
		t.Errorf("error recorded: %s %s %s", e.Source, e.Context, e.Error)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.stray) > 0 {
		t.Errorf("reconcilers other than the service ran: %v", in.stray)
	}
}
