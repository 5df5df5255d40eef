// Package agent is the node agent: "bftrainer node-agent", run as root on
// a node by the controller's runner (over ssh, or locally) and, for the
// reclaim, by the node's own prolog. It owns what runs on the node: it
// starts each Trainer launch as its owner under a supervisor, inside the
// launch's own cgroup where the node has a writable cgroup v2 hierarchy;
// it records launches in the node's registry; it lists them; and it kills
// them — one Trainer (a stop) or all (the reclaim), first and at once,
// with the fence, the registry and every log line after.
//
// Containment is cgroup v2 where it can be (cgroup.kill, then a wait on
// cgroup.events until the cgroup is empty); elsewhere, or when switched
// off, it is degraded — process groups, run tokens and the owner's
// processes found in /proc — and every report says so, and what may
// escape.
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/bftrainer/bftrainer/names"
	"github.com/bftrainer/bftrainer/trainer/registry"
	"github.com/bftrainer/bftrainer/trainer/supervisor"
	"github.com/bftrainer/bftrainer/trainer/wire"
)

// Agent carries out the per-node operations.
type Agent struct {
	Registry       registry.Registry
	LogDir         string        // program output: LOGDIR/TRAINER/RUN/NODE.log
	Self           string        // executable that runs "node-agent supervise"; "" means this one
	AllowRootOwner bool          // tests only: let a Trainer run as root
	KillWait       time.Duration // how long a kill waits for processes to be gone; 0 means 5 s
	// Containment is "auto" (cgroup v2 where writable, else degraded),
	// "cgroup" (refuse to start without it) or "off" (degraded, for tests
	// and hosts whose cgroups belong to someone else). "" means auto.
	Containment string
	CgroupRoot  string // the delegated subtree; "" means CGROUP2MOUNT/bftrainer
	Limits      Limits // per launch, where the controllers exist
	// IdleCPU starts every program at SCHED_IDLE (trainer.cpu_priority =
	// "idle"): a scheduling class, not a limit — a program may leave it.
	IdleCPU bool
	// DeviceGlob names the device files (GPUs) a kill reports holders of
	// and waits to be released; "" checks none.
	DeviceGlob string
	// Sweep also scans /proc for every run token of the node, whatever the
	// containment: for a kill whose configuration did not load, which
	// cannot know where the launches' registry and cgroups are.
	Sweep bool
	// JobMarkers are the variables a batch scheduler sets in every
	// process of its jobs (hooks.Scheduler.JobMarkers, each scheduler's
	// own, gathered by hooks.Registry.JobMarkers where the binary is
	// wired). A process carrying one is a scheduler job's — a main job
	// submitted from inside a Trainer inherits the Trainer's run token
	// too — and never ours to kill; Start removes them from every launch,
	// so no Trainer process starts with one. Nil spares no job: only
	// tests about something else leave it so.
	JobMarkers []string
	// Version is this binary's version, which "doctor" reports.
	Version string
	Now     func() time.Time

	cg       *Cgroups
	cgReason string
	cgDone   bool
}

// Containment modes of the configuration.
const (
	ContainAuto   = "auto"
	ContainCgroup = "cgroup"
	ContainOff    = "off"
)

// Errors a caller may branch on.
var (
	ErrFenced     = errors.New("node is reclaimed by the scheduler")
	ErrRootOwner  = errors.New("refusing to run a Trainer as root")
	ErrSurvivors  = errors.New("processes survived SIGKILL")
	ErrNoCgroup   = errors.New("no cgroup containment")
	ErrDeviceHeld = errors.New("device files still held")
)

func (a *Agent) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

func (a *Agent) killWait() time.Duration {
	if a.KillWait > 0 {
		return a.KillWait
	}
	return 5 * time.Second
}

// cgroups returns the node's cgroup subtree, or nil and the reason
// containment is degraded. It is looked at once per agent.
func (a *Agent) cgroups() (*Cgroups, string) {
	if a.cgDone {
		return a.cg, a.cgReason
	}
	a.cgDone = true
	switch a.Containment {
	case ContainOff:
		a.cgReason = "switched off by trainer.containment"
		return nil, a.cgReason
	case "", ContainAuto, ContainCgroup:
	default:
		a.cgReason = fmt.Sprintf("unknown trainer.containment %q", a.Containment)
		return nil, a.cgReason
	}
	cg, err := openCgroups(a.CgroupRoot, false)
	if err != nil {
		a.cgReason = err.Error()
		return nil, a.cgReason
	}
	a.cg = cg
	return cg, ""
}

