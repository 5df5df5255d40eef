package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/store"
	"github.com/bftrainer/bftrainer/trainer/trainertest"
)

// TestTorchrunLearnsCurve: a real torchrun Trainer over the loopback sshd,
// submitted without a curve, is planned by what it measures. It starts on
// one node (nothing known), its progress reports (train.py, through the
// launcher's environment) teach the pool its one-node rate; a second node
// joins and the learned estimate grows it there; its reports teach the
// two-node rate. The learned rate at each count it ran is within 15 % of
// the throughput its own progress log shows there (steps after the settle
// window, rank 0's job-wide samples over time).
func TestTorchrunLearnsCurve(t *testing.T) { learnsCurve(t, false) }

// TestTorchrunLearnsCurveFromLog: the same, with a train.py that never
// runs bftrainer progress (--no-report): the Trainer declares its progress
// log (--progress-log, train.py's --log as is) and the runner reads it over
// ssh on the Trainer's first node; every observation says it came from
// the log.
func TestTorchrunLearnsCurveFromLog(t *testing.T) { learnsCurve(t, true) }

func learnsCurve(t *testing.T, fromLog bool) {
	if testing.Short() {
		t.Skip("runs a real elastic torchrun job (under a minute)")
	}
	trainertest.NeedTorch(t)
	root := trainertest.RepoRoot(t)
	const settle, sample = 8.0, 2.0
	e := newTrainerEnv(t, "ssh", 2, fmt.Sprintf("allow_root_owner = true\nprogress_log_every = \"1s\"\nprogress_log_timeout = \"20s\"\n[trainer.launcher.torchrun]\ncommand = [\"/usr/bin/python3\", %q]\nstore_ports = \"@STORE_PORTS@\"\n[pool]\ncurve_settle = %g\ncurve_sample = %g\n",
		filepath.Join(root, "contrib/trainer/fast_torchrun.py"), settle, sample))
	tr := uniq("lc")
	killLeftovers(t, tr)
	log := filepath.Join(e.work, "progress.log")
	learner := alloc.CurveLearner{Settle: settle, MinSample: sample}
	db := e.openDB(t)
	ctx := context.Background()

	e.run(t, "node", "join", "n1")
	submit := []string{"trainer", "submit", "--name", tr, "--min", "1", "--max", "2", "--workdir", e.work,
		"--env", "PYTHONDONTWRITEBYTECODE=1", "--env", "BFTRAINER_PROGRESS_INTERVAL=1"}
	train := []string{"/usr/bin/python3", filepath.Join(root, "contrib/trainer/train.py"), "--steps", "100000",
		"--ckpt-dir", filepath.Join(e.work, "ckpt"), "--log", log, "--sleep", "0.1", "--print-every", "0", "--pg-timeout", "10"}
	if fromLog {
		submit = append(submit, "--progress-log", "progress.log") // relative: below --workdir
		train = append(train, "--no-report")
	}
	e.run(t, append(append(submit, "--"), train...)...)

	settled := func(n, k int) { t.Helper(); waitSettled(t, e, db, tr, n, k) }
	// logged waits, a reconciler round a second, until the progress log
	// itself shows settled steps at world n over at least the learner's
	// sample length: on busy cores a restart's first steps come late, and
	// the learner's settle window (from the decision) can end before the
	// log's (from the run's first step).
	logged := func(n int) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			steps, err := trainertest.ReadSteps(log)
			if err == nil && settledSeconds(steps, settle, n) >= 2*sample {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the progress log shows no %g s of settled steps at world %d within 60 s (read: %v)", 2*sample, n, err)
			}
			time.Sleep(time.Second)
			e.run(t, "reconcile", "--no-scheduler")
		}
	}
	settled(1, 3)
	logged(1)
	e.run(t, "node", "join", "n2")
	settled(2, 3)
	logged(2)
	e.run(t, "trainer", "cancel", tr)

	row, _, err := db.Trainer(ctx, tr)
	if err != nil {
		t.Fatal(err)
	}
	est := learner.Estimate(row.Learn.Curve)
	show := e.run(t, "trainer", "show", tr)
	t.Logf("trainer show:\n%s", show)
	measured := measuredRates(readSteps(t, log), settle)
	checkSources(t, db, tr, row, fromLog, show)
	for _, n := range []int{1, 2} {
		got, sd := est.At(n)
		want, ok := measured[n]
		if !ok {
			t.Fatalf("the progress log shows no settled steps at world %d", n)
		}
		t.Logf("%d nodes: learned %.1f samples/s ±%.1f %%, measured %.1f (%+.1f %%)", n, got, 100*sd, want, 100*(got/want-1))
		if math.Abs(got/want-1) > 0.15 {
			t.Errorf("%d nodes: learned %.1f samples/s, the log shows %.1f: more than 15 %% apart", n, got, want)
		}
	}
}

