package hooks

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/bftrainer/bftrainer/names"
)

// nameLSF is IBM Spectrum LSF's name.
const nameLSF = "lsf"

// lsf is IBM Spectrum LSF: contrib/lsf's wrapper runs `bftrainer hook lsf
// HOOK` from the queue's pre- and post-execution; sync reads bhosts.
var lsf = Scheduler{
	Name:       nameLSF,
	Contrib:    "contrib/lsf",
	JobMarkers: []string{"LSB_JOBID"},
	Usage:      "bftrainer hook lsf pre_exec|post_exec|host_pre_exec|host_post_exec",
	Detect:     func(in Input) bool { return present(in.Env, "LSB_JOBID") },
	Parse:      func(in Input) (Call, error) { return parseLSF(in.Env, in.ReadFile, in.arg(0), in.Hostname) },
	Listing: &Listing{Key: "bhosts", Program: "bhosts",
		Args: func([]string) []string { return []string{"-w"} }, Parse: parseBhosts},
}

// lsfAction maps the hook names the LSF wrapper script passes to what they
// mean for us, mirroring Slurm: the job-level hooks act for the whole job,
// the host-level ones for the host they run on.
func lsfAction(ctx string) (a Action, known bool) {
	switch ctx {
	case "pre_exec":
		// Job-based pre-exec (PRE_EXEC in lsb.queues or lsb.applications):
		// runs once, on the first execution host, before the job starts.
		return Reclaim, true
	case "post_exec":
		return Release, true
	case "host_pre_exec":
		// HOST_PRE_EXEC: runs on every execution host, like Slurm's Prolog.
		return KillLocal, true
	case "host_post_exec":
		return CleanupLocal, true
	}
	return Ignore, false
}

// parseLSF decodes an IBM Spectrum LSF pre- or post-execution call. LSF does
// not say which hook is running, so the wrapper script configured for each
// hook passes it as context: "pre_exec" (job-based, Reclaim of all the job's
// hosts), "post_exec" (Release), "host_pre_exec" (host-based, KillLocal) or
// "host_post_exec" (CleanupLocal); anything else is an error. hostname is the
// host the hook runs on (os.Hostname), used as Call.Local; readFile reads
// LSB_DJOB_HOSTFILE (os.ReadFile).
//
// From LSF 10.1's documentation (not verified here: there is no LSF):
//   - job-based pre/post-exec run only on the first execution host, with the
//     job's environment, as the job's user unless LSB_PRE_POST_EXEC_USER
//     (lsf.sudoers) says otherwise: sites must set it to root for bftrainer;
//   - host-based pre/post-exec run on every execution host;
//   - LSB_JOBID is the job; array elements also have LSB_JOBINDEX, and we
//     write the job as "ID[INDEX]", LSF's own notation;
//   - LSB_MCPU_HOSTS is "hostA 2 hostB 1" (host, slot count), LSB_HOSTS is
//     one host per slot ("hostA hostA hostB"), LSB_DJOB_HOSTFILE names a file
//     with one host per slot per line.
//
// Our assumptions: host-based hooks see the same LSB_* variables as
// job-based ones; an LSB_JOBINDEX of "0" means "not an array job"; the host
// sources are tried in the order above (LSB_MCPU_HOSTS is the shortest;
// LSB_HOSTS grows with the slot count and, we believe, is left unset for very
// large jobs, hence the file last); host names are kept as LSF gives them
// (short or fully qualified, whichever the cluster uses). The user is
// LSB_SUB_USER, else USER; it may be empty.
//
// A job-level hook without any host list is an error; a host-level one falls
// back to hostname alone. On error the Call holds what was decoded so far,
// as parseSlurm's does.
func parseLSF(env Env, readFile func(string) ([]byte, error), context, hostname string) (Call, error) {
	c := Call{Scheduler: nameLSF}
	action, known := lsfAction(context)
	if !known {
		return c, fmt.Errorf("lsf: unknown hook %q (want pre_exec, post_exec, host_pre_exec or host_post_exec)", context)
	}
	c.Context, c.Action = context, action
	local := action == KillLocal || action == CleanupLocal
	if err := setLocal(&c, hostname, local); err != nil {
		return c, fmt.Errorf("lsf %s: %w", context, err)
	}
	id, err := lsfJobID(env)
	if err != nil {
		return c, fmt.Errorf("lsf %s: %w", context, err)
	}
	c.JobID = id
	if user, key := env.get("LSB_SUB_USER", "USER"); user != "" {
		if err := names.ValidateUser(user); err != nil {
			return c, fmt.Errorf("lsf %s: %s: %w", context, key, err)
		}
		c.User = user
	}
	hosts, key, err := lsfHosts(env, readFile)
	if err != nil {
		return c, fmt.Errorf("lsf %s: %s: %w", context, key, err)
	}
	if len(hosts) == 0 && !local {
		return c, fmt.Errorf("lsf %s: none of LSB_MCPU_HOSTS, LSB_HOSTS, LSB_DJOB_HOSTFILE is set", context)
	}
	nodes, err := names.Unique(hosts)
	if err != nil {
		return c, fmt.Errorf("lsf %s: %s: %w", context, key, err)
	}
	c.Nodes = nodesOr(nodes, c.Local)
	return c, nil
}