// cgroupsToStart is cgroups, with the root made: a start needs it.
func (a *Agent) cgroupsToStart() (*Cgroups, string) {
	cg, reason := a.cgroups()
	if cg == nil || !cg.absent {
		return cg, reason
	}
	made, err := OpenCgroups(cg.Root)
	if err != nil {
		a.cg, a.cgReason = nil, err.Error()
		return nil, a.cgReason
	}
	a.cg = made
	return made, ""
}

// Mode says how this node contains Trainer processes: wire.Cgroup, or
// "degraded (reason)".
func (a *Agent) Mode() string {
	if _, reason := a.cgroups(); reason != "" {
		return degraded(reason)
	}
	return wire.Cgroup
}

func degraded(reason string) string { return wire.Degraded + " (" + reason + ")" }

// ModeReport is the answer to "node-agent containment".
type ModeReport struct {
	Containment string `json:"containment"`
	Root        string `json:"cgroup_root,omitempty"`
	Escapes     string `json:"escapes,omitempty"` // what a degraded kill may miss
}

// Report says the node's containment mode.
func (a *Agent) Report() ModeReport {
	r := ModeReport{Containment: a.Mode()}
	if cg, _ := a.cgroups(); cg != nil {
		r.Root = cg.Root
	} else {
		r.Escapes = wire.DegradedEscapes
	}
	return r
}

// Unfence lifts node's reclaim fence: new starts are taken again.
func (a *Agent) Unfence(_ context.Context, node string) error {
	if err := names.ValidateNode(node); err != nil {
		return err
	}
	return a.Registry.Unfence(node)
}

// Main runs one node-agent command — start (launch JSON on stdin), stop
// NODE TRAINER, kill-all [--fence] NODE, clean NODE, unfence NODE, list
// NODE, tail NODE TRAINER (request on stdin), containment, doctor [HOOK], or the
// internal supervise and read-tail — and writes its JSON
// answer to stdout.
func (a *Agent) Main(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New("node-agent: want start, stop, kill-all, clean, unfence, list, tail, containment or doctor")
	}
	var out any
	var err error
	switch cmd, rest := args[0], args[1:]; cmd {
	case "supervise":
		return supervisor.Main(stdin, os.NewFile(3, "ack"), os.Stderr)
	case "read-tail":
		return readTailMain(stdin, stdout)
	case "tail":
		if len(rest) != 2 {
			return errors.New("node-agent tail: want NODE TRAINER (the request on standard input)")
		}
		var req wire.TailRequest
		dec := json.NewDecoder(io.LimitReader(stdin, wire.MaxLaunch))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			return fmt.Errorf("node-agent tail: read request: %w", err)
		}
		out, err = a.Tail(ctx, rest[0], rest[1], req)
	case "start":
		if len(rest) != 0 {
			return errors.New("node-agent start: the launch comes on standard input")
		}
		var l wire.Launch
		dec := json.NewDecoder(io.LimitReader(stdin, wire.MaxLaunch))
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
	case "unfence":
		if len(rest) != 1 {
			return errors.New("node-agent unfence: want NODE")
		}
		err = a.Unfence(ctx, rest[0])
		out = map[string]string{"node": rest[0]}
	case "list":
		if len(rest) != 1 {
			return errors.New("node-agent list: want NODE")
		}
		out, err = a.List(ctx, rest[0])
	case "containment":
		out = a.Report()
	case "doctor":
		if len(rest) > 1 {
			return errors.New("node-agent doctor: want [HOOK]")
		}
		hook := ""
		if len(rest) == 1 {
			hook = rest[0]
		}
		out = a.Doctor(hook)
	default:
		return fmt.Errorf("node-agent: unknown command %q", cmd)
	}
	// A kill that failed still says what it sent to which process.
	if _, isReport := out.(wire.KillReport); err == nil || isReport {
		if werr := json.NewEncoder(stdout).Encode(out); err == nil {
			err = werr
		}
	}
	return err
}
