package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/bftrainer/bftrainer/names"
	"github.com/bftrainer/bftrainer/sidecar"
	"github.com/bftrainer/bftrainer/trainer"
)

func doctorCommand() *cli.Command {
	return &cli.Command{
		Name:      "doctor",
		Usage:     "check the site's wiring: the scheduler's configuration, paths and modes, services, nodes, solver and launchers",
		ArgsUsage: " ",
		Description: `Checks what the hooks cannot check on their own path (they fail open, so
a wrong wiring shows only as a harvest of zero weeks later), and prints one
line per check: ok, warn or fail, what was found, and for warn and fail the
fix. Run it as root on the controller after installing, after every change
of slurm.conf, and from monitoring; exit status 1 if any check fails.

  scheduler  as the scheduler itself reports its configuration (Slurm:
             scontrol show config): Prolog, Epilog, PrologSlurmctld and
             EpilogSlurmctld lead to this binary (or --hook), PrologFlags
             has Alloc, PrologEpilogTimeout is above twice hooks.deadline,
             SlurmUser is in the database's group. Grid Engine (qconf
             -sq, every queue): the prolog and epilog run this binary's
             "hook gridengine prolog|epilog" as root. LSF, PBS: a warning.
  paths      the database, the journals (2770, the database's group), the
             spool (1733), trainer.registry and log_dir, hooks.log,
             metrics.textfile
  systemd    bftrainer-reconcile.service enabled and active,
             bftrainer-sync.timer enabled and fired within --recent (a
             warning where systemd is not running)
  nodes      through each node's agent (trainer.transport, as root), on
             --nodes or a sample of the scheduler's nodes: cgroup v2 with
             cgroup.kill and the pids controller, the hook binary there and
             of this version, the clock within --max-skew
  programs   the solver (pool.solver's program) and what each launcher
             needs (torchrun; python with torch and the elastic runtime)

  bftrainer doctor
  bftrainer doctor --nodes 'n[01-04]' --format json`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "hook", Usage: "bftrainer's hook binary as the scheduler runs it, `PATH` (default: this binary)"},
			&cli.StringFlag{Name: "nodes", Usage: "check these `NODES` (a hostlist; default: a sample of the scheduler's nodes)"},
			&cli.IntFlag{Name: "sample", Value: 3, Usage: "how many of the scheduler's nodes to check without --nodes"},
			&cli.DurationFlag{Name: "max-skew", Value: time.Second, Usage: "clock skew allowed between a node and this host"},
			&cli.DurationFlag{Name: "recent", Value: 30 * time.Minute, Usage: "how long ago the sync timer may last have fired"},
			&cli.StringFlag{Name: "systemctl", Usage: "systemctl `PROGRAM` (default: systemctl, where systemd runs)"},
			formatFlag(fmtTable, fmtJSON),
		},
		Action: coreAction(func(c *cli.Context, core *sidecar.Core, cfg Config) error {
			if c.Args().Present() {
				return usagef("doctor takes no arguments (got %q)", c.Args().First())
			}
			o, err := doctorOptions(c, cfg)
			if err != nil {
				return err
			}
			r := core.Doctor(c.Context, o)
			if c.String("format") == fmtJSON {
				if err := writeJSON(c.App.Writer, r); err != nil {
					return err
				}
			} else if err := writeDoctor(c.App.Writer, r); err != nil {
				return err
			}
			say(c.App.ErrWriter, "doctor: %d ok, %d warn, %d fail", r.OK, r.Warn, r.Fail)
			if r.Fail > 0 {
				return errDoctor
			}
			return nil
		}),
	}
}

// errDoctor ends a doctor that found a failing check with exit status 1;
// the lines above said which and how to fix it.
var errDoctor = errors.New("the site's wiring has failing checks (the fail lines above)")

// doctorOptions maps the flags and the configuration onto the core's
// options: the hook binary, the paths, the systemctl program, the nodes'
// agents over the configured transport, the launchers.
func doctorOptions(c *cli.Context, cfg Config) (sidecar.DoctorOptions, error) {
	o := sidecar.DoctorOptions{
		Hook:       c.String("hook"),
		Version:    version,
		HookLog:    cfg.Hooks.Log,
		Registry:   cfg.Trainer.Registry,
		LogDir:     cfg.Trainer.LogDir,
		Systemctl:  c.String("systemctl"),
		Recent:     c.Duration("recent"),
		Sample:     c.Int("sample"),
		MaxSkew:    c.Duration("max-skew"),
		Launchers:  cfg.Trainer.launchers,
		Configured: map[string]bool{},
	}
	if o.Sample < 1 || o.MaxSkew <= 0 || o.Recent <= 0 {
		return o, usagef("--sample, --max-skew and --recent must be positive")
	}
	if o.Hook == "" {
		self, err := os.Executable()
		if err != nil {
			return o, fmt.Errorf("own path: %w", err)
		}
		o.Hook = self
	}
	if !filepath.IsAbs(o.Hook) {
		return o, usagef("--hook %q: want an absolute path (schedulers run hooks with no PATH)", o.Hook)
	}
	if n := c.String("nodes"); n != "" {
		nodes, err := names.ExpandHostlist(n)
		if err != nil {
			return o, usagef("--nodes: %v", err)
		}
		o.Nodes = nodes
	}
	if cfg.Trainer.Transport != "none" {
		self, err := selfCommand(cfg)
		if err != nil {
			return o, err
		}
		nodes, _, _ := nodeTransport(cfg, self)
		o.Agent = trainer.AgentClient{T: trainer.Timed{T: nodes, Timeout: cfg.Trainer.CommandTimeout.Duration}}
		for n := range cfg.Trainer.Launcher {
			o.Configured[n] = true
		}
	}
	return o, nil
}

// writeDoctor writes one line per check: status, check, what was found
// and, unless ok, the fix.
func writeDoctor(w io.Writer, r *sidecar.DoctorReport) error {
	for _, ch := range r.Checks {
		line := fmt.Sprintf("%-4s  %-36s  %s", ch.Status, ch.Check, ch.Detail)
		if ch.Hint != "" {
			line += " — fix: " + ch.Hint
		}
		if _, err := fmt.Fprintln(w, line); err != nil {
			return err
		}
	}
	return nil
}
