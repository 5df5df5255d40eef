package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// Summary is what the test commands found, package by package, in the
// order the packages ended.
type Summary struct {
	Packages []*Package
	Skips    []Skip
	module   string // the module's path, left out of package names
}

// Package is one package's (or one unittest run's) counts.
type Package struct {
	Name             string
	Pass, Fail, Skip int
	Note             string // why the counts are not the whole story ("build failed")
}

// Skip is one skipped test and the reason it gave.
type Skip struct {
	Package, Test, Reason string
}

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action      string
	Package     string
	ImportPath  string // build-output, build-fail
	Test        string
	Output      string
	FailedBuild string
}

// goPackage is a package's output held until it ends: go test prints a
// failed test's output whole, and a passing package's summary line only.
type goPackage struct {
	p      *Package
	tests  map[string][]string // output of tests not ended yet
	order  []string            // tests in the order they started
	failed []string            // output of the tests that failed
	out    []string            // the package's own lines ("ok …", "FAIL", a panic)
}

// ReadGo reads `go test -json` and writes to out what go test without
// -json would have printed, counting as it goes.
func (s *Summary) ReadGo(r io.Reader, out io.Writer) error {
	s.readModule()
	pkgs := map[string]*goPackage{}
	get := func(name string) *goPackage {
		g := pkgs[name]
		if g == nil {
			g = &goPackage{p: &Package{Name: s.short(name)}, tests: map[string][]string{}}
			pkgs[name] = g
		}
		return g
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			fmt.Fprintf(out, "%s\n", line) // not an event: the go command's own words
			continue
		}
		switch {
		case e.Action == "build-output":
			fmt.Fprint(out, e.Output)
		case e.Action == "build-fail":
			get(e.ImportPath).p.Note = "build failed"
		case e.Package == "":
			fmt.Fprint(out, e.Output)
		case e.Test != "":
			s.goTest(get(e.Package), e)
		default:
			g := get(e.Package)
			switch e.Action {
			case "output":
				g.out = append(g.out, e.Output)
			case "pass", "fail", "skip":
				s.endGo(g, e, out)
				delete(pkgs, e.Package)
			}
		}
	}
	return sc.Err()
}

func (s *Summary) goTest(g *goPackage, e event) {
	switch e.Action {
	case "run":
		if _, ok := g.tests[e.Test]; !ok {
			g.order = append(g.order, e.Test)
		}
		g.tests[e.Test] = append(g.tests[e.Test], "")[:0]
	case "output":
		g.tests[e.Test] = append(g.tests[e.Test], e.Output)
	case "pass":
		g.p.Pass++
		delete(g.tests, e.Test)
	case "skip":
		g.p.Skip++
		s.Skips = append(s.Skips, Skip{Package: g.p.Name, Test: e.Test, Reason: skipReason(g.tests[e.Test])})
		delete(g.tests, e.Test)
	case "fail":
		g.p.Fail++
		g.failed = append(g.failed, g.tests[e.Test]...)
		delete(g.tests, e.Test)
	}
}

// endGo prints a package that ended: its summary line when it passed;
// when it failed, the output of its failed tests, of the tests that never
// ended (a timeout, a panic: counted as failed), then its own.
func (s *Summary) endGo(g *goPackage, e event, out io.Writer) {
	if e.Action == "fail" {
		for _, t := range g.order {
			if lines, ok := g.tests[t]; ok {
				g.p.Fail++
				g.failed = append(g.failed, lines...)
			}
		}
		if e.FailedBuild != "" && g.p.Note == "" {
			g.p.Note = "build failed"
		}
		if g.p.Fail == 0 && g.p.Note == "" {
			g.p.Note = "failed outside any test"
		}
		for _, l := range append(g.failed, g.out...) {
			fmt.Fprint(out, l)
		}
	} else {
		for _, l := range g.out {
			if strings.HasPrefix(l, "ok ") || strings.HasPrefix(l, "? ") {
				fmt.Fprint(out, l)
			}
		}
	}
	if g.p.Pass+g.p.Fail+g.p.Skip > 0 || g.p.Note != "" {
		s.Packages = append(s.Packages, g.p)
	}
}

// skipReason is what a skipped test said: its lines but the framework's.
func skipReason(lines []string) string {
	var r []string
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- SKIP") {
			continue
		}
		r = append(r, t)
	}
	if len(r) == 0 {
		return "(no reason given)"
	}
	return strings.Join(r, " ")
}

