package main

import (
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
)

// flagsFirst moves a command's flags ahead of its arguments, so that
// "node leave n1 --job 42" and "progress T --samples N" (as
// bftrainer_progress.py calls it) mean what they say: urfave/cli, like Go's
// flag package, stops reading flags at the first argument. Everything
// after "--" (a Trainer's own command line) and the arguments of commands
// that read their own (hook, node-agent) are left alone.
func flagsFirst(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	out := []string{args[0]}
	rest := args[1:]
	flags, cmds := app.Flags, app.Commands
	// Global flags, then the command and subcommand names.
	for len(rest) > 0 {
		if a := rest[0]; strings.HasPrefix(a, "-") && a != "--" {
			n := flagLen(flags, rest)
			out, rest = append(out, rest[:n]...), rest[n:]
			continue
		}
		i := slices.IndexFunc(cmds, func(c *cli.Command) bool { return slices.Contains(c.Names(), rest[0]) })
		if i < 0 {
			break
		}
		c := cmds[i]
		out, rest = append(out, rest[0]), rest[1:]
		if c.SkipFlagParsing {
			return append(out, rest...)
		}
		flags, cmds = c.Flags, c.Subcommands
	}
	var fl, pos []string
	for len(rest) > 0 {
		a := rest[0]
		if a == "--" {
			pos = append(pos, rest...)
			break
		}
		if strings.HasPrefix(a, "-") && len(a) > 1 {
			n := flagLen(flags, rest)
			fl, rest = append(fl, rest[:n]...), rest[n:]
			continue
		}
		pos, rest = append(pos, a), rest[1:]
	}
	return append(append(out, fl...), pos...)
}

// flagLen returns how many words the flag at rest[0] takes: 2 when it
// needs a value given separately, else 1 (booleans, "--f=v", and flags
// the command does not know, which urfave/cli then reports).
func flagLen(flags []cli.Flag, rest []string) int {
	name := strings.TrimLeft(rest[0], "-")
	if strings.Contains(name, "=") || len(rest) < 2 {
		return 1
	}
	for _, f := range flags {
		if !slices.Contains(f.Names(), name) {
			continue
		}
		if _, isBool := f.(*cli.BoolFlag); isBool {
			return 1
		}
		return 2
	}
	return 1
}