// lsfJobID returns LSB_JOBID, as "ID[INDEX]" for an array element.
func lsfJobID(env Env) (string, error) {
	id, _ := env.get("LSB_JOBID")
	if id == "" {
		return "", fmt.Errorf("LSB_JOBID is not set")
	}
	if idx, _ := env.get("LSB_JOBINDEX"); idx != "" && idx != "0" {
		if !allDigits(idx) {
			return "", fmt.Errorf("LSB_JOBINDEX %q is not a number", idx)
		}
		id += "[" + idx + "]"
	}
	if err := names.ValidateJob(id); err != nil {
		return "", err
	}
	return id, nil
}

// lsfHosts returns the job's hosts, one entry per slot or per host, from the
// first source that is set, and the name of that source.
func lsfHosts(env Env, readFile func(string) ([]byte, error)) (hosts []string, key string, err error) {
	if v, k := env.get("LSB_MCPU_HOSTS"); v != "" {
		f := strings.Fields(v)
		if len(f)%2 != 0 {
			return nil, k, fmt.Errorf("%q is not host/count pairs", v)
		}
		for i := 0; i < len(f); i += 2 {
			if !allDigits(f[i+1]) {
				return nil, k, fmt.Errorf("slot count %q of host %q is not a number", f[i+1], f[i])
			}
			hosts = append(hosts, f[i])
		}
		return hosts, k, nil
	}
	if v, k := env.get("LSB_HOSTS"); v != "" {
		return strings.Fields(v), k, nil
	}
	if path, k := env.get("LSB_DJOB_HOSTFILE"); path != "" {
		hosts, err := readHostFile(readFile, path)
		return hosts, k, err
	}
	return nil, "", nil
}

// readHostFile reads a node file with one host per line (LSF's
// LSB_DJOB_HOSTFILE, PBS's PBS_NODEFILE), ignoring blank lines and the blanks
// around names.
func readHostFile(readFile func(string) ([]byte, error), path string) ([]string, error) {
	if readFile == nil {
		return nil, fmt.Errorf("read %s: no file reader given", path)
	}
	data, err := readFile(path)
	if err != nil {
		return nil, fmt.Errorf("read host file: %w", err)
	}
	var hosts []string
	for line := range strings.Lines(string(data)) {
		if h := strings.TrimSpace(line); h != "" {
			hosts = append(hosts, h)
		}
	}
	return hosts, nil
}

// setLocal validates hostname into c.Local; it must be given when the call
// is node-local.
func setLocal(c *Call, hostname string, required bool) error {
	if hostname == "" {
		if required {
			return fmt.Errorf("the local host name is unknown")
		}
		return nil
	}
	if err := names.ValidateNode(hostname); err != nil {
		return fmt.Errorf("local host: %w", err)
	}
	c.Local = hostname
	return nil
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// parseBhosts reads `bhosts -w`: a host is idle when its status is "ok"
// and it runs no job (NJOBS 0). From IBM's documentation; untested here
// (no LSF available).
func parseBhosts(out []byte) (map[string]string, error) {
	states := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	header := true
	for line := 1; sc.Scan(); line++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if header {
			header = false
			if f[0] == "HOST_NAME" {
				continue
			}
		}
		if len(f) < 5 {
			return nil, fmt.Errorf("bhosts line %d: too few fields: %q", line, sc.Text())
		}
		if err := names.ValidateNode(f[0]); err != nil {
			return nil, fmt.Errorf("bhosts line %d: %w", line, err)
		}
		njobs, err := strconv.Atoi(f[4])
		if err != nil && f[4] != "-" {
			return nil, fmt.Errorf("bhosts line %d: NJOBS %q: %w", line, f[4], err)
		}
		st := f[1]
		if st == "ok" && njobs == 0 {
			st = "idle"
		}
		states[f[0]] = st
	}
	return states, sc.Err()
}
