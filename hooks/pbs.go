package hooks

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bftrainer/bftrainer/names"
)

// namePBS is the name of PBS (Torque, OpenPBS, PBS Pro).
const namePBS = "pbs"

// pbs is PBS: contrib/pbs's site hook (execjob_begin, execjob_epilogue) or
// its prologue script (mom_priv/prologue, epilogue) runs `bftrainer hook
// pbs`; sync reads `pbsnodes -a -F json`. OpenPBS gives its prologue
// scripts the job ID as an argument, not as PBS_JOBID, so a call is also
// recognised by the script's name.
var pbs = Scheduler{
	Name:       namePBS,
	Contrib:    "contrib/pbs",
	JobMarkers: []string{"PBS_JOBID"},
	Usage:      `bftrainer hook pbs "$0" "$@"   (from prologue, epilogue, *.parallel)`,
	Detect: func(in Input) bool {
		return present(in.Env, "PBS_JOBID") || (len(in.Args) > 0 && pbsKnown(in.Args[0]))
	},
	Parse: func(in Input) (Call, error) { return parsePBS(in.Env, in.Args, in.ReadFile, in.Hostname) },
	Listing: &Listing{Key: "pbsnodes", Program: "pbsnodes",
		Args: func([]string) []string { return []string{"-a", "-F", "json"} }, Parse: parsePbsnodes},
	Plan: &Planner{Key: "qstat", Program: "qstat", Read: readPBSPlan},
}

// pbsAction maps the name a PBS hook runs under to what it means for us.
// primary is true for the OpenPBS / PBS Pro hook events, which run on
// every MoM of the job and whose meaning depends on whether they run on
// the job's primary execution host (see parsePBS); only is true for the
// calls that are the job's only hook (mom_priv/prologue and epilogue,
// which OpenPBS runs on the mother superior alone).
func pbsAction(ctx string) (a Action, primary, only, known bool) {
	switch ctx {
	case "prologue":
		// mom_priv/prologue: on the mother superior (the job's first
		// node) alone, as root, before the job starts (OpenPBS has no
		// prologue.parallel: seen on a real cell).
		return Reclaim, false, true, true
	case "epilogue":
		return Release, false, true, true
	case "prologue.parallel":
		// Torque: on each sister node, as root.
		return KillLocal, false, false, true
	case "epilogue.parallel":
		return CleanupLocal, false, false, true
	case "execjob_begin", "execjob_prologue":
		// OpenPBS / PBS Pro hook events. execjob_begin runs on every
		// MoM of the job, the sisters' while they join it, and the job
		// starts only once every sister has joined: the event the guide
		// wires. execjob_prologue runs on the mother superior, then on
		// the sisters without waiting for them (the job's script may
		// already run there): still understood, not wired.
		return KillLocal, true, false, true
	case "execjob_end", "execjob_epilogue":
		return CleanupLocal, true, false, true
	case "presetup.prologue", "prologue.user", "prologue.user.parallel",
		"epilogue.user", "epilogue.user.parallel", "epilogue.precancel",
		"execjob_launch", "execjob_preterm":
		// Run as the job's user, or duplicate the events above.
		return Ignore, false, false, true
	}
	return Ignore, false, false, false
}

// pbsKnown reports whether the base name of a program path is a PBS hook
// name, for its Detect.
func pbsKnown(name string) bool {
	_, _, _, known := pbsAction(filepath.Base(name))
	return known
}

