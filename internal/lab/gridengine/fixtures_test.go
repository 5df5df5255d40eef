package gridengine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/internal/lab"
	"github.com/bftrainer/bftrainer/trainer/trainertest"
)

// fixtureDir is where the node-state fixtures live, for the scheduler
// parsers in hooks.
func fixtureDir(t *testing.T) string {
	return filepath.Join(trainertest.RepoRoot(t), "hooks", "testdata", "gridengine")
}

// scenario is a state of the cell whose qstat and qhost outputs are
// fixtures: how to reach it, what more to capture, how to leave it, and
// what qstat -f -xml must say in it (host 1 and host 2 are the cell's
// hosts).
type scenario struct {
	name  string
	setup func(ctx context.Context, c *Cell) (extra map[string][]string, cleanup func() error, err error)
	check func(h1, h2 Instance, pending []XMLJob) error
}

// captures are every scenario's fixtures: file suffix → client command.
var captures = map[string][]string{
	"qstat-f.txt": {"qstat", "-f", "-u", "*"},
	"qstat-f.xml": {"qstat", "-f", "-u", "*", "-xml"},
	"qhost-q.txt": {"qhost", "-q"},
	"qhost-q.xml": {"qhost", "-q", "-xml"},
}

func noop() error { return nil }

var scenarios = []scenario{
	{
		name:  "idle",
		setup: func(context.Context, *Cell) (map[string][]string, func() error, error) { return nil, noop, nil },
		check: func(h1, h2 Instance, pending []XMLJob) error {
			if !h1.Idle() || !h2.Idle() || len(pending) > 0 {
				return fmt.Errorf("want both idle, nothing pending")
			}
			return nil
		},
	},
	{
		// A 2-host parallel job holds both hosts: qstat -g t names its
		// MASTER and SLAVE tasks per host.
		name: "running",
		setup: func(ctx context.Context, c *Cell) (map[string][]string, func() error, error) {
			j, err := c.Submit(ctx, JobSpec{Name: "pe", Hosts: c.Hosts[:2], Held: true})
			if err != nil {
				return nil, nil, err
			}
			if _, err := j.WaitChecked(ctx, time.Minute); err != nil {
				return nil, nil, err
			}
			return map[string][]string{"qstat-gt.txt": {"qstat", "-g", "t", "-u", "*"}, "qstat-gt.xml": {"qstat", "-g", "t", "-u", "*", "-xml"}},
				func() error { return endJob(ctx, j) }, nil
		},
		check: func(h1, h2 Instance, pending []XMLJob) error {
			if h1.Used != 1 || h2.Used != 1 || h1.State != "" || h2.State != "" {
				return fmt.Errorf("want both used, no state")
			}
			return nil
		},
	},
	{
		// A serial job on host 1 (no h_rt: the scheduler assumes
		// default_duration) and a pending 2-host job asking for a
		// reservation: the scheduler reserves both hosts from the first
		// job's assumed end. Host 2 still looks exactly idle in qstat; the
		// reservation shows only in the schedule file.
		name: "reserved",
		setup: func(ctx context.Context, c *Cell) (map[string][]string, func() error, error) {
			a, err := c.Submit(ctx, JobSpec{Name: "serial", Hosts: c.Hosts[:1], Held: true})
			if err != nil {
				return nil, nil, err
			}
			if _, err := a.WaitChecked(ctx, time.Minute); err != nil {
				a.Delete(ctx)
				return nil, nil, err
			}
			b, err := c.Submit(ctx, JobSpec{Name: "wide", Slots: 2, Reserve: true, Runtime: 10 * time.Minute})
			cleanup := func() error { return errors.Join(b.Delete(ctx), endJob(ctx, a)) }
			if err != nil {
				endJob(ctx, a)
				return nil, nil, err
			}
			if _, err := waitReservation(ctx, c, b.ID, time.Minute); err != nil {
				cleanup()
				return nil, nil, err
			}
			return map[string][]string{"qstat-j.txt": {"qstat", "-j", b.ID}, "schedule.txt": nil}, cleanup, nil
		},
		check: func(h1, h2 Instance, pending []XMLJob) error {
			if h1.Used != 1 || !h2.Idle() || len(pending) != 1 || pending[0].State != "qw" {
				return fmt.Errorf("want host 1 used, host 2 idle (reserved, not shown), one job waiting")
			}
			return nil
		},
	},
	{
		// A prolog exited 1 on host 1: its queue instance is in error, the
		// job waits again.
		name: "error",
		setup: func(ctx context.Context, c *Cell) (map[string][]string, func() error, error) {
			j, err := c.Submit(ctx, JobSpec{Name: "failing", Hosts: c.Hosts[:1], Env: []string{"BFT_PROLOG_EXIT=1"}})
			if err != nil {
				return nil, nil, err
			}
			cleanup := func() error {
				return errors.Join(j.Delete(ctx), ignore(c.Output(ctx, "qmod", "-c", c.Queue+"@"+c.Hosts[0])))
			}
			if err := waitState(ctx, c, c.Hosts[0], "E"); err != nil {
				cleanup()
				return nil, nil, err
			}
			return map[string][]string{"qstat-f-explain.txt": {"qstat", "-f", "-u", "*", "-explain", "E"}}, cleanup, nil
		},
		check: func(h1, h2 Instance, pending []XMLJob) error {
			if h1.State != "E" || !h2.Idle() || len(pending) != 1 {
				return fmt.Errorf("want host 1 in error, host 2 idle, the job waiting again")
			}
			return nil
		},
	},
	{
		name: "disabled",
		setup: func(ctx context.Context, c *Cell) (map[string][]string, func() error, error) {
			q := c.Queue + "@" + c.Hosts[0]
			if _, err := c.Output(ctx, "qmod", "-d", q); err != nil {
				return nil, nil, err
			}
			return nil, func() error { return ignore(c.Output(ctx, "qmod", "-e", q)) }, nil
		},
		check: func(h1, h2 Instance, pending []XMLJob) error {
			if h1.State != "d" || !h2.Idle() {
				return fmt.Errorf("want host 1 disabled, host 2 idle")
			}
			return nil
		},
	},
	{
		// Host 2's execd was shut down: unknown, and qhost shows no load.
		name: "unknown",
		setup: func(ctx context.Context, c *Cell) (map[string][]string, func() error, error) {
			if err := c.StopExecd(ctx, c.Hosts[1], false); err != nil {
				return nil, nil, err
			}
			cleanup := func() error { return c.StartExecd(ctx, c.Hosts[1]) }
			if err := waitState(ctx, c, c.Hosts[1], "u"); err != nil {
				cleanup()
				return nil, nil, err
			}
			return nil, cleanup, nil
		},
		check: func(h1, h2 Instance, pending []XMLJob) error {
			if !h1.Idle() || !strings.Contains(h2.State, "u") {
				return fmt.Errorf("want host 1 idle, host 2 unknown")
			}
			return nil
		},
	},
}

