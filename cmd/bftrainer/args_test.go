package main

import (
	"io"
	"strings"
	"testing"
)

func TestFlagsFirst(t *testing.T) {
	app := newApp(io.Discard, io.Discard)
	for _, c := range []struct {
		name, in, want string
	}{
		{"flag after the nodes", "node leave n1 n2 --job 42", "node leave --job 42 n1 n2"},
		{"flag with =", "node leave n1 --job=42", "node leave --job=42 n1"},
		{"boolean between nodes", "node join n1 --no-reconcile n2", "node join --no-reconcile n1 n2"},
		{"global flags stay first", "--config c.toml progress t1 --samples 5", "--config c.toml progress --samples 5 t1"},
		{"already in order", "trainer cancel t1", "trainer cancel t1"},
		{"a Trainer's command line is its own", "trainer submit --curve 1:1 t -- python3 x.py --samples 3", "trainer submit --curve 1:1 t -- python3 x.py --samples 3"},
		{"hooks read their own arguments", "hook pbs prologue 1.srv -x", "hook pbs prologue 1.srv -x"},
		{"unknown flag left for urfave/cli", "status extra --bogus", "status --bogus extra"},
	} {
		got := strings.Join(flagsFirst(app, append([]string{"bftrainer"}, strings.Fields(c.in)...))[1:], " ")
		if got != c.want {
			t.Errorf("%s: %q became %q, want %q", c.name, c.in, got, c.want)
		}
	}
}
