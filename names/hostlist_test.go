package names

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestExpandHostlist(t *testing.T) {
	tests := []struct {
		name string
		expr string
		want string // space-separated
	}{
		{"empty", "", ""},
		{"plain", "n1", "n1"},
		{"plain list", "login,n1,gpu-a", "login n1 gpu-a"},
		{"dash outside brackets", "rack-1,rack-2", "rack-1 rack-2"},
		{"dots and underscores", "n1.ib,gpu_2", "n1.ib gpu_2"},
		{"lab node list (slurm.md 2.1)", "n[1-2]", "n1 n2"},
		{"range", "n[1-3]", "n1 n2 n3"},
		{"single value", "n[7]", "n7"},
		{"single-host range", "n[1-1]", "n1"},
		{"zero padding", "n[001-010]", "n001 n002 n003 n004 n005 n006 n007 n008 n009 n010"},
		{"padding grows past width", "n[09-100]", "n09 n10 n11 n12 n13 n14 n15 n16 n17 n18 n19 n20 n21 n22 n23 n24 n25 n26 n27 n28 n29 n30 n31 n32 n33 n34 n35 n36 n37 n38 n39 n40 n41 n42 n43 n44 n45 n46 n47 n48 n49 n50 n51 n52 n53 n54 n55 n56 n57 n58 n59 n60 n61 n62 n63 n64 n65 n66 n67 n68 n69 n70 n71 n72 n73 n74 n75 n76 n77 n78 n79 n80 n81 n82 n83 n84 n85 n86 n87 n88 n89 n90 n91 n92 n93 n94 n95 n96 n97 n98 n99 n100"},
		{"width from the lower bound", "n[8-011]", "n8 n9 n10 n11"},
		{"padded lower bound, short upper", "n[01-2]", "n01 n02"},
		{"zero", "n[0]", "n0"},
		{"zeros", "n[000-001]", "n000 n001"},
		{"commas inside brackets", "n[1-2,5,7-8]", "n1 n2 n5 n7 n8"},
		{"order as written", "n[3,1-2]", "n3 n1 n2"},
		{"duplicates kept", "n[1,1,2],n1", "n1 n1 n2 n1"},
		{"commas between and inside", "a,b[1-2],c", "a b1 b2 c"},
		{"several elements with brackets", "n[1-2],m[1-2]x[1-2],z", "n1 n2 m1x1 m1x2 m2x1 m2x2 z"},
		{"no prefix", "[1-3]", "1 2 3"},
		{"dash in prefix", "n-[1-2]", "n-1 n-2"},
		{"docs example: two groups", "a[01-10,15]b[2-3]", "a01b2 a01b3 a02b2 a02b3 a03b2 a03b3 a04b2 a04b3 a05b2 a05b3 a06b2 a06b3 a07b2 a07b3 a08b2 a08b3 a09b2 a09b3 a10b2 a10b3 a15b2 a15b3"},
		{"adjacent groups", "n[1-2][3-4]", "n13 n14 n23 n24"},
		{"groups with dash between", "a[1-2]-b[3-4]", "a1-b3 a1-b4 a2-b3 a2-b4"},
		// Slurm's recursive expansion: the last group is the fastest, the
		// first the next fastest, the second-to-last the slowest.
		{"three groups in Slurm's order", "n[1-2]x[3-4]y[5-6]", "n1x3y5 n1x3y6 n2x3y5 n2x3y6 n1x4y5 n1x4y6 n2x4y5 n2x4y6"},
		{"four groups in Slurm's order", "a[1-2]b[1-2]c[1-2]d[1-2]", "a1b1c1d1 a1b1c1d2 a2b1c1d1 a2b1c1d2 a1b2c1d1 a1b2c1d2 a2b2c1d1 a2b2c1d2 a1b1c2d1 a1b1c2d2 a2b1c2d1 a2b1c2d2 a1b2c2d1 a1b2c2d2 a2b2c2d1 a2b2c2d2"},
		{"multi-range groups", "r[1,3]n[1-2,9]", "r1n1 r1n2 r1n9 r3n1 r3n2 r3n9"},
		{"eighteen digits", "n[999999999999999998-999999999999999999]", "n999999999999999998 n999999999999999999"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ExpandHostlist(tt.expr)
			if err != nil {
				t.Fatalf("ExpandHostlist(%q): %v", tt.expr, err)
			}
			if got, want := strings.Join(got, " "), tt.want; got != want {
				t.Fatalf("ExpandHostlist(%q) = %q, want %q", tt.expr, got, want)
			}
		})
	}
}

