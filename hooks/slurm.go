package hooks

import (
	"bufio"
	"bytes"
	"fmt"
	"strings"

	"github.com/bftrainer/bftrainer/names"
)

// Slurm is the Slurm scheduler's name.
const Slurm = "slurm"

// slurm is Slurm: every hook is the binary itself, run with no arguments
// and no PATH (slurm.conf's Prolog, Epilog, PrologSlurmctld,
// EpilogSlurmctld); sync and idle checks read sinfo.
var slurm = Scheduler{
	Name:    Slurm,
	Contrib: "contrib/slurm",
	// Every step of a job: the job's id (SLURM_JOBID is its old name,
	// still set).
	JobMarkers: []string{"SLURM_JOB_ID", "SLURM_JOBID"},
	Usage: `slurm.conf, the binary itself (no arguments, no wrapper needed):
    PrologFlags=Alloc
    Prolog=/usr/local/bin/bftrainer            # kills our processes on the node
    Epilog=/usr/local/bin/bftrainer            # cleans up on the node
    PrologSlurmctld=/usr/local/bin/bftrainer   # records the job's nodes as taken
    EpilogSlurmctld=/usr/local/bin/bftrainer   # records them as released`,
	Detect:   func(in Input) bool { return present(in.Env, "SLURM_SCRIPT_CONTEXT", "SLURM_JOB_ID") },
	BareCall: func(env Env) bool { return present(env, "SLURM_SCRIPT_CONTEXT") },
	Parse:    func(in Input) (Call, error) { return parseSlurm(in.Env) },
	Listing: &Listing{
		Key: "sinfo", Program: "/usr/bin/sinfo",
		Args: func(nodes []string) []string {
			args := []string{"-h", "-N", "-o", "%N %t"}
			if len(nodes) > 0 {
				args = append(args, "-n", names.CompressHostlist(nodes))
			}
			return args
		},
		Parse: parseSinfo,
		// PLANNED (compact "plnd", with a suffix such as "*" when not
		// responding): the backfill scheduler holds the node for a
		// pending job's planned start.
		Planned: func(state string) bool { return strings.HasPrefix(state, "plnd") || state == "planned" },
	},
	// The backfill scheduler's plan: pending jobs' expected start and
	// SchedNodes.
	Plan:       &Planner{Key: "squeue", Program: "/usr/bin/squeue", Read: readSlurmPlan},
	Accounting: &Accounting{Key: "sacct", Program: "/usr/bin/sacct", Read: readSlurmAccounting},
	Wiring:     slurmWiring,
}

// slurmAction maps every SLURM_SCRIPT_CONTEXT Slurm documents (22.05) to
// what it means for us; known is false for anything else.
func slurmAction(ctx string) (a Action, known bool) {
	switch ctx {
	case "prolog_slurmctld":
		// Once per job on the controller, as SlurmUser, before any node
		// prolog and while the job is CONFIGURING: the place to record
		// that the job's nodes leave the pool.
		return Reclaim, true
	case "epilog_slurmctld":
		// Once per job on the controller at job end, while the nodes may
		// still be COMPLETING (their Epilog running).
		return Release, true
	case "prolog_slurmd":
		// On every allocated node, as root (at allocation only with
		// PrologFlags=Alloc): the instant local kill.
		return KillLocal, true
	case "epilog_slurmd":
		return CleanupLocal, true
	case "prolog_task", "epilog_task", "prolog_srun", "epilog_srun":
		// Step and task hooks run as the job's user, per step or task.
		return Ignore, true
	}
	return Ignore, false
}

