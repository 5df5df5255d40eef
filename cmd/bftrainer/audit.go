package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/bftrainer/bftrainer/accounting"
	"github.com/bftrainer/bftrainer/sidecar"
)

func auditCommand() *cli.Command {
	return &cli.Command{
		Name:      "audit",
		Usage:     "check the history against the scheduler's own accounting: did bftrainer ever touch a main job?",
		ArgsUsage: " ",
		Description: `Reads the scheduler's accounting for the window (Slurm: sacct, every
user's jobs and their steps; Grid Engine: qacct -j, and qstat for the jobs
still running, which qacct lists only once they end) and checks every main
job that ran on a node the pool had held, node by node:

  late-leave         the node left the pool by the job's start (+ tolerance)
  trainer-started    no Trainer process was started there while the job held it
  kill-late          what another kill than the job's own node prolog's took
                     was gone when the job's own processes started (its first
                     step; + tolerance; the prolog runs before any of them)
  kill-unclean       the kill accounted for every process (no survivor, no error)
  early-join         the node did not rejoin the pool before the job ended

and, the other way, that every leave a hook recorded names a job the
accounting shows on that node (unexplained-leave; leaves recorded by sync
are the scheduler's own node states, and explained by them). It prints one
row per violation and a summary on stderr; exit status 1 if there is any.
Run it weekly, and show users the clean report:

  bftrainer audit --since 7d
  bftrainer audit --since 2026-11-01 --until 2026-12-01 --format csv
  sacct --allusers --parsable2 --starttime 2026-11-01 \
      --format JobID,Start,End,NodeList > nov.sacct      # on another host
  bftrainer audit --accounting nov.sacct --since 2026-11-01
  TZ=UTC qacct -j > all.qacct                            # Grid Engine
  bftrainer audit --accounting all.qacct --since 2026-11-01

A saved listing (--accounting: sacct --parsable2 or qacct -j output, told
apart by its first line) is read in UTC unless TZ says otherwise: print it
with TZ=UTC, as the audit's own calls do. Grid Engine's accounting names a
parallel job's hosts only where a task of it ran (accounting_summary FALSE
in its parallel environment): docs/history.md, "Audit".`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "since", Value: "7d", Usage: "from `TIME` (RFC 3339, a date, or a duration ago)"},
			&cli.StringFlag{Name: "until", Usage: "to `TIME` (default: now)"},
			&cli.StringFlag{Name: "accounting", Usage: "read the accounting from `FILE` (sacct --parsable2 or qacct -j output) instead of asking the scheduler"},
			&cli.DurationFlag{Name: "tolerance", Value: sidecar.DefaultAuditOptions.Tolerance, Usage: "clock skew allowed between the history and the accounting"},
			&cli.DurationFlag{Name: "lead", Value: sidecar.DefaultAuditOptions.Lead, Usage: "how long before a job's start its leave may be recorded"},
			formatFlag(fmtTable, fmtJSON, fmtCSV),
		},
		Action: coreAction(func(c *cli.Context, core *sidecar.Core, _ Config) error {
			if c.Args().Present() {
				return usagef("audit takes no arguments (got %q)", c.Args().First())
			}
			since, until, err := window(c)
			if err != nil {
				return err
			}
			if until.IsZero() {
				until = time.Now()
			}
			o := sidecar.AuditOptions{Tolerance: c.Duration("tolerance"), Lead: c.Duration("lead")}
			if o.Tolerance < 0 || o.Lead < 0 {
				return usagef("--tolerance and --lead must not be negative")
			}
			var listing *accounting.Listing
			if path := c.String("accounting"); path != "" {
				if listing, err = readListing(path); err != nil {
					return err
				}
			}
			r, err := core.Audit(c.Context, since, until, listing, o)
			if errors.Is(err, sidecar.ErrNoAccounting) {
				return withHint(err, "save the scheduler's accounting on a host that has it and pass it with --accounting FILE")
			}
			if err != nil {
				return err
			}
			t := &table{header: []string{"AT", "KIND", "JOB", "NODE", "DETAIL"}}
			for _, v := range r.Violations {
				t.add(v.At.Format(time.RFC3339Nano), v.Kind, v.Job, v.Node, v.Detail)
			}
			if c.String("format") == fmtJSON {
				out := struct {
					*sidecar.AuditReport
					ToleranceS float64 `json:"tolerance_s"`
					LeadS      float64 `json:"lead_s"`
				}{r, r.Tolerance.Seconds(), r.Lead.Seconds()}
				if out.Violations == nil {
					out.Violations = []sidecar.AuditViolation{}
				}
				if err := writeJSON(c.App.Writer, out); err != nil {
					return err
				}
			} else if len(r.Violations) > 0 || c.String("format") == fmtCSV {
				if err := t.write(c.App.Writer, c.String("format")); err != nil {
					return err
				}
			}
			say(c.App.ErrWriter, "audit %s to %s: %d main job(s), %d on %d pool node(s), %d leave(s) checked; %d violation(s)",
				r.From.UTC().Format(time.RFC3339), r.To.UTC().Format(time.RFC3339), r.Jobs, r.Checked, r.Nodes, r.Leaves, len(r.Violations))
			if len(r.Violations) > 0 {
				return errViolations
			}
			return nil
		}),
	}
}

// errViolations ends an audit that found violations with exit status 1;
// the table said what they are.
var errViolations = errors.New("the history and the scheduler's accounting disagree (the rows above)")

// readListing reads a saved sacct or qacct listing, told apart by its first
// line, its times in TZ (UTC unless set).
func readListing(path string) (*accounting.Listing, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("accounting: %w", err)
	}
	defer f.Close()
	loc := time.UTC
	if os.Getenv("TZ") != "" {
		loc = time.Local
	}
	r := bufio.NewReader(f)
	first, _ := r.Peek(5)
	read := accounting.ReadSacct
	if accounting.IsQacct(first) {
		read = accounting.ReadQacct
	}
	l, err := read(r, loc)
	if err != nil {
		return nil, fmt.Errorf("accounting %s: %w", path, err)
	}
	return l, nil
}
