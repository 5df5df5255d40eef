package main

import (
	"bytes"
	"strings"
	"testing"
)

// A stream of go test -json as the go command prints it: a package that
// passes with a skip, one with a failed subtest, one killed by -timeout
// while a test runs.
const goStream = `{"Action":"start","Package":"m/a"}
{"Action":"run","Package":"m/a","Test":"TestOK"}
{"Action":"output","Package":"m/a","Test":"TestOK","Output":"=== RUN   TestOK\n"}
{"Action":"output","Package":"m/a","Test":"TestOK","Output":"    a_test.go:9: chatter\n"}
{"Action":"pass","Package":"m/a","Test":"TestOK"}
{"Action":"run","Package":"m/a","Test":"TestNoCBC"}
{"Action":"output","Package":"m/a","Test":"TestNoCBC","Output":"=== RUN   TestNoCBC\n"}
{"Action":"output","Package":"m/a","Test":"TestNoCBC","Output":"    a_test.go:12: cbc not found\n"}
{"Action":"output","Package":"m/a","Test":"TestNoCBC","Output":"--- SKIP: TestNoCBC (0.00s)\n"}
{"Action":"skip","Package":"m/a","Test":"TestNoCBC"}
{"Action":"output","Package":"m/a","Output":"PASS\n"}
{"Action":"output","Package":"m/a","Output":"ok  \tm/a\t0.1s\n"}
{"Action":"pass","Package":"m/a"}
{"Action":"run","Package":"m/b","Test":"TestP"}
{"Action":"run","Package":"m/b","Test":"TestP/sub"}
{"Action":"output","Package":"m/b","Test":"TestP/sub","Output":"    b_test.go:3: the sub broke\n"}
{"Action":"fail","Package":"m/b","Test":"TestP/sub"}
{"Action":"fail","Package":"m/b","Test":"TestP"}
{"Action":"output","Package":"m/b","Output":"FAIL\n"}
{"Action":"output","Package":"m/b","Output":"FAIL\tm/b\t0.2s\n"}
{"Action":"fail","Package":"m/b"}
{"Action":"run","Package":"m/c","Test":"TestHang"}
{"Action":"output","Package":"m/c","Test":"TestHang","Output":"    c_test.go:5: waiting\n"}
{"Action":"output","Package":"m/c","Output":"panic: test timed out after 1s\n"}
{"Action":"fail","Package":"m/c"}
{"Action":"output","Package":"m/d","Output":"?   \tm/d\t[no test files]\n"}
{"Action":"skip","Package":"m/d"}
`

const unittestOut = `test_a (test_x.T.test_a) ... ok
test_b (test_x.T.test_b) ... skipped 'no torch here'
test_c (test_x.T.test_c)
The docstring. ... worker says hi
ok
test_d (test_x.T.test_d) ... FAIL

----------------------------------------------------------------------
Ran 4 tests in 0.01s

FAILED (failures=1, skipped=1)
`

func TestSummary(t *testing.T) {
	var s Summary
	s.module = "m"
	var out, pass bytes.Buffer
	if err := s.ReadGo(strings.NewReader(goStream), &out); err != nil {
		t.Fatal(err)
	}
	if err := s.ReadUnittest(strings.NewReader(unittestOut), &pass); err != nil {
		t.Fatal(err)
	}
	if pass.String() != unittestOut {
		t.Errorf("unittest output not passed on whole:\n%s", pass.String())
	}
	got := out.String()
	for _, want := range []string{"ok  \tm/a\t0.1s\n", "the sub broke\n", "FAIL\tm/b\t0.2s\n", "c_test.go:5: waiting\n", "panic: test timed out", "?   \tm/d\t[no test files]\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "chatter") || strings.Contains(got, "cbc not found") {
		t.Errorf("output of passed or skipped tests printed:\n%s", got)
	}
	var table bytes.Buffer
	s.Print(&table)
	for _, want := range []string{
		"  a                      1      0      1\n",
		"  b                      0      2      0\n",
		"  c                      0      1      0\n",
		"  python (unittest)      2      1      1\n",
		"  total                  3      4      2\n",
		"skipped: 2\n",
		"  a TestNoCBC: a_test.go:12: cbc not found\n",
		"  python (unittest) test_x.T.test_b: no torch here\n",
	} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("the table lacks %q:\n%s", want, table.String())
		}
	}
	if strings.Contains(table.String(), " d ") {
		t.Errorf("a package without tests is in the table:\n%s", table.String())
	}
}

func TestAddJSON(t *testing.T) {
	if got, want := addJSON("go test -race -timeout 60m ./..."), "go test -json -race -timeout 60m ./..."; got != want {
		t.Fatalf("addJSON: %q, want %q", got, want)
	}
}
