package main

import (
	"github.com/urfave/cli/v2"

	"github.com/bftrainer/bftrainer/sidecar"
)

func reportCommand() *cli.Command {
	return &cli.Command{
		Name:  "report",
		Usage: "summarise the harvest: node-hours offered and used, samples, losses, latencies",
		Description: `Times are RFC 3339, dates, or durations ago (as for history):

  bftrainer report
  bftrainer report --since 7d --format json`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "since", Usage: "from `TIME` (days for node-hours)"},
			&cli.StringFlag{Name: "until", Usage: "before `TIME`"},
			formatFlag(fmtTable, fmtJSON, fmtCSV),
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
