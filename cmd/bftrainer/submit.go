package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/sidecar"
	"github.com/bftrainer/bftrainer/store"
	"github.com/bftrainer/bftrainer/trainer"
)

func submitCommand() *cli.Command {
	return &cli.Command{
		Name:      "submit",
		Usage:     "submit a Trainer",
		ArgsUsage: "-- PROGRAM [ARGS…]",
		Description: `Submits an elastic training program. bftrainer gives it between --min and
--max idle nodes, as many as its scaling curve makes worthwhile, and
rescales it as nodes come and go. Example:

  bftrainer trainer submit --name resnet-lr3 --launcher torchrun \
      --min 1 --max 4 --curve 1:10,2:19,4:36 \
      --rescale-up 6 --rescale-down 14 --samples 100000 \
      -- /usr/bin/python3 train.py --steps 500

--curve is nodes:samples-per-second pairs measured at fixed sizes; values
between are interpolated, and the Trainer never gets more nodes than the
last pair. It is optional: without it (give --max) the pool learns the
curve from the Trainer's own progress reports (bftrainer progress, sent by
contrib/trainer/train.py), and with it the given curve is a prior that the
measurements refine; bftrainer trainer show prints what was learned.
--model names what it trains: Trainers of one model are taken to scale
alike (the same shape; the level, samples/s, may differ with batch size or
data), so without --curve a Trainer of a model the pool has seen is
planned on the shape learned of the others, until its own measurements
take over.

--progress-log FILE names a file the program appends its progress to, one
line per step (contrib/trainer/train.py's --log, as is): the runner reads
its latest complete line on the Trainer's first node, each round at most
every trainer.progress_log_every, and learns from it as from progress
reports — for a program that cannot call bftrainer progress. A line is a
JSON object with "time" (Unix seconds) and "samples" (or --samples-key),
or Unix seconds then key=value words (train.py's); with --samples-per-step
a line's "step" counts that many samples. Where the program also reports
itself (bftrainer progress), its reports win: the log is no longer read.
A relative FILE is below --workdir.

--launcher says how its processes start (docs/trainers.md, "Launchers"):
torchrun (a torch.distributed.run agent per node; every change restarts
the workers from their checkpoint); elastic (bftrainer's elastic runtime,
python/bftrainer_elastic: workers stay alive across changes, one per
node); horovod (horovodrun); mpi (the site's mpirun or mpiexec over the
nodes; every change restarts the MPI job: the ranks checkpoint and exit
on SIGUSR1); mpi-elastic (the MPI fast path: the first workers are ranks
mpirun starts, their ids from the MPI rank, then they live on the elastic
runtime: grown by workers bftrainer starts, shrunk and reclaimed without
a restart; one per node; the script uses bftrainer_elastic, as
contrib/trainer/mpi_torch.py does); exec (any program, on the first node).

--rescale-up/--rescale-down are the seconds of progress a scale-up or
scale-down costs (measure them; contrib/trainer shows how); with
--launcher elastic, mpi-elastic or mpi they are priors, replaced by what
the launcher measures on every rescale. The Trainer is yours: its processes run as
you, and only you (or root) may cancel it.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "name", Usage: "Trainer `NAME` (letters, digits, - _ .); default: generated"},
			choiceFlag("launcher", "NAME", launchers().Names(), trainer.Torchrun, "how its processes are started"),
			&cli.IntFlag{Name: "min", Value: 1, Usage: "fewest `NODES` it can run on"},
			&cli.IntFlag{Name: "max", Usage: "most `NODES` it can use", DefaultText: "the curve's last point"},
			&cli.StringFlag{Name: "curve", Usage: "scaling curve `N:RATE,…` (samples/s at N nodes), a prior; without it the pool learns the curve from the Trainer's progress"},
			&cli.StringFlag{Name: "metric", Usage: "optional admin metric at the same node counts `N:VALUE,…` (objective \"metric\")"},
			&cli.Float64Flag{Name: "rescale-up", Usage: "`SECONDS` of progress lost per scale-up"},
			&cli.Float64Flag{Name: "rescale-down", Usage: "`SECONDS` of progress lost per scale-down or reclaim"},
			&cli.Float64Flag{Name: "samples", Usage: "`SAMPLES` to process (0: until it exits)"},
			&cli.StringFlag{Name: "model", Usage: "what it trains, `NAME` (letters, digits, - _ .): without --curve it is planned on the curve learned of the pool's other Trainers of NAME until measured"},
			&cli.Float64Flag{Name: "weight", Value: 1, Usage: "priority `WEIGHT` on its objective"},
			&cli.IntFlag{Name: "procs-per-node", Value: 1, Usage: "`N` processes per node (torchrun nproc_per_node, Horovod slots)"},
			&cli.StringFlag{Name: "workdir", Usage: "working `DIR` on the nodes", DefaultText: "the current one"},
			&cli.StringSliceFlag{Name: "env", Usage: "extra environment `KEY=VALUE` (repeatable; the values are kept from other users: only the names are shown)"},
			&cli.StringFlag{Name: "progress-log", Usage: "`FILE` on its nodes the program appends its progress to (one line per step), read by the runner"},
			&cli.StringFlag{Name: "samples-key", Usage: "with --progress-log, the `KEY` of a line's samples done", DefaultText: "samples"},
			&cli.Float64Flag{Name: "samples-per-step", Usage: "with --progress-log, `SAMPLES` per step, for lines that count steps, not samples"},
		},
		Action: coreAction(func(c *cli.Context, core *sidecar.Core, cfg Config) error {
			req, err := submitRequest(c)
			if err != nil {
				return err
			}
			rc, err := core.Submit(c.Context, req)
			if err != nil {
				return err
			}
			done(c, cfg, rc, "submitted "+rc.ID)
			return nil
		}),
	}
}

// submitRequest reads the flags into a submission; the core checks it.
func submitRequest(c *cli.Context) (sidecar.SubmitRequest, error) {
	var req sidecar.SubmitRequest
	if !c.IsSet("curve") && !c.IsSet("max") {
		return req, withHint(usagef("trainer submit: give --max (and --curve if you know it)"),
			"without --curve the pool learns the curve from the Trainer's progress reports")
	}
	if c.NArg() == 0 {
		return req, usagef("trainer submit: give the program after --, e.g. -- /usr/bin/python3 train.py")
	}
	var curve alloc.Curve
	if c.IsSet("curve") {
		var err error
		if curve, err = parseCurve(c.String("curve")); err != nil {
			return req, usageError{err}
		}
	}
	if m := c.String("metric"); m != "" {
		if !c.IsSet("curve") {
			return req, usagef("--metric needs --curve (the same node counts)")
		}
		mc, err := parseCurve(m)
		if err != nil {
			return req, usageError{fmt.Errorf("metric: %w", err)}
		}
		if fmt.Sprint(mc.Nodes) != fmt.Sprint(curve.Nodes) {
			return req, usagef("--metric must give the same node counts as --curve")
		}
		curve.Metric = mc.Throughput
	}
	workdir := c.String("workdir")
	if workdir == "" {
		workdir, _ = os.Getwd()
	}
	spec := trainer.Spec{Argv: c.Args().Slice(), Workdir: workdir, ProcsPerNode: c.Int("procs-per-node")}
	switch {
	case c.IsSet("progress-log"):
		spec.ProgressLog = &trainer.ProgressLog{Path: c.String("progress-log"), SamplesKey: c.String("samples-key"), SamplesPerStep: c.Float64("samples-per-step")}
		if err := spec.ProgressLog.Check(); err != nil {
			return req, usageError{err}
		}
	case c.IsSet("samples-key") || c.IsSet("samples-per-step"):
		return req, usagef("--samples-key and --samples-per-step need --progress-log")
	}
	for _, kv := range c.StringSlice("env") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return req, usagef("--env %q: want KEY=VALUE", kv)
		}
		if spec.Env == nil {
			spec.Env = map[string]string{}
		}
		spec.Env[k] = v
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		return req, err
	}
	return sidecar.SubmitRequest{ID: c.String("name"), Min: c.Int("min"), Max: c.Int("max"), Curve: curve,
		Weight: c.Float64("weight"), RUp: c.Float64("rescale-up"), RDown: c.Float64("rescale-down"),
		Samples: c.Float64("samples"), Model: c.String("model"), Launch: store.Launch{Launcher: c.String("launcher"), Spec: raw}}, nil
}

// parseCurve reads "1:10,2:19,4:36" into breakpoints with (0, 0) first.
func parseCurve(s string) (alloc.Curve, error) {
	c := alloc.Curve{Nodes: []int{0}, Throughput: []float64{0}}
	for _, part := range strings.Split(s, ",") {
		n, v, ok := strings.Cut(strings.TrimSpace(part), ":")
		if !ok {
			return c, fmt.Errorf("curve point %q: want NODES:RATE", part)
		}
		k, err := strconv.Atoi(strings.TrimSpace(n))
		if err != nil || k <= 0 {
			return c, fmt.Errorf("curve point %q: node count must be a positive integer", part)
		}
		x, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return c, fmt.Errorf("curve point %q: %w", part, err)
		}
		c.Nodes = append(c.Nodes, k)
		c.Throughput = append(c.Throughput, x)
	}
	return c, nil
}