func ignore(string, error) error { return nil }

// endJob releases a held job and waits until it has ended.
func endJob(ctx context.Context, j *Job) error {
	if err := j.Release(); err != nil {
		return err
	}
	_, err := j.WaitEnded(ctx, time.Minute)
	return err
}

// waitState waits until a host's queue instance shows a state letter.
func waitState(ctx context.Context, c *Cell, host, letter string) error {
	return lab.Poll(ctx, time.Minute, func() (bool, error) {
		qs, err := c.Instances(ctx)
		for _, q := range qs {
			if q.Host == host {
				return strings.Contains(q.State, letter), err
			}
		}
		return false, err
	})
}

// lastInterval returns the schedule file's last complete scheduling
// interval: the lines after the last "::::::::" (sge_schedule(5)).
func lastInterval(c *Cell) (string, error) {
	b, err := os.ReadFile(c.ScheduleFile())
	if err != nil {
		return "", err
	}
	blocks := strings.Split(strings.TrimRight(string(b), "\n"), "::::::::\n")
	return "::::::::\n" + blocks[len(blocks)-1] + "\n", nil
}

// waitReservation waits until the scheduler's last interval reserves
// resources for the job, and returns that interval.
func waitReservation(ctx context.Context, c *Cell, job string, timeout time.Duration) (string, error) {
	var last string
	err := lab.Poll(ctx, timeout, func() (bool, error) {
		var err error
		last, err = lastInterval(c)
		return err == nil && strings.Contains(last, "\n"+job+":1:RESERVING:"), nil
	})
	if err != nil {
		return last, fmt.Errorf("no reservation for job %s in %s (last interval %q): %w", job, c.ScheduleFile(), last, err)
	}
	return last, nil
}

