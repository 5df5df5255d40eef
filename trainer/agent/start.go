package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bftrainer/bftrainer/trainer/wire"
)

// Start starts a launch under a supervisor, unless the same launch is
// already running there (then it reports that one: starts are
// idempotent). A different launch of the same Trainer on the node is
// replaced. A fenced node refuses.
func (a *Agent) Start(ctx context.Context, l wire.Launch) (wire.Started, error) {
	if err := l.Validate(); err != nil {
		return wire.Started{}, err
	}
	own, err := a.owner(l.Owner)
	if err != nil {
		return wire.Started{}, err
	}
	lk, err := a.Registry.Lock(ctx, l.Node)
	if err != nil {
		return wire.Started{}, err
	}
	defer lk.Unlock()
	if since, ok := a.Registry.Fenced(l.Node); ok {
		return wire.Started{}, fmt.Errorf("start %s on %s: %w (since %s, until its epilog or the controller lifts it)",
			l.Trainer, l.Node, ErrFenced, since.UTC().Format(time.RFC3339))
	}
	ents, err := a.Registry.Entries(l.Node)
	if err != nil {
		return wire.Started{}, err
	}
	var others []wire.Other
	for _, e := range ents {
		if e.Trainer != l.Trainer {
			others = append(others, wire.Other{Trainer: e.Trainer, Run: e.Run, Token: e.Token})
			continue
		}
		if a.sameLaunch(e, l) {
			return wire.Started{Entry: e, Existing: true, Others: others}, nil
		}
	}
	// Leftovers of an earlier launch (exited, replaced, or started by an
	// agent that died before recording it) go first.
	if rep, err := a.kill(ctx, l.Node, l.Trainer, nil); err != nil {
		return wire.Started{}, fmt.Errorf("start %s on %s: clear the earlier launch: %w (%s)", l.Trainer, l.Node, err, rep)
	}
	var e wire.Entry
	if l.Hosted {
		e, err = a.host(l, own)
	} else {
		e, err = a.spawn(l, own)
	}
	return wire.Started{Entry: e, Others: others}, err
}

// sameLaunch reports whether entry e is launch l, still running.
func (a *Agent) sameLaunch(e wire.Entry, l wire.Launch) bool {
	if e.Owner != l.Owner || e.Run != l.Run || e.Hosted != l.Hosted || !slices.Equal(e.Argv, l.Argv) || e.Workdir != l.Workdir {
		return false
	}
	return e.Hosted || a.states([]wire.Entry{e})[0] == wire.StateRunning
}

// host records a hosted launch: nothing to start, the kill looks for its
// processes (Horovod workers, which horovodrun starts over ssh).
func (a *Agent) host(l wire.Launch, own owner) (wire.Entry, error) {
	e := wire.Entry{Trainer: l.Trainer, Node: l.Node, Owner: l.Owner, UID: own.uid, GID: own.gid, Run: l.Run,
		Token: l.Token, Hosted: true, Started: a.now().UTC()}
	if err := a.Registry.Write(e); err != nil {
		return wire.Entry{}, fmt.Errorf("record %s on %s: %w", l.Trainer, l.Node, err)
	}
	return e, nil
}

// owner is whom a program runs as.
type owner struct {
	uid, gid int
	groups   []uint32
	home     string
	switchTo bool // set credentials (we are root)
}

func (a *Agent) owner(name string) (owner, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return owner{}, fmt.Errorf("owner %q: %w", name, err)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil {
		return owner{}, fmt.Errorf("owner %q: non-numeric uid or gid", name)
	}
	if uid == 0 && !a.AllowRootOwner {
		return owner{}, fmt.Errorf("owner %q: %w (allow_root_owner is for tests)", name, ErrRootOwner)
	}
	o := owner{uid: uid, gid: gid, home: u.HomeDir}
	if os.Geteuid() != 0 {
		// Without root we cannot become anyone else: same-user mode
		// (development machines, tests that are not root).
		if uid != os.Geteuid() {
			return owner{}, fmt.Errorf("owner %q: only root may start programs as another user", name)
		}
		return o, nil
	}
	o.switchTo = true
	ids, err := u.GroupIds()
	if err != nil {
		return owner{}, fmt.Errorf("owner %q: groups: %w", name, err)
	}
	for _, id := range ids {
		g, err := strconv.ParseUint(id, 10, 32)
		if err == nil {
			o.groups = append(o.groups, uint32(g))
		}
	}
	return o, nil
}

