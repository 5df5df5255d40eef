package main

import (
	"context"
	"encoding/json"
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
	var nodes trainer.Transport = local
	nodeBin, nodeConfig := self[0], cfg.path
	if t.Transport == "ssh" {
		if t.RemoteBftrainer != "" {
			nodeBin = t.RemoteBftrainer
		}
		nodeConfig = t.RemoteConfig
		remote := []string{nodeBin}
		if nodeConfig != "" {
			remote = append(remote, "--config", nodeConfig)
		}
		nodes = trainer.SSH{Program: t.SSH, Config: t.SSHConfig, Identity: t.SSHIdentity, User: t.SSHUser,
			ConnectTimeout: t.ConnectTimeout.Duration, Remote: remote}
	}
	addr := t.Controller
	if addr == "" {
		if addr, err = os.Hostname(); err != nil {
			return nil, fmt.Errorf("trainer.controller: %w", err)
		}
	}
	ports, _ := parsePorts(t.StorePorts) // validated with the configuration
	var cooldown [2]int
	if len(t.BlacklistCooldown) == 2 {
		cooldown = [2]int{t.BlacklistCooldown[0], t.BlacklistCooldown[1]}
	}
	return &trainer.Runner{
		Nodes:       timed{nodes, t.CommandTimeout.Duration},
		Controller:  timed{local, t.CommandTimeout.Duration},
		StateDir:    t.StateDir,
		Address:     addr,
		StorePorts:  ports,
		Torchrun:    t.Torchrun,
		Python:      t.Python,
		MaxRestarts: t.MaxRestarts,
		JoinTimeout: t.JoinTimeout.Duration,
		Horovodrun:  t.Horovodrun,
		Hosts:       append(self, "hosts"),
		Cooldown:    cooldown,
		NodeBin:     nodeBin,
		NodeConfig:  nodeConfig,
		Parallel:    t.Parallel,
		Log:         newLogger(os.Stderr),
	}, nil
}

// timed bounds every node-agent call: a node that hangs after the ssh
// connection is up cannot hold the round.
type timed struct {
	t       trainer.Transport
	timeout time.Duration
}

func (t timed) Agent(ctx context.Context, node string, args []string, stdin []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	return t.t.Agent(ctx, node, args, stdin)
}

// nodeAgent is this machine's node agent, from the configuration.
func nodeAgent(cfg Config) *trainer.NodeAgent {
	self, _ := os.Executable()
	return &trainer.NodeAgent{
		Registry:       trainer.Registry{Dir: cfg.Trainer.Registry},
		LogDir:         cfg.Trainer.LogDir,
		Self:           self,
		AllowRootOwner: cfg.Trainer.AllowRootOwner,
		KillWait:       cfg.Trainer.KillWait.Duration,
		FenceMax:       cfg.Trainer.ReclaimFence.Duration,
	}
}

// localKiller is the node-local reclaim: the node's own prolog kills every
// Trainer process recorded in this machine's registry (and every process
// carrying a run token for the node), with no database and no network,
// and refuses new starts until the job's epilog.
func localKiller(cfg Config) sidecar.Killer { return registryKiller{nodeAgent(cfg)} }

type registryKiller struct{ a *trainer.NodeAgent }

func (k registryKiller) KillLocal(ctx context.Context, node string) (sidecar.KillResult, error) {
	rep, err := k.a.KillAll(ctx, node, k.a.FenceMax > 0)
	return killResult(rep), err
}

func (k registryKiller) CleanLocal(ctx context.Context, node string) (sidecar.KillResult, error) {
	rep, err := k.a.Clean(ctx, node)
	return killResult(rep), err
}

func killResult(rep trainer.KillReport) sidecar.KillResult {
	b, _ := json.Marshal(rep)
	return sidecar.KillResult{Killed: rep.Count(), Containment: "degraded (process groups and run tokens)", Report: b}
}

func nodeAgentCommand() *cli.Command {
	return &cli.Command{
		Name:      "node-agent",
		Usage:     "per-node Trainer operations, run as root on the node by the reconciler (ssh or local)",
		ArgsUsage: "start | stop NODE TRAINER | kill-all [--fence] NODE | clean NODE | list NODE",
		Hidden:    true,
		Description: `Not for people: the reconciler runs it on a node, as root, over ssh (or
locally). "start" reads the launch as JSON on standard input and starts the
program as its owner under a supervisor; the others print what they did as
JSON. The registry is trainer.registry of this machine's configuration.`,
		SkipFlagParsing: true,
		Action: func(c *cli.Context) error {
			args := c.Args().Slice()
			a := &trainer.NodeAgent{}
			if len(args) == 0 || args[0] != "supervise" {
				cfg, err := configFrom(c)
				if err != nil {
					return err
				}
				a = nodeAgent(cfg)
			}
			ctx, cancel := context.WithTimeout(c.Context, 2*time.Minute)
			defer cancel()
			return a.Main(ctx, args, os.Stdin, c.App.Writer)
		},
	}
}
