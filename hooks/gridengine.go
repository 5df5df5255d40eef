package hooks

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bftrainer/bftrainer/names"
)

// nameGridEngine is Grid Engine's name (Son of Grid Engine, and the Sun,
// Oracle and Univa lines it comes from).
const nameGridEngine = "gridengine"

// gridEngine is Grid Engine: the queue's prolog and epilog run
// `bftrainer hook gridengine prolog|epilog $host` as root
// (contrib/gridengine); sync and idle checks read `qhost -q -xml`.
var gridEngine = Scheduler{
	Name:    nameGridEngine,
	Contrib: "contrib/gridengine",
	// Every process of a job, also of a parallel job's slave tasks
	// (qrsh -inherit); JOB_ID alone is too common a name.
	JobMarkers: []string{"SGE_JOB_SPOOL_DIR"},
	Usage: `the queue's prolog and epilog, as root (qconf -mattr queue …):
    prolog root@/usr/local/sbin/bftrainer hook gridengine prolog $host $job_id $job_owner
    epilog root@/usr/local/sbin/bftrainer hook gridengine epilog $host $job_id $job_owner
    (on the job's master host only: kills on every host of the job)`,
	// SGE_JOB_SPOOL_DIR is in every job's environment, and so in its
	// prolog's and epilog's, and in nothing else's.
	Detect: func(in Input) bool { return present(in.Env, "SGE_JOB_SPOOL_DIR") },
	Parse: func(in Input) (Call, error) {
		return parseGridEngine(in.Env, in.Args, in.ReadFile, in.Hostname)
	},
	Listing: &Listing{Key: "qhost", Program: "qhost",
		Args: func([]string) []string { return []string{"-q", "-xml"} }, Parse: parseQhostXML},
	// Reservations (qsub -R y) from the schedule file, written while the
	// scheduler's params include MONITOR=1; Debian's $SGE_ROOT/$SGE_CELL.
	Plan: &Planner{Key: "schedule", Program: "/var/lib/gridengine/default/common/schedule", Read: readGridEnginePlan},
	// The audit's: qacct for the ended jobs, qstat beside it for the
	// running ones.
	Accounting: &Accounting{Key: "qacct", Program: "qacct", Read: readGridEngineAccounting},
	Wiring:     gridEngineWiring,
}

// gridEngineAction maps the context the queue's hook line passes to what it
// means for us.
func gridEngineAction(ctx string) (a Action, known bool) {
	switch ctx {
	case "prolog":
		return Reclaim, true
	case "epilog":
		return Release, true
	}
	return Ignore, false
}

