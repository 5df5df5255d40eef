package main

import (
	"fmt"
	"io"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/bftrainer/bftrainer/sidecar"
	"github.com/bftrainer/bftrainer/sim"
)

func reportCommand() *cli.Command {
	return &cli.Command{
		Name:  "report",
		Usage: "summarise the harvest: node-hours offered and used, samples, losses, latencies",
		Description: `Times are RFC 3339, dates, or durations ago (as for history):

  bftrainer report
  bftrainer report --since 7d --format json

--svg draws the live pool's timeline over the window — idle nodes, nodes
used, and each Trainer's nodes stacked — the plot "bftrainer replay --out"
draws for a replay, rebuilt from the history:

  bftrainer report --since 24h --svg pool.svg`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "since", Usage: "from `TIME` (days for node-hours)"},
			&cli.StringFlag{Name: "until", Usage: "before `TIME`"},
			formatFlag(fmtTable, fmtJSON, fmtCSV),
			&cli.StringFlag{Name: "svg", Usage: "also draw the pool's timeline over the window in `FILE`"},
		},
		Action: coreAction(func(c *cli.Context, core *sidecar.Core, _ Config) error {
			since, until, err := window(c)
			if err != nil {
				return err
			}
			rep, err := core.Report(c.Context, since, until)
			if err != nil {
				return err
			}
			if path := c.String("svg"); path != "" {
				if err := liveTimeline(c, core, since, until, path); err != nil {
					return err
				}
			}
			if c.String("format") == fmtJSON {
				return writeJSON(c.App.Writer, rep)
			}
			t := table{header: []string{"FIGURE", "VALUE"}}
			for _, kv := range rep.Rows() {
				t.add(kv[0], kv[1])
			}
			return t.write(c.App.Writer, c.String("format"))
		}),
	}
}

// timelineSamples is how many instants the live timeline draws, as a
// replay's (replayTo).
const timelineSamples = 2000

// liveTimeline draws the pool's node use between since and until in path
// with the replay's SVG writer.
func liveTimeline(c *cli.Context, core *sidecar.Core, since, until time.Time, path string) error {
	tl, err := core.Timeline(c.Context, since, until, timelineSamples)
	if err != nil {
		return err
	}
	st := &sim.Timeline{Times: tl.Times, Idle: tl.Idle, Used: tl.Used, Shares: make([][]sim.Share, len(tl.Shares))}
	for i, shares := range tl.Shares {
		for _, s := range shares {
			st.Shares[i] = append(st.Shares[i], sim.Share{Trainer: int32(s.Trainer), Nodes: int32(s.Nodes)})
		}
	}
	hours := sim.Hours(tl.To.Sub(tl.From))
	title := fmt.Sprintf("the idle pool, live: %s h of %s", hours, core.Database())
	sub := fmt.Sprintf("hours 0–%s from %s UTC to %s UTC: %d events recorded, %d Trainer(s) drawn",
		hours, tl.From.UTC().Format("2006-01-02 15:04"), tl.To.UTC().Format("2006-01-02 15:04"), tl.Events, len(tl.Trainers))
	if err := sim.WriteFile(path, func(w io.Writer) error { return sim.WriteTimeline(w, st, title, sub) }); err != nil {
		return err
	}
	say(c.App.ErrWriter, "wrote %s: the pool's timeline, %s h from %s", path, hours, tl.From.UTC().Format(time.RFC3339))
	return nil
}
