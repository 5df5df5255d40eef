package trainertest

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Step is one line of contrib/trainer/train.py's progress log, one per
// rank per training step:
//
//	<unix time> node= pid= rank= world= restart= step= samples= loss=
//
// and a last "… done" line.
type Step struct {
	At                   time.Time
	Node                 string // NODE_TAG: the node the rank runs on
	Rank, World, Restart int
	Step                 int
	Samples              float64 // samples done by the whole job, restored from the checkpoint
	Done                 bool
}

// ParseStep reads one progress line; ok is false for a line cut short
// (train.py writes each line with one write(2), but a kill or a full disk
// may still cut one).
func ParseStep(line string) (s Step, ok bool) {
	fs := strings.Fields(line)
	if len(fs) < 2 {
		return s, false
	}
	at, err := ParseUnix(fs[0])
	if err != nil {
		return s, false
	}
	s.At = at
	for _, f := range fs[1:] {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			s.Done = s.Done || f == "done"
			continue
		}
		n, _ := strconv.Atoi(v)
		switch k {
		case "node":
			s.Node = v
		case "rank":
			s.Rank = n
		case "world":
			s.World = n
		case "restart":
			s.Restart = n
		case "step":
			s.Step = n
		case "samples":
			s.Samples, _ = strconv.ParseFloat(v, 64)
		}
	}
	return s, s.World >= 1
}

// ReadSteps parses a progress log; a missing file has no steps yet.
func ReadSteps(path string) ([]Step, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Step
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if s, ok := ParseStep(sc.Text()); ok {
			out = append(out, s)
		}
	}
	return out, sc.Err()
}

// ParseUnix reads "seconds.fraction" (date +%s.%N, Python's time.time())
// exactly: a float64 would round the nanoseconds.
func ParseUnix(s string) (time.Time, error) {
	sec, frac, _ := strings.Cut(s, ".")
	a, err := strconv.ParseInt(sec, 10, 64)
	if err != nil {
		return time.Time{}, err
	}
	var ns int64
	if frac != "" {
		frac = (frac + "000000000")[:9]
		if ns, err = strconv.ParseInt(frac, 10, 64); err != nil {
			return time.Time{}, err
		}
	}
	return time.Unix(a, ns), nil
}

// RepoRoot is the module's top directory (contrib/ and cmd/ live there).
func RepoRoot(tb testing.TB) string {
	tb.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		tb.Fatal("no caller information")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// HaveTorch reports why Debian's torch does not import with
// /usr/bin/python3, or nil when it does.
func HaveTorch() error {
	if out, err := exec.Command("/usr/bin/python3", "-c", "import torch.distributed").CombinedOutput(); err != nil {
		return fmt.Errorf("needs torch for /usr/bin/python3 (apt-get install python3-torch): %w %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// NeedTorch skips unless torch imports.
func NeedTorch(tb testing.TB) {
	tb.Helper()
	if err := HaveTorch(); err != nil {
		tb.Skip(err)
	}
}