// parseGridEngine decodes a Grid Engine queue prolog or epilog call. args
// are the hook line's words after `bftrainer hook gridengine`: the context
// ("prolog" or "epilog"), then optionally Grid Engine's $host, $job_id and
// $job_owner, which it expands on the line. hostname is the host the hook
// runs on (os.Hostname); readFile reads the PE hostfile (os.ReadFile).
//
// Observed on Son of Grid Engine 8.1.9 (internal/lab/gridengine's cell:
// TestSerialJob, TestParallelJob): the queue's prolog and epilog run as
// root (the "root@" prefix of the queue's prolog and epilog lines) once per
// job, on the job's master host only — a parallel job's other hosts run no
// hook at all — with the job's environment: JOB_ID, SGE_TASK_ID
// ("undefined" unless an array job), USER (the job's owner, although the
// hook runs as root), HOSTNAME, SGE_JOB_SPOOL_DIR, and for a parallel job
// PE and PE_HOSTFILE, a file of one line per host ("host slots queue
// processors", readable in the prolog and still in the epilog). The prolog
// and the epilog differ only in SGE_JOBEXIT_STAT, the epilog's alone.
//
// Contexts and their Actions:
//   - "prolog" → Reclaim of the job's hosts; "epilog" → Release;
//   - with no context at all, the epilog is told from the prolog by
//     SGE_JOBEXIT_STAT; anything else is an error.
//
// Both calls are OnlyHook: they speak for every host of the job, Local (the
// master host) included, since nothing else of Grid Engine runs there.
//
// The job is JOB_ID (else $job_id), as "JOB_ID.TASK" for an array task
// (Grid Engine's own notation); the user $job_owner, else USER, else
// LOGNAME; Local is $host, else HOSTNAME, else hostname: Grid Engine's own
// name for the host comes first, so that it matches qhost's. The hosts are
// the PE hostfile's, in its order, without repeats; a job without one
// (serial) holds Local alone. A PE hostfile that cannot be read or parsed
// is an error, and the partial Call then names Local alone: the master
// host is the job's for certain.
func parseGridEngine(env Env, args []string, readFile func(string) ([]byte, error), hostname string) (Call, error) {
	c := Call{Scheduler: nameGridEngine}
	arg := func(i int) string {
		if i < len(args) {
			return args[i]
		}
		return ""
	}
	ctx := arg(0)
	if ctx == "" {
		ctx = "prolog"
		if present(env, "SGE_JOBEXIT_STAT") {
			ctx = "epilog"
		}
	}
	action, known := gridEngineAction(ctx)
	if !known {
		return c, fmt.Errorf("gridengine: unknown hook %q (want prolog or epilog)", ctx)
	}
	c.Context, c.Action, c.OnlyHook = ctx, action, true
	host := arg(1)
	if host == "" {
		host, _ = env.get("HOSTNAME")
	}
	if host == "" {
		host = hostname
	}
	if err := setLocal(&c, host, true); err != nil {
		return c, fmt.Errorf("gridengine %s: %w", ctx, err)
	}
	c.Nodes = []string{c.Local}
	id, err := gridEngineJob(env, arg(2))
	if err != nil {
		return c, fmt.Errorf("gridengine %s: %w", ctx, err)
	}
	c.JobID = id
	if user, key := firstOf(arg(3), "argument 3", env, "USER", "LOGNAME"); user != "" {
		if err := names.ValidateUser(user); err != nil {
			return c, fmt.Errorf("gridengine %s: %s: %w", ctx, key, err)
		}
		c.User = user
	}
	path, key := env.get("PE_HOSTFILE")
	if path == "" {
		return c, nil
	}
	hosts, err := readPEHostfile(readFile, path)
	if err == nil {
		hosts, err = names.Unique(hosts)
	}
	if err == nil && len(hosts) == 0 {
		err = errors.New("no hosts")
	}
	if err != nil {
		return c, fmt.Errorf("gridengine %s: %s: %w", ctx, key, err)
	}
	if !slices.Contains(hosts, c.Local) {
		// Grid Engine's names and the local one differ (a domain, an
		// alias): the call still speaks for the job's hosts, but Local is
		// not among them and gets no kill of its own.
		c.Local = ""
	}
	c.Nodes = hosts
	return c, nil
}

// gridEngineJob returns the job's ID: JOB_ID (else the hook line's
// $job_id), and ".TASK" for an array task.
func gridEngineJob(env Env, arg string) (string, error) {
	id, key := env.get("JOB_ID")
	if id == "" {
		id, key = arg, "argument 2"
	}
	if id == "" {
		return "", errors.New("no job id (JOB_ID or argument 2)")
	}
	if !allDigits(id) {
		return "", fmt.Errorf("%s %q is not a job number: %w", key, id, names.ErrJob)
	}
	if task, _ := env.get("SGE_TASK_ID"); task != "" && task != "undefined" {
		if !allDigits(task) {
			return "", fmt.Errorf("SGE_TASK_ID %q is not a number", task)
		}
		id += "." + task
	}
	return id, names.ValidateJob(id)
}

// firstOf returns the first of a given value (named what) and the
// environment's keys that is not empty, and its name.
func firstOf(value, what string, env Env, keys ...string) (string, string) {
	if value != "" {
		return value, what
	}
	return env.get(keys...)
}

// readPEHostfile returns the hosts of a PE hostfile (sge_pe(5)): one line
// per host and queue, "host slots queue processors"; a host may appear once
// per queue.
func readPEHostfile(readFile func(string) ([]byte, error), path string) ([]string, error) {
	lines, err := readHostFile(readFile, path)
	if err != nil {
		return nil, err
	}
	hosts := make([]string, 0, len(lines))
	for i, line := range lines {
		f := strings.Fields(line)
		if len(f) < 3 || !allDigits(f[1]) {
			return nil, fmt.Errorf("line %d: %q is not \"host slots queue processors\"", i+1, line)
		}
		hosts = append(hosts, f[0])
	}
	return hosts, nil
}

