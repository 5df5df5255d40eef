package trainer

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bftrainer/bftrainer/names"
	"golang.org/x/sys/unix"
)

// Launch is what a node agent is asked to start, read as JSON on its
// standard input (never from a command line, never through a shell).
type Launch struct {
	Trainer string            `json:"trainer"`
	Node    string            `json:"node"`
	Owner   string            `json:"owner"` // Unix user the program runs as
	Argv    []string          `json:"argv"`
	Env     map[string]string `json:"env,omitempty"`
	Workdir string            `json:"workdir,omitempty"` // default: the owner's home
	Token   string            `json:"token"`             // Token.String() for Trainer and Node
	Nodes   []string          `json:"nodes,omitempty"`   // the Trainer's node list, for programs told it by file
}

// Validate checks a launch before anything is looked up or started.
func (l Launch) Validate() error {
	if err := names.ValidateTrainer(l.Trainer); err != nil {
		return err
	}
	if err := names.ValidateNode(l.Node); err != nil {
		return err
	}
	if err := names.ValidateUser(l.Owner); err != nil {
		return err
	}
	t, err := ParseToken(l.Token)
	if err != nil {
		return err
	}
	if t.Trainer != l.Trainer || t.Node != l.Node {
		return fmt.Errorf("run token %q is not for %s on %s", l.Token, l.Trainer, l.Node)
	}
	if err := ValidateSpec(Spec{Argv: l.Argv, Workdir: l.Workdir, Env: l.Env}); err != nil {
		return err
	}
	if l.Workdir != "" && !filepath.IsAbs(l.Workdir) {
		return fmt.Errorf("launch: workdir %q is not absolute", l.Workdir)
	}
	for _, n := range l.Nodes {
		if err := names.ValidateNode(n); err != nil {
			return err
		}
	}
	return nil
}

// NodeAgent carries out the per-node operations, as root on the node
// (the controller runs "bftrainer node-agent" there over ssh, or locally):
// start a program as its owner under a supervisor, stop one Trainer's
// processes, kill everything of ours, list what runs.
type NodeAgent struct {
	Registry       Registry
	LogDir         string        // program output: LOGDIR/TRAINER/NODE.log
	Self           string        // executable that runs "node-agent supervise"
	AllowRootOwner bool          // tests only: let a Trainer run as root
	KillWait       time.Duration // how long a kill waits for processes to be gone; 0 means 5 s
	FenceMax       time.Duration // how long a reclaim fence lasts without an epilog; 0 means 10 min
	Now            func() time.Time
}

// Errors a caller may branch on.
var (
	ErrFenced    = errors.New("node is reclaimed by the scheduler")
	ErrRootOwner = errors.New("refusing to run a Trainer as root")
	ErrSurvivors = errors.New("processes survived SIGKILL")
)

// Started is the answer to a start.
type Started struct {
	Entry
	Existing bool `json:"existing,omitempty"` // the same launch was already running: nothing started
}

// KillReport says what a stop or a kill sent to which process.
type KillReport struct {
	Node      string         `json:"node"`
	Trainer   string         `json:"trainer,omitempty"` // "" for every Trainer on the node
	Groups    []KilledGroup  `json:"groups,omitempty"`
	Procs     []KilledProc   `json:"procs,omitempty"` // processes outside the recorded groups, found by token
	Removed   []string       `json:"removed,omitempty"`
	Survivors []int          `json:"survivors,omitempty"`
	Exits     map[string]int `json:"exits,omitempty"` // entries that had exited by themselves: Trainer → code
	Ms        float64        `json:"ms"`
}

// KilledGroup is a recorded process group sent SIGKILL.
type KilledGroup struct {
	Trainer string `json:"trainer"`
	PGID    int    `json:"pgid"`
	PIDs    []int  `json:"pids"` // its members when it was signalled
	Signal  string `json:"signal"`
}

// KilledProc is a process sent SIGKILL on its own: a descendant that left
// its group (setsid) but still carries the run token.
type KilledProc struct {
	PID    int    `json:"pid"`
	PGID   int    `json:"pgid"`
	Comm   string `json:"comm"`
	Run    string `json:"run"`
	Signal string `json:"signal"`
}