// parsePBS decodes a PBS call: a Torque or PBS Pro (OpenPBS) prologue or
// epilogue script, or a PBS Pro hook event handed to us by a small Python
// hook. args is the argument vector as the script received it: the base name
// of args[0] is the context (the MoM runs mom_priv/prologue, so a link or
// wrapper of that name passes "$0" "$@"); args[1:] are the MoM's positional
// arguments. hostname is the host the hook runs on (os.Hostname), used as
// Call.Local; readFile reads node files (os.ReadFile).
//
// Contexts and their Actions:
//   - "prologue" → Reclaim of all the job's nodes; "epilogue" → Release.
//     OpenPBS runs them on the mother superior alone, so they are
//     OnlyHook: the call kills (cleans up) on every node of the job;
//   - "prologue.parallel" → KillLocal, "epilogue.parallel" → CleanupLocal
//     (Torque's sister nodes);
//   - "execjob_begin", "execjob_prologue" and "execjob_epilogue",
//     "execjob_end" (OpenPBS / PBS Pro hook events, run on every MoM) →
//     Reclaim or Release, OnlyHook, on the primary execution host (Local
//     equal to the first node, domains ignored in the comparison),
//     KillLocal or CleanupLocal on the others, and when the node list is
//     unknown;
//   - the user and pre-setup scripts, execjob_launch and execjob_preterm
//     → Ignore.
//
// Observed on a real OpenPBS 23.06.06 cell (testdata/pbs): the scripts run
// as root on the mother superior only, argv[1] the job ID, argv[2] the
// user, argv[3] the group (the epilogue adds seven more), with no PBS_*
// variable but PBS_JOBDIR in their environment; the node file
// $PBS_HOME/aux/JOBID exists then (one line per chunk). A site hook's
// environment has only PBS_CONF_FILE of PBS's; at execjob_begin on the
// primary the node file does not exist yet, so contrib/pbs's hook passes
// the job's vnodes, the primary's first, as BFTRAINER_PBS_NODES.
// From the Torque documentation, not run here: Torque 6 gives the prologue
// scripts a comma-separated host list as argv[9], and passes an empty
// environment.
//
// Node lists come from PBS_NODEFILE, else BFTRAINER_PBS_NODES, else
// Torque's argv[9], else the job's node file $PBS_HOME/aux/JOBID
// (TORQUE_HOME for Torque; the wrapper must export PBS_HOME, since the MoM
// does not); they are deduplicated; names are kept as written, short or
// fully qualified, so they may need mapping to the names `pbsnodes`
// prints.
//
// A mother-superior call without a node list is an error; a node-local one
// falls back to hostname alone. On error the Call holds what was decoded so
// far, as parseSlurm's does.
func parsePBS(env Env, args []string, readFile func(string) ([]byte, error), hostname string) (Call, error) {
	c := Call{Scheduler: namePBS}
	if len(args) == 0 {
		return c, fmt.Errorf("pbs: no arguments, not even the script name")
	}
	ctx := filepath.Base(args[0])
	action, primary, only, known := pbsAction(ctx)
	if !known {
		return c, fmt.Errorf("pbs: unknown hook %q", ctx)
	}
	c.Context, c.Action, c.OnlyHook = ctx, action, only
	arg := func(i int) string {
		if i < len(args) {
			return args[i]
		}
		return ""
	}
	id := arg(1)
	if id == "" {
		id, _ = env.get("PBS_JOBID")
	}
	if action == Ignore {
		if names.ValidateJob(id) == nil {
			c.JobID = id
		}
		return c, nil
	}
	local := action == KillLocal || action == CleanupLocal
	if err := setLocal(&c, hostname, local); err != nil {
		return c, fmt.Errorf("pbs %s: %w", ctx, err)
	}
	if id == "" {
		return c, fmt.Errorf("pbs %s: no job id (argument 1 or PBS_JOBID)", ctx)
	}
	if err := names.ValidateJob(id); err != nil {
		return c, fmt.Errorf("pbs %s: %w", ctx, err)
	}
	c.JobID = id
	if user := arg(2); user != "" {
		if err := names.ValidateUser(user); err != nil {
			return c, fmt.Errorf("pbs %s: argument 2: %w", ctx, err)
		}
		c.User = user
	}
	hosts, source, err := pbsHosts(env, ctx, arg(9), id, readFile)
	if err != nil {
		return c, fmt.Errorf("pbs %s: %s: %w", ctx, source, err)
	}
	nodes, err := names.Unique(hosts)
	if err != nil {
		return c, fmt.Errorf("pbs %s: %s: %w", ctx, source, err)
	}
	if primary && len(nodes) > 0 && shortName(nodes[0]) == shortName(c.Local) {
		// The primary execution host speaks for the whole job, as the
		// mother superior's prologue does: it kills on every node of
		// the job (the sisters' own calls kill locally too).
		c.Action, c.OnlyHook = jobLevel(action), true
		local = false
	}
	if len(nodes) == 0 && !local {
		return c, fmt.Errorf("pbs %s: no node list (PBS_NODEFILE, argument 9, or PBS_HOME/aux/%s)", ctx, id)
	}
	c.Nodes = nodesOr(nodes, c.Local)
	return c, nil
}

