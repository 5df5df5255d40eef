package trainer

import (
	"fmt"
	"time"

	"github.com/bftrainer/bftrainer/trainer/agent"
	"github.com/bftrainer/bftrainer/trainer/registry"
)

// AgentSettings are a node agent's configuration, as the binary's wiring
// gives them ([trainer] of the node's configuration, and the schedulers'
// job markers of the registry it is built with).
type AgentSettings struct {
	Registry       string        // the node's launch registry directory
	LogDir         string        // program output: LOGDIR/TRAINER/RUN/NODE.log
	Self           string        // executable that runs "node-agent supervise"; "": the running one
	AllowRootOwner bool          // tests only: let a Trainer run as root
	KillWait       time.Duration // how long a kill waits for processes to be gone; 0: 5 s
	Containment    string        // ContainAuto, ContainCgroup or ContainOff; "": auto
	CgroupRoot     string        // the delegated subtree; "": CGROUP2MOUNT/bftrainer
	PidsMax        int64         // per launch, where the controller exists; 0: none
	MemoryMax      int64         // bytes, per launch; 0: none
	IdleCPU        bool          // start programs at SCHED_IDLE (cpu_priority = "idle")
	DeviceGlob     string        // device files a kill waits to be released; "": none
	// Sweep scans /proc for every run token of the node whatever the
	// containment: for a kill whose configuration did not load.
	Sweep bool
	// JobMarkers are the schedulers' job variables
	// (hooks.Registry.JobMarkers): a process carrying one is spared.
	JobMarkers []string
	// Version is the binary's version, which "node-agent doctor" reports.
	Version string
}

// Containment modes of trainer.containment.
const (
	ContainAuto   = agent.ContainAuto
	ContainCgroup = agent.ContainCgroup
	ContainOff    = agent.ContainOff
)

// CheckContainment checks a trainer.containment value.
func CheckContainment(mode string) error {
	switch mode {
	case ContainAuto, ContainCgroup, ContainOff:
		return nil
	}
	return fmt.Errorf("%q, want %s, %s or %s", mode, ContainAuto, ContainCgroup, ContainOff)
}

// NewNodeAgent returns the node agent in process: what `bftrainer
// node-agent` runs (its Main), and what a node's own prolog kills with
// (KillAll, Clean: a sidecar.Killer, as AgentClient is for a remote node).
func NewNodeAgent(s AgentSettings) *agent.Agent {
	return &agent.Agent{
		Registry:       registry.Registry{Dir: s.Registry},
		LogDir:         s.LogDir,
		Self:           s.Self,
		AllowRootOwner: s.AllowRootOwner,
		KillWait:       s.KillWait,
		Containment:    s.Containment,
		CgroupRoot:     s.CgroupRoot,
		Limits:         agent.Limits{Pids: s.PidsMax, Memory: s.MemoryMax},
		IdleCPU:        s.IdleCPU,
		DeviceGlob:     s.DeviceGlob,
		Sweep:          s.Sweep,
		JobMarkers:     s.JobMarkers,
		Version:        s.Version,
	}
}
