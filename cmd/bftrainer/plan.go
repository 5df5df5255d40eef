package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/names"
	"github.com/bftrainer/bftrainer/sidecar"
)

func planCommand() *cli.Command {
	return &cli.Command{
		Name:  "plan",
		Usage: "dry run: what the solver would do now, and why each Trainer gets what it gets",
		Description: `Folds the events recorded since the last round into the pool, as the next
round would, and shows the plan the solver makes of it. Nothing is saved
and nothing is started or stopped.

  bftrainer plan
  bftrainer plan --solver cbc --format json`,
		Flags: []cli.Flag{
			solverFlag(),
			formatFlag(fmtTable, fmtJSON, fmtCSV),
		},
		Action: coreAction(func(c *cli.Context, core *sidecar.Core, _ Config) error {
			pv, err := core.Preview(c.Context, c.String("solver"))
			if err != nil {
				return err
			}
			why := alloc.Explain(pv.Problem, pv.Plan)
			for i, a := range pv.Plan.Trainers {
				if w := learnedWhy(pv, a); w != "" {
					why[i] += "; " + w
				}
			}
			solveMs := float64(pv.SolveDur.Microseconds()) / 1000
			format := c.String("format")
			if format == fmtJSON {
				return writePlanJSON(c, pv, why, solveMs)
			}
			if format == fmtTable {
				fmt.Fprintf(c.App.Writer, "solver %s: %s, objective %.6g over T_fwd=%gs, %d nodes, solved in %.3f ms\n\n",
					pv.Plan.Solver, pv.Plan.Status, pv.Plan.Objective, pv.Problem.TFwd, pv.Problem.Size(), solveMs)
			}
			t := table{header: []string{"TRAINER", "NOW", "PLAN", "ADD", "RELEASE", "WHY"}}
			for i, a := range pv.Plan.Trainers {
				t.add(a.ID, a.From, a.To, dash(names.CompressHostlist(a.Add)), dash(names.CompressHostlist(a.Release)), why[i])
			}
			return t.write(c.App.Writer, format)
		}),
	}
}

func writePlanJSON(c *cli.Context, pv *sidecar.Preview, why []string, solveMs float64) error {
	type row struct {
		Trainer string   `json:"trainer"`
		From    int      `json:"from"`
		To      int      `json:"to"`
		Add     []string `json:"add"`
		Release []string `json:"release"`
		Value   float64  `json:"value"`
		Why     string   `json:"why"`
	}
	out := struct {
		Solver    string  `json:"solver"`
		Status    string  `json:"status"`
		Objective float64 `json:"objective"`
		SolveMs   float64 `json:"solve_ms"`
		Nodes     int     `json:"nodes"`
		Trainers  []row   `json:"trainers"`
	}{pv.Plan.Solver, pv.Plan.Status.String(), pv.Plan.Objective, solveMs, pv.Problem.Size(), nil}
	for i, a := range pv.Plan.Trainers {
		out.Trainers = append(out.Trainers, row{a.ID, a.From, a.To, nonNil(a.Add), nonNil(a.Release), a.Value, why[i]})
	}
	return writeJSON(c.App.Writer, out)
}

// solverFlag is --solver: a registered allocator instead of pool.solver.
func solverFlag() *cli.StringFlag {
	f := choiceFlag("solver", "NAME", solvers().Names(), "", "the allocator")
	f.DefaultText = "pool.solver"
	return f
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// learnedWhy explains what a decision knew of a learning Trainer's curve:
// a probe it was offered (taken or not), or how sure the learned rate at
// its planned count is. Empty for a Trainer planned on its given curve.
func learnedWhy(pv *sidecar.Preview, a alloc.Assignment) string {
	for _, pb := range pv.Probes {
		if pb.Trainer != a.ID {
			continue
		}
		if a.To == pb.Nodes {
			return "exploring: " + pb.Reason
		}
		return "not exploring (" + pb.Reason + ": the plan found a better use)"
	}
	e, ok := pv.Pool.Estimate(a.ID)
	if !ok || a.To == 0 {
		return ""
	}
	if on, _ := pv.Pool.OnModelCurve(a.ID); on {
		return "planned on the curve learned of other Trainers of its model, until a count of its own is measured settled"
	}
	if !e.Known() {
		return "nothing measured yet: planned optimistically, as the best other running Trainer (or 1 sample/s per node), until its first measurement"
	}
	measured := false
	for _, p := range e.Points {
		measured = measured || p.Source&alloc.FromMeasured != 0
	}
	if !measured {
		return ""
	}
	r, sd := e.At(a.To)
	src := "interpolated"
	for _, p := range e.Points {
		if p.Nodes == a.To {
			src = p.Source.String()
		}
	}
	return fmt.Sprintf("learned curve: %.4g samples/s ±%.0f %% at %d nodes (%s)", r, 100*sd, a.To, src)
}
