package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/bftrainer/bftrainer/sidecar"
	"github.com/bftrainer/bftrainer/trainer"
)

// selfCommand is how this bftrainer runs itself: its path, and the
// configuration file it read (node agents run locally and `bftrainer
// hosts` must read the same one).
func selfCommand(cfg Config) ([]string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("own path: %w", err)
	}
	argv := []string{self}
	if cfg.path != "" {
		argv = append(argv, "--config", cfg.path)
	}
	return argv, nil
}

// newRunner returns the Trainer runner the configuration asks for; nil
// (transport "none") records the plan only.
func newRunner(cfg Config) (sidecar.Runner, error) {
	t := cfg.Trainer
	if t.Transport == "none" {
		return nil, nil
	}
	self, err := selfCommand(cfg)
	if err != nil {
		return nil, err
	}
	local := trainer.Local{Argv: self}
	nodes, nodeBin, nodeConfig := nodeTransport(cfg, self)
	addr := t.Controller
	if addr == "" {
		if addr, err = os.Hostname(); err != nil {
			return nil, fmt.Errorf("trainer.controller: %w", err)
		}
	}
	built := t.launchers
	if built == nil { // a Config not from loadConfig
		if built, err = t.buildLaunchers(nil); err != nil {
			return nil, err
		}
	}
	return &trainer.Runner{
		Nodes:       trainer.Timed{T: nodes, Timeout: t.CommandTimeout.Duration},
		Controller:  trainer.Timed{T: local, Timeout: t.CommandTimeout.Duration},
		Launchers:   built,
		Kinds:       launchers(),
		StateDir:    t.StateDir,
		Address:     addr,
		Self:        self,
		NodeBin:     nodeBin,
		NodeConfig:  nodeConfig,
		Parallel:    t.Parallel,
		ReadEvery:   readEvery(t.ProgressLogEvery.Duration),
		ReadTimeout: t.ProgressLogTimeout.Duration,
		Log:         newLogger(os.Stderr),
	}, nil
}

// readEvery is trainer.progress_log_every as the runner takes it (0:
// never).
func readEvery(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// nodeTransport is how the node agents are reached (transport "local" or
// "ssh"), with the bftrainer command and configuration they run; self is
// this process's own command (selfCommand).
func nodeTransport(cfg Config, self []string) (nodes trainer.Transport, nodeBin, nodeConfig string) {
	t := cfg.Trainer
	nodeBin, nodeConfig = self[0], cfg.path
	if t.Transport != "ssh" {
		return trainer.Local{Argv: self}, nodeBin, nodeConfig
	}
	if t.RemoteBftrainer != "" {
		nodeBin = t.RemoteBftrainer
	}
	nodeConfig = t.RemoteConfig
	remote := []string{nodeBin}
	if nodeConfig != "" {
		remote = append(remote, "--config", nodeConfig)
	}
	return trainer.SSH{Program: t.SSH, Config: t.SSHConfig, Identity: t.SSHIdentity, User: t.SSHUser,
		ConnectTimeout: t.ConnectTimeout.Duration, Remote: remote}, nodeBin, nodeConfig
}

// nodeAgent is this machine's node agent, from the configuration. The
// node runs this binary: its schedulers' job markers are the ones compiled
// in (the registry's), whatever the controller or the configuration says.
func nodeAgent(cfg Config) trainer.AgentSettings {
	self, _ := os.Executable()
	t := cfg.Trainer
	return trainer.AgentSettings{
		Registry:       t.Registry,
		LogDir:         t.LogDir,
		Self:           self,
		AllowRootOwner: t.AllowRootOwner,
		KillWait:       t.KillWait.Duration,
		Containment:    t.Containment,
		CgroupRoot:     t.CgroupRoot,
		PidsMax:        t.PidsMax,
		MemoryMax:      t.memoryMax,
		IdleCPU:        t.CPUPriority == cpuIdle,
		DeviceGlob:     t.DeviceGlob,
		Sweep:          t.sweep,
		JobMarkers:     schedulers().JobMarkers(),
		Version:        version,
	}
}

// fallbackConfig is what a hook kills with when its configuration does
// not load: the built-in paths, and a sweep of /proc for the node's run
// tokens, since the launches' registry and cgroups may be elsewhere.
func fallbackConfig() Config {
	c := defaults()
	c.Trainer.sweep = true
	return c
}

// localKiller is the node-local reclaim: the node's own prolog kills every
// Trainer process on this machine as the node — its launches' cgroups, or
// (degraded) the recorded process groups and a scan of /proc — with no
// database and no network, and refuses new starts until the job's epilog.
func localKiller(cfg Config) sidecar.Killer { return trainer.NewNodeAgent(nodeAgent(cfg)) }

// remoteKiller is the reclaim on the other nodes of a job whose scheduler
// runs no hook there (Grid Engine: the prolog runs on the master host
// only): kill-all (fenced, as a node's own prolog) and clean through each
// node's agent, over the transport; nil with transport "none".
func remoteKiller(cfg Config) sidecar.Killer {
	if cfg.Trainer.Transport == "none" {
		return nil
	}
	self, err := selfCommand(cfg)
	if err != nil {
		return nil
	}
	nodes, _, _ := nodeTransport(cfg, self)
	return trainer.AgentClient{T: trainer.Timed{T: nodes, Timeout: cfg.Trainer.CommandTimeout.Duration}}
}

func nodeAgentCommand() *cli.Command {
	return &cli.Command{
		Name:      "node-agent",
		Usage:     "per-node Trainer operations, run as root on the node by the reconciler (ssh or local)",
		ArgsUsage: "start | stop NODE TRAINER | kill-all [--fence] NODE | clean NODE | unfence NODE | list NODE | tail NODE TRAINER | containment | doctor [HOOK]",
		Hidden:    true,
		Description: `Not for people: the reconciler runs it on a node, as root, over ssh (or
locally). "start" reads the launch as JSON on standard input and starts the
program as its owner under a supervisor, in its own cgroup where the node
has cgroup v2; the others print what they did as JSON. The registry is
trainer.registry of this machine's configuration; "containment" prints
how this node contains Trainer processes; "doctor" what "bftrainer doctor"
checks on a node.`,
		SkipFlagParsing: true,
		Action: func(c *cli.Context) error {
			args := c.Args().Slice()
			if len(args) > 0 && (args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
				return cli.ShowCommandHelp(c.Lineage()[1], "node-agent")
			}
			var settings trainer.AgentSettings
			if len(args) == 0 || (args[0] != "supervise" && args[0] != "read-tail") {
				cfg, err := configFrom(c)
				if err != nil {
					return err
				}
				settings = nodeAgent(cfg)
			}
			a := trainer.NewNodeAgent(settings)
			ctx, cancel := context.WithTimeout(c.Context, 2*time.Minute)
			defer cancel()
			return a.Main(ctx, args, os.Stdin, c.App.Writer)
		},
	}
}
