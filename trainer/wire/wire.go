// Package wire holds what crosses a process boundary between bftrainer's
// Trainer processes, as JSON: the launch the controller's runner hands a
// node agent (over ssh or a local pipe), the agent's answers (started,
// killed, listed), the registry entry the agent and the per-launch
// supervisor share on the node's disk, and the request and acknowledgement
// between an agent and its supervisor. It also names the marks every
// Trainer process carries (the run token). It decides nothing and does no
// I/O: the runner (package trainer), the node agent (trainer/agent) and the
// supervisor (trainer/supervisor) each import it, and none imports another.
package wire

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/bftrainer/bftrainer/names"
)

// Launch is what a node agent is asked to start, read as JSON on its
// standard input (never from a command line, never through a shell).
type Launch struct {
	Trainer string            `json:"trainer"`
	Node    string            `json:"node"`
	Owner   string            `json:"owner"` // Unix user the program runs as
	Run     string            `json:"run"`   // the Trainer's run: fresh per submission, the same on every node
	Argv    []string          `json:"argv,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Workdir string            `json:"workdir,omitempty"` // default: the owner's home
	Token   string            `json:"token"`             // Token.String() for Trainer and Node
	Nodes   []string          `json:"nodes,omitempty"`   // the Trainer's node list, for programs told it by file
	// Hosted records a Trainer whose processes arrive on the node by
	// themselves (Elastic Horovod's workers, started by horovodrun over
	// the owner's ssh): nothing is started, the entry tells the node's
	// kill to look for them.
	Hosted bool `json:"hosted,omitempty"`
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
	if err := ValidateRun(l.Run); err != nil {
		return err
	}
	t, err := ParseToken(l.Token)
	if err != nil {
		return err
	}
	if t.Trainer != l.Trainer || t.Node != l.Node {
		return fmt.Errorf("run token %q is not for %s on %s", l.Token, l.Trainer, l.Node)
	}
	if l.Hosted {
		if len(l.Argv) > 0 {
			return errors.New("launch: a hosted launch starts nothing")
		}
	} else if err := ValidateCommand(l.Argv, l.Workdir, l.Env); err != nil {
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

// ValidateRun checks a run identity: 1 to 64 lowercase hex digits, as
// NewRun writes it. It names a log directory on every node.
func ValidateRun(run string) error {
	if run == "" || len(run) > 64 || strings.Trim(run, "0123456789abcdef") != "" {
		return fmt.Errorf("run %q: want 1 to 64 lowercase hex digits", run)
	}
	return nil
}

// ValidateCommand checks a program to start: a program, no NUL bytes
// anywhere (they cannot cross exec or ssh), environment names that a
// shell accepts.
func ValidateCommand(argv []string, workdir string, env map[string]string) error {
	if len(argv) == 0 || argv[0] == "" {
		return errors.New("launch: no program")
	}
	for _, a := range append(append([]string{}, argv...), workdir) {
		if strings.ContainsRune(a, 0) {
			return errors.New("launch: NUL byte in an argument")
		}
	}
	for k, v := range env {
		if !ValidEnvName(k) {
			return fmt.Errorf("launch: environment name %q: letters, digits and _ only, not starting with a digit", k)
		}
		if strings.ContainsRune(v, 0) {
			return fmt.Errorf("launch: NUL byte in %s", k)
		}
	}
	return nil
}

// ValidEnvName reports whether k is a name a POSIX shell accepts.
func ValidEnvName(k string) bool {
	if k == "" {
		return false
	}
	for i, c := range k {
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || (i > 0 && c >= '0' && c <= '9')) {
			return false
		}
	}
	return true
}

// Started is the answer to a start.
type Started struct {
	Entry
	Existing bool `json:"existing,omitempty"` // the same launch was already running: nothing started
	// Others are the other launches recorded on the node: the runner
	// stops those it does not know (started by a reconciler that died
	// before it could record them).
	Others []Other `json:"others,omitempty"`
}

// Other names a launch recorded on a node.
type Other struct {
	Trainer string `json:"trainer"`
	Run     string `json:"run"`
	Token   string `json:"token"`
}

// Entry is one launch in a node's registry: written by the node agent when
// it starts one, completed by the supervisor when the program exits.
type Entry struct {
	Trainer string `json:"trainer"`
	Node    string `json:"node"`
	Owner   string `json:"owner"`
	UID     int    `json:"uid"`
	GID     int    `json:"gid"`
	Run     string `json:"run"`
	Token   string `json:"token"`
	PGID    int    `json:"pgid,omitempty"` // the supervisor's pid: its session and process group
	PID     int    `json:"pid,omitempty"`  // the program's pid
	// Ticks is when the supervisor started, in clock ticks since boot
	// (/proc/PID/stat's starttime): a degraded kill takes the owner's
	// processes started after it.
	Ticks uint64 `json:"ticks,omitempty"`
	// Cgroup is the launch's own cgroup v2 directory, "" when it was
	// started without one (degraded containment).
	Cgroup string `json:"cgroup,omitempty"`
	// V1 are its directories in cgroup v1 hierarchies (limits where the
	// controller is not on the unified hierarchy).
	V1      []string    `json:"v1,omitempty"`
	Hosted  bool        `json:"hosted,omitempty"`
	Argv    []string    `json:"argv,omitempty"`
	Workdir string      `json:"workdir,omitempty"`
	Log     string      `json:"log,omitempty"`
	Started time.Time   `json:"started"`
	Exit    *ExitStatus `json:"exit,omitempty"` // set by the supervisor when the program exits by itself
}

// ExitStatus is how a program ended by itself.
type ExitStatus struct {
	Code   int       `json:"code"`             // exit status; -1 when killed by a signal
	Signal string    `json:"signal,omitempty"` // the signal, if one killed it
	At     time.Time `json:"at"`
}

// Status is an entry with what became of it.
type Status struct {
	Entry
	State string `json:"state"` // running, exited, gone
}

// States of an entry.
const (
	StateRunning = "running"
	StateExited  = "exited"
	// StateGone is an entry whose processes are all gone with no exit
	// recorded: killed by someone else than its supervisor's program
	// ending — a reclaim by a node prolog that could not update this
	// registry (a configuration that did not load), the machine
	// rebooting. It is never a Trainer failure.
	StateGone = "gone"
)

// SuperviseRequest is what the node agent hands the supervisor it starts:
// everything resolved, nothing left to look up.
type SuperviseRequest struct {
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
	// Join are cgroup v1 "cgroup.procs" files the supervisor writes its
	// own pid to before it starts the program (limits on hierarchies that
	// clone3 cannot start a process in).
	Join []string `json:"join,omitempty"`
	// Idle starts the program at SCHED_IDLE (trainer.cpu_priority =
	// "idle"): it and all it forks run only on CPU time no other process
	// of the node wants.
	Idle bool `json:"idle,omitempty"`
}

// Ack is the supervisor's first word: the program's pid, or why it could
// not be started.
type Ack struct {
	PID   int    `json:"pid,omitempty"`
	Error string `json:"error,omitempty"`
}

// MaxLaunch bounds a launch or a supervise request read from a pipe.
const MaxLaunch = 1 << 20

// NodeCheck is the node agent's answer to "node-agent doctor [HOOK]":
// what `bftrainer doctor` checks on a node.
type NodeCheck struct {
	// Containment is the agent's mode (Cgroup, or "degraded (reason)").
	Containment string `json:"containment"`
	// CgroupV2 says a cgroup2 filesystem is mounted; Kill that the kernel
	// has cgroup.kill (Linux 5.14); Pids that the pids controller is
	// available to the Trainers' subtree (v2, or v1 mirrored on a hybrid
	// host).
	CgroupV2 bool `json:"cgroup_v2"`
	Kill     bool `json:"cgroup_kill"`
	Pids     bool `json:"pids"`
	// Version is the agent's binary's version.
	Version string `json:"version"`
	// Hook is the hook path asked about; HookOK says it is an executable
	// file here, and HookErr why not.
	Hook    string `json:"hook,omitempty"`
	HookOK  bool   `json:"hook_ok,omitempty"`
	HookErr string `json:"hook_error,omitempty"`
	// Time is the node's clock when it answered.
	Time time.Time `json:"time"`
}
