package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/names"
	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/sidecar"
	"github.com/bftrainer/bftrainer/store"
	"github.com/bftrainer/bftrainer/trainer"
)

func trainerCommand() *cli.Command {
	return &cli.Command{
		Name:  "trainer",
		Usage: "submit, list, show and cancel Trainers (elastic training jobs)",
		Subcommands: []*cli.Command{
			submitCommand(),
			{Name: "list", Usage: "list Trainers", Flags: []cli.Flag{
				&cli.BoolFlag{Name: "all", Usage: "include finished and cancelled Trainers"},
				&cli.StringFlag{Name: "format", Value: "table", Usage: "table, json or csv"},
			}, Action: listAction},
			{Name: "show", Usage: "show one Trainer", ArgsUsage: "NAME", Action: showAction},
			{Name: "cancel", Usage: "cancel a Trainer (your own; root and admins: any)", ArgsUsage: "NAME", Action: cancelAction},
		},
	}
}

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
last pair. --rescale-up/--rescale-down are the seconds of progress a
scale-up or scale-down costs (measure them; contrib/trainer shows how).
The Trainer is yours: its processes run as you, and only you (or root) may
cancel it.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "name", Usage: "Trainer `NAME` (letters, digits, - _ .); default: generated"},
			&cli.StringFlag{Name: "launcher", Value: trainer.Torchrun, Usage: "a registered launcher: " + strings.Join(trainer.Kinds(), ", ")},
			&cli.IntFlag{Name: "min", Value: 1, Usage: "fewest nodes it can run on"},
			&cli.IntFlag{Name: "max", Usage: "most nodes it can use (default: the curve's last point)"},
			&cli.StringFlag{Name: "curve", Required: true, Usage: "scaling curve `N:RATE,…` (samples/s at N nodes)"},
			&cli.StringFlag{Name: "metric", Usage: "optional admin metric at the same node counts `N:VALUE,…` (objective \"metric\")"},
			&cli.Float64Flag{Name: "rescale-up", Usage: "seconds lost per scale-up"},
			&cli.Float64Flag{Name: "rescale-down", Usage: "seconds lost per scale-down or reclaim"},
			&cli.Float64Flag{Name: "samples", Usage: "samples to process (0: until it exits)"},
			&cli.Float64Flag{Name: "weight", Value: 1, Usage: "priority weight on its objective"},
			&cli.IntFlag{Name: "procs-per-node", Value: 1, Usage: "processes per node (torchrun nproc_per_node, Horovod slots)"},
			&cli.StringFlag{Name: "workdir", Usage: "working directory on the nodes (default: the current one)"},
			&cli.StringSliceFlag{Name: "env", Usage: "extra environment `KEY=VALUE` (repeatable)"},
		},
		Action: submitAction,
	}
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

func submitAction(c *cli.Context) error {
	if c.NArg() == 0 {
		return usagef("trainer submit: give the program after --, e.g. -- /usr/bin/python3 train.py")
	}
	curve, err := parseCurve(c.String("curve"))
	if err != nil {
		return usageError{err}
	}
	if m := c.String("metric"); m != "" {
		mc, err := parseCurve(m)
		if err != nil {
			return usageError{fmt.Errorf("metric: %w", err)}
		}
		if fmt.Sprint(mc.Nodes) != fmt.Sprint(curve.Nodes) {
			return usagef("--metric must give the same node counts as --curve")
		}
		curve.Metric = mc.Throughput
	}
	name := c.String("name")
	if name == "" {
		name = fmt.Sprintf("%s-%s", currentUser(), strconv.FormatInt(time.Now().UnixMilli(), 36))
	}
	if err := names.ValidateTrainer(name); err != nil {
		return usageError{err}
	}
	launcher := c.String("launcher")
	if !slices.Contains(trainer.Kinds(), launcher) {
		return usagef("--launcher %q: want one of %s", launcher, strings.Join(trainer.Kinds(), ", "))
	}
	max := c.Int("max")
	if max == 0 {
		max = curve.Nodes[len(curve.Nodes)-1]
	}
	workdir := c.String("workdir")
	if workdir == "" {
		workdir, _ = os.Getwd()
	}
	spec := trainer.Spec{Argv: c.Args().Slice(), Workdir: workdir, ProcsPerNode: c.Int("procs-per-node")}
	for _, kv := range c.StringSlice("env") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return usagef("--env %q: want KEY=VALUE", kv)
		}
		if spec.Env == nil {
			spec.Env = map[string]string{}
		}
		spec.Env[k] = v
	}
	if err := trainer.ValidateSpec(spec); err != nil {
		return usageError{err}
	}
	raw, _ := json.Marshal(spec)
	req := sidecar.SubmitRequest{ID: name, Min: c.Int("min"), Max: max, Curve: curve, Weight: c.Float64("weight"),
		RUp: c.Float64("rescale-up"), RDown: c.Float64("rescale-down"), Samples: c.Float64("samples"),
		Launch: store.Launch{Launcher: launcher, Spec: raw}}
	// Check the model now, for a clear error at the terminal.
	probe := alloc.Problem{TFwd: 1, Trainers: []alloc.Trainer{{ID: name, Min: req.Min, Max: req.Max, Curve: curve, Weight: req.Weight, RUp: req.RUp, RDown: req.RDown}}}
	if err := probe.Validate(); err != nil {
		return usageError{err}
	}
	if req.Samples < 0 {
		return usagef("--samples must be ≥ 0")
	}
	detail, _ := json.Marshal(req)
	cfg, err := configFrom(c)
	if err != nil {
		return err
	}
	return request(c, cfg, store.Event{At: time.Now(), Kind: store.KindSubmit, Source: "cli", Trainer: name, Detail: detail},
		fmt.Sprintf("submitted %s", name))
}