// Count returns how many process groups were killed (recorded groups and
// the groups of escaped processes).
func (r KillReport) Count() int {
	seen := map[int]bool{}
	for _, g := range r.Groups {
		seen[g.PGID] = true
	}
	for _, p := range r.Procs {
		seen[p.PGID] = true
	}
	return len(seen)
}

// String is a one-line account for logs.
func (r KillReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "node %s:", r.Node)
	if len(r.Groups) == 0 && len(r.Procs) == 0 {
		b.WriteString(" nothing running")
	}
	for _, g := range r.Groups {
		fmt.Fprintf(&b, " %s to group %d (%s: pids %v)", g.Signal, g.PGID, g.Trainer, g.PIDs)
	}
	for _, p := range r.Procs {
		fmt.Fprintf(&b, " %s to pid %d (%s, %s)", p.Signal, p.PID, p.Comm, p.Run)
	}
	if len(r.Survivors) > 0 {
		fmt.Fprintf(&b, "; survivors %v", r.Survivors)
	}
	fmt.Fprintf(&b, " in %.1f ms", r.Ms)
	return b.String()
}

// Status is an entry with what became of it.
type Status struct {
	Entry
	State string `json:"state"` // running, exited, gone (vanished without a recorded exit)
}

// States of an entry.
const (
	StateRunning = "running"
	StateExited  = "exited"
	StateGone    = "gone"
)

func (a *NodeAgent) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

// Start starts a launch under a supervisor, unless the same launch is
// already running there (then it reports that one: starts are
// idempotent). A different launch of the same Trainer on the node is
// replaced.
func (a *NodeAgent) Start(ctx context.Context, l Launch) (Started, error) {
	if err := l.Validate(); err != nil {
		return Started{}, err
	}
	own, err := a.owner(l.Owner)
	if err != nil {
		return Started{}, err
	}
	lk, err := a.Registry.lock(ctx, l.Node)
	if err != nil {
		return Started{}, err
	}
	defer lk.unlock()
	if until := a.Registry.fenced(l.Node, a.now()); !until.IsZero() {
		return Started{}, fmt.Errorf("start %s on %s: %w (until its epilog, at most until %s)", l.Trainer, l.Node, ErrFenced, until.UTC().Format(time.RFC3339))
	}
	if e, ok, err := a.Registry.Entry(l.Node, l.Trainer); err != nil {
		return Started{}, err
	} else if ok {
		procs, err := Procs()
		if err != nil {
			return Started{}, err
		}
		if entryState(e, procs) == StateRunning && e.Owner == l.Owner && slices.Equal(e.Argv, l.Argv) && e.Workdir == l.Workdir {
			return Started{Entry: e, Existing: true}, nil
		}
	}
	// Leftovers of an earlier launch (exited, replaced, or started by an
	// agent that died before recording it) go first.
	if _, err := a.killLocked(ctx, l.Node, l.Trainer); err != nil {
		return Started{}, err
	}
	return a.spawn(l, own)
}

// owner is whom a program runs as.
type owner struct {
	uid, gid int
	groups   []uint32
	home     string
	switchTo bool // set credentials (we are root)
}

