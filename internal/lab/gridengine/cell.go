package gridengine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bftrainer/bftrainer/internal/lab"
)

// writeCell writes the cell's bootstrap and act_qmaster and initialises
// the classic (flat file) spool with the global configuration, the
// default complexes and usersets, and root as manager: what Debian's
// init_cluster does for /var/lib/gridengine, here for a private SGE_ROOT
// and without Berkeley DB.
func (c *Cell) writeCell(context.Context) error {
	spool := c.common() + ";" + c.path("qmaster")
	bootstrap := strings.Join([]string{
		"admin_user              root",
		"default_domain          none",
		"ignore_fqdn             true",
		"spooling_method         classic",
		"spooling_lib            libspoolc",
		"spooling_params         " + spool,
		"binary_path             /usr/sbin",
		"qmaster_spool_dir       " + c.path("qmaster"),
		"security_mode           none",
		"listener_threads        2",
		"worker_threads          2",
		"scheduler_threads       1",
		"jvm_threads             0",
	}, "\n") + "\n"
	if err := os.WriteFile(c.common()+"/bootstrap", []byte(bootstrap), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(c.common()+"/act_qmaster", []byte(c.Master+"\n"), 0o644); err != nil {
		return err
	}
	base, err := os.ReadFile(defaultConf)
	if err != nil {
		return err
	}
	conf, err := setKeys(string(base), map[string]string{
		"execd_spool_dir": c.path("spool"),
		"mailer":          "/bin/true",
		// Jobs may run as root (the tests' default) or any user.
		"min_uid": "0",
		"min_gid": "0",
		// Loads reach qhost within seconds; an execd killed without
		// notice goes unknown after 30 s.
		"load_report_time": "00:00:05",
		"max_unheard":      "00:00:30",
		"loglevel":         "log_info",
		// Accounting records are written at once: qacct tells a test how
		// a job ended as soon as it has.
		"reporting_params": "accounting=true reporting=false flush_time=00:00:01 joblog=false sharelog=00:00:00 accounting_flush_time=00:00:00",
	})
	if err != nil {
		return err
	}
	confFile := c.path("conf", "global")
	if err := writeConf(confFile, conf); err != nil {
		return err
	}
	env := append(os.Environ(), "SGE_ROOT="+c.Root, "SGE_CELL="+cellName)
	for _, args := range [][]string{
		{"spoolinit", "classic", "libspoolc", spool, "init"},
		{"spooldefaults", "configuration", confFile},
		{"spooldefaults", "complexes", centryDir},
		{"spooldefaults", "usersets", usersetsDir},
		{"spooldefaults", "managers", "root"},
	} {
		cmd := exec.Command(libexecDir+"/"+args[0], args[1:]...)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// setKeys replaces the values of a Grid Engine "key value" file's keys;
// every key must be present.
func setKeys(text string, kv map[string]string) (string, error) {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	seen := map[string]bool{}
	for i, l := range lines {
		f := strings.Fields(l)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if v, ok := kv[f[0]]; ok {
			lines[i] = fmt.Sprintf("%-26s %s", f[0], v)
			seen[f[0]] = true
		}
	}
	var missing []string
	for k := range kv {
		if !seen[k] {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return "", fmt.Errorf("keys %v not in the template", missing)
	}
	return strings.Join(lines, "\n") + "\n", nil
}

func writeConf(path, body string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(body), 0o644)
}

// startQmaster starts sge_qmaster on the qmaster's host and waits until
// it answers. Its port is chosen free just before; if another program
// takes it first, the start is tried again on another.
func (c *Cell) startQmaster(ctx context.Context, timeout time.Duration) error {
	var err error
	for range 3 {
		if c.qport, err = freePort(); err != nil {
			return err
		}
		// The execds listen inside their own network namespaces: any port
		// is free there.
		c.eport = c.qport + 1
		if err = c.tryQmaster(ctx, timeout); err == nil {
			return nil
		}
		if c.qm != nil && !c.qm.exited() {
			return err
		}
		c.logf("gridengine: qmaster on port %d: %v; trying another port", c.qport, err)
	}
	return err
}

func (c *Cell) tryQmaster(ctx context.Context, timeout time.Duration) error {
	log, err := os.OpenFile(c.path("log", "qmaster.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command("nsenter", "-t", strconv.Itoa(c.ns[c.Master].pid()), "-m", "-u", "--wd="+c.Dir, "--", qmasterBin)
	cmd.Env = c.daemonEnv()
	cmd.Stdout, cmd.Stderr = log, log
	if c.qm, err = startProc("sge_qmaster", cmd); err != nil {
		return err
	}
	return lab.Poll(ctx, timeout, func() (bool, error) {
		if c.qm.exited() {
			return false, fmt.Errorf("sge_qmaster exited: %v", c.qm.err)
		}
		_, err := c.Output(ctx, "qconf", "-sh")
		return err == nil, nil
	})
}

// configure adds the hosts, the host group, the parallel environment,
// the queue and the scheduler's settings.
func (c *Cell) configure(ctx context.Context, o Options) error {
	if _, err := c.Output(ctx, "qconf", "-as", strings.Join(append([]string{c.Master}, c.Hosts...), ",")); err != nil {
		return err
	}
	for _, h := range c.Hosts {
		f := c.path("conf", "exechost-"+h)
		if err := writeConf(f, "hostname "+h+"\nload_scaling NONE\ncomplex_values NONE\nuser_lists NONE\nxuser_lists NONE\n"+
			"projects NONE\nxprojects NONE\nusage_scaling NONE\nreport_variables NONE\n"); err != nil {
			return err
		}
		if _, err := c.Output(ctx, "qconf", "-Ae", f); err != nil {
			return err
		}
	}
	hg := c.path("conf", "hostgroup")
	if err := writeConf(hg, "group_name "+hostGroup+"\nhostlist "+strings.Join(c.Hosts, " ")+"\n"); err != nil {
		return err
	}
	if _, err := c.Output(ctx, "qconf", "-Ahgrp", hg); err != nil {
		return err
	}
	// allocation_rule 1: one slot per host, so a job of N slots holds N
	// hosts. control_slaves: the job reaches its other hosts with qrsh
	// -inherit, under Grid Engine's control.
	pe := c.path("conf", "pe")
	if err := writeConf(pe, strings.Join([]string{
		"pe_name            " + peName,
		"slots              9999",
		"user_lists         NONE",
		"xuser_lists        NONE",
		"start_proc_args    " + asRoot(o.PEStart),
		"stop_proc_args     " + asRoot(o.PEStop),
		"allocation_rule    1",
		"control_slaves     TRUE",
		"job_is_first_task  FALSE",
		"urgency_slots      min",
		"accounting_summary FALSE",
		"qsort_args         NONE",
	}, "\n")+"\n"); err != nil {
		return err
	}
	if _, err := c.Output(ctx, "qconf", "-Ap", pe); err != nil {
		return err
	}
	if err := c.loadTemplate(ctx, []string{"-sq"}, "-Aq", "queue", map[string]string{
		"qname":    queueName,
		"hostlist": hostGroup,
		"pe_list":  peName,
		// One slot per host: a host is a node, whole, as main jobs take them.
		"slots": "1",
		"shell": "/bin/sh",
		// No load threshold: a busy machine (or a Trainer's load) must not
		// put the queue in alarm and keep main jobs off it.
		"load_thresholds": "NONE",
		"tmpdir":          c.path("tmp"),
		"prolog":          asRoot(o.Prolog),
		"epilog":          asRoot(o.Epilog),
	}); err != nil {
		return err
	}
	// A scheduling run every second; reservations on, with a finite
	// default duration (a reservation needs an end for every running job)
	// and MONITOR=1, so that the planned starts are written to the
	// schedule file.
	return c.loadTemplate(ctx, []string{"-ssconf"}, "-Msconf", "scheduler", map[string]string{
		"schedule_interval":          "0:0:1",
		"flush_submit_sec":           "1",
		"flush_finish_sec":           "1",
		"job_load_adjustments":       "NONE",
		"load_adjustment_decay_time": "0:0:0",
		"max_reservation":            "20",
		"default_duration":           "1:0:0",
		"params":                     "MONITOR=1",
	})
}

// asRoot is a hook's command line as Grid Engine runs it as root, or
// NONE.
func asRoot(cmd string) string {
	if cmd == "" {
		return "NONE"
	}
	return "root@" + cmd
}

// loadTemplate reads a configuration from qconf (show), sets keys, and
// loads it back (load): the template stays Grid Engine's own, whatever
// keys this version has.
func (c *Cell) loadTemplate(ctx context.Context, show []string, load, name string, kv map[string]string) error {
	text, err := c.Output(ctx, "qconf", show...)
	if err != nil {
		return err
	}
	if text, err = setKeys(text, kv); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	f := c.path("conf", name)
	if err := writeConf(f, text); err != nil {
		return err
	}
	_, err = c.Output(ctx, "qconf", load, f)
	return err
}

// SetHooks changes the queue's prolog and epilog ("" for none); Grid
// Engine applies it to the next job.
func (c *Cell) SetHooks(ctx context.Context, prolog, epilog string) error {
	for _, kv := range [][2]string{{"prolog", prolog}, {"epilog", epilog}} {
		if _, err := c.Output(ctx, "qconf", "-mattr", "queue", kv[0], asRoot(kv[1]), c.Queue); err != nil {
			return err
		}
	}
	return nil
}

// startExecds starts every host's execd and waits until every host's
// queue instance is exactly idle.
func (c *Cell) startExecds(ctx context.Context, timeout time.Duration) error {
	for _, h := range c.Hosts {
		if err := c.startExecd(h); err != nil {
			return err
		}
	}
	return c.WaitIdle(ctx, timeout)
}

func (c *Cell) startExecd(host string) error {
	log, err := os.OpenFile(c.path("log", "execd-"+host+".out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command("nsenter", "-t", strconv.Itoa(c.ns[host].pid()), "-n", "-u", "-m", "--wd="+c.Dir, "--", execdBin)
	cmd.Env = c.daemonEnv()
	cmd.Stdout, cmd.Stderr = log, log
	p, err := startProc("sge_execd on "+host, cmd)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.execds[host] = p
	c.mu.Unlock()
	return nil
}

// StopExecd shuts a host's execd down through the qmaster (qconf -ke:
// the qmaster marks the host unknown at once) and waits, at most 15 s,
// for it to exit; with kill it sends SIGKILL instead, as a crash would
// (the host goes unknown only after max_unheard, 30 s). Its jobs'
// shepherds keep running, as on a site.
func (c *Cell) StopExecd(ctx context.Context, host string, kill bool) error {
	c.mu.Lock()
	p := c.execds[host]
	c.mu.Unlock()
	if p == nil {
		return fmt.Errorf("no execd on %q", host)
	}
	if kill {
		return p.stop(syscall.SIGKILL, 0)
	}
	if _, err := c.Output(ctx, "qconf", "-ke", host); err != nil {
		return err
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(15 * time.Second):
		return p.stop(syscall.SIGTERM, 5*time.Second)
	}
}

// StartExecd starts a stopped host's execd again and waits until its
// queue instance is no longer unknown.
func (c *Cell) StartExecd(ctx context.Context, host string) error {
	c.mu.Lock()
	p := c.execds[host]
	c.mu.Unlock()
	if p != nil && !p.exited() {
		return fmt.Errorf("execd on %s still runs", host)
	}
	if err := c.startExecd(host); err != nil {
		return err
	}
	return lab.Poll(ctx, readyTimeout, func() (bool, error) {
		qs, err := c.Instances(ctx)
		if err != nil {
			return false, err
		}
		for _, q := range qs {
			if q.Host == host {
				return !strings.Contains(q.State, "u"), nil
			}
		}
		return false, nil
	})
}

// Stop deletes every job, stops the execds and the qmaster (SIGTERM,
// then SIGKILL), kills every process left that carries the cell's token
// (shepherds, hooks, jobs), ends the hosts' namespaces, removes the
// network devices and, unless keep, the directory. It is safe to call
// twice.
func (c *Cell) Stop(ctx context.Context, keep bool) error {
	c.stopOnce.Do(func() { c.stopErr = c.stop(ctx, keep) })
	return c.stopErr
}

func (c *Cell) stop(ctx context.Context, keep bool) error {
	var errs []error
	if c.qm != nil && !c.qm.exited() {
		// Best effort: jobs that did not start yet are not started by a
		// qmaster that is going away anyway.
		c.Output(ctx, "qdel", "-f", "-u", "*")
	}
	c.mu.Lock()
	execds := c.execds
	c.mu.Unlock()
	t := time.Now()
	for _, p := range execds {
		errs = append(errs, p.stop(syscall.SIGTERM, 5*time.Second))
	}
	c.logf("gridengine: stop execds: %v", time.Since(t).Round(time.Millisecond))
	t = time.Now()
	errs = append(errs, c.qm.stop(syscall.SIGTERM, 2*time.Second))
	c.logf("gridengine: stop qmaster: %v", time.Since(t).Round(time.Millisecond))
	t = time.Now()
	errs = append(errs, killToken(c.token, 10*time.Second))
	c.logf("gridengine: kill the rest: %v", time.Since(t).Round(time.Millisecond))
	for _, p := range c.ns {
		errs = append(errs, p.stop(syscall.SIGKILL, 0))
	}
	errs = append(errs, c.removeNetwork())
	if !keep && c.Dir != "" {
		errs = append(errs, os.RemoveAll(c.Dir))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("stop cell: %w", err)
	}
	return nil
}