// settledSeconds is how long a progress log shows settled steps at world n
// (the seconds measuredRates divides by).
func settledSeconds(steps []trainertest.Step, settle float64, n int) float64 {
	return settledWindows(steps, settle)[n].seconds
}

// measuredRates is the throughput a progress log shows at each world size:
// rank 0's job-wide samples over time, per run at one world, from settle
// seconds after the run's first step to its last, pooled over runs by
// time.
func measuredRates(steps []trainertest.Step, settle float64) map[int]float64 {
	out := map[int]float64{}
	for n, a := range settledWindows(steps, settle) {
		if a.seconds > 0 {
			out[n] = a.samples / a.seconds
		}
	}
	return out
}

// logWindow is the samples and seconds of a log's settled steps at one world.
type logWindow struct{ samples, seconds float64 }

// settledWindows sums, per world size, rank 0's job-wide samples and the
// time they took, per run at one world from settle seconds after the
// run's first step to its last.
func settledWindows(steps []trainertest.Step, settle float64) map[int]logWindow {
	sum := map[int]logWindow{}
	var first, last *trainertest.Step
	flush := func() {
		if first == nil || last == nil || !last.At.After(first.At) {
			return
		}
		a := sum[first.World]
		a.samples += last.Samples - first.Samples
		a.seconds += last.At.Sub(first.At).Seconds()
		sum[first.World] = a
	}
	var runStart time.Time
	world := -1
	for i := range steps {
		s := &steps[i]
		if s.Rank != 0 || s.Done {
			continue
		}
		if s.World != world {
			flush()
			first, last, world, runStart = nil, nil, s.World, s.At
		}
		if s.At.Sub(runStart).Seconds() < settle {
			continue
		}
		if first == nil {
			first = s
		}
		last = s
	}
	flush()
	return sum
}

// checkSources checks where the Trainer's samples came from: its own
// reports only, or (fromLog) its progress log only, in the pool's counts,
// in every curve row of the history and in trainer show.
func checkSources(t *testing.T, db *store.DB, tr string, row store.Trainer, fromLog bool, show string) {
	t.Helper()
	want := pool.SourceReport
	if fromLog {
		want = pool.SourceLog
		if row.Learn.Reports != 0 || row.Learn.Readings == 0 {
			t.Errorf("%d reports, %d progress-log readings: want readings only", row.Learn.Reports, row.Learn.Readings)
		}
	} else if row.Learn.Reports == 0 || row.Learn.Readings != 0 {
		t.Errorf("%d reports, %d progress-log readings: want reports only", row.Learn.Reports, row.Learn.Readings)
	}
	evs, err := db.Events(context.Background(), store.Filter{Kinds: []store.Kind{store.KindCurve}, Trainer: tr})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) == 0 {
		t.Fatal("no curve rows in the history")
	}
	for _, ev := range evs {
		var d struct{ Source string }
		if json.Unmarshal(ev.Detail, &d); d.Source != want {
			t.Fatalf("curve row %d from %q, want %q: %s", ev.ID, d.Source, want, ev.Detail)
		}
	}
	if !strings.Contains(show, "observed from") || !strings.Contains(show, "  "+want+" ") {
		t.Errorf("trainer show does not say the observations came from %q:\n%s", want, show)
	}
}

// waitSettled waits, running a reconciler round a second, until the
// learner holds k settled samples of the Trainer at n nodes. It fails
// when 60 s pass without a new reading of the log or a new sample (on a
// loaded machine the owner's ssh reads fail and back off, the restart
// takes long), or after 5 minutes in all.
func waitSettled(t *testing.T, e trainerEnv, db *store.DB, tr string, n, k int) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(60 * time.Second)
	seen := -1
	for {
		e.run(t, "reconcile", "--no-scheduler")
		row, ok, err := db.Trainer(context.Background(), tr)
		if err != nil || !ok {
			t.Fatal(ok, err)
		}
		moved := row.Learn.Readings
		if s := row.Learn.Curve; s != nil {
			for _, c := range s.Counts {
				if c.Nodes == n && !c.Unsettled && len(c.Rates) >= k {
					return
				}
				moved += len(c.Rates)
			}
		}
		if moved != seen {
			seen, deadline = moved, time.Now().Add(60*time.Second)
		}
		if time.Now().After(deadline) || time.Since(start) > 5*time.Minute {
			t.Fatalf("no %d settled samples at %d nodes after %.0f s (the last reading or sample %.0f s ago); learned %s",
				k, n, time.Since(start).Seconds(), time.Since(deadline.Add(-60*time.Second)).Seconds(), row.Learn)
		}
		time.Sleep(time.Second)
	}
}
