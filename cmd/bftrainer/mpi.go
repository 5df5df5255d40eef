package main

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/bftrainer/bftrainer/trainer"
)

// exitStatus is a hidden command's exit status that is a child's (the
// MPI remote side passes on its daemon's): no message, just the code.
type exitStatus int

func (e exitStatus) Error() string { return "" }

// mpiCommands are the hidden pieces of an MPI Trainer's remote side
// (trainer/mpiland.go): not for people.
func mpiCommands() []*cli.Command {
	return []*cli.Command{
		{
			Name: "mpi-land", Hidden: true, ArgsUsage: "[--worker-wait DURATION] TRAINER NODE",
			Usage: "an MPI Trainer's landing on a node, started by the node agent: runs the daemons mpi-exec hands it, in the run's cgroup",
			Flags: []cli.Flag{&cli.DurationFlag{Name: "worker-wait", Usage: "a worker landing (launcher mpi-elastic): run the program mpi-rank hands it, exit with its status; give up after this long without one"}},
			Action: func(c *cli.Context) error {
				if c.NArg() != 2 {
					return usagef("mpi-land: want TRAINER NODE")
				}
				code, err := trainer.MPILand(c.Context, c.Args().Get(0), c.Args().Get(1), c.Duration("worker-wait"))
				if err != nil {
					return err
				}
				return exitIf(code)
			},
		},
		{
			Name: "mpi-rank", Hidden: true, ArgsUsage: "-- PROGRAM...", SkipFlagParsing: true,
			Usage: "a mpi-elastic Trainer's rank, started by mpirun: hands PROGRAM to the node's landing, which runs it as a worker",
			Action: func(c *cli.Context) error {
				args := c.Args().Slice()
				if isHelp(args) {
					return cli.ShowCommandHelp(c.Lineage()[1], "mpi-rank")
				}
				if len(args) > 0 && args[0] == "--" {
					args = args[1:]
				}
				wait, err := time.ParseDuration(os.Getenv(trainer.MPIExecWaitEnv))
				if err != nil {
					wait = 30 * time.Second
				}
				_, err = trainer.MPIRank(c.Context, args, os.Getenv, wait)
				return err
			},
		},
		{
			Name: "mpi-elastic-driver", Hidden: true, ArgsUsage: "STARTFILE -- STORE...", SkipFlagParsing: true,
			Usage: "a mpi-elastic Trainer's process on the controller: runs its elastic store, and the mpirun of each generation the runner asks for",
			Action: func(c *cli.Context) error {
				args := c.Args().Slice()
				if isHelp(args) {
					return cli.ShowCommandHelp(c.Lineage()[1], "mpi-elastic-driver")
				}
				if len(args) < 3 || args[1] != "--" {
					return usagef("mpi-elastic-driver: want STARTFILE -- STORE...")
				}
				code, err := trainer.MPIElasticDriver(c.Context, args[0], args[2:], 20*time.Millisecond)
				if err != nil {
					return err
				}
				return exitIf(code)
			},
		},
		{
			Name: "mpi-exec", Hidden: true, ArgsUsage: "[--wait DURATION] TRAINER NODE -- ARGV...",
			Usage: "hand an MPI daemon's command to the Trainer's landing on this node (run by mpi-rsh's ssh)",
			Flags: []cli.Flag{&cli.DurationFlag{Name: "wait", Value: 30 * time.Second, Usage: "how long to wait for the landing"}},
			Action: func(c *cli.Context) error {
				args := c.Args().Slice()
				if len(args) > 2 && args[2] == "--" {
					args = append(args[:2], args[3:]...)
				}
				if len(args) < 3 {
					return usagef("mpi-exec: want TRAINER NODE -- ARGV...")
				}
				code, err := trainer.MPIExec(c.Context, args[0], args[1], args[2:], c.Duration("wait"))
				if err != nil {
					return err
				}
				return exitIf(code)
			},
		},
		{
			Name: "mpi-rsh", Hidden: true, ArgsUsage: "[-x] HOST COMMAND...", SkipFlagParsing: true,
			Usage: "the remote shell of an MPI Trainer's mpirun (Open MPI plm_rsh_agent, Hydra -launcher-exec)",
			Action: func(c *cli.Context) error {
				if isHelp(c.Args().Slice()) {
					return cli.ShowCommandHelp(c.Lineage()[1], "mpi-rsh")
				}
				argv, err := trainer.MPIRsh(c.Args().Slice(), os.Getenv)
				if err != nil {
					return err
				}
				path, err := exec.LookPath(argv[0])
				if err != nil {
					return err
				}
				return syscall.Exec(path, argv, os.Environ())
			},
		},
		{
			Name: "mpi-driver", Hidden: true, ArgsUsage: "STOPFILE GEN -- MPIRUN...", SkipFlagParsing: true,
			Usage: "an MPI Trainer's driver on the controller: runs mpirun, and tells its ranks to stop when the runner asks",
			Action: func(c *cli.Context) error {
				args := c.Args().Slice()
				if isHelp(args) {
					return cli.ShowCommandHelp(c.Lineage()[1], "mpi-driver")
				}
				if len(args) < 4 || args[2] != "--" {
					return usagef("mpi-driver: want STOPFILE GEN -- MPIRUN...")
				}
				code, err := trainer.MPIDriver(c.Context, args[0], args[1], args[3:], 100*time.Millisecond)
				if err != nil {
					return err
				}
				return exitIf(code)
			},
		},
	}
}

// exitIf is nil for 0, else the status to exit with.
func exitIf(code int) error {
	if code == 0 {
		return nil
	}
	return exitStatus(code)
}

// isExitStatus reports an error that is only an exit status.
func isExitStatus(err error) (int, bool) {
	var es exitStatus
	if errors.As(err, &es) {
		return int(es), true
	}
	return 0, false
}

// isHelp: a command that skips flag parsing asked for its help.
func isHelp(args []string) bool {
	return len(args) == 1 && (args[0] == "--help" || args[0] == "-h" || args[0] == "help")
}