// request records an input event directly when this process may write
// the database (and re-plans), or spools it for the root reconciler.
func request(c *cli.Context, cfg Config, ev store.Event, done string) error {
	ev.User = currentUser()
	if !canWrite(cfg) {
		sp := &sidecar.Spool{Dir: cfg.Spool}
		if _, err := sp.Put(sidecar.Request{Kind: ev.Kind, Trainer: ev.Trainer, Value: ev.Value, Detail: ev.Detail, At: ev.At}); err != nil {
			return withHint(err, "the spool %s must exist with mode 1733 (bftrainer install sets it up)", cfg.Spool)
		}
		fmt.Fprintf(c.App.ErrWriter, "bftrainer: %s (spooled; the reconciler takes it within %v)\n", done, cfg.Reconciler.Interval.Duration)
		return nil
	}
	db, err := openDB(c.Context, cfg)
	if err != nil {
		return err
	}
	defer db.Close()
	if ev.Kind == store.KindSubmit {
		if _, exists, err := db.Trainer(c.Context, ev.Trainer); err != nil {
			return err
		} else if exists {
			return usagef("a Trainer named %q already exists; choose another --name", ev.Trainer)
		}
	}
	if _, err := db.Append(c.Context, ev); err != nil {
		return err
	}
	fmt.Fprintf(c.App.ErrWriter, "bftrainer: %s\n", done)
	if ev.Kind == store.KindProgress {
		return nil
	}
	return reconcileNow(c, cfg, db)
}

func listAction(c *cli.Context) error {
	cfg, err := configFrom(c)
	if err != nil {
		return err
	}
	db, err := openRead(c.Context, cfg)
	if err != nil {
		return err
	}
	defer db.Close()
	var statuses []pool.Status
	if !c.Bool("all") {
		statuses = []pool.Status{pool.Queued, pool.Running}
	}
	ts, err := db.Trainers(c.Context, statuses...)
	if err != nil {
		return err
	}
	t := table{header: []string{"NAME", "OWNER", "STATUS", "LAUNCHER", "NODES", "MIN", "MAX", "DONE", "TARGET", "PCT", "RATE", "SUBMITTED"}}
	for _, tr := range ts {
		pct := "-"
		if tr.Samples > 0 {
			pct = fmt.Sprintf("%.1f%%", 100*tr.Done/tr.Samples)
		}
		t.add(tr.ID, tr.Owner, tr.Status, tr.Launch.Launcher, len(tr.Nodes), tr.Min, tr.Max, fmt.Sprintf("%.0f", tr.Done),
			fmt.Sprintf("%.0f", tr.Samples), pct, fmt.Sprintf("%.4g", tr.Rate), tr.Submit.UTC().Format(time.RFC3339))
	}
	return t.write(c.App.Writer, c.String("format"))
}

func showAction(c *cli.Context) error {
	id, cfg, err := trainerArg(c, "trainer show")
	if err != nil {
		return err
	}
	db, err := openRead(c.Context, cfg)
	if err != nil {
		return err
	}
	defer db.Close()
	tr, ok, err := db.Trainer(c.Context, id)
	if err != nil {
		return err
	}
	if !ok {
		return withHint(fmt.Errorf("no Trainer named %q", id), "bftrainer trainer list --all")
	}
	var spec trainer.Spec
	json.Unmarshal(tr.Launch.Spec, &spec)
	nodes := make([]string, len(tr.Nodes))
	for i, n := range tr.Nodes {
		nodes[i] = n.Name
	}
	w := c.App.Writer
	fmt.Fprintf(w, "name:          %s\nowner:         %s\nstatus:        %s\nlauncher:      %s\n", tr.ID, tr.Owner, tr.Status, tr.Launch.Launcher)
	fmt.Fprintf(w, "command:       %s\nworkdir:       %s\n", strings.Join(spec.Argv, " "), spec.Workdir)
	fmt.Fprintf(w, "nodes:         %d %s (bounds %d..%d)\n", len(nodes), names.CompressHostlist(nodes), tr.Min, tr.Max)
	fmt.Fprintf(w, "curve:         %s\n", formatCurve(tr.Curve))
	fmt.Fprintf(w, "rescale cost:  up %gs, down %gs\n", tr.RUp, tr.RDown)
	fmt.Fprintf(w, "progress:      %.0f of %.0f samples, %.4g samples/s now\n", tr.Done, tr.Samples, tr.Rate)
	fmt.Fprintf(w, "losses:        %.0f samples in %d rescales, %.0f in %d reclaims\n", tr.RescaleLoss, tr.Rescales, tr.PreemptLoss, tr.Preemptions)
	fmt.Fprintf(w, "node-hours:    %.3f\n", tr.NodeSeconds/3600)
	fmt.Fprintf(w, "submitted:     %s\n", tr.Submit.UTC().Format(time.RFC3339))
	if !tr.Admitted.IsZero() {
		fmt.Fprintf(w, "admitted:      %s\n", tr.Admitted.UTC().Format(time.RFC3339))
	}
	if !tr.Ended.IsZero() {
		fmt.Fprintf(w, "ended:         %s\n", tr.Ended.UTC().Format(time.RFC3339))
	}
	return nil
}

