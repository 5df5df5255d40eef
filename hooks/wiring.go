package hooks

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Wiring checks how a site wired a scheduler to bftrainer, as the scheduler
// itself reports its configuration, for `bftrainer doctor`. A scheduler
// whose configuration bftrainer does not read leaves it nil (doctor says
// so).
type Wiring struct {
	// Key is its program's key in the configuration's [scheduler] table
	// ("scontrol"), and Program its default.
	Key, Program string
	// Check asks program for the scheduler's configuration and checks it
	// against want, one Finding per thing checked. An error is the
	// program's failure (not installed, no controller answering).
	Check func(ctx context.Context, program string, want Want) ([]Finding, error)
}

// Want is what a site's wiring should say.
type Want struct {
	// Hook is bftrainer's hook binary: where the scheduler's hooks must
	// lead.
	Hook string
	// Deadline is hooks.deadline: a hook ends within twice it.
	Deadline time.Duration
	// Group is the database's group, which the hooks' journal has: the
	// user the controller hooks run as must be in it ("": not checked).
	Group string
	// Groups returns the names of a user's groups; nil: the system's
	// (os/user).
	Groups func(user string) ([]string, error)
}

// Statuses of a Finding.
const (
	OK   = "ok"
	Warn = "warn"
	Fail = "fail"
)

// Finding is one checked thing: its name, OK, Warn or Fail, what was
// found, and, unless OK, the fix.
type Finding struct {
	Name, Status, Detail, Hint string
}

// userGroups is Want.Groups's default: the user's groups from the system.
func userGroups(name string) ([]string, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, err
	}
	ids, err := u.GroupIds()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, id := range ids {
		if g, err := user.LookupGroupId(id); err == nil {
			out = append(out, g.Name)
		}
	}
	return out, nil
}

// slurmWiring reads `scontrol show config` (slurmctld's running
// configuration, not a slurm.conf that may not be applied yet).
var slurmWiring = &Wiring{Key: "scontrol", Program: "/usr/bin/scontrol", Check: checkSlurmWiring}

func checkSlurmWiring(ctx context.Context, program string, want Want) ([]Finding, error) {
	cmd := exec.CommandContext(ctx, program, "show", "config")
	cmd.WaitDelay = time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		// Its last line says why (scontrol's "fatal: …").
		msg := strings.TrimSpace(stderr.String())
		if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
			msg = msg[i+1:]
		}
		return nil, fmt.Errorf("%s show config: %w: %s", program, err, msg)
	}
	return CheckSlurmConfig(ParseSlurmConfig(out), want), nil
}

// ParseSlurmConfig reads `scontrol show config`'s "Key = value" lines.
func ParseSlurmConfig(out []byte) map[string]string {
	cfg := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if !ok {
			continue
		}
		k = strings.TrimSpace(k)
		if k == "" || strings.ContainsAny(k, " \t") {
			continue
		}
		cfg[k] = strings.TrimSpace(v)
	}
	return cfg
}

// slurmHooks are the hook points bftrainer needs, and what each does.
var slurmHooks = []struct{ key, does string }{
	{"Prolog", "kills Trainers on a node a job takes"},
	{"Epilog", "cleans up and lifts the node's fence"},
	{"PrologSlurmctld", "records a job's nodes as taken"},
	{"EpilogSlurmctld", "records them as released"},
}

// CheckSlurmConfig checks Slurm's running configuration (ParseSlurmConfig)
// against want: the four hooks lead to bftrainer's hook (the binary, a
// link to it, a prolog.d glob holding one, or a wrapper script naming
// it), PrologFlags has Alloc (Contain implies it), PrologEpilogTimeout
// is above twice hooks.deadline, and SlurmUser is in the database's
// group (root needs none).
func CheckSlurmConfig(cfg map[string]string, want Want) []Finding {
	var out []Finding
	for _, h := range slurmHooks {
		out = append(out, checkSlurmHook(h.key, h.does, cfg[h.key], want.Hook))
	}
	out = append(out, checkPrologFlags(cfg["PrologFlags"]), checkPrologTimeout(cfg["PrologEpilogTimeout"], want.Deadline))
	return append(out, checkSlurmUser(cfg["SlurmUser"], want))
}

func unset(v string) bool { return v == "" || v == "(null)" }

