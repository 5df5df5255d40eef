package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/bftrainer/bftrainer/sidecar"
)

func progressCommand() *cli.Command {
	return &cli.Command{
		Name:      "progress",
		Usage:     "report a Trainer's progress (called by the training script)",
		ArgsUsage: "TRAINER",
		Description: `The training script's rank 0 calls this every few seconds with the total
samples processed so far (contrib/trainer/bftrainer_progress.py does it).
A Trainer that reports its --samples target is finished and its nodes go
back to the pool. With --nodes it also says on how many nodes it trained
since its previous report: the curve learner then takes no rate from a
Trainer still at its old size after a rescale, or restarting (torchrun
trains on at the old size until its next rendezvous).

  bftrainer progress resnet-lr3 --samples 51200
  bftrainer progress resnet-lr3 --samples 51200 --nodes 4`,
		Flags: []cli.Flag{
			&cli.Float64Flag{Name: "samples", Usage: "`SAMPLES` processed so far (total, not since the last report; required)"},
			&cli.IntFlag{Name: "nodes", Usage: "`N` nodes trained on since the last report (torchrun: $GROUP_WORLD_SIZE; 0: not said)"},
		},
		Action: coreAction(func(c *cli.Context, core *sidecar.Core, cfg Config) error {
			id, err := trainerArg(c)
			if err != nil {
				return err
			}
			if err := requireFlag(c, "samples"); err != nil {
				return err
			}
			n := c.Float64("samples")
			rc, err := core.Progress(c.Context, id, n, c.Int("nodes"))
			if err != nil {
				return err
			}
			done(c, cfg, rc, fmt.Sprintf("%s: %.0f samples", id, n))
			return nil
		}),
	}
}
