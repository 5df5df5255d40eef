package agent

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestHasten: every thread of a launch's cgroup at SCHED_IDLE (a shell
// and its child, started idle by chrt) is back in the normal class after
// hasten, which a reclaim runs right after cgroup.kill.
func TestHasten(t *testing.T) {
	mount, err := CgroupMount()
	if err != nil || os.Geteuid() != 0 {
		t.Skipf("no writable cgroup2 hierarchy here (root: %v): %v", os.Geteuid() == 0, err)
	}
	chrt, err := exec.LookPath("chrt")
	if err != nil {
		t.Skip("no chrt (util-linux)")
	}
	dir := filepath.Join(mount, "bftrainer-hasten-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("cannot make a cgroup: %v", err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	cmd := exec.Command(chrt, "--idle", "0", "/bin/sh", "-c", "sleep 1000 & echo $!; exec sleep 1000")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		killCgroup(dir)
		cmd.Wait()
		waitEmpty(dir, time.Now().Add(5*time.Second))
	})
	b := make([]byte, 32)
	n, err := out.Read(b)
	if err != nil {
		t.Fatal(err)
	}
	child, err := strconv.Atoi(strings.TrimSpace(string(b[:n])))
	if err != nil {
		t.Fatalf("the child's pid: %q: %v", b[:n], err)
	}
	pids := []int{cmd.Process.Pid, child}
	class := func() []uint32 {
		var cs []uint32
		for _, p := range pids {
			attr, err := unix.SchedGetAttr(p, 0)
			if err != nil {
				t.Fatal(err)
			}
			cs = append(cs, attr.Policy)
		}
		return cs
	}
	for _, c := range class() {
		if c != unix.SCHED_IDLE {
			t.Fatalf("started in classes %v, want SCHED_IDLE (%d)", class(), unix.SCHED_IDLE)
		}
	}
	hasten(dir)
	for _, c := range class() {
		if c != unix.SCHED_NORMAL {
			t.Fatalf("after hasten: classes %v, want SCHED_NORMAL (%d)", class(), unix.SCHED_NORMAL)
		}
	}
}