func checkScenario(s scenario, hosts []string, xmlDoc []byte) error {
	qs, pending, err := ParseQstatXML(xmlDoc)
	if err != nil {
		return err
	}
	byHost := map[string]Instance{}
	for _, q := range qs {
		byHost[q.Host] = q
	}
	h1, ok1 := byHost[hosts[0]]
	h2, ok2 := byHost[hosts[1]]
	if !ok1 || !ok2 {
		return fmt.Errorf("%s: qstat -f lists %v, want %v", s.name, qs, hosts)
	}
	if err := s.check(h1, h2, pending); err != nil {
		return fmt.Errorf("%s: %w; got %+v, %+v, pending %+v", s.name, err, h1, h2, pending)
	}
	return nil
}

// TestNodeStates brings the cell through each scenario, checks what
// qstat -f -xml says of its hosts, and captures qstat's and qhost's
// outputs (with -update, into hooks/testdata/gridengine, as the
// scheduler parsers' fixtures).
func TestNodeStates(t *testing.T) {
	c, _ := cell(t)
	ctx := context.Background()
	out := t.TempDir()
	if *updateFlag {
		out = fixtureDir(t)
		if err := os.MkdirAll(out, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range scenarios {
		t.Run(s.name, func(t *testing.T) {
			if err := c.WaitIdle(ctx, time.Minute); err != nil {
				t.Fatal(err)
			}
			extra, cleanup, err := s.setup(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := cleanup(); err != nil {
					t.Error(err)
				}
				if err := c.WaitIdle(ctx, time.Minute); err != nil {
					t.Error(err)
				}
			}()
			all := map[string][]string{}
			for k, v := range captures {
				all[k] = v
			}
			for k, v := range extra {
				all[k] = v
			}
			got := map[string]string{}
			for name, cmd := range all {
				var text string
				if cmd == nil { // the schedule file
					text, err = lastInterval(c)
				} else {
					text, err = c.Output(ctx, cmd[0], cmd[1:]...)
				}
				if err != nil {
					t.Fatal(err)
				}
				got[name] = text
			}
			if err := checkScenario(s, c.Hosts, []byte(got["qstat-f.xml"])); err != nil {
				t.Fatal(err)
			}
			for name, text := range got {
				for _, h := range c.Hosts {
					if !strings.Contains(text, h) && name != "schedule.txt" && name != "qstat-j.txt" {
						t.Errorf("%s does not name %s:\n%s", name, h, text)
					}
				}
				if err := os.WriteFile(filepath.Join(out, s.name+"."+name), []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestFixtures checks the committed fixtures against the scenarios (no
// root, no cell): they are real outputs of the states they are named
// after.
func TestFixtures(t *testing.T) {
	dir := fixtureDir(t)
	for _, s := range scenarios {
		b, err := os.ReadFile(filepath.Join(dir, s.name+".qstat-f.xml"))
		if err != nil {
			t.Fatal(err)
		}
		if err := checkScenario(s, []string{"gel1", "gel2"}, b); err != nil {
			t.Error(err)
		}
	}
}