func TestExpandHostlistErrors(t *testing.T) {
	tests := []struct {
		name   string
		expr   string
		offset int
		reason string // a substring of the reason
	}{
		{"descending range", "n[5-3]", 2, `descending range "5-3"`},
		{"step", "n[1-9:2]", 5, "no step"},
		{"empty brackets", "n[]", 2, "empty range"},
		{"empty range before comma", "n[,1]", 2, "empty range"},
		{"empty range after comma", "n[1,]", 4, "empty range"},
		{"empty range between commas", "n[1-2,,3]", 6, "empty range"},
		{"open upper bound", "n[1-]", 2, "no upper bound"},
		{"open lower bound", "n[-1]", 2, "no lower bound"},
		{"two dashes", "n[1-2-3]", 2, "malformed range"},
		{"double dash", "n[1--2]", 2, "malformed range"},
		{"letters in range", "n[a-b]", 2, "invalid character 'a' inside brackets"},
		{"blank in range", "n[1 - 2]", 3, "invalid character ' ' inside brackets"},
		{"unclosed bracket", "n[1-2", 1, "unclosed '['"},
		{"unclosed bracket after comma", "n[1,2", 1, "unclosed '['"},
		{"bare open bracket", "n[", 1, "unclosed '['"},
		{"unmatched close", "n1-2]", 4, "unmatched ']'"},
		{"extra close", "n[1]]", 4, "unmatched ']'"},
		{"nested", "n[[1]]", 2, "'[' inside brackets"},
		{"text after last group", "n[1-2]x", 6, `text "x" after the last bracket group`},
		{"domain after group", "n[1-2].ib", 6, `text ".ib"`},
		{"text after three groups", "n[1-2]x[3]y", 10, `text "y"`},
		{"empty element in middle", "x,,y", 2, "empty element"},
		{"leading comma", ",n1", 0, "empty element"},
		{"trailing comma", "n1,", 3, "empty element"},
		{"lone comma", ",", 0, "empty element"},
		{"blank separator", "n1 n2", 2, "invalid character ' '"},
		{"leading blank", " n1", 0, "invalid character ' '"},
		{"shell metacharacter", "n1;reboot", 2, "invalid character ';'"},
		{"non-ASCII", "nœud1", 1, "invalid character 'œ'"},
		{"leading dash", "-n1", 0, "starts with '-'"},
		{"leading dash in second element", "n1,-n[1-2]", 3, "starts with '-'"},
		{"number too long", "n[1234567890123456789]", 2, "longer than 18 digits"},
		{"huge range", "n[0-999999999999999999]", 2, "more than 1000000 hosts"},
		{"huge product", "n[1-1000]x[1-1001]", 0, "more than 1000000 hosts"},
		{"huge across elements", "a[1-600000],b[1-600000]", 12, "more than 1000000 hosts"},
		{"too much text", strings.Repeat("a", 90) + "[1-999999]", 0, "bytes of names"},
		{"name too long", strings.Repeat("a", 250) + "[1000-1001]", 0, "longer than 253"},
		{"plain name too long", strings.Repeat("a", 254), 0, "longer than 253"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ExpandHostlist(tt.expr)
			if err == nil {
				t.Fatalf("ExpandHostlist(%q) = %q, want an error", tt.expr, got)
			}
			var he *HostlistError
			if !errors.As(err, &he) {
				t.Fatalf("ExpandHostlist(%q): error %v is not a *HostlistError", tt.expr, err)
			}
			if got, want := he.Offset, tt.offset; got != want {
				t.Fatalf("ExpandHostlist(%q): offset %d, want %d (%v)", tt.expr, got, want, err)
			}
			if !strings.Contains(he.Reason, tt.reason) {
				t.Fatalf("ExpandHostlist(%q): reason %q, want it to contain %q", tt.expr, he.Reason, tt.reason)
			}
			if got, want := err.Error(), fmt.Sprintf("hostlist %q: ", tt.expr); !strings.HasPrefix(got, want) {
				t.Fatalf("error %q does not start with %q", got, want)
			}
		})
	}
}

