// Package names owns the identifiers that cross trust boundaries: node
// names and Slurm hostlists, job ids, user names and Trainer names. Every
// one of them reaches a command line, a path or SQL, so each has one
// validator here, used by the scheduler hooks and the Trainer side alike.
// It imports nothing of ours.
package names

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// ErrNode is wrapped by every error about a node name that fails
// ValidateNode.
var ErrNode = errors.New("invalid node name")

// ErrJob is wrapped by every error about a job ID that fails ValidateJob.
var ErrJob = errors.New("invalid job id")

// ErrUser is wrapped by every error about a user name that fails
// ValidateUser.
var ErrUser = errors.New("invalid user name")

// ErrTrainer is wrapped by every error about a Trainer name that fails
// ValidateTrainer.
var ErrTrainer = errors.New("invalid trainer name")

// maxNameLen is the longest node name accepted: a DNS name's limit.
const maxNameLen = 253

// maxJobIDLen bounds a job ID. PBS IDs carry the server's name
// ("1234[5].pbs01.example.org"), so they are the longest we expect.
const maxJobIDLen = 255

// maxUserLen bounds a user name; Linux allows 32, directory services more.
const maxUserLen = 256

// nameByte reports whether c may appear in a node name: ASCII letters and
// digits, '-', '_' and '.'. The set is conservative on purpose: node names
// from the scheduler end up on ssh command lines and in SQL, and no real
// cluster needs more.
func nameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '-' || c == '_' || c == '.'
}

// jobIDByte reports whether c may appear in a job ID: the node name set plus
// '[' and ']' for LSF and PBS array jobs ("1234[5]", "1234[].server").
func jobIDByte(c byte) bool {
	return nameByte(c) || c == '[' || c == ']'
}

// userByte reports whether c may appear in a user name: the node name set
// plus '@' for directory-service names ("jdoe@EXAMPLE.ORG").
func userByte(c byte) bool {
	return nameByte(c) || c == '@'
}

// ValidateNode checks that name is safe to use as a node name: 1 to 253
// characters from letters, digits, '-', '_' and '.', not starting with '-'
// (it would read as an option to ssh and friends), and not "." or ".."
// (as a path component, the directory itself or its parent: the node
// agent's registry keeps a directory per node).
func ValidateNode(name string) error {
	if name == "." || name == ".." {
		return fmt.Errorf("node name %q: a directory's own name: %w", name, ErrNode)
	}
	return validateToken("node name", name, maxNameLen, nameByte, ErrNode)
}

// ValidateJob checks that id is safe to use as a job ID: 1 to 255
// characters from letters, digits, '.', '_', '-', '[' and ']', not starting
// with '-'. That covers Slurm ("123", "123_4"), LSF ("123[4]") and PBS
// ("123.server", "123[4].server").
func ValidateJob(id string) error {
	return validateToken("job id", id, maxJobIDLen, jobIDByte, ErrJob)
}

// ValidateUser checks a user name before it is looked up or recorded: 1 to 256 characters from letters, digits,
// '-', '_', '.' and '@', not starting with '-'.
func ValidateUser(user string) error {
	return validateToken("user", user, maxUserLen, userByte, ErrUser)
}

// ValidateTrainer checks a Trainer name: it names processes, files,
// registry entries and rendezvous ids, and reaches remote shells, so it is
// kept to a small safe alphabet that cannot start an option: 1 to 64
// letters, digits, '-', '_' and '.', the first a letter or a digit.
func ValidateTrainer(id string) error {
	if id == "" || len(id) > 64 {
		return fmt.Errorf("trainer name %q: must be 1 to 64 characters: %w", id, ErrTrainer)
	}
	for i, c := range id {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || (i > 0 && (c == '-' || c == '_' || c == '.'))
		if !ok {
			return fmt.Errorf("trainer name %q: only letters, digits and - _ . (not first) are allowed: %w", id, ErrTrainer)
		}
	}
	return nil
}

func validateToken(what, s string, maxLen int, ok func(byte) bool, sentinel error) error {
	switch {
	case s == "":
		return fmt.Errorf("%s is empty: %w", what, sentinel)
	case len(s) > maxLen:
		return fmt.Errorf("%s %.20q…: longer than %d characters: %w", what, s, maxLen, sentinel)
	case s[0] == '-':
		return fmt.Errorf("%s %q: starts with '-': %w", what, s, sentinel)
	}
	for i := 0; i < len(s); i++ {
		if !ok(s[i]) {
			r, _ := utf8.DecodeRuneInString(s[i:])
			return fmt.Errorf("%s %q: character %q at offset %d: %w", what, s, r, i, sentinel)
		}
	}
	return nil
}

// Unique returns names without repeats, first occurrence first, each
// checked with ValidateNode.
func Unique(names []string) ([]string, error) {
	seen := make(map[string]struct{}, len(names))
	out := make([]string, 0, len(names))
	for _, n := range names {
		if _, dup := seen[n]; dup {
			continue
		}
		if err := ValidateNode(n); err != nil {
			return nil, err
		}
		seen[n] = struct{}{}
		out = append(out, n)
	}
	return out, nil
}
