package pool_test

import (
	"testing"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/pool"
)

// curveObs returns the curve observations among changes, with their
// sources.
func curveObs(cs []pool.Change) (obs []alloc.CurveObs, src []string) {
	for _, c := range cs {
		if c.Kind == pool.CurveUpdated {
			obs, src = append(obs, *c.Obs), append(src, c.Source)
		}
	}
	return obs, src
}

// TestLearnFromLogReadings: readings of a Trainer's progress log teach the
// curve like reports do, timed by their lines even when folded late; a
// count that goes down (a restart from a checkpoint) is no observation,
// and the next one is measured from it.
func TestLearnFromLogReadings(t *testing.T) {
	p := mustNew(t, pool.Config{TFwd: 100, Learner: alloc.CurveLearner{Settle: 5, MinSample: 1}})
	p.Join(at(0), []string{"n1"}, "")
	if err := p.Submit(at(0), pool.Spec{ID: "L", Min: 1, Max: 2}); err != nil {
		t.Fatal(err)
	}
	p.Admit()
	decide(t, p)
	p.Changes()
	read := func(s int, samples float64) {
		t.Helper()
		if used, err := p.ProgressRead(at(s), "L", samples, false); err != nil || !used {
			t.Fatalf("reading at t%d: used %v, %v", s, used, err)
		}
	}
	read(10, 400)
	read(20, 800)
	p.Join(at(40), []string{"n9"}, "") // moves the pool's clock past the next line
	p.Changes()
	read(30, 1200) // folded after t40: still 400 samples over its own 10 s
	read(35, 1000) // restarted from a checkpoint
	read(45, 1400)
	obs, src := curveObs(p.Changes())
	if len(obs) != 2 || obs[0].Since != 20 || obs[1].Since != 35 {
		t.Fatalf("after the late line, the restart and one more: %+v; want t20→t30 and t35→t45, none across the restart", obs)
	}
	for i, o := range obs {
		if !near(o.Rate, 40) || o.Duration != 10 || src[i] != pool.SourceLog {
			t.Fatalf("observation %+v from %q: want 40/s over 10 s, from the log", o, src[i])
		}
	}
	// A reading marked restart (the workers restarted at another size in
	// between, the count already past the last one): no observation, and
	// the settle window starts again there.
	if _, err := p.ProgressRead(at(60), "L", 2400, true); err != nil {
		t.Fatal(err)
	}
	read(70, 2800)
	obs, _ = curveObs(p.Changes())
	if len(obs) != 1 || obs[0].Since != 0 || !near(obs[0].Rate, 40) {
		t.Fatalf("after a restart: %+v; want only t60→t70, 0 s after the restart", obs)
	}
	l, _ := p.Trainer("L")
	if l.Done != 2800 || l.Learn.Readings != 7 || l.Learn.Reports != 0 {
		t.Fatalf("done %v, readings %d, reports %d", l.Done, l.Learn.Readings, l.Learn.Reports)
	}
}

// TestReportsWinOverReadings: once a Trainer reports itself, readings of
// its log are ignored; a report and a reading never pair into one
// observation.
func TestReportsWinOverReadings(t *testing.T) {
	p := mustNew(t, pool.Config{TFwd: 100, Learner: alloc.CurveLearner{Settle: 5, MinSample: 1}})
	p.Join(at(0), []string{"n1"}, "")
	if err := p.Submit(at(0), pool.Spec{ID: "B", Min: 1, Max: 2, Samples: 100000}); err != nil {
		t.Fatal(err)
	}
	p.Admit()
	decide(t, p)
	p.Changes()
	if _, err := p.ProgressRead(at(10), "B", 400, false); err != nil {
		t.Fatal(err)
	}
	// Its first report, 100 samples/s after the reading: not paired.
	if err := p.Progress(at(11), "B", 500); err != nil {
		t.Fatal(err)
	}
	if obs, _ := curveObs(p.Changes()); len(obs) != 0 {
		t.Fatalf("a reading and a report paired: %+v", obs)
	}
	if used, err := p.ProgressRead(at(15), "B", 99999, false); err != nil || used {
		t.Fatalf("a reading after a report: used %v, %v", used, err)
	}
	if err := p.Progress(at(21), "B", 900); err != nil {
		t.Fatal(err)
	}
	obs, src := curveObs(p.Changes())
	if len(obs) != 1 || !near(obs[0].Rate, 40) || src[0] != pool.SourceReport {
		t.Fatalf("observations %+v %v: want one of 40/s from the reports", obs, src)
	}
	b, _ := p.Trainer("B")
	if b.Done != 900 {
		t.Fatalf("done %v: the ignored reading counted", b.Done)
	}
}

// TestReadingFinishes: a reading at the target finishes the Trainer; one
// that is read is not finished on the pool's estimate between readings.
func TestReadingFinishes(t *testing.T) {
	p := mustNew(t, pool.Config{TFwd: 100})
	p.Join(at(0), []string{"n1", "n2"}, "")
	if err := p.Submit(at(0), pool.Spec{ID: "F", Min: 1, Max: 1, Curve: linear(1, 100), Samples: 1000}); err != nil {
		t.Fatal(err)
	}
	p.Admit()
	decide(t, p)
	if _, err := p.ProgressRead(at(1), "F", 10, false); err != nil {
		t.Fatal(err)
	}
	p.Join(at(60), []string{"n3"}, "") // the estimate passes 1000
	if f, ok := p.Trainer("F"); !ok || f.Status != pool.Running {
		t.Fatalf("ended on the estimate: %+v", f)
	}
	if _, err := p.ProgressRead(at(70), "F", 1000, false); err != nil {
		t.Fatal(err)
	}
	if _, ok := p.Trainer("F"); ok {
		t.Fatal("a reading of its target did not finish it")
	}
}
