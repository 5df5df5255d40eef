package agent

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bftrainer/bftrainer/trainer/registry"
	"golang.org/x/sys/unix"
)

// Cgroups is the agent's delegated subtree of the unified (v2) cgroup
// hierarchy: ROOT/TRAINER/NODE@NONCE, one leaf per launch, created before
// the launch's first process and entered by it at birth (clone3 with
// CLONE_INTO_CGROUP). Every directory is root's with the kernel's default
// modes, so no Trainer process can move itself, or a child, out of it.
type Cgroups struct {
	Root  string // the subtree, in a cgroup2 mount
	Mount string // that mount: /proc/PID/cgroup paths are relative to it
	// v2 are the controllers the subtree can use (enabled for it by its
	// parent); v1 the mounts of cgroup v1 hierarchies for the limits that
	// are not on the unified one (hybrid hosts), by controller.
	v2 map[string]bool
	v1 map[string]string
	// absent: the root is not made yet (no launch ever started here).
	absent bool
}

// Limits are what a launch's cgroup may use; 0 means no limit.
type Limits struct {
	Pids   int64 // pids.max: bounds a fork storm
	Memory int64 // bytes
}

// cgroup2Magic is statfs's f_type of a cgroup2 mount.
const cgroup2Magic = 0x63677270

// mounts reads /proc/self/mountinfo: the cgroup2 mount points, and the
// cgroup v1 mount of each controller.
func mounts() (v2 []string, v1 map[string]string, err error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	v1 = map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional…] - fstype source superoptions
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if len(pf) < 5 || len(qf) < 3 {
			continue
		}
		point := unescapeMount(pf[4])
		switch qf[0] {
		case "cgroup2":
			v2 = append(v2, point)
		case "cgroup":
			for _, o := range strings.Split(qf[2], ",") {
				if o == "pids" || o == "memory" {
					v1[o] = point
				}
			}
		}
	}
	return v2, v1, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// CgroupMount returns the (first) cgroup2 mount point.
func CgroupMount() (string, error) {
	v2, _, err := mounts()
	if err != nil {
		return "", fmt.Errorf("read mounts: %w", err)
	}
	if len(v2) == 0 {
		return "", errors.New("no cgroup2 filesystem mounted")
	}
	return v2[0], nil
}

// OpenCgroups finds the cgroup2 mount and prepares the subtree root (""
// means MOUNT/bftrainer): created if needed, ours, not writable by
// others, able to kill (cgroup.kill, Linux 5.14). Any failure is the
// reason for degraded containment.
func OpenCgroups(root string) (*Cgroups, error) { return openCgroups(root, true) }

// openCgroups is OpenCgroups; without create, a root that does not exist
// yet is not made (a kill or a list has nothing to find there), and the
// subtree is judged by its parent.
func openCgroups(root string, create bool) (*Cgroups, error) {
	v2, v1, err := mounts()
	if err != nil {
		return nil, fmt.Errorf("read mounts: %w", err)
	}
	if root == "" {
		if len(v2) == 0 {
			return nil, errors.New("no cgroup2 filesystem mounted")
		}
		root = filepath.Join(v2[0], "bftrainer")
	}
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Dir(root), &st); err != nil {
		return nil, fmt.Errorf("cgroup root %s: %w", root, err)
	}
	if st.Type != cgroup2Magic {
		return nil, fmt.Errorf("cgroup root %s: not in a cgroup2 filesystem", root)
	}
	c := &Cgroups{Root: root, v2: map[string]bool{}, v1: map[string]string{}}
	for _, m := range v2 {
		if strings.HasPrefix(root, m+"/") && len(m) > len(c.Mount) {
			c.Mount = m
		}
	}
	if _, err := os.Stat(root); errors.Is(err, os.ErrNotExist) && !create {
		if err := unix.Access(filepath.Dir(root), unix.W_OK); err != nil {
			return nil, fmt.Errorf("cgroup root %s: parent not writable: %w", root, err)
		}
		if !canKill() {
			return nil, fmt.Errorf("cgroup root %s: no cgroup.kill (Linux 5.14 or later)", root)
		}
		c.absent = true
		return c, nil
	}
	if err := registry.EnsureRoot(root); err != nil {
		return nil, fmt.Errorf("cgroup root: %w", err)
	}
	if _, err := os.Stat(filepath.Join(root, "cgroup.kill")); err != nil {
		return nil, fmt.Errorf("cgroup root %s: no cgroup.kill (Linux 5.14 or later)", root)
	}
	ctl, _ := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
	for _, k := range strings.Fields(string(ctl)) {
		c.v2[k] = true
	}
	for k, m := range v1 {
		if !c.v2[k] {
			c.v1[k] = m
		}
	}
	return c, nil
}