func TestExpandHostlistNamesAreValid(t *testing.T) {
	for _, expr := range []string{"a[01-10,15]b[2-3]", "[1-3]", "x_y.z-[7-9]", strings.Repeat("a", 249) + "[1000-1001]"} {
		hosts, err := ExpandHostlist(expr)
		if err != nil {
			t.Fatalf("ExpandHostlist(%q): %v", expr, err)
		}
		for _, h := range hosts {
			if err := ValidateNode(h); err != nil {
				t.Fatalf("ExpandHostlist(%q) gave %q: %v", expr, h, err)
			}
		}
	}
}

func TestExpandHostlistLarge(t *testing.T) {
	hosts, err := ExpandHostlist("a[0001-4608]")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(hosts), 4608; got != want {
		t.Fatalf("len = %d, want %d", got, want)
	}
	if got, want := hosts[0]+" "+hosts[4607], "a0001 a4608"; got != want {
		t.Fatalf("ends = %q, want %q", got, want)
	}
	hosts, err = ExpandHostlist(fmt.Sprintf("n[1-%d]", MaxHostlistHosts))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(hosts), MaxHostlistHosts; got != want {
		t.Fatalf("len = %d, want %d", got, want)
	}
}

func TestSortHostnames(t *testing.T) {
	tests := []struct {
		name  string
		names string
		want  string
	}{
		{"empty", "", ""},
		{"numeric, not lexical", "n10 n9 n1", "n1 n9 n10"},
		{"prefix first", "n2 m3 n1", "m3 n1 n2"},
		{"plain before numbered", "n1 n", "n n1"},
		{"narrower spelling first", "n10 n09 n9", "n9 n09 n10"},
		{"deduplicated", "n1 n1 n2 n1", "n1 n2"},
		{"number only at the end counts", "r2n1 r10n1 r1n2", "r10n1 r1n2 r2n1"},
		{"too long to be a number: sorted as a plain name", "n1234567890123456789 n2", "n2 n1234567890123456789"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, want := strings.Join(SortHostnames(strings.Fields(tt.names)), " "), tt.want; got != want {
				t.Fatalf("SortHostnames(%q) = %q, want %q", tt.names, got, want)
			}
		})
	}
}

