package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
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
			{Name: "list", Usage: "list Trainers", Description: `The active Trainers (queued, running, or waiting: admitted but holding no
node), or every one ever submitted. PROGRESS says where DONE comes from:
"measured" (the Trainer's progress reports or its progress log) or
"modelled" (its curve over the time it held nodes: it reported nothing,
so nothing says the samples were processed):

  bftrainer trainer list
  bftrainer trainer list --all --format csv`, Flags: []cli.Flag{
				&cli.BoolFlag{Name: "all", Usage: "include finished and cancelled Trainers"},
				formatFlag(fmtTable, fmtJSON, fmtCSV),
			}, Action: coreAction(listAction)},
			{Name: "show", Usage: "show one Trainer", ArgsUsage: "NAME", Action: coreAction(showAction),
				Description: `Its command, nodes, curve, progress, losses and times, active or ended:

  bftrainer trainer show resnet-lr3`},
			{Name: "cancel", Usage: "cancel a Trainer (your own; root and admins: any)", ArgsUsage: "NAME", Action: coreAction(cancelAction),
				Description: `Stops the Trainer's processes at the next round and gives its nodes back
to the pool. Only its owner, root, or an admin (admins, admin_group) may.

  bftrainer trainer cancel resnet-lr3`},
		},
	}
}

func listAction(c *cli.Context, core *sidecar.Core, _ Config) error {
	ts, err := core.Trainers(c.Context, c.Bool("all"))
	if err != nil {
		return err
	}
	t := table{header: []string{"NAME", "OWNER", "STATUS", "LAUNCHER", "NODES", "MIN", "MAX", "DONE", "PROGRESS", "TARGET", "PCT", "RATE", "SUBMITTED"}}
	starts := core.Starts()
	for _, tr := range ts {
		pct := "-"
		if tr.Samples > 0 {
			pct = fmt.Sprintf("%.1f%%", 100*tr.Done/tr.Samples)
		}
		t.add(tr.ID, tr.Owner, shownStatus(starts, tr.Trainer), tr.Launch.Launcher, len(tr.Nodes), tr.Min, tr.Max, fmt.Sprintf("%.0f", tr.Done),
			progressSource(tr.Trainer), fmt.Sprintf("%.0f", tr.Samples), pct, fmt.Sprintf("%.4g", tr.Rate), tr.Submit.UTC().Format(time.RFC3339))
	}
	return t.write(c.App.Writer, c.String("format"))
}

// progressSource says where a Trainer's DONE comes from: "measured" (its
// progress reports or its progress log) or "modelled" (the pool's curve
// over the time it held nodes: nothing it said).
func progressSource(t pool.Trainer) string {
	if _, ok := t.MeasuredDone(); ok {
		return "measured"
	}
	return "modelled"
}

// progressLine is trainer show's progress: what the Trainer measured, or
// the pool's model, labelled as such.
func progressLine(t pool.Trainer) string {
	if _, ok := t.MeasuredDone(); ok {
		return fmt.Sprintf("%.0f of %.0f samples (measured: %d progress reports, %d progress-log readings), %.4g samples/s now",
			t.Done, t.Samples, t.Learn.Reports, t.Learn.Readings, t.Rate)
	}
	return fmt.Sprintf("%.0f of %.0f samples modelled from its curve, %.4g samples/s modelled now (it has reported no progress: nothing measured)",
		t.Done, t.Samples, t.Rate)
}