func (a *NodeAgent) owner(name string) (owner, error) {
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

// superviseRequest is what start hands its supervisor: everything
// resolved, nothing left to look up.
type superviseRequest struct {
	Registry string   `json:"registry"`
	Node     string   `json:"node"`
	Trainer  string   `json:"trainer"`
	Token    string   `json:"token"`
	Path     string   `json:"path"`
	Argv     []string `json:"argv"`
	Env      []string `json:"env"`
	Dir      string   `json:"dir"`
	UID      int      `json:"uid"`
	GID      int      `json:"gid"`
	Groups   []uint32 `json:"groups"`
	Switch   bool     `json:"switch"`
}

// ack is the supervisor's first word: the program's pid, or why it could
// not be started.
type ack struct {
	PID   int    `json:"pid,omitempty"`
	Error string `json:"error,omitempty"`
}

// spawn starts the supervisor in its own session and waits for its ack.
func (a *NodeAgent) spawn(l Launch, own owner) (Started, error) {
	env := map[string]string{"HOME": own.home, "USER": l.Owner, "LOGNAME": l.Owner, "PATH": safePath}
	for k, v := range l.Env {
		env[k] = v
	}
	env["BFTRAINER_TRAINER"] = l.Trainer
	env["BFTRAINER_NODE"] = l.Node
	env[RunEnv] = l.Token // last: a launch cannot override its own mark
	dir := l.Workdir
	if dir == "" {
		dir = own.home
	}
	logPath, logf, err := a.openLog(l, own)
	if err != nil {
		return Started{}, err
	}
	defer logf.Close()
	if len(l.Nodes) > 0 {
		nf, err := a.writeNodeFile(l)
		if err != nil {
			return Started{}, err
		}
		env["BFTRAINER_NODES"] = strings.Join(l.Nodes, ",")
		env["BFTRAINER_NODEFILE"] = nf
	}
	// The chdir happens in the child, as the owner; a directory that does
	// not exist would come back as the exec's ENOENT, naming the program.
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return Started{}, fmt.Errorf("start %s on %s: workdir %s: not a directory", l.Trainer, l.Node, dir)
	}
	path, err := lookPathIn(l.Argv[0], env["PATH"], dir)
	if err != nil {
		return Started{}, fmt.Errorf("start %s on %s: %w", l.Trainer, l.Node, err)
	}
	req := superviseRequest{Registry: a.Registry.Dir, Node: l.Node, Trainer: l.Trainer, Token: l.Token,
		Path: path, Argv: l.Argv, Env: envList(env), Dir: dir,
		UID: own.uid, GID: own.gid, Groups: own.groups, Switch: own.switchTo}
	body, err := json.Marshal(req)
	if err != nil {
		return Started{}, err
	}
	fmt.Fprintf(logf, "bftrainer: %s start %s on %s as %s: %s\n", a.now().UTC().Format(time.RFC3339), l.Trainer, l.Node, l.Owner, ShellJoin(l.Argv))

	inR, inW, err := os.Pipe()
	if err != nil {
		return Started{}, err
	}
	ackR, ackW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return Started{}, err
	}
	defer ackR.Close()
	self := a.Self
	if self == "" {
		if self, err = os.Executable(); err != nil {
			return Started{}, err
		}
	}
	cmd := exec.Command(self, "node-agent", "supervise")
	// The supervisor runs as root: it gets no environment of the launch
	// (an LD_PRELOAD there is for the owner's program, not for root), only
	// the run token, so that a kill by token covers it too.
	cmd.Env = []string{"PATH=" + safePath, RunEnv + "=" + l.Token}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, logf, logf
	cmd.ExtraFiles = []*os.File{ackW} // fd 3
	cmd.Dir = "/"
	// Its own session, hence its own process group (pgid = its pid), which
	// the program and every descendant that does not setsid share: one
	// kill(-pgid) reaches them all. It also leaves the ssh session's
	// process group, so the ssh connection closing cannot signal it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	inR.Close()
	ackW.Close()
	if err != nil {
		inW.Close()
		return Started{}, fmt.Errorf("start supervisor: %w", err)
	}
	go func() {
		inW.Write(body)
		inW.Close()
	}()
	go cmd.Wait() // reap it if we outlive it (tests, a long-lived caller)

	ackR.SetReadDeadline(time.Now().Add(10 * time.Second))
	var ak ack
	line, rerr := bufio.NewReader(ackR).ReadBytes('\n')
	if rerr == nil {
		rerr = json.Unmarshal(line, &ak)
	}
	if rerr != nil || ak.Error != "" || ak.PID <= 0 {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		if ak.Error != "" {
			return Started{}, fmt.Errorf("start %s on %s: %s", l.Trainer, l.Node, ak.Error)
		}
		return Started{}, fmt.Errorf("start %s on %s: no word from the supervisor: %v", l.Trainer, l.Node, rerr)
	}
	e := Entry{Trainer: l.Trainer, Node: l.Node, Owner: l.Owner, UID: own.uid, GID: own.gid, Token: l.Token,
		PGID: cmd.Process.Pid, PID: ak.PID, Argv: l.Argv, Workdir: l.Workdir, Log: logPath, Started: a.now().UTC()}
	if err := a.Registry.write(e); err != nil {
		// Unrecorded processes would be found only by token: kill them now.
		syscall.Kill(-e.PGID, syscall.SIGKILL)
		return Started{}, fmt.Errorf("record %s on %s: %w", l.Trainer, l.Node, err)
	}
	return Started{Entry: e}, nil
}