// The lines of `python -m unittest -v` that matter here: a test's name
// (with its result at the end of the line, or on a later line when the
// test printed something or has a docstring), and the closing summary.
var (
	pyName    = regexp.MustCompile(`^(\w+) \(([\w.]+)\)`)
	pyResult  = regexp.MustCompile(`(?:^|\.\.\. )(ok|FAIL|ERROR|expected failure|unexpected success|skipped (?:'(.*)'|"(.*)"))$`)
	pyRan     = regexp.MustCompile(`^Ran (\d+) tests? in `)
	pyOutcome = regexp.MustCompile(`^(OK|FAILED)(?: \((.*)\))?$`)
)

// ReadUnittest reads the verbose output of `python -m unittest`, passing
// it on to out, and counts from its closing summary ("Ran N tests",
// "FAILED (failures=1, skipped=2)"); the skip reasons come from its
// per-test lines.
func (s *Summary) ReadUnittest(r io.Reader, out io.Writer) error {
	p := &Package{Name: "python (unittest)"}
	s.Packages = append(s.Packages, p)
	var current string
	ran, skips := -1, 0
	counts := map[string]int{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(out, line)
		if m := pyName.FindStringSubmatch(line); m != nil {
			current = m[2]
		}
		if m := pyResult.FindStringSubmatch(line); m != nil && current != "" && strings.HasPrefix(m[1], "skipped") {
			skips++
			s.Skips = append(s.Skips, Skip{Package: p.Name, Test: current, Reason: m[2] + m[3]})
			current = ""
		}
		if m := pyRan.FindStringSubmatch(line); m != nil {
			ran, _ = strconv.Atoi(m[1])
		}
		if m := pyOutcome.FindStringSubmatch(line); m != nil && ran >= 0 {
			for _, kv := range strings.Split(m[2], ", ") {
				k, v, ok := strings.Cut(kv, "=")
				if n, err := strconv.Atoi(v); ok && err == nil {
					counts[k] = n
				}
			}
		}
	}
	if ran < 0 {
		p.Note = "no closing summary: the run did not finish"
		p.Fail = 1
		return sc.Err()
	}
	p.Fail = counts["failures"] + counts["errors"] + counts["unexpected successes"]
	p.Skip = counts["skipped"]
	p.Pass = ran - p.Fail - p.Skip
	if left := p.Skip - skips; left > 0 {
		s.Skips = append(s.Skips, Skip{Package: p.Name, Test: fmt.Sprintf("%d more", left), Reason: "(their reason was not printed where it could be read)"})
	}
	return sc.Err()
}

// Print writes the counts and the skips.
func (s *Summary) Print(w io.Writer) {
	width := len("total")
	for _, p := range s.Packages {
		width = max(width, len(p.Name))
	}
	var t Package
	fmt.Fprintf(w, "\ntests (subtests included):\n  %-*s %6s %6s %6s\n", width, "package", "pass", "fail", "skip")
	for _, p := range s.Packages {
		note := ""
		if p.Note != "" {
			note = "  " + p.Note
		}
		fmt.Fprintf(w, "  %-*s %6d %6d %6d%s\n", width, p.Name, p.Pass, p.Fail, p.Skip, note)
		t.Pass, t.Fail, t.Skip = t.Pass+p.Pass, t.Fail+p.Fail, t.Skip+p.Skip
	}
	fmt.Fprintf(w, "  %-*s %6d %6d %6d\n", width, "total", t.Pass, t.Fail, t.Skip)
	fmt.Fprintf(w, "skipped: %d\n", len(s.Skips))
	for _, k := range s.Skips {
		fmt.Fprintf(w, "  %s %s: %s\n", k.Package, k.Test, k.Reason)
	}
}

// readModule reads the module's path from go.mod in this directory.
func (s *Summary) readModule() {
	b, err := os.ReadFile("go.mod")
	if err != nil {
		return
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "module" {
			s.module = f[1]
		}
	}
}

// short is a package's path without the module's.
func (s *Summary) short(pkg string) string {
	if s.module == "" {
		return pkg
	}
	if pkg == s.module {
		return "."
	}
	return strings.TrimPrefix(pkg, s.module+"/")
}
