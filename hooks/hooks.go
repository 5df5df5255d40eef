// Package hooks decides what a batch scheduler's hook call means for the
// idle pool: which scheduler called, in which hook, for which job and nodes,
// and so whether bftrainer must reclaim nodes, release them, or act on the
// local node only. It also reads each scheduler's own view of node states,
// and, where a scheduler publishes one, its plan of the jobs it will start
// (PlannedStart; Grid Engine's reservations, GridEnginePlan), and, for
// `bftrainer doctor`, checks its running configuration against what
// bftrainer needs (Wiring: Slurm's scontrol show config, Grid Engine's
// queues).
//
// Each scheduler is one Scheduler value in its own file (slurm.go, lsf.go,
// pbs.go, gridengine.go), and a Registry lists them (Builtin); nothing
// outside a scheduler's file knows its hooks, its commands or the
// variables that mark its jobs' processes (JobMarkers: the node agent is
// built with the registry's, and spares a process carrying one). A parser
// reads the hook's environment (and, for PBS and Grid Engine, its arguments
// and node file) and returns a Call; it never runs a scheduler command on
// the hook's path, so Slurm hostlists are expanded natively
// (names.ExpandHostlist). Every node name, job ID and user name in a Call
// has been validated against a conservative character set, because they
// later reach ssh command lines and SQL.
//
// Slurm's behaviour is documented and was observed on a real cluster
// (Slurm 22.05, the project's notes on Slurm), Grid Engine's on a real cell
// (Son of Grid Engine 8.1.9: internal/lab/gridengine, whose recorded hook
// environments and listings are testdata/gridengine), OpenPBS's on a real
// cell run by hand (23.06.06: testdata/pbs, contrib/pbs/README.md). LSF
// and Torque were not available: what this package assumes about them is
// written on parseLSF and parsePBS, each point marked as taken from the
// vendor's documentation or as our assumption.
package hooks

import (
	"fmt"
)

// Action is what a hook call means for the idle pool. The zero Action is
// Ignore, so that a Call built by hand does nothing by accident.
type Action int

const (
	// Ignore: a hook context we do not act on (per-task or per-step hooks,
	// hooks that run as the job's user).
	Ignore Action = iota
	// Reclaim: a main job is about to start on Call.Nodes. Everything of
	// ours on them must be killed and the nodes recorded as gone, at once.
	Reclaim
	// Release: a main job ended on Call.Nodes. They may rejoin the pool
	// once the scheduler reports them exactly idle (its epilogs may still
	// be running).
	Release
	// KillLocal: a node-local prolog on Call.Local. Kill our processes on
	// this node only; no network, no database.
	KillLocal
	// CleanupLocal: a node-local epilog on Call.Local. Nothing of ours
	// should be running here; clean up whatever is.
	CleanupLocal
)

// String returns the Action's name as logs and the history write it.
func (a Action) String() string {
	switch a {
	case Ignore:
		return "ignore"
	case Reclaim:
		return "reclaim"
	case Release:
		return "release"
	case KillLocal:
		return "kill-local"
	case CleanupLocal:
		return "cleanup-local"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Call is one hook invocation, decoded.
type Call struct {
	// Scheduler is the Name of the Scheduler that decoded it.
	Scheduler string
	// Context is the scheduler's own name for the hook: Slurm's
	// SLURM_SCRIPT_CONTEXT ("prolog_slurmctld", "epilog_slurmd", …), the
	// LSF hook ("pre_exec", "host_post_exec", …) or the PBS script or hook
	// event ("prologue", "epilogue.parallel", "execjob_prologue", …).
	Context string
	// Action is what the call means for the pool.
	Action Action
	// JobID is the scheduler's ID of the main job.
	JobID string
	// User owns the main job; it may be empty.
	User string
	// Nodes are all the job's nodes, expanded and deduplicated, in the
	// scheduler's order.
	Nodes []string
	// Local is the node the hook runs on, for node-local hooks (and where
	// known for the others); empty for Slurm's controller hooks.
	Local string
	// OnlyHook marks a job-level call (Reclaim or Release) that is the
	// only hook its scheduler runs for the job: no node-local prolog or
	// epilog runs on Nodes (Grid Engine runs its prolog and epilog on the
	// job's master host alone). The call itself then kills (Reclaim) or
	// cleans up (Release) on every one of Nodes, as their own prologs and
	// epilogs would: on Local from this machine's registry, on the others
	// through the node agents.
	OnlyHook bool
}

// Env looks up one variable of the hook's environment, as os.LookupEnv does
// (os.LookupEnv is the Env of a real hook). Throughout this package a
// variable set to the empty string counts as unset: schedulers leave such
// variables behind, and an empty node list or job ID is no better than none.
type Env func(key string) (string, bool)

// MapEnv returns an Env that reads m: for tests, and for environments
// recorded elsewhere.
func MapEnv(m map[string]string) Env {
	return func(key string) (string, bool) {
		v, ok := m[key]
		return v, ok
	}
}

// get returns the first of keys that env has set to a non-empty value.
func (env Env) get(keys ...string) (value, key string) {
	for _, k := range keys {
		if v, ok := env(k); ok && v != "" {
			return v, k
		}
	}
	return "", ""
}

func present(env Env, keys ...string) bool {
	v, _ := env.get(keys...)
	return v != ""
}

// nodesOr returns nodes, or just local when nodes is empty: the fallback of
// node-local hooks that were not told the job's node list.
func nodesOr(nodes []string, local string) []string {
	if len(nodes) > 0 || local == "" {
		return nodes
	}
	return []string{local}
}
