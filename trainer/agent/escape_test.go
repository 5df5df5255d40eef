package agent_test

import (
	"context"
	"errors"
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

// escapeLaunch is a launch of an escape's program as u.
func escapeLaunch(a trainertest.Agent, u trainertest.User, e trainertest.Escape, dir string) wire.Launch {
	return wire.Launch{Trainer: "esc", Node: a.N("n1"), Owner: u.Name, Run: "ab", Argv: []string{"/bin/sh", "-c", e.Program()},
		Env: map[string]string{"ESC_DIR": dir}, Workdir: "/", Token: wire.NewToken("esc", a.N("n1")).String()}
}

// reclaim is the node prolog's kill. Its bound is the agent's own wait
// (KillWait, 5 s), not a hook's 2 s deadline: these tests are about what
// the kill finds, and a test machine running other suites at once (a
// load of 12 on two cores has kept 300 processes with 1.9 MB
// environments from being scanned, killed and gone within 2 s) must not
// turn a slow kill into a survivor. The kill's time is printed, not
// asserted; the hook's deadline is sidecar's, tested there.
func reclaim(tb testing.TB, a trainertest.Agent) (wire.KillReport, error) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return a.KillAll(ctx, a.N("n1"), true)
}

// nothingLeft fails the test if any process of the escape, or of its
// owner, runs.
func nothingLeft(tb testing.TB, u trainertest.User, pids []int, rep wire.KillReport) {
	tb.Helper()
	if left := trainertest.Alive(pids); len(left) > 0 {
		tb.Fatalf("the escape's pids %v survived the reclaim: %s", left, rep)
	}
	if left := trainertest.UIDProcs(u.UID); len(left) > 0 {
		tb.Fatalf("processes of the Trainer's owner survived the reclaim: %v: %s", left, rep)
	}
}

// checkMode checks what the report says of its containment: cgroup and
// clean, or degraded, not clean, saying what may escape.
func checkMode(tb testing.TB, a trainertest.Agent, degraded bool, rep wire.KillReport) {
	tb.Helper()
	switch {
	case degraded:
		if !strings.HasPrefix(rep.Containment, wire.Degraded+" (") || rep.Clean || rep.Escapes != wire.DegradedEscapes {
			tb.Fatalf("a degraded kill reported containment %q, clean %v, escapes %q", rep.Containment, rep.Clean, rep.Escapes)
		}
	case a.Mode() == wire.Cgroup:
		if rep.Containment != wire.Cgroup || !rep.Clean || len(rep.Procs) != 0 {
			tb.Fatalf("a cgroup kill reported containment %q, clean %v, found by scan %+v", rep.Containment, rep.Clean, rep.Procs)
		}
	}
}

// TestEscapes plays every trick of trainertest.Escapes against the
// reclaim, with cgroup containment and degraded: nothing of the
// Trainer's survives either way; the report says which mode found them.
func TestEscapes(t *testing.T) {
	u := trainertest.MustUser(t, "bftesc")
	for _, e := range trainertest.Escapes {
		if e.Storm {
			continue // TestForkStorm
		}
		t.Run(e.Kind, func(t *testing.T) {
			modes(t, func(t *testing.T, degraded bool, mode func(*trainertest.AgentConfig)) {
				a := trainertest.MustAgent(t, mode)
				dir := trainertest.EscapeDir(t, u.UID, u.GID)
				if _, err := a.Start(context.Background(), escapeLaunch(a, u, e, dir)); err != nil {
					t.Fatal(err)
				}
				pids := trainertest.WaitEscape(t, dir, 10*time.Second)
				rep, err := reclaim(t, a)
				if err != nil {
					t.Fatalf("reclaim: %v (%s)", err, rep)
				}
				nothingLeft(t, u, pids, rep)
				checkMode(t, a, degraded, rep)
				t.Logf("%s", rep)
			})
		})
	}
}

