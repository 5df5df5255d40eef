package manpage

import (
	"os/exec"
	"strings"
	"testing"
)

// TestRoff: text that roff would read as requests, escapes or blank lines
// is kept as text; indented lines keep their layout in a no-fill block;
// blank lines start paragraphs.
func TestRoff(t *testing.T) {
	p := Page{Name: "tool-sub", Section: 8, Source: "tool", Manual: "tool manual", Summary: "does a thing",
		Command: "tool sub", Synopsis: "tool sub [options] FILE…",
		Text:    "First line\n.starts with a dot, 'and a quote\n\n  tool sub --x a\\b\n\n  tool sub -y\nlast",
		Options: []Item{{"--x VALUE, -x VALUE", "set x (default: \"a-b\")"}}, SeeAlso: []string{"tool(8)", "tool-other(1)"},
		Header: "generated"}
	got := string(p.Roff())
	for _, want := range []string{
		".\\\" generated\n",
		".TH \"TOOL\\-SUB\" 8 \"\" \"tool\" \"tool manual\"\n",
		".SH NAME\ntool\\-sub \\- does a thing\n",
		".B tool sub\n[options] FILE\\[u2026]\n",
		"First line\n\\&.starts with a dot, 'and a quote\n.PP\n.RS 4\n.nf\ntool sub \\-\\-x a\\eb\n\ntool sub \\-y\n.fi\n.RE\n.PP\nlast\n",
		".TP\n\\fB\\-\\-x VALUE, \\-x VALUE\\fR\nset x (default: \"a\\-b\")\n",
		".SH SEE ALSO\n.BR tool (8),\n.BR tool\\-other (1)\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("page lacks %q:\n%s", want, got)
		}
	}
	if got, want := p.FileName(), "tool-sub.8"; got != want {
		t.Errorf("file name %q, want %q", got, want)
	}

	// groff reads it without a warning, and renders the text as given.
	if _, err := exec.LookPath("groff"); err != nil {
		t.Skip("groff not installed: the page is not rendered")
	}
	cmd := exec.Command("groff", "-man", "-Tutf8", "-ww", "-z")
	cmd.Stdin = strings.NewReader(got)
	if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("groff -ww: %v\n%s", err, out)
	}
	cmd = exec.Command("groff", "-man", "-Tascii", "-P-cbou")
	cmd.Stdin = strings.NewReader(got)
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{".starts with a dot, 'and a quote", "tool sub --x a\\b", "set x (default: \"a-b\")"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("rendered page lacks %q:\n%s", want, out)
		}
	}
}