// safePath is the PATH of the supervisor and the default of programs.
const safePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// prepared is a launch with everything resolved: what the supervisor is
// asked to run, and the open log it writes to.
type prepared struct {
	req     wire.SuperviseRequest
	logPath string
	log     *os.File
}

// spawn starts a launch: resolve it, make its cgroup, start the
// supervisor in it, record the entry.
func (a *Agent) spawn(l wire.Launch, own owner) (wire.Entry, error) {
	p, err := a.prepare(l, own)
	if err != nil {
		return wire.Entry{}, err
	}
	defer p.log.Close()
	cr, note, err := a.contain(l)
	if err != nil {
		return wire.Entry{}, fmt.Errorf("start %s on %s: %w", l.Trainer, l.Node, err)
	}
	if cr != nil {
		defer cr.Close()
		p.req.Join = cr.Join
	}
	fmt.Fprintf(p.log, "bftrainer: %s start %s on %s as %s (containment: %s%s): %s\n", a.now().UTC().Format(time.RFC3339),
		l.Trainer, l.Node, l.Owner, a.Mode(), note, wire.ShellJoin(l.Argv))
	sup, pid, err := a.startSupervisor(p, cr)
	if err != nil {
		if cr != nil {
			a.cg.remove(cr.Dir, cr.V1)
		}
		return wire.Entry{}, fmt.Errorf("start %s on %s: %w", l.Trainer, l.Node, err)
	}
	e := wire.Entry{Trainer: l.Trainer, Node: l.Node, Owner: l.Owner, UID: own.uid, GID: own.gid, Run: l.Run, Token: l.Token,
		PGID: sup, PID: pid, Argv: l.Argv, Workdir: l.Workdir, Log: p.logPath, Started: a.now().UTC()}
	if pr, ok := readProc(sup); ok {
		e.Ticks = pr.Ticks
	}
	if cr != nil {
		e.Cgroup, e.V1 = cr.Dir, cr.V1
	}
	if err := a.Registry.Write(e); err != nil {
		// Unrecorded processes would be found only by a scan: kill them
		// now, the same way a reclaim would.
		rep, _ := a.kill(context.Background(), l.Node, l.Trainer, []wire.Entry{e})
		return wire.Entry{}, fmt.Errorf("record %s on %s: %w (killed: %s)", l.Trainer, l.Node, err, rep)
	}
	return e, nil
}

// prepare resolves a launch: its environment, directory, program and
// log.
func (a *Agent) prepare(l wire.Launch, own owner) (*prepared, error) {
	env := map[string]string{"HOME": own.home, "USER": l.Owner, "LOGNAME": l.Owner, "PATH": safePath}
	for k, v := range l.Env {
		env[k] = v
	}
	// A Trainer process never starts with a scheduler job's marks: a
	// process that carries one is the scheduler's (see Agent.JobMarkers).
	for _, m := range a.JobMarkers {
		delete(env, m)
	}
	env["BFTRAINER_TRAINER"] = l.Trainer
	env["BFTRAINER_NODE"] = l.Node
	dir := l.Workdir
	if dir == "" {
		dir = own.home
	}
	logPath, logf, runDir, err := a.openLog(l, own)
	if err != nil {
		return nil, err
	}
	if len(l.Nodes) > 0 {
		nf, err := writeNodeFile(runDir, l, own)
		if err != nil {
			logf.Close()
			return nil, err
		}
		env["BFTRAINER_NODES"] = strings.Join(l.Nodes, ",")
		env["BFTRAINER_NODEFILE"] = nf
	}
	// The chdir happens in the child, as the owner; a directory that does
	// not exist would come back as the exec's ENOENT, naming the program.
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		logf.Close()
		return nil, fmt.Errorf("start %s on %s: workdir %s: not a directory", l.Trainer, l.Node, dir)
	}
	path, err := lookPathIn(l.Argv[0], env["PATH"], dir)
	if err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s on %s: %w", l.Trainer, l.Node, err)
	}
	req := wire.SuperviseRequest{Registry: a.Registry.Dir, Node: l.Node, Trainer: l.Trainer, Token: l.Token,
		Path: path, Argv: l.Argv, Env: envList(l.Token, env), Dir: dir,
		UID: own.uid, GID: own.gid, Groups: own.groups, Switch: own.switchTo, Idle: a.IdleCPU}
	return &prepared{req: req, logPath: logPath, log: logf}, nil
}

