package names

import (
	"slices"
	"strings"
	"testing"
)

// FuzzExpandHostlist: no input panics, every name expanded is a valid node
// name, and what expands round-trips through CompressHostlist to the sorted
// set of its names.
func FuzzExpandHostlist(f *testing.F) {
	for _, s := range []string{
		"", "n1", "n[1-3]", "a[01-10,15]b[2-3]", "n[001-010]", "rack-1,rack-2", "n[5-3]", "n[1-3:2]",
		"n[]", "n[1-]", "x,,y", "n[1-2]x", "n[[1]]", "n[09-100]", "n[8-011]", "[1-3]",
		"n[1-2]x[3-4]y[5-6]", "a[1-2]b[1-2]c[1-2]d[1-2]", "n[0-999999999999999999]", "n9,n09,n10",
		"n[1-1000]x[1-1001]", "gpu_[1,3]-ib.[2]", "-n1", "n1]", "n[",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		hosts, err := ExpandHostlist(expr)
		if err != nil {
			if hosts != nil {
				t.Fatalf("ExpandHostlist(%q) returned names with error %v", expr, err)
			}
			if !strings.HasPrefix(err.Error(), "hostlist ") {
				t.Fatalf("ExpandHostlist(%q): error %q lacks the hostlist prefix", expr, err)
			}
			return
		}
		if len(hosts) > MaxHostlistHosts {
			t.Fatalf("ExpandHostlist(%q): %d hosts, cap %d", expr, len(hosts), MaxHostlistHosts)
		}
		for _, h := range hosts {
			if err := ValidateNode(h); err != nil {
				t.Fatalf("ExpandHostlist(%q) gave an invalid name: %v", expr, err)
			}
		}
		if len(hosts) > 20000 {
			return // valid, but too slow to round-trip on every fuzz run
		}
		compressed := CompressHostlist(hosts)
		back, err := ExpandHostlist(compressed)
		if err != nil {
			t.Fatalf("ExpandHostlist(CompressHostlist(ExpandHostlist(%q)) = %q): %v", expr, compressed, err)
		}
		want := SortHostnames(hosts)
		if !slices.Equal(back, want) {
			t.Fatalf("round trip of %q via %q = %q, want %q", expr, compressed, back, want)
		}
		// SortHostnames really is a sorted set: no repeats, and each name
		// of the input is in it.
		seen := map[string]bool{}
		for _, h := range want {
			if seen[h] {
				t.Fatalf("SortHostnames(%q) repeats %q", hosts, h)
			}
			seen[h] = true
		}
		for _, h := range hosts {
			if !seen[h] {
				t.Fatalf("SortHostnames(%q) lost %q", hosts, h)
			}
		}
	})
}

// checkCall is what any successful parse must satisfy, whatever its input.
