package slurm

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/accounting"
	"github.com/bftrainer/bftrainer/trainer/trainertest"
	"golang.org/x/sys/unix"
)

// harvestT0 is the hand-made timelines' origin; sec is a second after it.
var harvestT0 = time.Unix(1_800_000_000, 0)

func sec(s float64) time.Time { return harvestT0.Add(time.Duration(s * float64(time.Second))) }

// near reports a within a microsecond-hour of b (the split is exact in
// nanoseconds; the hours are floats).
func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

// TestSplitHarvest: a timeline whose split is known by hand. Two nodes
// over [0, 100] s; n1 runs job A over [20, 50) (its first line at 22), n2
// runs job B over the whole span (never idle; no first line: its hold
// counts from sacct's Start). Samples every 10 s but none at 70 and 80
// (a 30 s gap: 60 stands for [55, 75), 90 for [75, 95)).
func TestSplitHarvest(t *testing.T) {
	jobs := []accounting.Job{
		{ID: "A", Start: sec(20), End: sec(50), Nodes: []string{"n1"}},
		{ID: "B", Start: sec(0), End: sec(100), Nodes: []string{"n2"}},
	}
	first := map[string]time.Time{"A": sec(22)}
	ss := []harvestSample{
		{at: sec(0), free: []string{"n1"}, demand: true},                         // [0, 5): reconcile 5
		{at: sec(10), held: []string{"n1"}, demand: true},                        // [5, 15): startup 10, held 10
		{at: sec(20), procs: []string{"n1"}},                                     // [15, 25): used 5 (idle to 20); at 20 < first line 22: not beside
		{at: sec(30), procs: []string{"n1"}},                                     // [25, 35): busy; at 30 in [22, 50): beside 10
		{at: sec(40)},                                                            // [35, 45): busy
		{at: sec(50)},                                                            // [45, 55): completing 5 (idle from 50)
		{at: sec(60), free: []string{"n1"}, held: []string{"n2"}},                // [55, 75): no_demand 20; n2 held 20
		{at: sec(90), free: []string{"n1"}, procs: []string{"n2"}, demand: true}, // [75, 95): reconcile 20; n2 beside 20 (B from its Start)
		{at: sec(100), held: []string{"n1"}, procs: []string{"n1"}},              // [95, 100]: used 5, held 5
	}
	// Nemeses' windows: [60, 70) (and [65, 68) within it, counted once)
	// takes 10 s of n1's no_demand; [96, 98) is in its use; [40, 45) in
	// job A's run, not idle.
	faults := []interval{{sec(60), sec(70)}, {sec(65), sec(68)}, {sec(96), sec(98)}, {sec(40), sec(45)}}
	h, err := splitHarvest([]string{"n1", "n2"}, jobs, first, ss, faults, sec(0), sec(100))
	if err != nil {
		t.Fatal(err)
	}
	hs := func(s float64) float64 { return s / 3600 }
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"idle", h.IdleH, hs(70)}, // n1: [0, 20) and [50, 100)
		{"used", h.UsedH, hs(10)},
		{"startup", h.StartupH, hs(10)},
		{"completing", h.CompletingH, hs(5)},
		{"reconcile", h.ReconcileH, hs(25)},
		{"no_demand", h.NoDemandH, hs(10)},
		{"fault", h.FaultH, hs(10)},
		{"fault_idle", h.FaultIdleH, hs(12)},
		{"fault_used", h.FaultUsedH, hs(2)},
		{"used_outside_faults", h.UsedOutsideFaults(), 8.0 / 58},
		{"held", h.HeldH, hs(35)},
		{"beside_s", h.BesideS, 30},
	} {
		if !near(c.got, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
	if h.Samples != 9 || h.MaxGap != 30*time.Second {
		t.Errorf("samples %d, longest gap %s; want 9, 30s", h.Samples, h.MaxGap)
	}
	if !near(h.StagesH(), h.IdleH) {
		t.Errorf("the stages sum to %v, idle %v", h.StagesH(), h.IdleH)
	}
	r := PilotResult{Harvest: h}
	want := "pilot harvest idle_node_h=0.019 used_node_h=0.003 held_node_h=0.010 fault_node_h=0.003 startup_node_h=0.003 completing_node_h=0.001 " +
		"reconcile_node_h=0.007 no_demand_node_h=0.003 beside_node_s=30.0 samples=9 max_gap_s=30.0 fault_idle_node_h=0.003 used_outside_faults=0.14"
	if got := r.HarvestLine(); got != want {
		t.Errorf("line:\n got %s\nwant %s", got, want)
	}
}

// TestSplitHarvestEdges: samples before and after the span stand for its
// ends; a node busy all the span has no idle time whatever the samples
// say; a span with no sample, an empty span and samples out of order are
// errors.
func TestSplitHarvestEdges(t *testing.T) {
	jobs := []accounting.Job{{ID: "A", Start: sec(-5), End: sec(200), Nodes: []string{"n2"}}}
	ss := []harvestSample{
		{at: sec(-30), procs: []string{"n1", "n2"}}, // [-∞, 15) → [10, 15): used 5 on n1
		{at: sec(60), held: []string{"n1"}},         // [15, ∞) → [15, 20]: startup 5
	}
	h, err := splitHarvest([]string{"n1", "n2"}, jobs, nil, ss, nil, sec(10), sec(20))
	if err != nil {
		t.Fatal(err)
	}
	if !near(h.IdleH, 10.0/3600) || !near(h.UsedH, 5.0/3600) || !near(h.StartupH, 5.0/3600) || !near(h.HeldH, 5.0/3600) {
		t.Errorf("got %+v; want idle 10 s (n1 alone), used 5 s, startup 5 s, held 5 s", h)
	}
	// n2's process at -30 is before its job's hold (from -5): no beside.
	if h.BesideS != 0 {
		t.Errorf("beside %v s, want 0 (the sample's instant is before the job's hold)", h.BesideS)
	}
	if _, err := splitHarvest([]string{"n1"}, nil, nil, nil, nil, sec(0), sec(10)); err == nil || !strings.Contains(err.Error(), "no sample") {
		t.Errorf("no samples: err %v", err)
	}
	if _, err := splitHarvest([]string{"n1"}, nil, nil, ss, nil, sec(10), sec(10)); err == nil {
		t.Error("an empty span was split")
	}
	if _, err := splitHarvest([]string{"n1"}, nil, nil, []harvestSample{ss[1], ss[0]}, nil, sec(0), sec(10)); err == nil {
		t.Error("samples out of order were split")
	}
}

// TestSplitHarvestOracle: on random timelines (jobs overlapping or not,
// samples at irregular times with gaps, random states) the split agrees
// with a count made independently, 10 ms by 10 ms: every job bound and
// every midpoint between samples falls on the grid, so the count is
// exact. The stages tile the idle time.
func TestSplitHarvestOracle(t *testing.T) {
	nodes := []string{"n1", "n2", "n3"}
	const grid = 10 * time.Millisecond
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 27))
		from, to := sec(0), sec(float64(60+rng.IntN(60)))
		var jobs []accounting.Job
		first := map[string]time.Time{}
		for i := range rng.IntN(8) {
			a := sec(float64(rng.IntN(140) - 10))
			j := accounting.Job{ID: strconv.Itoa(i), Start: a, End: a.Add(time.Duration(1+rng.IntN(40)) * time.Second)}
			for _, n := range nodes {
				if rng.IntN(2) == 0 {
					j.Nodes = append(j.Nodes, n)
				}
			}
			if rng.IntN(2) == 0 {
				first[j.ID] = j.Start.Add(time.Duration(rng.IntN(150)) * grid)
			}
			jobs = append(jobs, j)
		}
		var ss []harvestSample
		at := sec(-2)
		for at.Before(to.Add(2 * time.Second)) {
			s := harvestSample{at: at, demand: rng.IntN(2) == 0}
			for _, n := range nodes {
				switch rng.IntN(4) {
				case 0:
					s.held = append(s.held, n)
				case 1:
					s.free = append(s.free, n)
				}
				if rng.IntN(3) == 0 {
					s.procs = append(s.procs, n)
				}
			}
			ss = append(ss, s)
			step := time.Duration(40+rng.IntN(20)) * 2 * grid // about a second, in whole 20 ms
			if rng.IntN(10) == 0 {
				step *= time.Duration(2 + rng.IntN(20)) // a gap
			}
			at = at.Add(step)
		}
		// Nemeses' windows, overlapping at times, some past the span.
		var faults []interval
		for range rng.IntN(4) {
			a := sec(float64(rng.IntN(140) - 10))
			faults = append(faults, interval{a, a.Add(time.Duration(rng.IntN(3000)) * grid)})
		}
		h, err := splitHarvest(nodes, jobs, first, ss, faults, from, to)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		// The count: each 10 ms cell by its middle.
		var idle, held, beside, faultIdle, faultUsed time.Duration
		var stages [nStages]time.Duration
		winIdle, winLost := make([]time.Duration, len(faults)), make([]time.Duration, len(faults))
		for c := from; c.Before(to); c = c.Add(grid) {
			m := c.Add(grid / 2)
			inFault := slices.ContainsFunc(faults, func(f interval) bool { return !m.Before(f.a) && m.Before(f.b) })
			inWindow := func(w int) bool { return !m.Before(faults[w].a) && m.Before(faults[w].b) }
			s := ss[0]
			for _, x := range ss {
				if x.at.Sub(m).Abs() < s.at.Sub(m).Abs() {
					s = x
				}
			}
			for _, n := range nodes {
				busy := false
				for _, j := range jobs {
					if !slices.Contains(j.Nodes, n) {
						continue
					}
					if !m.Before(j.Start) && m.Before(j.End) {
						busy = true
					}
					sure := j.Start
					if f, ok := first[j.ID]; ok {
						sure = f
					}
					in := func(x time.Time) bool { return !x.Before(sure) && x.Before(j.End) }
					if slices.Contains(s.procs, n) && in(m) && in(s.at) {
						beside += grid
					}
				}
				if slices.Contains(s.held, n) {
					held += grid
				}
				if !busy {
					idle += grid
					st := s.stage(n)
					for w := range faults {
						if inWindow(w) {
							winIdle[w] += grid
							if st != stageUsed {
								winLost[w] += grid
							}
						}
					}
					if inFault {
						faultIdle += grid
						if st == stageUsed {
							faultUsed += grid
						} else {
							st = stageFault
						}
					}
					stages[st] += grid
				}
			}
		}
		for _, c := range []struct {
			name      string
			got, want float64
		}{
			{"idle", h.IdleH, idle.Hours()}, {"used", h.UsedH, stages[stageUsed].Hours()}, {"startup", h.StartupH, stages[stageStartup].Hours()},
			{"completing", h.CompletingH, stages[stageCompleting].Hours()}, {"reconcile", h.ReconcileH, stages[stageReconcile].Hours()},
			{"no_demand", h.NoDemandH, stages[stageNoDemand].Hours()}, {"held", h.HeldH, held.Hours()}, {"beside_s", h.BesideS / 3600, beside.Hours()},
			{"fault", h.FaultH, stages[stageFault].Hours()}, {"fault_idle", h.FaultIdleH, faultIdle.Hours()}, {"fault_used", h.FaultUsedH, faultUsed.Hours()},
		} {
			if !near(c.got, c.want) {
				t.Errorf("seed %d: %s: split %.9f, count %.9f", seed, c.name, c.got, c.want)
			}
		}
		if !near(h.StagesH(), h.IdleH) {
			t.Errorf("seed %d: the stages sum to %v, idle %v", seed, h.StagesH(), h.IdleH)
		}
		if len(h.Windows) != len(faults) {
			t.Fatalf("seed %d: %d windows' harvests, %d windows", seed, len(h.Windows), len(faults))
		}
		for w, got := range h.Windows {
			if !near(got.IdleH, winIdle[w].Hours()) || !near(got.LostH, winLost[w].Hours()) {
				t.Errorf("seed %d: window %d: idle %.9f lost %.9f, count %.9f %.9f", seed, w, got.IdleH, got.LostH, winIdle[w].Hours(), winLost[w].Hours())
			}
		}
	}
}