// openLog opens the program's output file, LOGDIR/TRAINER/NODE.log, for
// appending. It is created by root in root-owned directories and then
// given to the owner, so no path a user controls is ever opened as root.
func (a *NodeAgent) openLog(l Launch, own owner) (string, *os.File, error) {
	if err := ensureRoot(a.LogDir); err != nil {
		return "", nil, fmt.Errorf("log directory: %w", err)
	}
	d := filepath.Join(a.LogDir, l.Trainer)
	if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", nil, fmt.Errorf("log directory: %w", err)
	}
	if err := ensureRoot(d); err != nil {
		return "", nil, fmt.Errorf("log directory: %w", err)
	}
	p := filepath.Join(d, l.Node+".log")
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_APPEND|syscall.O_NOFOLLOW, 0o640)
	if err != nil {
		return "", nil, fmt.Errorf("log: %w", err)
	}
	if own.switchTo {
		if err := f.Chown(own.uid, own.gid); err != nil {
			f.Close()
			return "", nil, fmt.Errorf("log: %w", err)
		}
	}
	return p, f, nil
}

// writeNodeFile writes the Trainer's node list, one per line, beside the
// log: LOGDIR/TRAINER/NODE.nodes.
func (a *NodeAgent) writeNodeFile(l Launch) (string, error) {
	p := filepath.Join(a.LogDir, l.Trainer, l.Node+".nodes")
	if err := writeAtomic(p, []byte(strings.Join(l.Nodes, "\n")+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("node file: %w", err)
	}
	return p, nil
}

func envList(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
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

// Stop kills one Trainer's processes on a node: its recorded process
// group, then every process still carrying its run token there; it
// returns once they are gone (or the wait is over) and removes the entry.
func (a *NodeAgent) Stop(ctx context.Context, node, trainer string) (KillReport, error) {
	if err := names.ValidateTrainer(trainer); err != nil {
		return KillReport{}, err
	}
	lk, err := a.Registry.lock(ctx, node)
	if err != nil {
		return KillReport{}, err
	}
	defer lk.unlock()
	return a.killLocked(ctx, node, trainer)
}

// KillAll kills every Trainer process on the node — the reclaim. With
// fence, starts are refused afterwards until Clean lifts the fence (the
// job's epilog) or FenceMax passes.
func (a *NodeAgent) KillAll(ctx context.Context, node string, fence bool) (KillReport, error) {
	lk, err := a.Registry.lock(ctx, node)
	if err != nil {
		return KillReport{}, err
	}
	defer lk.unlock()
	if fence {
		max := a.FenceMax
		if max <= 0 {
			max = 10 * time.Minute
		}
		if err := a.Registry.fence(node, a.now().Add(max)); err != nil {
			return KillReport{}, err
		}
	}
	return a.killLocked(ctx, node, "")
}

// Clean kills every Trainer process on the node and lifts a reclaim
// fence: the scheduler's job there ended (its epilog).
func (a *NodeAgent) Clean(ctx context.Context, node string) (KillReport, error) {
	lk, err := a.Registry.lock(ctx, node)
	if err != nil {
		return KillReport{}, err
	}
	defer lk.unlock()
	rep, err := a.killLocked(ctx, node, "")
	if err == nil {
		err = a.Registry.unfence(node)
	}
	return rep, err
}

// killLocked is Stop (trainer set) or KillAll (trainer ""), the node's
// lock held.
func (a *NodeAgent) killLocked(ctx context.Context, node, trainer string) (rep KillReport, err error) {
	start := time.Now()
	rep = KillReport{Node: node, Trainer: trainer}
	defer func() { rep.Ms = float64(time.Since(start).Microseconds()) / 1000 }()
	ents, err := a.Registry.Entries(node)
	if err != nil {
		return rep, err
	}
	if trainer != "" {
		ents = slices.DeleteFunc(ents, func(e Entry) bool { return e.Trainer != trainer })
	}
	procs, err := Procs()
	if err != nil {
		return rep, err
	}
	me := os.Getpid()
	groups := map[int]bool{}
	for _, e := range ents {
		if e.Exit != nil {
			if rep.Exits == nil {
				rep.Exits = map[string]int{}
			}
			rep.Exits[e.Trainer] = e.Exit.Code
		}
		if e.PGID <= 1 {
			continue
		}
		// Kill the group only while a member still carries the launch's
		// token: a group id whose processes are all gone may have been
		// reused by someone else's process group.
		var members []int
		verified := false
		for _, p := range procs {
			if p.PGID == e.PGID && !p.Dead() && p.PID != me {
				members = append(members, p.PID)
				verified = verified || p.Run == e.Token
			}
		}
		if !verified {
			continue
		}
		// SIGKILL the whole group, never the torchrun agent's pid alone:
		// its worker shares the group and would be orphaned, training on
		// (see the notes on torch 1.13).
		if err := syscall.Kill(-e.PGID, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return rep, fmt.Errorf("kill group %d of %s: %w", e.PGID, e.Trainer, err)
		}
		groups[e.PGID] = true
		rep.Groups = append(rep.Groups, KilledGroup{Trainer: e.Trainer, PGID: e.PGID, PIDs: members, Signal: "SIGKILL"})
	}
	match := func(p Proc) bool {
		if p.PID == me || p.Dead() {
			return false
		}
		if groups[p.PGID] {
			return true
		}
		t, ok := p.Token()
		if !ok || (trainer != "" && t.Trainer != trainer) {
			return false
		}
		return t.Node == node || p.Host == node
	}
	wait := a.KillWait
	if wait <= 0 {
		wait = 5 * time.Second
	}
	deadline := time.Now().Add(wait)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	// Wait for the killed groups' members to die before looking again:
	// a process freeing a few hundred megabytes takes milliseconds, and
	// each look at /proc reads every process's environment.
	var killed []int
	for _, g := range rep.Groups {
		killed = append(killed, g.PIDs...)
	}
	waitExit(killed, deadline)
	if len(killed) > 0 {
		if procs, err = Procs(); err != nil {
			return rep, err
		}
	}
	signalled := map[int]bool{}
	pause := time.Millisecond
	for {
		var alive []Proc
		for _, p := range procs {
			if match(p) {
				alive = append(alive, p)
			}
		}
		if len(alive) == 0 {
			break
		}
		if time.Now().After(deadline) {
			for _, p := range alive {
				rep.Survivors = append(rep.Survivors, p.PID)
			}
			return rep, fmt.Errorf("node %s: %w after %v: pids %v", node, ErrSurvivors, wait, rep.Survivors)
		}
		for _, p := range alive {
			if signalled[p.PID] {
				continue
			}
			signalled[p.PID] = true
			// Members of a group just killed need nothing more; others
			// escaped it (setsid) or were never in one we recorded.
			if !groups[p.PGID] {
				rep.Procs = append(rep.Procs, KilledProc{PID: p.PID, PGID: p.PGID, Comm: p.Comm, Run: p.Run, Signal: "SIGKILL"})
			}
			syscall.Kill(p.PID, syscall.SIGKILL)
		}
		time.Sleep(pause)
		pause = min(2*pause, 20*time.Millisecond)
		if procs, err = Procs(); err != nil {
			return rep, err
		}
	}
	for _, e := range ents {
		if err := a.Registry.remove(node, e.Trainer); err != nil {
			return rep, fmt.Errorf("registry: %w", err)
		}
		rep.Removed = append(rep.Removed, e.Trainer)
	}
	return rep, nil
}

// List returns the node's entries and what became of them.
//
// It takes the node's lock, as the kills do: a reclaim in progress has
// killed processes whose entries it has not yet removed, and a look in
// between would report those launches as gone by themselves — a Trainer
// failure, when it is a reclaim.
func (a *NodeAgent) List(ctx context.Context, node string) ([]Status, error) {
	lk, err := a.Registry.lock(ctx, node)
	if err != nil {
		return nil, err
	}
	defer lk.unlock()
	ents, err := a.Registry.Entries(node)
	if err != nil {
		return nil, err
	}
	procs, err := Procs()
	if err != nil {
		return nil, err
	}
	out := make([]Status, 0, len(ents))
	for _, e := range ents {
		out = append(out, Status{Entry: e, State: entryState(e, procs)})
	}
	return out, nil
}

// entryState says whether a launch runs: exited when its supervisor
// recorded the program's end, running while any live process carries its
// token, gone otherwise (killed by someone else, the machine rebooted).
func entryState(e Entry, procs []Proc) string {
	if e.Exit != nil {
		return StateExited
	}
	for _, p := range procs {
		if !p.Dead() && p.Run == e.Token {
			return StateRunning
		}
	}
	return StateGone
}

// maxLaunch bounds a launch read from standard input.
const maxLaunch = 1 << 20

// Main runs one node-agent command — start (launch JSON on stdin), stop
// NODE TRAINER, kill-all [--fence] NODE, clean NODE, list NODE, or the
// internal supervise — and writes its JSON answer to stdout.
func (a *NodeAgent) Main(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New("node-agent: want start, stop, kill-all, clean, list")
	}
	var out any
	var err error
	switch cmd, rest := args[0], args[1:]; cmd {
	case "supervise":
		return Supervise(stdin, os.NewFile(3, "ack"), os.Stderr)
	case "start":
		if len(rest) != 0 {
			return errors.New("node-agent start: the launch comes on standard input")
		}
		var l Launch
		dec := json.NewDecoder(io.LimitReader(stdin, maxLaunch))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&l); err != nil {
			return fmt.Errorf("node-agent start: read launch: %w", err)
		}
		out, err = a.Start(ctx, l)
	case "stop":
		if len(rest) != 2 {
			return errors.New("node-agent stop: want NODE TRAINER")
		}
		out, err = a.Stop(ctx, rest[0], rest[1])
	case "kill-all":
		fence := len(rest) == 2 && rest[0] == "--fence"
		if fence {
			rest = rest[1:]
		}
		if len(rest) != 1 {
			return errors.New("node-agent kill-all: want [--fence] NODE")
		}
		out, err = a.KillAll(ctx, rest[0], fence)
	case "clean":
		if len(rest) != 1 {
			return errors.New("node-agent clean: want NODE")
		}
		out, err = a.Clean(ctx, rest[0])
	case "list":
		if len(rest) != 1 {
			return errors.New("node-agent list: want NODE")
		}
		out, err = a.List(ctx, rest[0])
	default:
		return fmt.Errorf("node-agent: unknown command %q", cmd)
	}
	// A kill that failed still says what it sent to which process.
	if _, isReport := out.(KillReport); err == nil || isReport {
		if werr := json.NewEncoder(stdout).Encode(out); err == nil {
			err = werr
		}
	}
	return err
}

// waitExit waits until the processes have exited (zombies count: they run
// nothing) or the deadline passes, without polling /proc: a pidfd becomes
// readable when its process exits.
func waitExit(pids []int, deadline time.Time) {
	var fds []unix.PollFd
	for _, pid := range pids {
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue // already gone, or pidfds unsupported: the scan decides
		}
		defer unix.Close(fd)
		fds = append(fds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
	}
	for len(fds) > 0 {
		left := time.Until(deadline)
		if left <= 0 {
			return
		}
		n, err := unix.Poll(fds, int(left.Milliseconds())+1)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return
		}
		if n <= 0 {
			continue
		}
		fds = slices.DeleteFunc(fds, func(f unix.PollFd) bool { return f.Revents != 0 })
	}
}
