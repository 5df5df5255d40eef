package trainertest

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/trainer/wire"
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
	PID                  int    // the worker's process
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
		case "pid":
			s.PID = n
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

// ParseUnix reads "seconds.fraction" exactly (wire.ParseUnix).
func ParseUnix(s string) (time.Time, error) { return wire.ParseUnix(s) }

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
func HaveTorch() error { return HavePythonTorch("/usr/bin/python3") }

// HavePythonTorch reports why torch.distributed does not import with the
// interpreter python, or nil when it does.
func HavePythonTorch(python string) error {
	if out, err := exec.Command(python, "-c", "import torch.distributed").CombinedOutput(); err != nil {
		hint := ""
		if python == "/usr/bin/python3" {
			hint = " (apt-get install python3-torch)"
		}
		return fmt.Errorf("needs torch for %s%s: %w %s", python, hint, err, strings.TrimSpace(string(out)))
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

// Phase is a stretch of a scenario on a fixed set of nodes: from when
// its change was complete (At) to when the next one began (End; zero:
// until now).
type Phase struct {
	At, End time.Time
	Nodes   []string
}

// CheckSteps checks the progress log of a Trainer on bftrainer's elastic
// runtime (contrib/trainer/train.py): every step from 1 to the last was
// completed once (the lines of a step agree on its world size and its
// samples), the samples add up to Σ batch·world over the steps, the end
// line is at the last step with that sum, and each phase ran at its size
// on its nodes. It returns the last step and the samples trained.
func CheckSteps(tb testing.TB, all []Step, batch int, phases []Phase) (last int, samples float64) {
	tb.Helper()
	world, got := map[int]int{}, map[int]float64{}
	var done []Step
	for _, s := range all {
		if s.Done {
			done = append(done, s)
			continue
		}
		if w, ok := world[s.Step]; ok && (w != s.World || got[s.Step] != s.Samples) {
			tb.Errorf("step %d logged at world %d (%v samples) and at world %d (%v): trained twice", s.Step, w, got[s.Step], s.World, s.Samples)
		}
		world[s.Step], got[s.Step] = s.World, s.Samples
		last = max(last, s.Step)
	}
	for step := 1; step <= last; step++ {
		w, ok := world[step]
		if !ok {
			tb.Errorf("step %d was never completed", step)
			continue
		}
		samples += float64(batch * w)
		if got[step] != samples {
			tb.Errorf("step %d: %v samples, want %v", step, got[step], samples)
		}
	}
	if len(done) == 0 || done[0].Step != last || done[0].Samples != samples {
		tb.Errorf("end lines %+v, want step %d with %v samples", done, last, samples)
	}
	for _, ph := range phases {
		end := ph.End
		if end.IsZero() {
			end = time.Now()
		}
		for _, s := range all {
			if !s.Done && s.At.After(ph.At) && s.At.Before(end) && (s.World != len(ph.Nodes) || !slices.Contains(ph.Nodes, s.Node)) {
				tb.Errorf("a step at world %d on %s while the Trainer ran on %v: %+v", s.World, s.Node, ph.Nodes, s)
			}
		}
	}
	tb.Logf("%d steps, %v samples, %d phases checked", last, samples, len(phases))
	return last, samples
}