// pbsHosts returns the job's hosts from the first source that has them, and
// that source's name for errors. hostArg is argv[9].
func pbsHosts(env Env, ctx, hostArg, id string, readFile func(string) ([]byte, error)) ([]string, string, error) {
	if p, k := env.get("PBS_NODEFILE"); p != "" {
		hosts, err := readHostFile(readFile, p)
		return hosts, k, err
	}
	// contrib/pbs's hook: the job's vnodes in exec_vnode's order, the
	// primary execution host's first (its node file is not written yet
	// when execjob_begin runs there).
	if v, k := env.get("BFTRAINER_PBS_NODES"); v != "" {
		return strings.Fields(v), k, nil
	}
	// Torque 6 passes the host list to the prologue scripts only; the
	// epilogue's argv[9] is the job's account.
	if hostArg != "" && strings.HasPrefix(ctx, "prologue") {
		return strings.Split(hostArg, ","), "argument 9", nil
	}
	// The job ID becomes a file name. ValidateJobID has ruled out '/';
	// PBS IDs start with a digit, which also rules out "." and "..".
	if home, k := env.get("PBS_HOME", "TORQUE_HOME"); home != "" && id[0] >= '0' && id[0] <= '9' {
		p := path.Join(home, "aux", id)
		hosts, err := readHostFile(readFile, p)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, k, nil
		}
		return hosts, k + "/aux/" + id, err
	}
	return nil, "", nil
}

// jobLevel is the whole-job counterpart of a node-local Action.
func jobLevel(a Action) Action {
	switch a {
	case KillLocal:
		return Reclaim
	case CleanupLocal:
		return Release
	}
	return a
}

// shortName is name up to its first dot: "n1.cluster.org" and "n1" are one
// host when we decide which node is the primary.
func shortName(name string) string {
	short, _, _ := strings.Cut(name, ".")
	return short
}

// parsePbsnodes reads `pbsnodes -a -F json` (OpenPBS, PBS Pro), or the
// plain `pbsnodes -a` (Torque, or a wrapper that prints it): see
// parsePbsnodesJSON and parsePbsnodesText.
func parsePbsnodes(out []byte) (map[string]string, error) {
	if t := bytes.TrimSpace(out); len(t) > 0 && t[0] == '{' {
		return parsePbsnodesJSON(t)
	}
	return parsePbsnodesText(out)
}

// pbsnodesJSON is the part of `pbsnodes -a -F json` we read: one object
// per vnode under "nodes", keyed by the vnode's name.
type pbsnodesJSON struct {
	Nodes map[string]struct {
		State string   `json:"state"`
		Jobs  []string `json:"jobs"`
	} `json:"nodes"`
}

// parsePbsnodesJSON reads `pbsnodes -a -F json`. A node is idle when its
// state is exactly "free" and it lists no jobs: PBS keeps a node "free"
// while a job uses only part of its CPUs, and lists the job.
func parsePbsnodesJSON(out []byte) (map[string]string, error) {
	var doc pbsnodesJSON
	if err := json.Unmarshal(out, &doc); err != nil {
		return nil, fmt.Errorf("pbsnodes -F json: %w", err)
	}
	states := map[string]string{}
	for name, n := range doc.Nodes {
		if err := names.ValidateNode(name); err != nil {
			return nil, fmt.Errorf("pbsnodes -F json: %w", err)
		}
		state := n.State
		if state == "free" && len(n.Jobs) == 0 {
			state = "idle"
		}
		states[name] = state
	}
	return states, nil
}

// parsePbsnodesText reads the plain `pbsnodes -a`: blocks starting with
// the node name, then indented "key = value" lines. A node is idle when
// its state is "free" and it lists no jobs.
func parsePbsnodesText(out []byte) (map[string]string, error) {
	states := map[string]string{}
	var name, state string
	jobs := false
	flush := func() {
		if name == "" {
			return
		}
		if state == "free" && !jobs {
			state = "idle"
		}
		states[name] = state
		name, state, jobs = "", "", false
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for line := 1; sc.Scan(); line++ {
		t := sc.Text()
		if strings.TrimSpace(t) == "" {
			flush()
			continue
		}
		if t[0] != ' ' && t[0] != '\t' {
			flush()
			name = strings.TrimSpace(t)
			if err := names.ValidateNode(name); err != nil {
				return nil, fmt.Errorf("pbsnodes line %d: %w", line, err)
			}
			continue
		}
		k, v, ok := strings.Cut(strings.TrimSpace(t), "=")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "state":
			state = strings.TrimSpace(v)
		case "jobs":
			jobs = strings.TrimSpace(v) != ""
		}
	}
	flush()
	return states, sc.Err()
}

// readPBSPlan runs `qstat -f -F json` (PBSPlan). qstat prints times in the
// local zone: TZ is fixed to UTC for it.
func readPBSPlan(ctx context.Context, program string) ([]PlannedStart, error) {
	cmd := exec.CommandContext(ctx, program, "-f", "-F", "json")
	cmd.Env = append(os.Environ(), "TZ=UTC")
	cmd.WaitDelay = time.Second
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok && len(ee.Stderr) > 0 {
			return nil, fmt.Errorf("%s: %w: %s", program, err, strings.TrimSpace(string(ee.Stderr)))
		}
		return nil, fmt.Errorf("%s: %w", program, err)
	}
	return PBSPlan(out, time.UTC)
}