func showAction(c *cli.Context, core *sidecar.Core, cfg Config) error {
	id, err := trainerArg(c)
	if err != nil {
		return err
	}
	tr, ok, err := core.Trainer(c.Context, id)
	if err != nil {
		return err
	}
	if !ok {
		return withHint(fmt.Errorf("no Trainer named %q", id), "bftrainer trainer list --all")
	}
	var spec trainer.Spec
	json.Unmarshal(tr.Launch.Spec, &spec)
	w := c.App.Writer
	status := sidecar.ShownStatus(tr.Trainer)
	if st := shownStatus(core.Starts(), tr.Trainer); st != status {
		status = st + ` (trainer.transport = "none": nothing is started)`
	}
	if status == "waiting" {
		status += " (admitted, holding no node: nothing of it runs)"
	}
	if f := tr.Starts; f.Failures > 0 {
		status += fmt.Sprintf("; %d failed start(s) in a row, last: %s", f.Failures, f.Last)
		if tr.Status.Active() && !f.RetryAt.IsZero() {
			status += fmt.Sprintf("; no node before %s", f.RetryAt.UTC().Format(time.RFC3339))
		}
	}
	fmt.Fprintf(w, "name:          %s\nowner:         %s\nstatus:        %s\nlauncher:      %s\n", tr.ID, tr.Owner, status, tr.Launch.Launcher)
	fmt.Fprintf(w, "command:       %s\nworkdir:       %s\n", strings.Join(spec.Argv, " "), spec.Workdir)
	if len(spec.Env) > 0 {
		// The names only: the values are the owner's (trainer.SealEnv).
		fmt.Fprintf(w, "environment:   %s (values not shown)\n", strings.Join(slices.Sorted(maps.Keys(spec.Env)), " "))
	}
	if l, err := launchedLine(c, core, tr); err != nil {
		return err
	} else if l != "" {
		fmt.Fprintf(w, "launched:      %s\n", l)
	}
	fmt.Fprintf(w, "nodes:         %d %s (bounds %d..%d)\n", len(tr.Nodes), names.CompressHostlist(alloc.Names(tr.Nodes)), tr.Min, tr.Max)
	given := formatCurve(tr.Curve)
	if given == "" {
		given = "none given: learned from its progress"
	}
	fmt.Fprintf(w, "curve:         %s\n", given)
	onModel := false
	if tr.Model != "" {
		line, on, err := modelLine(c.Context, core, tr)
		if err != nil {
			return err
		}
		onModel = on
		fmt.Fprintf(w, "model:         %s\n", line)
	}
	fmt.Fprintf(w, "rescale cost:  %s\n", formatCosts(tr.Trainer))
	fmt.Fprintf(w, "progress:      %s\n", progressLine(tr.Trainer))
	fmt.Fprintf(w, "losses:        %.0f samples in %d rescales, %.0f in %d reclaims\n", tr.RescaleLoss, tr.Rescales, tr.PreemptLoss, tr.Preemptions)
	fmt.Fprintf(w, "node-hours:    %.3f\n", tr.NodeSeconds/3600)
	fmt.Fprintf(w, "submitted:     %s\n", tr.Submit.UTC().Format(time.RFC3339))
	if !tr.Admitted.IsZero() {
		fmt.Fprintf(w, "admitted:      %s\n", tr.Admitted.UTC().Format(time.RFC3339))
	}
	if !tr.Ended.IsZero() {
		fmt.Fprintf(w, "ended:         %s\n", tr.Ended.UTC().Format(time.RFC3339))
	}
	if s := tr.Learn.Curve; s != nil {
		from, err := observedFrom(c, core, tr)
		if err != nil {
			return err
		}
		writeLearned(w, cfg.learner().Estimate(s), tr.Learn, from, onModel)
	}
	return nil
}

// modelLine says what a Trainer's model did for its plan, and whether it
// is planned on its model's curve now.
func modelLine(ctx context.Context, core *sidecar.Core, tr store.Trainer) (string, bool, error) {
	on, n := false, 0
	if tr.Status.Active() {
		var err error
		if on, n, err = core.OnModelCurve(ctx, tr.ID); err != nil {
			return "", false, err
		}
	}
	switch {
	case on && n > 0:
		return fmt.Sprintf("%s: planned on the curve learned of %d other Trainers of it, until it is measured", tr.Model, n), true, nil
	case on:
		return tr.Model + ": planned on the curve learned of other Trainers of it (its prior), until a count is measured settled", true, nil
	case tr.Learn.ModelPrior:
		return tr.Model + ": its learned curve's prior is the curve learned of other Trainers of it", false, nil
	}
	return tr.Model, false, nil
}

// observedFrom counts, per node count, the curve learner's observations
// of the Trainer by their source (the history's curve rows since its
// submission): "report" (bftrainer progress), "log" (its progress log, read
// by the runner).
// launchedLine is the last command line the Trainer's launcher started
// for the whole Trainer (trainer.LaunchedMark in an action's note: MPI's
// mpirun), "" when there is none.
func launchedLine(c *cli.Context, core *sidecar.Core, tr store.Trainer) (string, error) {
	evs, err := core.Events(c.Context, store.Filter{Kinds: []store.Kind{store.KindAction}, Trainer: tr.ID, Since: tr.Submit})
	if err != nil {
		return "", err
	}
	for i := len(evs) - 1; i >= 0; i-- {
		var d struct {
			Note string `json:"note"`
		}
		if json.Unmarshal(evs[i].Detail, &d) == nil {
			if _, l, ok := strings.Cut(d.Note, trainer.LaunchedMark); ok {
				return l, nil
			}
		}
	}
	return "", nil
}

