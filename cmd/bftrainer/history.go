package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/bftrainer/bftrainer/names"
	"github.com/bftrainer/bftrainer/sidecar"
	"github.com/bftrainer/bftrainer/store"
)

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
			listFlag("kind", "KINDS", eventKinds(), "events of these kinds"),
			&cli.IntFlag{Name: "limit", Value: 1000, Usage: "at most `N` events, newest (0: all)"},
			formatFlag(fmtTable, fmtJSON, fmtCSV),
		},
		Action: coreAction(func(c *cli.Context, core *sidecar.Core, _ Config) error {
			f := store.Filter{Node: c.String("node"), Trainer: c.String("trainer"), Job: c.String("job"), Limit: c.Int("limit"), Desc: true}
			var err error
			if f.Since, f.Until, err = window(c); err != nil {
				return err
			}
			for _, k := range splitList(c.String("kind")) {
				f.Kinds = append(f.Kinds, store.Kind(k))
			}
			evs, err := core.Events(c.Context, f)
			if err != nil {
				return err
			}
			slices.Reverse(evs) // oldest first
			return eventTable(evs, c.String("format")).write(c.App.Writer, c.String("format"))
		}),
	}
}

// eventTable lays the events out, one row each.
func eventTable(evs []store.Event, format string) *table {
	t := &table{header: []string{"ID", "AT", "KIND", "SOURCE", "CONTEXT", "JOB", "TRAINER", "USER", "NODES", "VALUE", "MS", "DETAIL", "ERROR"}}
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
		if (format == "" || format == "table") && len(detail) > 60 {
			detail = detail[:57] + "..."
		}
		t.add(e.ID, e.At.UTC().Format(store.TimeFormat), e.Kind, e.Source, e.Context, e.Job, e.Trainer, e.User, nodes, val, ms, detail, e.Error)
	}
	return t
}

// window reads --since and --until.
func window(c *cli.Context) (since, until time.Time, err error) {
	now := time.Now()
	if since, err = parseWhen(c.String("since"), now); err != nil {
		return
	}
	until, err = parseWhen(c.String("until"), now)
	return
}

// parseWhen reads a time as RFC 3339, a date, or a duration ago ("2h",
// or days: "7d").
func parseWhen(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		return now.Add(-d), nil
	}
	if days, err := strconv.ParseFloat(strings.TrimSuffix(s, "d"), 64); err == nil && strings.HasSuffix(s, "d") && days >= 0 {
		return now.Add(-time.Duration(days * 24 * float64(time.Hour))), nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02 15:04:05", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, usagef("time %q: want RFC 3339 (2026-11-29T10:00:00Z), a date (2026-11-29) or a duration ago (2h, 7d)", s)
}
