package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// TestHelp reads every command's --help as a new user would: it goes to
// stdout with exit 0, shows one default per flag, lists no "COMMANDS"
// section where there are no subcommands (urfave/cli's bare "help"),
// and teaches by example: an indented "bftrainer <command> …" line.
func TestHelp(t *testing.T) {
	var walk func(path []string, cmds []*cli.Command)
	walk = func(path []string, cmds []*cli.Command) {
		for _, c := range cmds {
			p := append(append([]string{}, path...), c.Name)
			t.Run(strings.Join(p, "_"), func(t *testing.T) { checkHelp(t, p, c) })
			walk(p, c.Subcommands)
		}
	}
	walk(nil, newApp(nil, nil).Commands)
	t.Run("bftrainer", func(t *testing.T) { checkHelp(t, nil, nil) })
}

var (
	exampleLine = regexp.MustCompile(`(?m)^\s+bftrainer `)
	defaultText = regexp.MustCompile(`\(default`)
)

func checkHelp(t *testing.T, path []string, c *cli.Command) {
	var out, errs bytes.Buffer
	args := append(append([]string{"bftrainer"}, path...), "--help")
	if code := run(args, &out, &errs); code != 0 || errs.Len() > 0 {
		t.Fatalf("%s: exit %d, stderr %q", strings.Join(args, " "), code, errs.String())
	}
	help := out.String()
	if !strings.Contains(help, "USAGE:") {
		t.Fatalf("%s: no usage:\n%s", strings.Join(args, " "), help)
	}
	for _, l := range strings.Split(help, "\n") {
		if n := len(defaultText.FindAllString(l, -1)); n > 1 {
			t.Errorf("%d defaults on one line: %q", n, l)
		}
		if strings.Contains(l, "Shows a list of commands") {
			t.Errorf("a bare help subcommand: %q", l)
		}
	}
	if c != nil && len(c.Subcommands) == 0 && strings.Contains(help, "COMMANDS:") {
		t.Errorf("a COMMANDS section without subcommands:\n%s", help)
	}
	if c != nil && !c.Hidden && len(c.Subcommands) == 0 && !exampleLine.MatchString(c.Description) {
		t.Errorf("no example line (indented \"bftrainer %s …\") in its description:\n%s", strings.Join(path, " "), help)
	}
}