func TestCompressHostlist(t *testing.T) {
	tests := []struct {
		name  string
		names string
		want  string
	}{
		{"empty", "", ""},
		{"one", "n1", "n1"},
		{"range", "n1 n2 n3", "n[1-3]"},
		{"unsorted with gaps", "n5 n1 n3 n2", "n[1-3,5]"},
		{"duplicates", "n1 n2 n1", "n[1-2]"},
		{"zero padding", "n001 n002 n003 n010", "n[001-003,010]"},
		{"padded range crossing a power of ten", "n08 n09 n10 n11", "n[08-11]"},
		{"unpadded range crossing a power of ten", "n8 n9 n10 n11", "n[8-11]"},
		{"different widths do not join", "n9 n09 n10", "n[9,09-10]"},
		{"like scontrol show hostlistsorted", "n1 n2 n3 n5 n10 n011 n012 m1 n", "m1,n,n[1-3,5,10,011-012]"},
		{"plain names", "c a b", "a,b,c"},
		{"dash", "rack-2 rack-1", "rack-[1-2]"},
		{"last numeric run only", "r1n1 r1n2 r2n1", "r1n[1-2],r2n1"},
		{"digits only", "3 1 2", "[1-3]"},
		{"domain names stay plain", "n2.ib n1.ib", "n1.ib,n2.ib"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			names := strings.Fields(tt.names)
			got := CompressHostlist(names)
			if got != tt.want {
				t.Fatalf("CompressHostlist(%q) = %q, want %q", tt.names, got, tt.want)
			}
			back, err := ExpandHostlist(got)
			if err != nil {
				t.Fatalf("ExpandHostlist(%q): %v", got, err)
			}
			if got, want := strings.Join(back, " "), strings.Join(SortHostnames(names), " "); got != want {
				t.Fatalf("round trip of %q = %q, want %q", tt.names, got, want)
			}
		})
	}
}

// TestCompressHostlistRoundTrip checks the round trip on random sets of
// names built to collide: shared prefixes, equal values in several widths,
// runs across powers of ten.
func TestCompressHostlistRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		names := randomNames(r)
		compressed := CompressHostlist(names)
		back, err := ExpandHostlist(compressed)
		if err != nil {
			t.Fatalf("case %d: ExpandHostlist(CompressHostlist(%q) = %q): %v", i, names, compressed, err)
		}
		if got, want := back, SortHostnames(names); !slices.Equal(got, want) {
			t.Fatalf("case %d: round trip of %q via %q = %q, want %q", i, names, compressed, got, want)
		}
	}
}

// randomNames returns up to 30 node names that share prefixes, spell equal
// numbers in several widths and run across powers of ten.
func randomNames(r *rand.Rand) []string {
	prefixes := []string{"", "n", "n0", "gpu-", "a.b", "r1n", "x_"}
	var names []string
	for range r.IntN(30) {
		p := prefixes[r.IntN(len(prefixes))]
		if r.IntN(4) == 0 {
			names = append(names, p+"z")
			continue
		}
		names = append(names, fmt.Sprintf("%s%0*d", p, r.IntN(4), r.IntN(120)))
	}
	return names
}