// contain makes the launch's cgroup: nil (and the reason in the note)
// when containment is degraded and that is allowed.
func (a *Agent) contain(l wire.Launch) (*Created, string, error) {
	cg, reason := a.cgroupsToStart()
	if cg == nil {
		if a.Containment == ContainCgroup {
			return nil, "", fmt.Errorf("%w: %s (trainer.containment = \"cgroup\")", ErrNoCgroup, reason)
		}
		return nil, "", nil
	}
	t, _ := wire.ParseToken(l.Token) // validated
	cr, err := cg.Create(l.Trainer, l.Node, t.Nonce, a.Limits)
	if err != nil {
		return nil, "", err
	}
	note := ""
	if cr.Note != "" {
		note = "; " + cr.Note
	}
	return cr, note, nil
}

// startSupervisor starts "node-agent supervise" in its own session (and
// in the launch's cgroup from its first instruction) and waits for its
// word: the program's pid.
func (a *Agent) startSupervisor(p *prepared, cr *Created) (sup, pid int, err error) {
	body, err := json.Marshal(p.req)
	if err != nil {
		return 0, 0, err
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return 0, 0, err
	}
	ackR, ackW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return 0, 0, err
	}
	defer ackR.Close()
	self := a.Self
	if self == "" {
		if self, err = os.Executable(); err != nil {
			return 0, 0, err
		}
	}
	cmd := exec.Command(self, "node-agent", "supervise")
	// The supervisor runs as root: it gets no environment of the launch
	// (an LD_PRELOAD there is for the owner's program, not for root), only
	// the run token, so that a scan by token covers it too.
	cmd.Env = []string{"PATH=" + safePath, wire.RunEnv + "=" + p.req.Token}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, p.log, p.log
	cmd.ExtraFiles = []*os.File{ackW} // fd 3
	cmd.Dir = "/"
	// Its own session, hence its own process group (pgid = its pid), which
	// the program and every descendant that does not setsid share. It
	// also leaves the ssh session's process group, so the ssh connection
	// closing cannot signal it. With a cgroup, clone3 starts it inside:
	// no instruction of the launch ever runs outside.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if cr != nil {
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, cr.FD()
	}
	err = cmd.Start()
	inR.Close()
	ackW.Close()
	if err != nil {
		inW.Close()
		return 0, 0, fmt.Errorf("start supervisor: %w", err)
	}
	go func() {
		inW.Write(body)
		inW.Close()
	}()
	go cmd.Wait() // reap it if we outlive it (tests, a long-lived caller)
	pid, err = waitAck(ackR)
	if err != nil {
		// Nothing of a launch that did not start may stay.
		if cr != nil {
			killCgroup(cr.Dir)
			waitEmpty(cr.Dir, time.Now().Add(a.killWait()))
		}
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		return 0, 0, err
	}
	return cmd.Process.Pid, pid, nil
}

// waitAck reads the supervisor's first word: the program's pid, or why
// it could not start it.
func waitAck(r *os.File) (int, error) {
	r.SetReadDeadline(time.Now().Add(10 * time.Second))
	var ak wire.Ack
	line, err := bufio.NewReader(r).ReadBytes('\n')
	if err == nil {
		err = json.Unmarshal(line, &ak)
	}
	switch {
	case ak.Error != "":
		return 0, errors.New(ak.Error)
	case err != nil || ak.PID <= 0:
		return 0, fmt.Errorf("no word from the supervisor: %v", err)
	}
	return ak.PID, nil
}

// envList is the program's environment: the run token first (a scan of
// /proc finds it in the first bytes), then the rest in order.
func envList(token string, m map[string]string) []string {
	out := make([]string, 0, len(m)+1)
	for k, v := range m {
		if k != wire.RunEnv {
			out = append(out, k+"="+v)
		}
	}
	slices.Sort(out)
	return append([]string{wire.RunEnv + "=" + token}, out...)
}

// lookPathIn resolves a program name like a shell would with the given
// PATH; a name with a slash is taken as is (relative to dir).
func lookPathIn(file, path, dir string) (string, error) {
	if strings.Contains(file, "/") {
		p := file
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if err := executable(p); err != nil {
			return "", err
		}
		return p, nil
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" || !filepath.IsAbs(d) {
			continue // never the current directory
		}
		p := filepath.Join(d, file)
		if executable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%q not found in PATH %s", file, path)
}

func executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", p)
	}
	return nil
}
