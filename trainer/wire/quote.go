package wire

import "strings"

// ShellQuote returns s as exactly one word for a POSIX shell (sh, dash,
// bash, zsh, ksh): s itself when it is made only of characters no shell
// treats specially, otherwise s in single quotes, each single quote of s
// written as four bytes: one ending the quoted text, a backslash-escaped
// quote, one reopening it. Inside single quotes a POSIX shell expands
// nothing — no $, no backquote, no backslash, no
// newline continuation — so the word reaches the program byte for byte.
//
// ssh joins its command arguments with spaces and hands the result to the
// remote user's login shell: every argument we send must be quoted this
// way, one by one. (csh and tcsh are not POSIX: root's shell on the nodes
// must be.)
func ShellQuote(s string) string {
	if s != "" && plainWord(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// ShellJoin quotes each argument with ShellQuote and joins them with
// spaces: a command line a POSIX shell splits back into exactly args.
func ShellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = ShellQuote(a)
	}
	return strings.Join(q, " ")
}

// plainWord reports whether s needs no quoting. '=' is left out (a first
// word with it is an assignment), and so are '~' (home expansion) and
// every glob, redirection, expansion, separator and quote character.
func plainWord(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '-' || c == '_' || c == '.' || c == '/' || c == ':' || c == ',' || c == '@' || c == '%' || c == '+') {
			return false
		}
	}
	return true
}