// parseSlurm decodes a Slurm Prolog, Epilog, PrologSlurmctld or
// EpilogSlurmctld call from its environment. Slurm passes these hooks no
// arguments and no PATH, only SLURM_* variables (observed, Slurm 22.05):
//
//   - SLURM_SCRIPT_CONTEXT names the hook; a missing or unknown context is an
//     error, the step and task contexts give Ignore (with JobID if valid).
//   - SLURM_JOB_ID, or the older SLURM_JOBID, is the job; required.
//   - SLURM_JOB_USER is the job's owner; may be empty.
//   - SLURM_JOB_NODELIST (the *Slurmctld hooks) or SLURM_NODELIST (the slurmd
//     hooks in 22.05) is the job's hostlist expression. The controller hooks
//     need it; the node hooks fall back to their own node.
//   - SLURMD_NODENAME is the node a Prolog or Epilog runs on; required there.
//
// On error the Call still holds what was decoded before the problem (the
// Context and Action first, then Local, then JobID), so a caller that must
// fail open can still act on the local node.
func parseSlurm(env Env) (Call, error) {
	c := Call{Scheduler: Slurm}
	ctx, _ := env.get("SLURM_SCRIPT_CONTEXT")
	if ctx == "" {
		return c, fmt.Errorf("slurm: SLURM_SCRIPT_CONTEXT is not set")
	}
	action, known := slurmAction(ctx)
	if !known {
		return c, fmt.Errorf("slurm: unknown SLURM_SCRIPT_CONTEXT %q", ctx)
	}
	c.Context, c.Action = ctx, action
	id, _ := env.get("SLURM_JOB_ID", "SLURM_JOBID")
	if action == Ignore {
		if names.ValidateJob(id) == nil {
			c.JobID = id
		}
		return c, nil
	}
	local := action == KillLocal || action == CleanupLocal
	if local {
		name, _ := env.get("SLURMD_NODENAME")
		if name == "" {
			return c, fmt.Errorf("slurm %s: SLURMD_NODENAME is not set", ctx)
		}
		if err := names.ValidateNode(name); err != nil {
			return c, fmt.Errorf("slurm %s: SLURMD_NODENAME: %w", ctx, err)
		}
		c.Local = name
	}
	if id == "" {
		return c, fmt.Errorf("slurm %s: SLURM_JOB_ID is not set", ctx)
	}
	if err := names.ValidateJob(id); err != nil {
		return c, fmt.Errorf("slurm %s: %w", ctx, err)
	}
	c.JobID = id
	if user, _ := env.get("SLURM_JOB_USER"); user != "" {
		if err := names.ValidateUser(user); err != nil {
			return c, fmt.Errorf("slurm %s: SLURM_JOB_USER: %w", ctx, err)
		}
		c.User = user
	}
	expr, key := env.get("SLURM_JOB_NODELIST", "SLURM_NODELIST")
	if expr == "" {
		if !local {
			return c, fmt.Errorf("slurm %s: neither SLURM_JOB_NODELIST nor SLURM_NODELIST is set", ctx)
		}
		c.Nodes = nodesOr(nil, c.Local)
		return c, nil
	}
	hosts, err := names.ExpandHostlist(expr)
	if err != nil {
		return c, fmt.Errorf("slurm %s: %s: %w", ctx, key, err)
	}
	nodes, err := names.Unique(hosts)
	if err != nil {
		return c, fmt.Errorf("slurm %s: %s: %w", ctx, key, err)
	}
	c.Nodes = nodes
	return c, nil
}

// parseSinfo reads `sinfo -h -N -o '%N %t'`. sinfo -N prints a node once
// per partition; a node in any non-idle state in any line is not idle.
// Only the exact compact state "idle" counts: "idle*" (not responding),
// "idle~" (powered off), "idle#" (powering up) and "comp" (epilog
// running) do not.
func parseSinfo(out []byte) (map[string]string, error) {
	states := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for line := 1; sc.Scan(); line++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) != 2 {
			return nil, fmt.Errorf("sinfo line %d: want \"NODE STATE\", got %q", line, sc.Text())
		}
		if err := names.ValidateNode(f[0]); err != nil {
			return nil, fmt.Errorf("sinfo line %d: %w", line, err)
		}
		if prev, ok := states[f[0]]; ok && prev != "idle" {
			continue
		}
		states[f[0]] = f[1]
	}
	return states, sc.Err()
}