// TestForkStorm: a fork storm is bounded by the launch's pids.max and
// killed whole by cgroup.kill.
func TestForkStorm(t *testing.T) {
	u := trainertest.MustUser(t, "bftfs")
	const limit = 64
	a := trainertest.MustAgent(t, func(c *trainertest.AgentConfig) { c.Limits.Pids = limit })
	if a.Mode() != wire.Cgroup {
		t.Skipf("no cgroup containment here (%s): a fork storm cannot be bounded", a.Mode())
	}
	var storm trainertest.Escape
	for _, e := range trainertest.Escapes {
		if e.Storm {
			storm = e
		}
	}
	dir := trainertest.EscapeDir(t, u.UID, u.GID)
	s, err := a.Start(context.Background(), escapeLaunch(a, u, storm, dir))
	if err != nil {
		t.Fatal(err)
	}
	max := pidsMaxFile(s)
	if max == "" {
		t.Skip("no pids controller on this host: pids.max was not applied")
	}
	if got, _ := os.ReadFile(max); strings.TrimSpace(string(got)) != strconv.Itoa(limit) {
		t.Fatalf("%s = %q, want %d", max, got, limit)
	}
	trainertest.WaitEscape(t, dir, 10*time.Second)
	current := filepath.Join(filepath.Dir(max), "pids.current")
	trainertest.WaitFor(t, 10*time.Second, "the storm to reach the limit", func() bool {
		b, _ := os.ReadFile(current)
		n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return n >= limit-4
	})
	if n := len(trainertest.UIDProcs(u.UID)); n > limit {
		t.Fatalf("the storm has %d processes, beyond pids.max %d", n, limit)
	}
	rep, err := reclaim(t, a)
	if err != nil {
		t.Fatalf("reclaim: %v (%s)", err, rep)
	}
	nothingLeft(t, u, nil, rep)
	checkMode(t, a, false, rep)
	t.Logf("killed %d processes of the storm in %.1f ms", rep.Count(), rep.Ms)
}

// pidsMaxFile is the pids.max of a launch's cgroup, on v2 or v1; "" if
// none was set.
func pidsMaxFile(s wire.Started) string {
	for _, d := range append([]string{s.Cgroup}, s.V1...) {
		if b, err := os.ReadFile(filepath.Join(d, "pids.max")); err == nil && strings.TrimSpace(string(b)) != "max" {
			return filepath.Join(d, "pids.max")
		}
	}
	return ""
}

// TestFullRegistry: with the registry's filesystem full, the reclaim
// still kills everything; the fence that cannot be written is an error
// reported after the kill, never a kill not done.
func TestFullRegistry(t *testing.T) {
	u := trainertest.MustUser(t, "bftfull")
	modes(t, func(t *testing.T, degraded bool, mode func(*trainertest.AgentConfig)) {
		dir := t.TempDir()
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=256k,mode=0755", "tmpfs", dir).CombinedOutput(); err != nil {
			t.Skipf("cannot mount a tmpfs: %v %s", err, out)
		}
		t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
		a := trainertest.MustAgent(t, mode, func(c *trainertest.AgentConfig) { c.Registry = filepath.Join(dir, "registry") })
		esc := trainertest.Escapes[0] // setsid env -i
		escDir := trainertest.EscapeDir(t, u.UID, u.GID)
		if _, err := a.Start(context.Background(), escapeLaunch(a, u, esc, escDir)); err != nil {
			t.Fatal(err)
		}
		pids := trainertest.WaitEscape(t, escDir, 10*time.Second)
		trainertest.Fill(t, filepath.Join(dir, "filler"))
		rep, err := reclaim(t, a)
		if err == nil || !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("reclaim on a full registry: %v, want the fence's ENOSPC reported (%s)", err, rep)
		}
		nothingLeft(t, u, pids, rep)
		if len(rep.Errors) == 0 || !strings.Contains(rep.Errors[0], "fence") || rep.Clean {
			t.Fatalf("the report does not say the fence failed after the kill: %s", rep)
		}
		if ents, _ := a.Registry.Entries(a.N("n1")); len(ents) != 0 {
			t.Fatalf("entries left: %+v", ents)
		}
		t.Logf("%s", rep)
	})
}

// TestDeviceHolders: the report lists the processes that held a device
// file (a stand-in for /dev/nvidia0), and the kill returns once they are
// gone: a holder that left the launch's group, and one that stayed in it
// (which a degraded kill takes with its group, before any scan could see
// its descriptors).
func TestDeviceHolders(t *testing.T) {
	u := trainertest.MustUser(t, "bftgpu")
	for _, tc := range []struct{ name, prefix string }{
		{"escaped", "setsid env -i "},
		{"in the group", ""},
	} {
		t.Run(tc.name, func(t *testing.T) { deviceHolders(t, u, tc.prefix) })
	}
}

