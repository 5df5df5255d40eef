package trainer

import (
	"os"
	"os/user"
	"strings"
	"testing"
	"time"
)

func currentUserName(tb testing.TB) string {
	tb.Helper()
	u, err := user.Current()
	if err != nil {
		tb.Fatal(err)
	}
	return u.Username
}

// tokenProcs returns the live processes whose run token satisfies keep.
func tokenProcs(tb testing.TB, keep func(Token, Proc) bool) []Proc {
	tb.Helper()
	ps, err := Procs()
	if err != nil {
		tb.Fatal(err)
	}
	var out []Proc
	for _, p := range ps {
		if t, ok := p.Token(); ok && !p.Dead() && keep(t, p) {
			out = append(out, p)
		}
	}
	return out
}

// waitFor polls cond every 20 ms until it holds or the timeout passes.
func waitFor(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readFile returns a file's content, "" when absent.
func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}