func observedFrom(c *cli.Context, core *sidecar.Core, tr store.Trainer) (map[int]map[string]int, error) {
	evs, err := core.Events(c.Context, store.Filter{Kinds: []store.Kind{store.KindCurve}, Trainer: tr.ID, Since: tr.Submit})
	if err != nil {
		return nil, err
	}
	out := map[int]map[string]int{}
	for _, ev := range evs {
		var d struct {
			Nodes  int    `json:"nodes"`
			Source string `json:"source"`
		}
		if json.Unmarshal(ev.Detail, &d) != nil {
			continue
		}
		if d.Source == "" {
			d.Source = pool.SourceReport // rows from before sources were recorded
		}
		if out[d.Nodes] == nil {
			out[d.Nodes] = map[string]int{}
		}
		out[d.Nodes][d.Source]++
	}
	return out, nil
}

// formatFrom is one count's observations by source: "log 12, report 3".
func formatFrom(m map[string]int) string {
	if len(m) == 0 {
		return "-"
	}
	var parts []string
	for _, src := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", src, m[src]))
	}
	return strings.Join(parts, ", ")
}

// writeLearned prints a learned curve: a summary line, then one row per
// point: its node count, rate, relative SD, what it rests on, for a
// measured count the samples and settled seconds behind it, and where its
// observations came from (observedFrom).
func writeLearned(w io.Writer, e alloc.CurveEstimate, l pool.Learning, from map[int]map[string]int, onModel bool) {
	measured := 0
	for _, p := range e.Points {
		if p.Source&alloc.FromMeasured != 0 {
			measured++
		}
	}
	if !e.Known() && onModel {
		fmt.Fprintf(w, "learned:       nothing yet (%d progress reports, %d progress-log readings; planned on its model's curve)\n", l.Reports, l.Readings)
		return
	}
	if !e.Known() {
		fmt.Fprintf(w, "learned:       nothing yet (%d progress reports, %d progress-log readings; planned as the best other running Trainer, or 1 sample/s per node)\n", l.Reports, l.Readings)
		return
	}
	fmt.Fprintf(w, "learned:       %d counts measured, noise %.1f %% per sample, %d progress reports, %d progress-log readings\n", measured, 100*e.Noise, l.Reports, l.Readings)
	fmt.Fprintf(w, "  nodes  samples/s  sd_%%   source            samples  seconds  observed from\n")
	for _, p := range e.Points {
		fmt.Fprintf(w, "  %-5d  %-9.4g  %-5.1f  %-16s  %-7.3g  %-7.0f  %s\n", p.Nodes, p.Rate, 100*p.SD, p.Source, p.Samples, p.Seconds, formatFrom(from[p.Nodes]))
	}
}

// formatCosts is the R_up and R_down the allocator uses (and, once one
// is measured, what a reclaim costs), and where they come from: the submitted values, or the running median of the measured
// costs with the submitted ones as a prior (pool.Trainer.RescaleUp).
func formatCosts(t pool.Trainer) string {
	one := func(used, given float64, measured int) string {
		if measured == 0 {
			return fmt.Sprintf("%gs", used)
		}
		return fmt.Sprintf("%.3gs (%d measured; submitted %gs)", used, measured, given)
	}
	s := fmt.Sprintf("up %s, down %s", one(t.RescaleUp(), t.RUp, len(t.Measured.Up)), one(t.RescaleDown(), t.RDown, len(t.Measured.Down)))
	if n := len(t.Measured.Reclaim); n > 0 {
		s += ", reclaim " + one(t.ReclaimDown(), t.RDown, n)
	}
	return s
}

// shownStatus is a Trainer's status as users read it: where rounds start
// nothing (trainer.transport = "none"), a running Trainer is planned only;
// one holding no node is waiting (sidecar.ShownStatus).
func shownStatus(starts bool, t pool.Trainer) string {
	if t.Status == pool.Running && !starts && len(t.Nodes) > 0 {
		return "planned"
	}
	return sidecar.ShownStatus(t)
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

func cancelAction(c *cli.Context, core *sidecar.Core, cfg Config) error {
	id, err := trainerArg(c)
	if err != nil {
		return err
	}
	rc, err := core.Cancel(c.Context, id)
	if err != nil {
		return err
	}
	done(c, cfg, rc, "cancelled "+id)
	return nil
}

// trainerArg reads a command's one argument, a Trainer's name (the core
// checks it).
func trainerArg(c *cli.Context) (string, error) {
	if c.NArg() != 1 {
		return "", withHint(usagef("%s: name one Trainer", cmdPath(c)), "bftrainer trainer list shows them")
	}
	return c.Args().First(), nil
}
