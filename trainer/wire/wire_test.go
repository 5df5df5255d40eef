package wire_test

import (
	"slices"
	"testing"

	"github.com/bftrainer/bftrainer/trainer/trainertest"
	"github.com/bftrainer/bftrainer/trainer/wire"
)

func TestParseToken(t *testing.T) {
	tests := []struct {
		name string
		in   string
		ok   bool
	}{
		{"good", "t1/n1/0a1b", true},
		{"controller", "t1/_controller/ff", true},
		{"two parts", "t1/n1", false},
		{"four parts", "t1/n1/ab/cd", false},
		{"bad trainer", "t;1/n1/ab", false},
		{"bad node", "t1/-n1/ab", false},
		{"upper nonce", "t1/n1/AB", false},
		{"empty nonce", "t1/n1/", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok, err := wire.ParseToken(tt.in)
			if got := err == nil; got != tt.ok {
				t.Fatalf("wire.ParseToken(%q) error %v, want ok=%v", tt.in, err, tt.ok)
			}
			if tt.ok && tok.String() != tt.in {
				t.Fatalf("round trip: %q → %q", tt.in, tok.String())
			}
		})
	}
	if a, b := wire.NewToken("t", "n"), wire.NewToken("t", "n"); a == b {
		t.Fatal("two tokens share a nonce")
	}
}

func TestLaunchValidate(t *testing.T) {
	good := wire.Launch{Trainer: "t1", Node: "n1", Owner: "alice", Argv: []string{"/bin/true"}, Token: "t1/n1/ab", Run: "ab"}
	tests := []struct {
		name string
		edit func(*wire.Launch)
		ok   bool
	}{
		{"good", func(*wire.Launch) {}, true},
		{"hostile argv is data", func(l *wire.Launch) { l.Argv = append(l.Argv, trainertest.Hostile...) }, true},
		{"hostile env value is data", func(l *wire.Launch) { l.Env = map[string]string{"X": "$(touch CANARY)"} }, true},
		{"node with semicolon", func(l *wire.Launch) { l.Node = "n1;touch x"; l.Token = "t1/n1/ab" }, false},
		{"node with dash", func(l *wire.Launch) { l.Node = "-oProxyCommand=x" }, false},
		{"node path", func(l *wire.Launch) { l.Node = "../../etc" }, false},
		{"trainer with dollar", func(l *wire.Launch) { l.Trainer = "$(x)" }, false},
		{"trainer with space", func(l *wire.Launch) { l.Trainer = "a b" }, false},
		{"owner with dash", func(l *wire.Launch) { l.Owner = "-root" }, false},
		{"owner with newline", func(l *wire.Launch) { l.Owner = "a\nroot" }, false},
		{"token for another node", func(l *wire.Launch) { l.Token = "t1/n2/ab" }, false},
		{"token for another trainer", func(l *wire.Launch) { l.Token = "t2/n1/ab" }, false},
		{"no program", func(l *wire.Launch) { l.Argv = nil }, false},
		{"NUL in argument", func(l *wire.Launch) { l.Argv = []string{"/bin/echo", "a\x00b"} }, false},
		{"env name with semicolon", func(l *wire.Launch) { l.Env = map[string]string{"A;B": "x"} }, false},
		{"env name with equals", func(l *wire.Launch) { l.Env = map[string]string{"A=B": "x"} }, false},
		{"relative workdir", func(l *wire.Launch) { l.Workdir = "tmp" }, false},
		{"bad node in list", func(l *wire.Launch) { l.Nodes = []string{"n1", "n2 n3"} }, false},
		{"no run", func(l *wire.Launch) { l.Run = "" }, false},
		{"run as a path", func(l *wire.Launch) { l.Run = "../x" }, false},
		{"hosted with a program", func(l *wire.Launch) { l.Hosted = true }, false},
		{"hosted", func(l *wire.Launch) { l.Hosted, l.Argv = true, nil }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := good
			l.Argv = slices.Clone(good.Argv)
			tt.edit(&l)
			if err := l.Validate(); (err == nil) != tt.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}