// qhostXML is `qhost -q -xml`: each host with its values and its queue
// instances (qhost.xsd).
type qhostXML struct {
	Hosts []struct {
		Name   string `xml:"name,attr"`
		Queues []struct {
			Name   string `xml:"name,attr"`
			Values []struct {
				Name  string `xml:"name,attr"`
				Value string `xml:",chardata"`
			} `xml:"queuevalue"`
		} `xml:"queue"`
	} `xml:"host"`
}

// parseQhostXML reads `qhost -q -xml`. A host is exactly idle when it
// serves at least one queue and every queue instance on it has no slot
// used, no slot reserved by an advance reservation and no state letter (u
// unknown, a/A alarm, d/D disabled, E error, s/S/C suspended, o orphaned, c
// configuration ambiguous): observed on 8.1.9, hooks/testdata/gridengine. A
// job's slots stay used until its epilog has returned. Otherwise its state
// lists what is not idle, comma-separated: "used", "resv", the state
// letters, or "no-queue". The "global" pseudo-host is skipped. A
// scheduler's own reservation (qsub -R y) does not show here: a host
// reserved for a waiting job is idle until the job starts (GridEnginePlan
// reads the reservations).
func parseQhostXML(out []byte) (map[string]string, error) {
	var doc qhostXML
	if err := xml.Unmarshal(out, &doc); err != nil {
		return nil, fmt.Errorf("qhost -q -xml: %w", err)
	}
	states := map[string]string{}
	for _, h := range doc.Hosts {
		if h.Name == "global" {
			continue
		}
		if err := names.ValidateNode(h.Name); err != nil {
			return nil, fmt.Errorf("qhost -q -xml: %w", err)
		}
		var why []string
		add := func(s string) {
			if !slices.Contains(why, s) {
				why = append(why, s)
			}
		}
		if len(h.Queues) == 0 {
			add("no-queue")
		}
		for _, q := range h.Queues {
			for _, v := range q.Values {
				val := strings.TrimSpace(v.Value)
				switch v.Name {
				case "slots_used", "slots_resv":
					n, err := strconv.Atoi(val)
					if err != nil || n < 0 {
						return nil, fmt.Errorf("qhost -q -xml: host %s queue %s: %s %q is not a count", h.Name, q.Name, v.Name, val)
					}
					if n > 0 {
						add(strings.TrimPrefix(v.Name, "slots_"))
					}
				case "state_string":
					for _, r := range val {
						if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
							return nil, fmt.Errorf("qhost -q -xml: host %s queue %s: state %q is not state letters", h.Name, q.Name, val)
						}
						add(string(r))
					}
				}
			}
		}
		state := "idle"
		if len(why) > 0 {
			state = strings.Join(why, ",")
		}
		if prev, ok := states[h.Name]; ok && prev != "idle" {
			continue
		}
		states[h.Name] = state
	}
	return states, nil
}

// scheduleSeparator starts each scheduling run in Grid Engine's schedule
// file.
const scheduleSeparator = "::::::::"