// canKill reports a kernel with cgroup.kill (5.14 and later).
func canKill() bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	var major, minor int
	fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &major, &minor)
	return major > 5 || major == 5 && minor >= 14
}

// runName is a launch's leaf: NODE@NONCE ('@' is in no node name, and no
// cgroup interface file has one).
func runName(node, nonce string) string { return node + "@" + nonce }

// Dir is a launch's cgroup directory.
func (c *Cgroups) Dir(trainer, node, nonce string) string {
	return filepath.Join(c.Root, trainer, runName(node, nonce))
}

// v1Dir is the directory mirroring a v2 one in a v1 hierarchy.
func (c *Cgroups) v1Dir(mount, dir string) string {
	rel, _ := filepath.Rel(c.Root, dir)
	return filepath.Join(mount, filepath.Base(c.Root), rel)
}

// Created is a launch's cgroup, ready to start the supervisor in.
type Created struct {
	Dir  string
	V1   []string // v1 directories (limits on hybrid hosts)
	Join []string // their cgroup.procs, for the supervisor to enter
	Note string   // limits that could not be applied, and why
	fd   int
}

// Create makes a launch's cgroup with its limits. The caller starts the
// supervisor in it (FD) and closes it.
func (c *Cgroups) Create(trainer, node, nonce string, lim Limits) (*Created, error) {
	dir := c.Dir(trainer, node, nonce)
	if err := mkdirs(filepath.Dir(dir), dir); err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	cr := &Created{Dir: dir, fd: -1}
	var notes []string
	for _, l := range []struct {
		ctl, v2file, v1file string
		value               int64
	}{{"pids", "pids.max", "pids.max", lim.Pids}, {"memory", "memory.max", "memory.limit_in_bytes", lim.Memory}} {
		if l.value <= 0 {
			continue
		}
		v := []byte(strconv.FormatInt(l.value, 10))
		switch {
		case c.v2[l.ctl]:
			err := c.enable(l.ctl, filepath.Dir(dir))
			if err == nil {
				err = os.WriteFile(filepath.Join(dir, l.v2file), v, 0)
			}
			if err != nil {
				notes = append(notes, fmt.Sprintf("%s not applied: %v", l.v2file, err))
			}
		case c.v1[l.ctl] != "":
			d := c.v1Dir(c.v1[l.ctl], dir)
			err := os.MkdirAll(filepath.Dir(d), 0o755)
			if err == nil {
				err = mkdirs(filepath.Dir(d), d)
			}
			if err == nil {
				cr.V1 = append(cr.V1, d)
				err = os.WriteFile(filepath.Join(d, l.v1file), v, 0)
			}
			if err != nil {
				notes = append(notes, fmt.Sprintf("%s (cgroup v1) not applied: %v", l.v1file, err))
				continue
			}
			cr.Join = append(cr.Join, filepath.Join(d, "cgroup.procs"))
		default:
			notes = append(notes, fmt.Sprintf("%s not applied: no %s controller", l.v2file, l.ctl))
		}
	}
	cr.Note = strings.Join(notes, "; ")
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		c.remove(dir, cr.V1)
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	cr.fd = fd
	return cr, nil
}

// FD is the directory's descriptor, for SysProcAttr.CgroupFD.
func (cr *Created) FD() int { return cr.fd }

// Close closes the descriptor.
func (cr *Created) Close() {
	if cr.fd >= 0 {
		unix.Close(cr.fd)
		cr.fd = -1
	}
}

// enable turns a controller on for the subtree down to parent (the
// Trainer's directory), so that its leaves can use it. Our directories
// hold no process, so the v2 rule against internal processes is kept.
func (c *Cgroups) enable(ctl, parent string) error {
	for _, d := range []string{c.Root, parent} {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.subtree_control"))
		if err != nil {
			return err
		}
		if slices.Contains(strings.Fields(string(b)), ctl) {
			continue
		}
		if err := os.WriteFile(filepath.Join(d, "cgroup.subtree_control"), []byte("+"+ctl), 0); err != nil {
			return err
		}
	}
	return nil
}