// pbsTimeLayout is how `qstat -f -F json` prints times (ctime(3)).
const pbsTimeLayout = "Mon Jan _2 15:04:05 2006"

// pbsVnode is a vnode's name in an exec_vnode chunk "(NAME:res=…)".
var pbsVnode = regexp.MustCompile(`\(([^:+)]+)`)

// PBSPlan reads `qstat -f -F json` (times in loc): one PlannedStart per
// queued job ("job_state": "Q") for which the scheduler has estimated a
// start and the vnodes ("estimated": {"start_time", "exec_vnode"}), in
// start order. OpenPBS's scheduler estimates them for the jobs it
// calendars: the top jobs under strict_ordering (sched_config), as many as
// the server's backfill_depth (1 by default), and help_starving_jobs'.
// Nodes are exec_vnode's vnode names, first appearance first (a host with
// several vnodes needs them mapped to its name, as BFTRAINER_PBS_NODES
// does); Duration is Resource_List.walltime (0 when not stated).
// A job whose estimate does not parse is an error: a changed format
// should be noticed, not read as "no plan".
// Observed on OpenPBS 23.06.06 (internal/lab/pbs, TestBftrainer/plan).
func PBSPlan(out []byte, loc *time.Location) ([]PlannedStart, error) {
	var doc struct {
		Jobs map[string]struct {
			State     string `json:"job_state"`
			Estimated struct {
				StartTime json.RawMessage `json:"start_time"`
				ExecVnode string          `json:"exec_vnode"`
			} `json:"estimated"`
			ResourceList struct {
				Walltime json.RawMessage `json:"walltime"`
			} `json:"Resource_List"`
		} `json:"Jobs"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return nil, fmt.Errorf("qstat -f -F json: %w", err)
	}
	var plan []PlannedStart
	for id, j := range doc.Jobs {
		if j.State != "Q" || len(j.Estimated.StartTime) == 0 || j.Estimated.ExecVnode == "" {
			continue
		}
		if err := names.ValidateJob(id); err != nil {
			return nil, fmt.Errorf("qstat: %w", err)
		}
		at, err := pbsTime(j.Estimated.StartTime, loc)
		if err != nil {
			return nil, fmt.Errorf("qstat: job %s: estimated.start_time: %w", id, err)
		}
		var nodes []string
		for _, m := range pbsVnode.FindAllStringSubmatch(j.Estimated.ExecVnode, -1) {
			if n := strings.TrimSpace(m[1]); !slices.Contains(nodes, n) {
				if err := names.ValidateNode(n); err != nil {
					return nil, fmt.Errorf("qstat: job %s: estimated.exec_vnode: %w", id, err)
				}
				nodes = append(nodes, n)
			}
		}
		if len(nodes) == 0 {
			return nil, fmt.Errorf("qstat: job %s: estimated.exec_vnode %q names no vnode", id, j.Estimated.ExecVnode)
		}
		plan = append(plan, PlannedStart{Job: id, Nodes: nodes, Start: at, Duration: pbsDuration(j.ResourceList.Walltime)})
	}
	slices.SortFunc(plan, func(a, b PlannedStart) int {
		if c := a.Start.Compare(b.Start); c != 0 {
			return c
		}
		return strings.Compare(a.Job, b.Job)
	})
	return plan, nil
}

// pbsTime reads a qstat JSON time: a ctime(3) string in loc, or seconds
// since the epoch (a number or a string of digits).
func pbsTime(raw json.RawMessage, loc *time.Location) (time.Time, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		var n int64
		if err := json.Unmarshal(raw, &n); err != nil {
			return time.Time{}, fmt.Errorf("%s: neither a string nor seconds", raw)
		}
		return time.Unix(n, 0), nil
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.Unix(n, 0), nil
	}
	return time.ParseInLocation(pbsTimeLayout, s, loc)
}

// pbsDuration reads a walltime: "H:M:S", "M:S", or seconds, as a string or
// a number; 0 for anything else.
func pbsDuration(raw json.RawMessage) time.Duration {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		var n int64
		if json.Unmarshal(raw, &n) != nil || n < 0 {
			return 0
		}
		return time.Duration(n) * time.Second
	}
	total := 0
	parts := strings.Split(s, ":")
	if len(parts) > 3 {
		return 0
	}
	for _, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return 0
		}
		total = total*60 + n
	}
	return time.Duration(total) * time.Second
}
