package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/names"
	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/sidecar"
	"github.com/bftrainer/bftrainer/store"
)

func preview(c *cli.Context) (*sidecar.Preview, Config, error) {
	cfg, err := configFrom(c)
	if err != nil {
		return nil, cfg, err
	}
	db, err := openRead(c.Context, cfg)
	if err != nil {
		return nil, cfg, err
	}
	defer db.Close()
	solver, err := solverByName(cfg.Pool.Solver, cfg.Pool.SolverTimeLimit.Duration, cfg.Pool.SolverPath)
	if err != nil {
		return nil, cfg, err
	}
	r := &sidecar.Reconciler{DB: db, Pool: poolConfig(cfg), Solver: solver, Admins: cfg.isAdmin}
	pv, err := r.Preview(c.Context)
	return pv, cfg, err
}

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "show the idle pool and the Trainers now",
		Action: func(c *cli.Context) error {
			pv, cfg, err := preview(c)
			if err != nil {
				return err
			}
			p := pv.Pool
			st := p.State()
			var idle, pending, busy []string
			held := 0
			for _, n := range st.Nodes {
				switch n.State {
				case pool.Idle:
					idle = append(idle, n.Name)
					if n.Trainer != "" {
						held++
					}
				case pool.Pending:
					pending = append(pending, n.Name)
				case pool.Busy:
					busy = append(busy, n.Name)
				}
			}
			w := c.App.Writer
			fmt.Fprintf(w, "database:   %s\n", cfg.Database)
			fmt.Fprintf(w, "idle:       %d (%d held by Trainers, %d free) %s\n", len(idle), held, len(idle)-held, names.CompressHostlist(idle))
			fmt.Fprintf(w, "completing: %d %s\n", len(pending), names.CompressHostlist(pending))
			fmt.Fprintf(w, "busy:       %d\n", len(busy))
			fmt.Fprintf(w, "contained:  %s (this machine's Trainer processes)\n", nodeContainment(cfg))
			fmt.Fprintf(w, "trainers:   %d running, %d queued (max %d)\n", len(p.Running()), len(p.Queued()), cfg.Pool.MaxTrainers)
			for _, t := range p.Running() {
				held := make([]string, len(t.Nodes))
				for i, n := range t.Nodes {
					held[i] = n.Name
				}
				fmt.Fprintf(w, "  %-20s %-10s %3d nodes %s\n", t.ID, t.Owner, len(t.Nodes), names.CompressHostlist(held))
			}
			if pv.Pending > 0 {
				fmt.Fprintf(w, "note:       %d recorded event(s) not yet folded by a reconciler (shown as if they were)\n", pv.Pending)
			}
			return nil
		},
	}
}

func planCommand() *cli.Command {
	return &cli.Command{
		Name:  "plan",
		Usage: "dry run: what the solver would do now, and why each Trainer gets what it gets",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "solver", Usage: "exact, cbc, heuristic or greedy (default pool.solver)"},
			&cli.StringFlag{Name: "format", Value: "table", Usage: "table or json"},
		},
		Action: func(c *cli.Context) error {
			pv, cfg, err := preview(c)
			if err != nil {
				return err
			}
			if s := c.String("solver"); s != "" {
				solver, err := solverByName(s, cfg.Pool.SolverTimeLimit.Duration, cfg.Pool.SolverPath)
				if err != nil {
					return usageError{err}
				}
				start := time.Now()
				if pv.Plan, err = solver.Solve(c.Context, pv.Problem); err != nil {
					return err
				}
				pv.SolveDur = time.Since(start)
			}
			why := alloc.Explain(pv.Problem, pv.Plan)
			if c.String("format") == "json" {
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
				}{pv.Plan.Solver, pv.Plan.Status.String(), pv.Plan.Objective, float64(pv.SolveDur.Microseconds()) / 1000, pv.Problem.Size(), nil}
				for i, a := range pv.Plan.Trainers {
					out.Trainers = append(out.Trainers, row{a.ID, a.From, a.To, nonNil(a.Add), nonNil(a.Release), a.Value, why[i]})
				}
				return writeJSON(c.App.Writer, out)
			}
			fmt.Fprintf(c.App.Writer, "solver %s: %s, objective %.6g over T_fwd=%gs, %d nodes, solved in %.3f ms\n\n",
				pv.Plan.Solver, pv.Plan.Status, pv.Plan.Objective, pv.Problem.TFwd, pv.Problem.Size(), float64(pv.SolveDur.Microseconds())/1000)
			t := table{header: []string{"TRAINER", "NOW", "PLAN", "ADD", "RELEASE", "WHY"}}
			for i, a := range pv.Plan.Trainers {
				t.add(a.ID, a.From, a.To, dash(names.CompressHostlist(a.Add)), dash(names.CompressHostlist(a.Release)), why[i])
			}
			return t.write(c.App.Writer, "table")
		},
	}
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

