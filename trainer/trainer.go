// Package trainer applies allocations to real Trainer processes: it starts
// and stops agents on nodes (torchrun, Elastic Horovod, any program), over
// ssh or locally, and kills everything of ours on a node the instant the
// scheduler reclaims it.
//
// The reconciler hands it the desired state (each Trainer and the nodes it
// should run on); Apply makes the processes match, idempotently, and
// reports every action with its timing for the history.
package trainer

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Want is one Trainer's desired state.
type Want struct {
	ID       string
	Owner    string // Unix user the processes run as
	Launcher string // torchrun, horovod, exec
	Spec     json.RawMessage
	Min, Max int
	Nodes    []string // nodes it should run on now, in the order taken
}

// Action is one thing done (or that would be done) to a Trainer's
// processes.
type Action struct {
	Trainer string
	Node    string
	Op      string // start, stop, kill, store-start, store-stop, ...
	Took    time.Duration
	Err     error
	Note    string
}

// Launchers.
const (
	Torchrun = "torchrun"
	Horovod  = "horovod"
	Exec     = "exec"
)

// Spec is how a Trainer's processes are started, as submitted.
type Spec struct {
	Argv         []string          `json:"argv"`              // the training program and its arguments
	Workdir      string            `json:"workdir,omitempty"` // directory to run in (shared across nodes)
	Env          map[string]string `json:"env,omitempty"`     // extra environment
	ProcsPerNode int               `json:"procs_per_node,omitempty"`
}

// Slots returns processes per node (Horovod's slots, torchrun's
// nproc_per_node); at least 1.
func (s Spec) Slots() int { return max(1, s.ProcsPerNode) }

// ValidateSpec checks a launch spec: a program, no NUL bytes anywhere
// (they cannot cross exec or ssh), environment names that a shell
// accepts.
func ValidateSpec(s Spec) error {
	if len(s.Argv) == 0 || s.Argv[0] == "" {
		return errors.New("launch: no program")
	}
	for _, a := range append(slices.Clone(s.Argv), s.Workdir) {
		if strings.ContainsRune(a, 0) {
			return errors.New("launch: NUL byte in an argument")
		}
	}
	for k, v := range s.Env {
		if !validEnvName(k) {
			return fmt.Errorf("launch: environment name %q: letters, digits and _ only, not starting with a digit", k)
		}
		if strings.ContainsRune(v, 0) {
			return fmt.Errorf("launch: NUL byte in %s", k)
		}
	}
	if s.ProcsPerNode < 0 || s.ProcsPerNode > 1024 {
		return fmt.Errorf("launch: procs per node %d out of range", s.ProcsPerNode)
	}
	return nil
}

func validEnvName(k string) bool {
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
