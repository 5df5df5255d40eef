package wire_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bftrainer/bftrainer/trainer/trainertest"
	"github.com/bftrainer/bftrainer/trainer/wire"
)

var hostile = trainertest.Hostile

func TestShellQuote(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"plain word unquoted", "n01.cluster", "n01.cluster"},
		{"path unquoted", "/usr/local/sbin/bftrainer", "/usr/local/sbin/bftrainer"},
		{"empty", "", "''"},
		{"space", "a b", "'a b'"},
		{"dollar", "$HOME", "'$HOME'"},
		{"single quote", "it's", `'it'\''s'`},
		{"equals quoted", "a=b", "'a=b'"},
		{"tilde quoted", "~x", "'~x'"},
		{"newline", "a\nb", "'a\nb'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := wire.ShellQuote(tt.in); got != tt.want {
				t.Fatalf("wire.ShellQuote(%q) = %s, want %s", tt.in, got, tt.want)
			}
		})
	}
}

// TestShellJoinRoundTrip hands ShellJoin's output to real shells and
// checks that each gives the program back exactly the words, and runs
// nothing: a canary file that any injected command would create must not
// appear.
func TestShellJoinRoundTrip(t *testing.T) {
	dir := t.TempDir()
	canary := filepath.Join(dir, "CANARY")
	for _, sh := range []string{"/bin/sh", "/bin/dash", "/bin/bash", "/usr/bin/zsh"} {
		if _, err := os.Stat(sh); err != nil {
			continue
		}
		t.Run(filepath.Base(sh), func(t *testing.T) {
			line := "printf '%s\\0' " + wire.ShellJoin(hostile)
			cmd := exec.Command(sh, "-c", line)
			cmd.Dir = dir
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%s: %v", sh, err)
			}
			got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
			if len(got) != len(hostile) {
				t.Fatalf("%d words back, want %d: %q", len(got), len(hostile), got)
			}
			for i := range hostile {
				if got[i] != hostile[i] {
					t.Errorf("word %d: got %q, want %q", i, got[i], hostile[i])
				}
			}
			if _, err := os.Stat(canary); err == nil {
				t.Fatal("an injected command ran: the canary exists")
			}
		})
	}
}
