// Command bftrainer-bench measures parts of bftrainer on fixed instances,
// for developers (make bench); it is not installed with bftrainer.
//
//	bftrainer-bench <command> [flags]
//
// Each command prints one machine-readable line per measurement on
// stdout (key=value fields); progress and diagnostics go to stderr as
// "bftrainer-bench: …". One file per command; main only dispatches, and
// "all" (make bench) runs the commands in allCommands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `usage: bftrainer-bench <command> [flags]

commands:
  all      every command below with its default flags (make bench)
  alloc    time the exact allocator against CBC and HiGHS on the paper's MILP
  replay   time a whole Summit replay (hps-1000J), exact and CBC
  yield    what every allocator yields on Summit, Theta and Pollux-built
           workloads (issue 12's table), and the paired-start sweep
  order    is the scheduler's choice of idle nodes to take back predictable?
           (rank of each node taken among the idle ones, by order)
  plan     hps-1000J on Theta 2022 re-simulated (EASY), the scheduler's
           plan off, on, and wrong (walltimes ×2): graceful moves vs kills
  curves   makespan with the curves given, learned online and assumed
           linear (issue 13), on Summit with three workloads
  hook     time the real binary as a scheduler hook, exec to exit; then a
           burst of 1,000 at once on busy cores: none lost, none twice
  rescale  seconds a real torchrun Trainer loses per scale-up, scale-down
           and reclaim, and the reclaim kill path (root, python3-torch)
  slurm    bftrainer as a real Slurm cluster's hooks: main-job start delay,
           reclaim, Slurm's own scavenger partition side by side, and an
           elastic Trainer moved off by the plan vs killed (issue 15)
  reclaim  the node prolog's kill against Trainers that try to escape it,
           cgroup and degraded containment (root)
  pilot    a slice of a real job log (Theta 2022) replayed on the Slurm lab
           with bftrainer and Trainers, a nemesis, then without bftrainer;
           audit and the replay's prediction (issue 27; root, ~25 min)
  gpu      the node prolog's kill of a Trainer holding GPU memory: until the
           process is gone and the memory back (root, a GPU, torch with CUDA;
           not in all)

Run "bftrainer-bench <command> -h" for a command's flags.
`

// allCommands are the commands "all" runs, in order: add yours.
var allCommands = []string{"alloc", "replay", "yield", "order", "plan", "curves", "hook", "rescale", "slurm", "reclaim", "pilot"}

// errUsage marks a command-line mistake: exit status 2.
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
	case errors.Is(err, errUsage):
		os.Exit(2)
	default:
		fmt.Fprintf(os.Stderr, "bftrainer-bench: %v\n", err)
		os.Exit(1)
	}
}

// run dispatches on the command name.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errUsage
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "alloc":
		return (&allocCommand{stdout: stdout, stderr: stderr}).Run(ctx, rest)
	case "replay":
		return (&replayCommand{stdout: stdout, stderr: stderr}).Run(ctx, rest)
	case "order":
		return (&orderCommand{stdout: stdout, stderr: stderr}).Run(ctx, rest)
	case "yield":
		return (&yieldCommand{stdout: stdout, stderr: stderr}).Run(ctx, rest)
	case "plan":
		return (&planCommand{stdout: stdout, stderr: stderr}).Run(ctx, rest)
	case "curves":
		return (&curvesCommand{stdout: stdout, stderr: stderr}).Run(ctx, rest)
	case "hook":
		return (&hookCommand{stdout: stdout, stderr: stderr}).Run(ctx, rest)
	case "rescale":
		return benchRescale(ctx, rest)
	case "slurm":
		return (&slurmCommand{stdout: stdout, stderr: stderr}).Run(ctx, rest)
	case "reclaim":
		return (&reclaimCommand{stdout: stdout, stderr: stderr}).Run(ctx, rest)
	case "pilot":
		return (&pilotCommand{stdout: stdout, stderr: stderr}).Run(ctx, rest)
	case "gpu":
		return (&gpuCommand{stdout: stdout, stderr: stderr}).Run(ctx, rest)
	case "all":
		if len(rest) > 0 {
			fmt.Fprintf(stderr, "bftrainer-bench: all takes no flags\n")
			return errUsage
		}
		for _, c := range allCommands {
			if err := run(ctx, []string{c}, stdout, stderr); err != nil {
				return err
			}
		}
		return nil
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprintf(stderr, "bftrainer-bench: unknown command %q\n%s", cmd, usage)
		return errUsage
	}
}

// parseFlags parses a command's flags: -h is flag.ErrHelp (exit 0), a bad
// flag or a stray argument is errUsage (exit 2).
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "bftrainer-bench: %s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return errUsage
	}
	return nil
}