// TestCgroupNodes: the sampler's process source on a real cgroup subtree
// laid out as the agent's (ROOT/TRAINER/NODE@NONCE): a node counts while a
// live process is in one of its launches' cgroups — not an empty launch,
// not a zombie's; a subtree not made yet says so (the run-token scan is
// then used).
func TestCgroupNodes(t *testing.T) {
	root := trainertest.TestCgroupRoot(t)
	if root == "" {
		t.Skip("no writable cgroup2 subtree here")
	}
	if _, ok, err := cgroupNodes(filepath.Join(root, "absent")); ok || err != nil {
		t.Errorf("a subtree not made: ok %v, err %v; want false, nil", ok, err)
	}
	if _, ok, _ := cgroupNodes(""); ok {
		t.Error("no subtree configured: ok")
	}
	leaf := func(tr, run string) string {
		d := filepath.Join(root, tr, run)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	a, _ := leaf("s1-tr", "n1@aaaa"), leaf("s1-tr", "n2@bbbb") // n2's launch has no process
	leaf("s1-other", "n3@cccc")
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	reaped := false
	defer func() {
		if !reaped {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()
	if err := os.WriteFile(filepath.Join(a, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
		t.Fatalf("move the process into its launch cgroup: %v", err)
	}
	got, ok, err := cgroupNodes(root)
	if err != nil || !ok || !slices.Equal(got, []string{"n1"}) {
		t.Fatalf("got %v (ok %v, err %v); want [n1]", got, ok, err)
	}
	// Killed and not reaped: a zombie, which holds nothing.
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := Poll(ctx, 10*time.Second, func() (bool, error) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
		if err != nil {
			return false, err
		}
		_, rest, _ := strings.Cut(string(b), ") ")
		return strings.HasPrefix(rest, "Z"), nil
	}); err != nil {
		t.Fatalf("the killed process did not become a zombie: %v", err)
	}
	if got, ok, err := cgroupNodes(root); err != nil || !ok || len(got) != 0 {
		t.Errorf("with only a zombie: got %v (ok %v, err %v); want none", got, ok, err)
	}
	cmd.Wait()
	reaped = true
}

// TestLostToRestart: a job lost to slurmctld's restart was submitted
// within restartSlack before it began or while slurmctld was down, and
// never ran its script; a job that ran, or came at another time, is not.
func TestLostToRestart(t *testing.T) {
	restarts := []interval{{sec(20), sec(23)}}
	for _, c := range []struct {
		submitted, first float64 // first < 0: no first line
		want             bool
	}{
		{19.7, -1, true},  // just before it went down (the CI pilot's job 9: 0.25 s)
		{18, -1, true},    // restartSlack before
		{21.5, -1, true},  // while it was down
		{23, -1, true},    // as it came back
		{17.9, -1, false}, // before the slack
		{23.1, -1, false}, // after it was back
		{19.7, 25, false}, // its script ran: whatever happened is the job's
		{40, -1, false},
	} {
		first := time.Time{}
		if c.first >= 0 {
			first = sec(c.first)
		}
		if got := lostToRestart(sec(c.submitted), first, restarts); got != c.want {
			t.Errorf("submitted at %v s, first line at %v s: lost %v, want %v", c.submitted, c.first, got, c.want)
		}
	}
	if lostToRestart(sec(19.7), time.Time{}, nil) {
		t.Error("lost to a restart in a pass without one")
	}
}

// TestDying: a live process is not dying; the same process killed and
// not yet reaped is (a zombie: its SIGKILL still pending, PF_EXITING
// set; either alone is enough), and so is one that is gone. A live
// process between the kill and its exit is too brief to catch here.
func TestDying(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if dying(pid) {
		t.Fatalf("a live sleep (pid %d) is dying", pid)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	// Waited for but not reaped (WNOWAIT): a zombie.
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
		t.Fatal(err)
	}
	if !dying(pid) {
		t.Fatalf("a killed, unreaped sleep (pid %d) is not dying", pid)
	}
	cmd.Wait()
	if !dying(pid) {
		t.Fatalf("a reaped process (pid %d) is not dying", pid)
	}
}