func checkSlurmHook(key, does, value, hook string) Finding {
	f := Finding{Name: "slurm." + key, Detail: key + "=" + value}
	fix := fmt.Sprintf("set %s=%s in slurm.conf, then scontrol reconfigure (contrib/slurm/README.md, section 2)", key, hook)
	if unset(value) {
		f.Status, f.Detail, f.Hint = Fail, key+" is not set: nothing "+does, fix
		return f
	}
	paths := []string{value}
	if strings.ContainsAny(value, "*?[") {
		paths, _ = filepath.Glob(value)
		if len(paths) == 0 {
			f.Status, f.Detail, f.Hint = Fail, fmt.Sprintf("%s=%s matches no file here", key, value), fix
			return f
		}
	}
	for _, p := range paths {
		if leadsTo(p, hook) == nil {
			f.Status = OK
			if p != value {
				f.Detail += " (" + p + ")"
			}
			return f
		}
	}
	if _, err := os.Stat(paths[0]); err != nil {
		f.Status, f.Detail, f.Hint = Fail, fmt.Sprintf("%s=%s: %v", key, value, err), fix
		return f
	}
	f.Status, f.Detail, f.Hint = Fail, fmt.Sprintf("%s=%s does not run bftrainer's hook %s", key, value, hook), fix+", or run "+hook+" from that script"
	return f
}

// leadsTo reports (nil) whether running path runs hook: it is hook, a link
// to it, or a small script that names it.
func leadsTo(path, hook string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if st.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not executable", path)
	}
	if hook == "" {
		return nil
	}
	hs, err := os.Stat(hook)
	if err == nil && os.SameFile(st, hs) {
		return nil
	}
	if st.Size() < 64<<10 {
		b, err := os.ReadFile(path)
		if err == nil && bytes.HasPrefix(b, []byte("#!")) && bytes.Contains(b, []byte(hook)) {
			return nil
		}
	}
	return fmt.Errorf("%s does not run %s", path, hook)
}

func checkPrologFlags(v string) Finding {
	f := Finding{Name: "slurm.PrologFlags", Detail: "PrologFlags=" + v}
	for _, fl := range strings.Split(v, ",") {
		if fl = strings.TrimSpace(fl); strings.EqualFold(fl, "Alloc") || strings.EqualFold(fl, "Contain") {
			f.Status = OK
			return f
		}
	}
	f.Status = Fail
	f.Detail += ": without Alloc a node's Prolog runs only when a step reaches it, and a Trainer runs beside the job until then"
	f.Hint = "add PrologFlags=Alloc to slurm.conf, then scontrol reconfigure"
	return f
}

func checkPrologTimeout(v string, deadline time.Duration) Finding {
	f := Finding{Name: "slurm.PrologEpilogTimeout", Detail: "PrologEpilogTimeout=" + v}
	hint := fmt.Sprintf("set PrologEpilogTimeout well above twice hooks.deadline (%s), e.g. 120, in slurm.conf", 2*deadline)
	// Slurm 22.05 prints 65534 (NO_VAL16) for "not set": it waits forever.
	s, err := strconv.Atoi(v)
	switch {
	case unset(v) || err == nil && s >= 65534 || strings.EqualFold(v, "INFINITE"):
		f.Status, f.Detail, f.Hint = Warn, f.Detail+": Slurm waits forever for a hung prolog", hint
	case err != nil:
		f.Status, f.Detail, f.Hint = Warn, f.Detail+": not a number of seconds", hint
	case time.Duration(s)*time.Second <= 2*deadline:
		f.Status, f.Hint = Fail, hint
		f.Detail += fmt.Sprintf(": not above twice hooks.deadline (%s): a slow hook drains the node", 2*deadline)
	default:
		f.Status = OK
	}
	return f
}

func checkSlurmUser(v string, want Want) Finding {
	name, _, _ := strings.Cut(v, "(") // "slurm(64030)"
	f := Finding{Name: "slurm.SlurmUser", Detail: "SlurmUser=" + v}
	switch {
	case name == "root" || want.Group == "":
		f.Status = OK
		return f
	case unset(name):
		f.Status, f.Detail, f.Hint = Warn, "SlurmUser not reported", "check scontrol show config"
		return f
	}
	groups := want.Groups
	if groups == nil {
		groups = userGroups
	}
	gs, err := groups(name)
	if err != nil {
		f.Status, f.Detail, f.Hint = Fail, fmt.Sprintf("SlurmUser %s: %v", name, err), "create the user here as on the controller"
		return f
	}
	if slices.Contains(gs, want.Group) {
		f.Status, f.Detail = OK, f.Detail+" (in group "+want.Group+")"
		return f
	}
	f.Status = Fail
	f.Detail = fmt.Sprintf("SlurmUser %s is not in the database's group %s: the controller hooks cannot write the journal", name, want.Group)
	f.Hint = fmt.Sprintf("usermod -aG %s %s (or give the database's directory %s's group: contrib/slurm/README.md, section 3)", want.Group, name, name)
	return f
}