// GridEnginePlan reads Grid Engine's schedule file
// ($SGE_ROOT/$SGE_CELL/common/schedule, written while the scheduler's
// params include MONITOR=1): the reservations of its latest scheduling run,
// one PlannedStart per job, in the file's order. Each run starts with a
// line of eight colons, then one line per job and resource,
// "job:task:state:start:duration:level:object:resource:amount"
// (sge_schedule(5)); a job reserves with state RESERVING, its start in
// seconds since the epoch, its duration in seconds, and its hosts as
// queue instances ("Q", "queue@host") or hosts ("H"). Jobs reserve only
// with `qsub -R y` and the scheduler's max_reservation above 0. A
// reserved host looks exactly idle in qstat and qhost until the job
// starts; the reservation is Grid Engine's only statement of a planned
// start.
//
// The Job is the job number: Grid Engine reserves for one task of an
// array job at a time, and the file does not tell an array's task 1 from
// a job without tasks. A last line without its newline is still being
// written and is left out; any other line that does not parse is an
// error. Observed on 8.1.9 (internal/lab/gridengine, TestPlannedStarts).
func GridEnginePlan(schedule []byte) ([]PlannedStart, error) {
	text := string(schedule)
	if i := strings.LastIndexByte(text, '\n'); i >= 0 {
		text = text[:i+1]
	} else {
		text = ""
	}
	if i := strings.LastIndex(text, scheduleSeparator+"\n"); i >= 0 {
		text = text[i+len(scheduleSeparator)+1:]
	}
	var plan []PlannedStart
	byJob := map[string]int{}
	n := 0
	for line := range strings.Lines(text) {
		n++
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			continue
		}
		f := strings.Split(line, ":")
		if len(f) != 9 {
			return nil, fmt.Errorf("schedule line %d: %q is not job:task:state:start:duration:level:object:resource:amount", n, line)
		}
		if f[2] != "RESERVING" {
			continue
		}
		start, err1 := strconv.ParseInt(f[3], 10, 64)
		dur, err2 := strconv.ParseInt(f[4], 10, 64)
		if !allDigits(f[0]) || !allDigits(f[1]) || err1 != nil || err2 != nil || start < 0 || dur < 0 || start > 1<<40 || dur > 1<<32 {
			return nil, fmt.Errorf("schedule line %d: %q: job, task, start and duration must be numbers of seconds", n, line)
		}
		i, ok := byJob[f[0]]
		if !ok {
			i = len(plan)
			byJob[f[0]] = i
			plan = append(plan, PlannedStart{Job: f[0], Start: time.Unix(start, 0), Duration: time.Duration(dur) * time.Second})
		}
		host := ""
		switch f[5] {
		case "Q":
			_, h, found := strings.Cut(f[6], "@")
			if !found {
				return nil, fmt.Errorf("schedule line %d: queue instance %q has no host", n, f[6])
			}
			host = h
		case "H":
			host = f[6]
		}
		if host == "" {
			continue // the job's parallel environment, or a global resource
		}
		if err := names.ValidateNode(host); err != nil {
			return nil, fmt.Errorf("schedule line %d: %w", n, err)
		}
		if !slices.Contains(plan[i].Nodes, host) {
			plan[i].Nodes = append(plan[i].Nodes, host)
		}
	}
	// A job that reserves no host (a global resource alone) plans nothing
	// on nodes.
	return slices.DeleteFunc(plan, func(p PlannedStart) bool { return len(p.Nodes) == 0 }), nil
}

// scheduleTail is how much of the schedule file's end ReadGridEnginePlan
// reads first; it doubles until the last run is in it.
const scheduleTail = 256 << 10

// ReadGridEnginePlan reads the latest scheduling run's reservations from
// the schedule file at path (GridEnginePlan), reading only the file's end:
// the scheduler appends a run every scheduling interval and the file grows
// without bound. A run is written within milliseconds; a file written to
// in the last 100 ms is read again a moment later, so that a run is not
// taken half written.
func ReadGridEnginePlan(path string) ([]PlannedStart, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("schedule: %w", err)
	}
	defer f.Close()
	for try := 0; ; try++ {
		fi, err := f.Stat()
		if err != nil {
			return nil, fmt.Errorf("schedule: %w", err)
		}
		if age := time.Since(fi.ModTime()); age < 100*time.Millisecond && try < 3 {
			time.Sleep(100*time.Millisecond - age)
			continue
		}
		for n := int64(scheduleTail); ; n *= 2 {
			off := max(0, fi.Size()-n)
			b := make([]byte, fi.Size()-off)
			if _, err := f.ReadAt(b, off); err != nil && !errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("schedule: %w", err)
			}
			if off == 0 || strings.Contains(string(b), "\n"+scheduleSeparator+"\n") {
				if off > 0 {
					b = b[strings.Index(string(b), "\n")+1:] // a line cut short at the start
				}
				return GridEnginePlan(b)
			}
		}
	}
}