// mkdirs makes parent (if needed) and then dir, which must be new. A
// concurrent kill may remove an empty parent in between: that is retried.
func mkdirs(parent, dir string) error {
	var err error
	for range 3 {
		if err = os.Mkdir(parent, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
		if err = os.Mkdir(dir, 0o755); !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return err
}

// Runs returns a node's launch cgroups, of one Trainer or ("") of all:
// the cgroup tree itself is the record, whatever the registry says.
func (c *Cgroups) Runs(node, trainer string) ([]string, error) {
	if c.absent {
		return nil, nil
	}
	tdirs := []string{trainer}
	if trainer == "" {
		ents, err := os.ReadDir(c.Root)
		if err != nil {
			return nil, err
		}
		tdirs = tdirs[:0]
		for _, e := range ents {
			if e.IsDir() {
				tdirs = append(tdirs, e.Name())
			}
		}
	}
	var out []string
	prefix := node + "@"
	for _, t := range tdirs {
		ents, err := os.ReadDir(filepath.Join(c.Root, t))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return out, err
		}
		for _, e := range ents {
			if e.IsDir() && strings.HasPrefix(e.Name(), prefix) {
				out = append(out, filepath.Join(c.Root, t, e.Name()))
			}
		}
	}
	return out, nil
}

// cgroupPIDs lists the processes in a cgroup (not its descendants: the
// leaves have none).
func cgroupPIDs(dir string) ([]int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	return out, nil
}

// killCgroup kills every process in the cgroup and its descendants at
// once; processes forked meanwhile are killed too.
func killCgroup(dir string) error {
	return os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0)
}

// hasten moves every thread of a killed cgroup back to the normal
// scheduling class. A killed process still runs to exit (a large
// Trainer's address space takes tens of milliseconds of CPU to tear
// down), and at SCHED_IDLE (trainer.cpu_priority = "idle") it would get
// that CPU only when nothing else on the node wants it, while the
// reclaim waits for it. Threads gone meanwhile are skipped: best effort,
// the wait after it is what the kill's guarantee rests on.
func hasten(dir string) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.threads"))
	if err != nil {
		return
	}
	normal := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_NORMAL}
	for _, f := range strings.Fields(string(b)) {
		if tid, err := strconv.Atoi(f); err == nil {
			unix.SchedSetAttr(tid, &normal, 0)
		}
	}
}

// Populated reports whether any process is in the cgroup's subtree.
func Populated(dir string) (bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	if err != nil {
		return false, err
	}
	return populated(b), nil
}

func populated(events []byte) bool {
	for _, line := range bytes.Split(events, []byte("\n")) {
		if k, v, ok := bytes.Cut(line, []byte(" ")); ok && string(k) == "populated" {
			return string(bytes.TrimSpace(v)) != "0"
		}
	}
	return false
}

// waitEmpty waits until the cgroup has no process, or the deadline. It
// does not poll the file on a timer: the kernel wakes a poll on
// cgroup.events (POLLPRI) whenever "populated" changes.
func waitEmpty(dir string, deadline time.Time) error {
	fd, err := unix.Open(filepath.Join(dir, "cgroup.events"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil // removed: nothing in it
		}
		return err
	}
	defer unix.Close(fd)
	buf := make([]byte, 256)
	for {
		n, err := unix.Pread(fd, buf, 0)
		if err != nil {
			return err
		}
		if !populated(buf[:n]) {
			return nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("cgroup %s still populated at the deadline", dir)
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLPRI}}
		if _, err := unix.Poll(fds, int(left.Milliseconds())+1); err != nil && !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// remove deletes a launch's empty cgroup, its v1 mirrors and, when they
// are left empty, their Trainer directories.
func (c *Cgroups) remove(dir string, v1 []string) error {
	var errs []error
	for _, d := range append([]string{dir}, v1...) {
		if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
			continue
		}
		syscall.Rmdir(filepath.Dir(d)) // the Trainer's directory, once empty; busy otherwise
	}
	return errors.Join(errs...)
}

// v1Mirrors are the v1 directories a launch cgroup may have, whatever
// its registry entry says.
func (c *Cgroups) v1Mirrors(dir string) []string {
	var out []string
	for _, m := range c.v1 {
		d := c.v1Dir(m, dir)
		if _, err := os.Stat(d); err == nil {
			out = append(out, d)
		}
	}
	slices.Sort(out)
	return out
}

// RemoveAll kills everything in the subtree and removes it, with its v1
// mirrors: for tests (each makes its own subtree) and for taking
// bftrainer off a node.
func (c *Cgroups) RemoveAll(wait time.Duration) error {
	deadline := time.Now().Add(wait)
	var errs []error
	var leaves []string
	filepath.WalkDir(c.Root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			leaves = append(leaves, p)
		}
		return nil
	})
	if len(leaves) > 0 {
		killCgroup(c.Root)
		if err := waitEmpty(c.Root, deadline); err != nil {
			errs = append(errs, err)
		}
	}
	for _, m := range c.v1 {
		mirror := c.v1Dir(m, c.Root)
		filepath.WalkDir(mirror, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				leaves = append(leaves, p)
			}
			return nil
		})
	}
	// Deepest first.
	slices.SortFunc(leaves, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	for _, d := range leaves {
		if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}