// gridEngineWiring reads each cluster queue's configuration (qconf -sql,
// then qconf -sq QUEUE).
var gridEngineWiring = &Wiring{Key: "qconf", Program: "qconf", Check: checkGridEngineWiring}

func checkGridEngineWiring(ctx context.Context, program string, want Want) ([]Finding, error) {
	qconf := func(args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, program, args...)
		cmd.WaitDelay = time.Second
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w: %s", program, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
		}
		return out, nil
	}
	list, err := qconf("-sql")
	if err != nil {
		return nil, err
	}
	queues := map[string][]byte{}
	for _, q := range strings.Fields(string(list)) {
		if queues[q], err = qconf("-sq", q); err != nil {
			return nil, err
		}
	}
	return CheckGridEngineQueues(queues, want), nil
}

// ParseGridEngineQueue reads `qconf -sq QUEUE`: "name value" lines, a
// value continued on the next line after a trailing backslash.
func ParseGridEngineQueue(out []byte) map[string]string {
	q := map[string]string{}
	text := strings.ReplaceAll(string(out), "\\\n", "")
	for _, l := range strings.Split(text, "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 {
			q[f[0]] = strings.Join(f[1:], " ")
		}
	}
	return q
}

// CheckGridEngineQueues checks each queue's prolog and epilog (by
// queue name, `qconf -sq` output): run as root, they lead to bftrainer's
// hook with "hook gridengine prolog|epilog" (contrib/gridengine). A
// queue without bftrainer's prolog lends its hosts' Trainers to its jobs.
// Host-specific values ("[host=…]") are not checked, and say so.
func CheckGridEngineQueues(queues map[string][]byte, want Want) []Finding {
	names := make([]string, 0, len(queues))
	for n := range queues {
		names = append(names, n)
	}
	slices.Sort(names)
	var out []Finding
	for _, n := range names {
		q := ParseGridEngineQueue(queues[n])
		for _, h := range []string{"prolog", "epilog"} {
			out = append(out, checkGridEngineHook(n, h, q[h], want.Hook))
		}
	}
	return out
}

func checkGridEngineHook(queue, hook, value, bin string) Finding {
	f := Finding{Name: "gridengine." + queue + "." + hook, Detail: hook + " " + value}
	fix := fmt.Sprintf("qconf -mattr queue %s 'root@%s hook gridengine %s $host $job_id $job_owner' %s (contrib/gridengine/README.md)", hook, bin, hook, queue)
	def, hosts, _ := strings.Cut(value, ",[")
	user, line, hasUser := strings.Cut(def, "@")
	if !hasUser || strings.Contains(user, "/") {
		user, line = "", def
	}
	args := strings.Fields(line)
	switch {
	case len(args) == 0 || line == "NONE":
		does := "nothing kills the Trainers on a job's hosts"
		if hook == "epilog" {
			does = "nothing lifts the hosts' fence when a job ends"
		}
		f.Status, f.Detail, f.Hint = Fail, fmt.Sprintf("queue %s has no %s: %s", queue, hook, does), fix
	case user != "root":
		f.Status, f.Detail, f.Hint = Fail, fmt.Sprintf("queue %s's %s runs as %s, not root: it cannot kill Trainers", queue, hook, cmpOr(user, "the job's owner")), fix
	default:
		if err := leadsTo(args[0], bin); err != nil {
			f.Status, f.Detail, f.Hint = Fail, fmt.Sprintf("queue %s's %s: %v", queue, hook, err), fix
			break
		}
		if sameFile(args[0], bin) && !strings.Contains(" "+strings.Join(args[1:], " ")+" ", " hook gridengine "+hook+" ") {
			f.Status, f.Detail, f.Hint = Fail, fmt.Sprintf("queue %s's %s runs bftrainer without \"hook gridengine %s\": %q", queue, hook, hook, line), fix
			break
		}
		f.Status = OK
		if hosts != "" {
			f.Status, f.Hint = Warn, "check the host-specific values by hand: qconf -sq "+queue
		}
	}
	return f
}

// sameFile reports whether a and b are one file.
func sameFile(a, b string) bool {
	sa, err := os.Stat(a)
	if err != nil {
		return false
	}
	sb, err := os.Stat(b)
	return err == nil && os.SameFile(sa, sb)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
