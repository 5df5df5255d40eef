// Package trainer is the controller side of running Trainers: the runner
// the reconciler hands each round's desired state to (each Trainer and the
// nodes it should run on), the launchers that know how one kind of
// Trainer is started and scaled (exec, torchrun, Elastic Horovod, …; one
// Kind value each in Builtin), the transports that reach the node agents
// (ssh, or local) and the agents' one client (AgentClient: every
// node-agent command line outside the agent is built there). Apply makes
// the processes match, idempotently, and reports every action with its
// timing for the history; Check notices Trainers that ended by themselves.
//
// What runs on a node is the node agent's (trainer/agent, built in
// process by NewNodeAgent) and each launch's supervisor's
// (trainer/supervisor); what crosses between them and this package is in
// trainer/wire. Nothing here knows a scheduler: the job markers the agent
// spares come from the binary's hooks.Registry, through its wiring.
package trainer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/bftrainer/bftrainer/trainer/wire"
)

// Want is one Trainer's desired state.
type Want struct {
	ID       string
	Owner    string // Unix user the processes run as
	Launcher string // a registered launcher's name: exec, torchrun, horovod, elastic, mpi
	Spec     json.RawMessage
	Min, Max int
	Nodes    []string // nodes it should run on now, in the order taken
	// Since is when the Trainer was submitted: a name reused by a later
	// submission is a new Trainer, never the old one's processes. Zero
	// when unknown (the owner and launcher still tell them apart).
	Since time.Time
	// Taken are nodes the scheduler holds now (busy in the pool). A node
	// the Trainer no longer has that is among them was reclaimed, not
	// released by a plan: a launcher that lets released workers leave
	// gracefully (elastic) stops them at once there instead. Shared by
	// every Want of a round: read only.
	Taken []string
	// Reports: the Trainer has reported its progress itself (bftrainer
	// progress). Its progress log, if it declares one, is then not read:
	// reports win.
	Reports bool
}

// Action is one thing done (or that would be done) to a Trainer's
// processes.
type Action struct {
	Trainer string
	Node    string
	Op      string // start, stop, kill, store-start, store-stop, orphan-stop, ...
	Took    time.Duration
	// At is when the operation began (start, stop): the history's time of
	// the action. Zero: when the round recorded it, which for a start may
	// be seconds later (an elastic launch waits for its workers), after
	// a main job began on the node and its prolog killed what started.
	At   time.Time
	Err  error
	Note string
	// Measured is set on the action that completed a rescale whose cost
	// the launcher measured; the reconciler records it (a cost event) and
	// folds it into the Trainer's R_up / R_down.
	Measured *Measured
}

// Measured is what a rescale cost, as a launcher measured it.
type Measured struct {
	Direction string  // Up, Down, Reclaim (or Failure: a worker that crashed)
	From, To  int     // workers before and after
	Seconds   float64 // seconds of training progress lost
}

// Directions of a measured rescale.
const (
	Up      = "up"
	Down    = "down"
	Reclaim = "reclaim"
	Failure = "failure"
)

// LaunchedMark begins the part of an action's note that is the command
// line a launcher started for the whole Trainer (MPI's mpirun): `trainer
// show` prints the last one.
const LaunchedMark = "launched: "

// Exit is a Trainer whose processes all ended by themselves.
type Exit struct {
	Trainer string
	Status  string // Finished or Failed
	Note    string
}

// End states an Exit reports.
const (
	Finished = "finished"
	Failed   = "failed"
)

// Spec is how a Trainer's processes are started, as submitted: what the
// launchers shipped here share. A launcher may take another spec; each
// one's Kind.CheckSpec says what it accepts.
type Spec struct {
	Argv    []string          `json:"argv"`              // the training program and its arguments
	Workdir string            `json:"workdir,omitempty"` // directory to run in (shared across nodes)
	Env     map[string]string `json:"env,omitempty"`     // extra environment
	// EnvRef names the root-only file that holds Env's values once the
	// spec is recorded (SealEnv): the database keeps only the names.
	EnvRef       string `json:"env_ref,omitempty"`
	ProcsPerNode int    `json:"procs_per_node,omitempty"`
	// ProgressLog, when set, is a file the program appends its progress
	// to, which the runner reads (progresslog.go): its throughput
	// without a `bftrainer progress` call.
	ProgressLog *ProgressLog `json:"progress_log,omitempty"`
}

// Slots returns processes per node (Horovod's slots, torchrun's
// nproc_per_node); at least 1.
func (s Spec) Slots() int { return max(1, s.ProcsPerNode) }

// ValidateSpec checks a launch spec: a program, no NUL bytes anywhere
// (they cannot cross exec or ssh), environment names that a shell
// accepts.
func ValidateSpec(s Spec) error {
	if err := wire.ValidateCommand(s.Argv, s.Workdir, s.Env); err != nil {
		return err
	}
	if s.ProcsPerNode < 0 || s.ProcsPerNode > 1024 {
		return fmt.Errorf("launch: procs per node %d out of range", s.ProcsPerNode)
	}
	if p := s.ProgressLog; p != nil {
		if err := p.Check(); err != nil {
			return fmt.Errorf("launch: %w", err)
		}
		if _, err := p.Resolve(s.Workdir); err != nil {
			return fmt.Errorf("launch: %w", err)
		}
	}
	return nil
}

// DecodeSpec reads and checks a Spec, refusing unknown fields.
func DecodeSpec(raw json.RawMessage) (Spec, error) {
	var s Spec
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return Spec{}, fmt.Errorf("launch spec: %w", err)
	}
	if err := ValidateSpec(s); err != nil {
		return Spec{}, fmt.Errorf("launch spec: %w", err)
	}
	return s, nil
}

// CheckSpec is the Kind.CheckSpec of launchers that take a Spec.
func CheckSpec(raw json.RawMessage) error {
	_, err := DecodeSpec(raw)
	return err
}
