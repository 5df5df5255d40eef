package wire

import (
	"fmt"
	"strings"
)

// Containment modes, as a kill report and `status` say them.
const (
	// Cgroup: every process of a launch lives in the launch's own cgroup
	// v2 directory, created before the first exec; no process can leave
	// it, and the kill is cgroup.kill plus a wait until it is empty.
	Cgroup = "cgroup"
	// Degraded is the prefix of the fallback's mode, "degraded (reason)":
	// process groups, the run token and the owner's processes, found in
	// /proc.
	Degraded = "degraded"
)

// DegradedEscapes says which processes a degraded kill cannot account
// for: it is in every degraded report, so that no report calls a node
// clean when it may not be.
const DegradedEscapes = "a process of the owner's that carries a scheduler job's variables, " +
	"one that changed its uid (a setuid program), and one started through another service " +
	"(cron, at, systemd-run) before the kill's scan"

// KillReport says what a stop or a kill did to which process.
type KillReport struct {
	Node    string `json:"node"`
	Trainer string `json:"trainer,omitempty"` // "" for every Trainer on the node
	// Containment is how the processes were found: Cgroup, or
	// "degraded (reason)".
	Containment string `json:"containment"`
	// Clean is true only when every process of ours on the node was
	// accounted for and is gone: cgroup containment, every cgroup empty,
	// no device still held. A degraded kill is never clean.
	Clean     bool           `json:"clean"`
	Escapes   string         `json:"escapes,omitempty"` // degraded: what may remain unseen
	Cgroups   []KilledCgroup `json:"cgroups,omitempty"`
	Groups    []KilledGroup  `json:"groups,omitempty"`
	Procs     []KilledProc   `json:"procs,omitempty"`   // found one by one in /proc
	Holders   []Holder       `json:"holders,omitempty"` // processes of ours that held a device file
	Removed   []string       `json:"removed,omitempty"`
	Survivors []int          `json:"survivors,omitempty"`
	Exits     map[string]int `json:"exits,omitempty"` // entries that had exited by themselves: Trainer → code
	// Errors are what failed after the kill (the fence, the registry):
	// they never prevented or delayed it.
	Errors []string           `json:"errors,omitempty"`
	Ms     float64            `json:"ms"`
	Stages map[string]float64 `json:"stages_ms,omitempty"` // where the time went
}

// KilledCgroup is a launch's cgroup, killed with cgroup.kill.
type KilledCgroup struct {
	Trainer string `json:"trainer"`
	Path    string `json:"path"`
	PIDs    []int  `json:"pids"` // its members when it was killed
}

// KilledGroup is a recorded process group sent SIGKILL.
type KilledGroup struct {
	Trainer string `json:"trainer"`
	PGID    int    `json:"pgid"`
	PIDs    []int  `json:"pids"` // its members when it was signalled
	Signal  string `json:"signal"`
}

// KilledProc is a process sent SIGKILL on its own, outside a recorded
// group or cgroup, and why it was taken for ours.
type KilledProc struct {
	PID    int    `json:"pid"`
	PGID   int    `json:"pgid"`
	Comm   string `json:"comm"`
	Run    string `json:"run,omitempty"`
	Why    string `json:"why"` // token, host (a Horovod worker), owner (the owner's, started after the run)
	Signal string `json:"signal"`
}

// Holder is a process of ours that held device files (a GPU) when the
// kill began.
type Holder struct {
	PID   int      `json:"pid"`
	Comm  string   `json:"comm"`
	Files []string `json:"files"`
}

// Count returns how many processes were killed.
func (r KillReport) Count() int {
	seen := map[int]bool{}
	for _, c := range r.Cgroups {
		for _, p := range c.PIDs {
			seen[p] = true
		}
	}
	for _, g := range r.Groups {
		for _, p := range g.PIDs {
			seen[p] = true
		}
	}
	for _, p := range r.Procs {
		seen[p.PID] = true
	}
	return len(seen)
}

// String is a one-line account for logs.
func (r KillReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "node %s:", r.Node)
	if len(r.Cgroups) == 0 && len(r.Groups) == 0 && len(r.Procs) == 0 {
		b.WriteString(" nothing running")
	}
	for _, c := range r.Cgroups {
		fmt.Fprintf(&b, " cgroup.kill %s (%s: pids %v)", c.Path, c.Trainer, c.PIDs)
	}
	for _, g := range r.Groups {
		fmt.Fprintf(&b, " %s to group %d (%s: pids %v)", g.Signal, g.PGID, g.Trainer, g.PIDs)
	}
	for _, p := range r.Procs {
		fmt.Fprintf(&b, " %s to pid %d (%s, %s)", p.Signal, p.PID, p.Comm, p.Why)
	}
	for _, h := range r.Holders {
		fmt.Fprintf(&b, "; pid %d (%s) held %s", h.PID, h.Comm, strings.Join(h.Files, ","))
	}
	if len(r.Survivors) > 0 {
		fmt.Fprintf(&b, "; survivors %v", r.Survivors)
	}
	fmt.Fprintf(&b, "; containment: %s", r.Containment)
	switch {
	case r.Clean:
		b.WriteString(", clean")
	case r.Escapes != "":
		fmt.Fprintf(&b, ", not provably clean: may escape: %s", r.Escapes)
	}
	for _, e := range r.Errors {
		fmt.Fprintf(&b, "; after the kill: %s", e)
	}
	fmt.Fprintf(&b, " in %.1f ms", r.Ms)
	return b.String()
}