// TestExpandHostlistMatchesScontrol compares ExpandHostlist with the real
// `scontrol show hostnames` (which runs offline, given any slurm.conf) on
// hand-picked and random expressions. Skipped where Slurm is not installed.
func TestExpandHostlistMatchesScontrol(t *testing.T) {
	scontrol, err := exec.LookPath("scontrol")
	if err != nil {
		t.Skip("scontrol not installed")
	}
	conf := filepath.Join(t.TempDir(), "slurm.conf")
	if err := os.WriteFile(conf, []byte("ClusterName=test\nSlurmctldHost=localhost\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	slurm := func(expr string) ([]string, bool) {
		cmd := exec.Command(scontrol, "show", "hostnames", expr)
		cmd.Env = append(os.Environ(), "SLURM_CONF="+conf)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("scontrol show hostnames %q: %v: %s", expr, err, stderr.String())
		}
		// scontrol exits 0 even on a bad hostlist: it says so, or prints
		// nothing at all (for bounds that overflow).
		out := stdout.String() + stderr.String()
		if strings.Contains(out, "Invalid hostlist") || strings.Contains(out, "error:") || stdout.Len() == 0 {
			return nil, false
		}
		return strings.Fields(stdout.String()), true
	}
	exprs := []string{
		"n[1-3]", "a[01-10,15]b[2-3]", "n[001-010]", "rack-1,rack-2", "n[5-3]", "n[1-3:2]",
		"n[]", "n[09-100]", "n[8-011]", "n[01-2]", "n[1-2]x[3-4]y[5-6]", "a[1-2]b[1-2]c[1-2]d[1-2]",
		"n[1-2]x", "n[[1]]", "n[1]]", "n[1-2-3]", "n[a-b]", "[1-3]", "n[3,1-2]", "n[1,1,2]",
		"n[1-2],m[1-2]x[1-2],z", "a[1-2]-b[3-4]", "n[0-99999999999999999999]",
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range 300 {
		exprs = append(exprs, randomHostlist(r))
	}
	var stricter int
	for _, expr := range exprs {
		want, slurmOK := slurm(expr)
		got, err := ExpandHostlist(expr)
		switch {
		case err == nil && !slurmOK:
			t.Errorf("ExpandHostlist(%q) = %q, but Slurm rejects it", expr, got)
		case err == nil && !slices.Equal(got, want):
			t.Errorf("ExpandHostlist(%q) = %q, Slurm says %q", expr, got, want)
		case err != nil && slurmOK:
			// Expected for Slurm's leniencies (empty elements, "[1-]",
			// stray brackets taken as part of a name).
			stricter++
			t.Logf("stricter than Slurm (%d hosts there): %v", len(want), err)
		}
	}
	t.Logf("%d expressions, %d rejected here but accepted by Slurm", len(exprs), stricter)

	// What CompressHostlist writes, Slurm reads back as SortHostnames.
	for i := range 100 {
		names := randomNames(r)
		expr := CompressHostlist(names)
		if expr == "" {
			continue // scontrol prints nothing either way
		}
		got, ok := slurm(expr)
		if want := SortHostnames(names); !ok || !slices.Equal(got, want) {
			t.Fatalf("case %d: Slurm expands CompressHostlist(%q) = %q to %q (ok %v), want %q", i, names, expr, got, ok, want)
		}
	}
}

// randomHostlist builds a hostlist expression, valid most of the time, with
// now and then a character inserted or dropped.
func randomHostlist(r *rand.Rand) string {
	prefixes := []string{"n", "a", "rack-", "gpu_", "x.y", "", "c1n"}
	lits := []string{"", "x", "-", "b", "_s"}
	var b strings.Builder
	for e := range 1 + r.IntN(3) {
		if e > 0 {
			b.WriteByte(',')
		}
		b.WriteString(prefixes[r.IntN(len(prefixes))])
		groups := r.IntN(4)
		for g := range groups {
			if g > 0 {
				b.WriteString(lits[r.IntN(len(lits))])
			}
			b.WriteByte('[')
			for k := range 1 + r.IntN(3) {
				if k > 0 {
					b.WriteByte(',')
				}
				lo := r.IntN(30)
				fmt.Fprintf(&b, "%0*d", r.IntN(4), lo)
				if r.IntN(2) == 0 {
					fmt.Fprintf(&b, "-%0*d", r.IntN(3), lo+r.IntN(6))
				}
			}
			b.WriteByte(']')
		}
		if groups == 0 {
			fmt.Fprintf(&b, "%d", r.IntN(20))
		}
	}
	s := b.String()
	if r.IntN(4) == 0 {
		i := r.IntN(len(s) + 1)
		switch r.IntN(2) {
		case 0:
			c := "[],-:"[r.IntN(5)]
			s = s[:i] + string(c) + s[i:]
		default:
			if i < len(s) {
				s = s[:i] + s[i+1:]
			}
		}
	}
	return s
}

func BenchmarkExpandHostlist4608(b *testing.B) {
	for b.Loop() {
		hosts, err := ExpandHostlist("a[0001-4608]")
		if err != nil || len(hosts) != 4608 {
			b.Fatal(len(hosts), err)
		}
	}
}

func BenchmarkCompressHostlist4608(b *testing.B) {
	hosts, err := ExpandHostlist("a[0001-4608]")
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if got := CompressHostlist(hosts); got != "a[0001-4608]" {
			b.Fatal(got)
		}
	}
}