func deviceHolders(t *testing.T, u trainertest.User, prefix string) {
	modes(t, func(t *testing.T, degraded bool, mode func(*trainertest.AgentConfig)) {
		devs := t.TempDir()
		trainertest.OpenUp(t, devs)
		dev := filepath.Join(devs, "nvidia0")
		if err := os.WriteFile(dev, nil, 0o666); err != nil {
			t.Fatal(err)
		}
		a := trainertest.MustAgent(t, mode, func(c *trainertest.AgentConfig) { c.DeviceGlob = filepath.Join(devs, "nvidia*") })
		escDir := trainertest.EscapeDir(t, u.UID, u.GID)
		holder := trainertest.Escape{Kind: "gpu", Pids: 1, Script: prefix + `/bin/sh -c 'exec 3<` + dev + `; exec /bin/sleep 600' & echo $! >> "$ESC_DIR/pids"`}
		if _, err := a.Start(context.Background(), escapeLaunch(a, u, holder, escDir)); err != nil {
			t.Fatal(err)
		}
		pids := trainertest.WaitEscape(t, escDir, 10*time.Second)
		trainertest.WaitFor(t, 5*time.Second, "the device held", func() bool {
			l, _ := os.Readlink("/proc/" + strconv.Itoa(pids[0]) + "/fd/3")
			return l == dev
		})
		rep, err := reclaim(t, a)
		if err != nil {
			t.Fatalf("reclaim: %v (%s)", err, rep)
		}
		nothingLeft(t, u, pids, rep)
		if len(rep.Holders) != 1 || rep.Holders[0].PID != pids[0] || rep.Holders[0].Files[0] != dev {
			t.Fatalf("holders %+v, want pid %d holding %s", rep.Holders, pids[0], dev)
		}
		t.Logf("%s", rep)
	})
}

// TestSchedulerJobSpared: a main job submitted from inside a Trainer
// inherits its run token; it is the scheduler's (its job variables say
// so, or its cgroup is not ours), and the reclaim leaves it alone.
func TestSchedulerJobSpared(t *testing.T) {
	u := trainertest.MustUser(t, "bftjob")
	modes(t, func(t *testing.T, degraded bool, mode func(*trainertest.AgentConfig)) {
		a := trainertest.MustAgent(t, mode, func(c *trainertest.AgentConfig) { c.JobMarkers = []string{"SLURM_JOB_ID"} })
		escDir := trainertest.EscapeDir(t, u.UID, u.GID)
		if _, err := a.Start(context.Background(), escapeLaunch(a, u, trainertest.Escapes[0], escDir)); err != nil {
			t.Fatal(err)
		}
		pids := trainertest.WaitEscape(t, escDir, 10*time.Second)
		// The job, as slurmstepd starts it: outside our cgroup and group,
		// as the owner, with the Trainer's environment and the job's.
		job := exec.Command("/bin/sleep", "600")
		job.Env = []string{wire.RunEnv + "=" + wire.NewToken("esc", a.N("n1")).String(), "SLURM_JOB_ID=42"}
		job.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: &syscall.Credential{Uid: uint32(u.UID), Gid: uint32(u.GID)}}
		if err := job.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { job.Process.Kill(); job.Wait() }()
		rep, err := reclaim(t, a)
		if err != nil {
			t.Fatalf("reclaim: %v (%s)", err, rep)
		}
		if left := trainertest.Alive(pids); len(left) > 0 {
			t.Fatalf("the Trainer's %v survived: %s", left, rep)
		}
		if len(trainertest.Alive([]int{job.Process.Pid})) == 0 {
			t.Fatalf("the scheduler's job was killed: %s", rep)
		}
	})
}

// TestManyLargeEnvironments: 300 processes with 1.9 MB environments each
// die within a hook's deadline, found by their cgroup or — degraded — by
// their group and owner, never by reading 570 MB of environments.
func TestManyLargeEnvironments(t *testing.T) {
	if testing.Short() {
		t.Skip("300 processes with 1.9 MB environments (570 MB)")
	}
	u := trainertest.MustUser(t, "bftenv")
	modes(t, func(t *testing.T, degraded bool, mode func(*trainertest.AgentConfig)) {
		// 570 MB of environments to scan and free: the agent waits for
		// them as long as reclaim does.
		a := trainertest.MustAgent(t, mode, func(c *trainertest.AgentConfig) { c.KillWait = time.Minute })
		escDir := trainertest.EscapeDir(t, u.UID, u.GID)
		many := trainertest.ManyEnv(300, 1900<<10)
		if _, err := a.Start(context.Background(), escapeLaunch(a, u, many, escDir)); err != nil {
			t.Fatal(err)
		}
		pids := trainertest.WaitEscape(t, escDir, 60*time.Second)
		if len(pids) < 300 {
			t.Fatalf("%d processes started, want 300", len(pids))
		}
		rep, err := reclaim(t, a)
		if err != nil {
			t.Fatalf("reclaim: %v (%s)", err, rep)
		}
		nothingLeft(t, u, pids, rep)
		checkMode(t, a, degraded, rep)
		t.Logf("killed %d processes in %.1f ms (stages %v)", rep.Count(), rep.Ms, rep.Stages)
	})
}
