// Package manpage writes manual pages in roff (man(7) macros) from what a
// command's help already says: its one-line usage, synopsis, description,
// options and subcommands. The pages are generated, never written by hand,
// so that they cannot drift from the help (cmd/bftrainer's man test walks
// the CLI into Pages and compares them with man/; `make man` rewrites
// them).
//
// It is a writer of its own rather than urfave/cli's ToMan: that one sits
// behind the build tag the binary leaves out (urfave_cli_no_docs, so that
// no hook call pays its package initialisation), writes one page for the
// whole program rather than one per command, and goes through Markdown,
// whose output follows go-md2man's version.
package manpage

import (
	"bytes"
	"fmt"
	"strings"
	"unicode"
)

// Page is one manual page.
type Page struct {
	Name     string   // the page's name: bftrainer, bftrainer-trainer-submit
	Section  int      // 8: system administration commands
	Source   string   // the footer's left: the program, e.g. "bftrainer"
	Manual   string   // the header's centre, e.g. "bftrainer manual"
	Summary  string   // the NAME line's text after the dash
	Synopsis string   // the command line: the command's words, then its arguments
	Command  string   // the command's words, set in bold in the synopsis
	Text     string   // the description: paragraphs split by blank lines; indented lines are kept as they are
	Options  []Item   // OPTIONS
	Commands []Item   // COMMANDS: subcommands
	SeeAlso  []string // other pages, "name(section)"
	Header   string   // a comment on the first line: where the page comes from
}

// Item is an option or a subcommand: its term (the option's names and
// placeholder, or the subcommand's name) and what it does.
type Item struct {
	Term, Text string
}

// FileName is the page's file name: name.section.
func (p Page) FileName() string { return fmt.Sprintf("%s.%d", p.Name, p.Section) }

// Roff returns the page in roff.
func (p Page) Roff() []byte {
	var b bytes.Buffer
	if p.Header != "" {
		for _, l := range strings.Split(p.Header, "\n") {
			fmt.Fprintf(&b, ".\\\" %s\n", l)
		}
	}
	// No date: the page is the same whenever it is generated.
	fmt.Fprintf(&b, ".TH %s %d \"\" %s %s\n", quote(strings.ToUpper(p.Name)), p.Section, quote(p.Source), quote(p.Manual))
	fmt.Fprintf(&b, ".SH NAME\n%s \\- %s\n", escape(p.Name), escape(p.Summary))
	b.WriteString(".SH SYNOPSIS\n")
	args := strings.TrimSpace(strings.TrimPrefix(p.Synopsis, p.Command))
	fmt.Fprintf(&b, ".B %s\n", escape(p.Command))
	if args != "" {
		b.WriteString(line(args))
	}
	if strings.TrimSpace(p.Text) != "" {
		b.WriteString(".SH DESCRIPTION\n")
		text(&b, p.Text)
	}
	items(&b, "COMMANDS", p.Commands)
	items(&b, "OPTIONS", p.Options)
	if len(p.SeeAlso) > 0 {
		b.WriteString(".SH SEE ALSO\n")
		for i, s := range p.SeeAlso {
			name, sec, _ := strings.Cut(s, "(")
			sep := ","
			if i == len(p.SeeAlso)-1 {
				sep = ""
			}
			fmt.Fprintf(&b, ".BR %s (%s%s\n", escape(name), escape(sec), sep)
		}
	}
	return b.Bytes()
}

// items writes a section of tagged paragraphs, the term in bold.
func items(b *bytes.Buffer, title string, its []Item) {
	if len(its) == 0 {
		return
	}
	fmt.Fprintf(b, ".SH %s\n", title)
	for _, it := range its {
		fmt.Fprintf(b, ".TP\n\\fB%s\\fR\n", escape(it.Term))
		text(b, it.Text)
	}
}

// text writes a description: a blank line starts a paragraph; lines that
// begin with white space (examples, snippets) are kept as they are, in an
// indented no-fill block; the others are filled.
func text(b *bytes.Buffer, s string) {
	lines := strings.Split(strings.Trim(s, "\n"), "\n")
	inBlock, para := false, false
	for i, l := range lines {
		switch {
		case strings.TrimSpace(l) == "":
			// A blank line inside a block followed by more of it stays in it.
			if inBlock && i+1 < len(lines) && indented(lines[i+1]) {
				b.WriteString("\n")
				continue
			}
			if inBlock {
				b.WriteString(".fi\n.RE\n")
				inBlock = false
			}
			para = false
		case indented(l):
			if !inBlock {
				b.WriteString(".PP\n.RS 4\n.nf\n")
				inBlock, para = true, true
			}
			b.WriteString(line(dedent(l)))
		default:
			if inBlock {
				b.WriteString(".fi\n.RE\n")
				inBlock, para = false, false
			}
			if !para && i > 0 {
				b.WriteString(".PP\n")
			}
			para = true
			b.WriteString(line(strings.TrimSpace(l)))
		}
	}
	if inBlock {
		b.WriteString(".fi\n.RE\n")
	}
}

// indented says whether a line begins with white space.
func indented(l string) bool { return l != "" && (l[0] == ' ' || l[0] == '\t') }

// dedent drops the first two spaces of an example line (help indents its
// examples by two under the text), keeping the rest of its layout.
func dedent(l string) string {
	l = strings.ReplaceAll(l, "\t", "        ")
	return strings.TrimPrefix(l, "  ")
}

// line returns one input line: escaped, and kept from being read as a
// request (a leading . or ') or as a blank line.
func line(s string) string {
	s = escape(s)
	if s == "" || s[0] == '.' || s[0] == '\'' || s[0] == ' ' {
		s = `\&` + s
	}
	return s + "\n"
}

// escape makes text safe in roff: a backslash printed as itself, every
// hyphen a minus (what options and paths are, copied from the page), and
// characters outside ASCII by their Unicode name, which groff renders
// in any locale.
func escape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\\':
			b.WriteString(`\e`)
		case r == '-':
			b.WriteString(`\-`)
		case r > unicode.MaxASCII:
			fmt.Fprintf(&b, `\[u%04X]`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// quote makes a macro argument: in double quotes, a quote inside doubled.
func quote(s string) string {
	return `"` + strings.ReplaceAll(escape(s), `"`, `""`) + `"`
}