// parseWhen reads a time as RFC 3339, a date, or a duration ago ("2h").
func parseWhen(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		return now.Add(-d), nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02 15:04:05", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, usagef("time %q: want RFC 3339 (2026-11-29T10:00:00Z), a date (2026-11-29) or a duration ago (2h)", s)
}

func historyCommand() *cli.Command {
	return &cli.Command{
		Name:  "history",
		Usage: "show recorded events (hooks, joins, leaves, rescales, solves, errors)",
		Description: `Filters combine. Times are RFC 3339, dates, or durations ago:

  bftrainer history --since 2h --kind preempt,rescale
  bftrainer history --node n17 --format csv
  bftrainer history --job 4242
  bftrainer history --trainer resnet-lr3 --format json

For anything else, query the database with sqlite3; docs/history.md
describes every table and view.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "since", Usage: "from `TIME`"},
			&cli.StringFlag{Name: "until", Usage: "before `TIME`"},
			&cli.StringFlag{Name: "node", Usage: "events naming `NODE`"},
			&cli.StringFlag{Name: "trainer", Usage: "events of `TRAINER`"},
			&cli.StringFlag{Name: "job", Usage: "events of scheduler `JOB`"},
			&cli.StringFlag{Name: "kind", Usage: "comma-separated `KINDS` (hook, join, leave, release, submit, admit, rescale, preempt, end, solve, action, kill, error, …)"},
			&cli.IntFlag{Name: "limit", Value: 1000, Usage: "at most `N` events, newest (0: all)"},
			&cli.StringFlag{Name: "format", Value: "table", Usage: "table, json or csv"},
		},
		Action: func(c *cli.Context) error {
			cfg, err := configFrom(c)
			if err != nil {
				return err
			}
			now := time.Now()
			var f store.Filter
			if f.Since, err = parseWhen(c.String("since"), now); err != nil {
				return err
			}
			if f.Until, err = parseWhen(c.String("until"), now); err != nil {
				return err
			}
			f.Node, f.Trainer, f.Job, f.Limit, f.Desc = c.String("node"), c.String("trainer"), c.String("job"), c.Int("limit"), true
			if k := c.String("kind"); k != "" {
				f.Kinds = strings.Split(k, ",")
			}
			db, err := openRead(c.Context, cfg)
			if err != nil {
				return err
			}
			defer db.Close()
			evs, err := db.Events(c.Context, f)
			if err != nil {
				return err
			}
			slices.Reverse(evs) // oldest first
			t := table{header: []string{"ID", "AT", "KIND", "SOURCE", "CONTEXT", "JOB", "TRAINER", "USER", "NODES", "VALUE", "MS", "DETAIL", "ERROR"}}
			for _, e := range evs {
				val, ms := "", ""
				if e.HasVal {
					val = fmt.Sprintf("%.6g", e.Value)
				}
				if e.HasMs {
					ms = fmt.Sprintf("%.3f", e.Ms)
				}
				nodes := names.CompressHostlist(e.Nodes)
				if nodes == "" && e.Count > 0 {
					nodes = fmt.Sprintf("(%d)", e.Count)
				}
				detail := string(e.Detail)
				if format := c.String("format"); (format == "" || format == "table") && len(detail) > 60 {
					detail = detail[:57] + "..."
				}
				t.add(e.ID, e.At.UTC().Format(store.TimeFormat), e.Kind, e.Source, e.Context, e.Job, e.Trainer, e.User, nodes, val, ms, detail, e.Error)
			}
			return t.write(c.App.Writer, c.String("format"))
		},
	}
}

func reportCommand() *cli.Command {
	return &cli.Command{
		Name:  "report",
		Usage: "summarise the harvest: node-hours offered and used, samples, losses, latencies",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "since", Usage: "from `TIME` (days for node-hours)"},
			&cli.StringFlag{Name: "until", Usage: "before `TIME`"},
			&cli.StringFlag{Name: "format", Value: "table", Usage: "table or json"},
		},
		Action: func(c *cli.Context) error {
			cfg, err := configFrom(c)
			if err != nil {
				return err
			}
			now := time.Now()
			since, err := parseWhen(c.String("since"), now)
			if err != nil {
				return err
			}
			until, err := parseWhen(c.String("until"), now)
			if err != nil {
				return err
			}
			db, err := openRead(c.Context, cfg)
			if err != nil {
				return err
			}
			defer db.Close()
			rep, err := db.Report(c.Context, since, until)
			if err != nil {
				return err
			}
			if c.String("format") == "json" {
				return writeJSON(c.App.Writer, rep)
			}
			t := table{header: []string{"FIGURE", "VALUE"}}
			for _, kv := range rep.Rows() {
				t.add(kv[0], kv[1])
			}
			return t.write(c.App.Writer, "table")
		},
	}
}