func formatCurve(c alloc.Curve) string {
	var parts []string
	for i, n := range c.Nodes {
		if n == 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%d:%g", n, c.Throughput[i]))
	}
	return strings.Join(parts, ",")
}

func cancelAction(c *cli.Context) error {
	id, cfg, err := trainerArg(c, "trainer cancel")
	if err != nil {
		return err
	}
	if canWrite(cfg) {
		db, err := openRead(c.Context, cfg)
		if err != nil {
			return err
		}
		tr, ok, err := db.Trainer(c.Context, id)
		db.Close()
		if err != nil {
			return err
		}
		if !ok || !tr.Status.Active() {
			return fmt.Errorf("no active Trainer named %q", id)
		}
		if me := currentUser(); me != tr.Owner && !cfg.isAdmin(me) {
			return errors.New("permission denied: " + id + " belongs to " + tr.Owner)
		}
	}
	return request(c, cfg, store.Event{At: time.Now(), Kind: store.KindCancel, Source: "cli", Trainer: id}, "cancelled "+id)
}

func progressCommand() *cli.Command {
	return &cli.Command{
		Name:      "progress",
		Usage:     "report a Trainer's progress (called by the training script)",
		ArgsUsage: "TRAINER",
		Description: `The training script's rank 0 calls this every few seconds with the total
samples processed so far (contrib/trainer/bftrainer_progress.py does it).
A Trainer that reports its --samples target is finished and its nodes go
back to the pool.`,
		Flags: []cli.Flag{&cli.Float64Flag{Name: "samples", Required: true, Usage: "samples processed so far (total, not since the last report)"}},
		Action: func(c *cli.Context) error {
			id, cfg, err := trainerArg(c, "progress")
			if err != nil {
				return err
			}
			n := c.Float64("samples")
			if n < 0 || n != n {
				return usagef("--samples must be ≥ 0")
			}
			return request(c, cfg, store.Event{At: time.Now(), Kind: store.KindProgress, Source: "trainer", Trainer: id, Value: n, HasVal: true},
				fmt.Sprintf("%s: %.0f samples", id, n))
		},
	}
}

func hostsCommand() *cli.Command {
	return &cli.Command{
		Name:      "hosts",
		Usage:     "print a Trainer's nodes as host:slots lines (Elastic Horovod's --host-discovery-script)",
		ArgsUsage: "TRAINER",
		Description: `horovodrun --host-discovery-script calls this every second:

  horovodrun --host-discovery-script "bftrainer hosts my-trainer" ...

It prints one "node:slots" line per node the Trainer holds now (nothing
when it holds none) and exits 0; an unknown Trainer exits 1. It prints
the host file the runner replaces atomically each round
(trainer.state_dir/hosts/TRAINER), or, when there is none, the database.`,
		Action: func(c *cli.Context) error {
			id, cfg, err := trainerArg(c, "hosts")
			if err != nil {
				return err
			}
			// Horovod calls this every second: the file, when there is
			// one, spares the database that many readers.
			if b, err := trainer.ReadHosts(cfg.Trainer.StateDir, id); err == nil {
				_, err = c.App.Writer.Write(b)
				return err
			}
			db, err := openRead(c.Context, cfg)
			if err != nil {
				return err
			}
			defer db.Close()
			tr, ok, err := db.Trainer(c.Context, id)
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("no Trainer named %q", id)
			}
			var spec trainer.Spec
			json.Unmarshal(tr.Launch.Spec, &spec)
			var b strings.Builder
			for _, n := range tr.Nodes {
				fmt.Fprintf(&b, "%s:%d\n", n.Name, spec.Slots())
			}
			_, err = fmt.Fprint(c.App.Writer, b.String())
			return err
		},
	}
}

// trainerArg reads a command's one argument, a Trainer name, and the
// configuration.
func trainerArg(c *cli.Context, cmd string) (string, Config, error) {
	if c.NArg() != 1 {
		return "", Config{}, usagef("%s: name one Trainer", cmd)
	}
	id := c.Args().First()
	if err := names.ValidateTrainer(id); err != nil {
		return "", Config{}, usageError{err}
	}
	cfg, err := configFrom(c)
	return id, cfg, err
}
