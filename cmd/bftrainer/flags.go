package main

import (
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/bftrainer/bftrainer/store"
)

// Flags whose value is one of a fixed set — a format, or a name in one of
// the registries (schedulers, solvers, launchers, event kinds) — check it
// as soon as it is parsed: an unknown value is bad usage (exit 2), never
// silently a default.

// choiceFlag is a string flag whose value must be one of values; def ("":
// none) is its default.
func choiceFlag(name, placeholder string, values []string, def, usage string) *cli.StringFlag {
	return &cli.StringFlag{Name: name, Value: def, Usage: usage + " (`" + placeholder + "`: " + oneOf(values) + ")",
		Action: func(c *cli.Context, v string) error { return checkChoice(c, name, values, v) }}
}

// listFlag is a comma-separated list flag whose every item must be one
// of values.
func listFlag(name, placeholder string, values []string, usage string) *cli.StringFlag {
	return &cli.StringFlag{Name: name, Usage: usage + " (comma-separated `" + placeholder + "`: " + oneOf(values) + ")",
		Action: func(c *cli.Context, v string) error {
			for _, item := range splitList(v) {
				if err := checkChoice(c, name, values, item); err != nil {
					return err
				}
			}
			return nil
		}}
}

// formatFlag is --format with the output formats a command writes; the
// first is the default.
func formatFlag(formats ...string) *cli.StringFlag {
	return choiceFlag("format", "FORMAT", formats, formats[0], "output format")
}

// Output formats.
const (
	fmtTable = "table"
	fmtJSON  = "json"
	fmtCSV   = "csv"
)

func checkChoice(c *cli.Context, flag string, values []string, v string) error {
	if slices.Contains(values, v) {
		return nil
	}
	return withHint(usagef("--%s %q: want %s", flag, v, oneOf(values)), "%s --help", helpName(c))
}

// oneOf lists values for a message: "a, b or c".
func oneOf(values []string) string {
	if len(values) < 2 {
		return strings.Join(values, "")
	}
	return strings.Join(values[:len(values)-1], ", ") + " or " + values[len(values)-1]
}

// splitList reads "a, b,c" as [a b c], dropping empty items.
func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// eventKinds are the kinds the history records, for --kind.
func eventKinds() []string {
	var out []string
	for _, k := range store.Kinds() {
		out = append(out, string(k))
	}
	return out
}

// requireFlag is a flag the command cannot do without. (urfave/cli's own
// Required prints the whole help on stdout; this is a usage error by the
// stderr rule.)
func requireFlag(c *cli.Context, name string) error {
	if c.IsSet(name) {
		return nil
	}
	return withHint(usagef("%s: --%s is required", cmdPath(c), name), "%s --help", helpName(c))
}

// cmdPath is the command at c without the program's name ("node join"),
// for messages.
func cmdPath(c *cli.Context) string { return strings.TrimPrefix(helpName(c), c.App.HelpName+" ") }

// helpName is how the command at c is called ("bftrainer node join"),
// for hints.
func helpName(c *cli.Context) string {
	if c.Command != nil && c.Command.HelpName != "" {
		return c.Command.HelpName
	}
	return c.App.HelpName
}
