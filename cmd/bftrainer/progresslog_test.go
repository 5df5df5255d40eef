package main

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/bftrainer/bftrainer/alloc"
)

// TestExecLearnsFromLog: an exec Trainer over the loopback sshd that
// never runs bftrainer progress, only appends train.py-style lines to the
// progress log it declares (a shell loop: no torch), is learned from that
// log: the rounds read it on its node, the learned one-node rate is
// within 15 % of what the log itself shows, and every curve row, the
// pool's counts and trainer show say the samples came from the log.
func TestExecLearnsFromLog(t *testing.T) {
	const settle, sample = 2.0, 1.0
	e := newTrainerEnv(t, "ssh", 1, fmt.Sprintf("allow_root_owner = true\nprogress_log_every = \"1s\"\n[pool]\ncurve_settle = %g\ncurve_sample = %g\n", settle, sample))
	tr := uniq("pl")
	killLeftovers(t, tr)
	log := filepath.Join(e.work, "p.log")
	db := e.openDB(t)
	ctx := context.Background()
	e.run(t, "node", "join", "n1")
	loop := `i=0; while :; do i=$((i+1)); echo "$(date +%s.%N) node=n1 rank=0 world=1 step=$i samples=$((i*64))" >> p.log; sleep 0.05; done`
	e.run(t, "trainer", "submit", "--name", tr, "--launcher", "exec", "--min", "1", "--max", "1", "--curve", "1:1", "--workdir", e.work,
		"--progress-log", "p.log", "--", "/bin/sh", "-c", loop)
	waitSettled(t, e, db, tr, 1, 4)
	e.run(t, "trainer", "cancel", tr)
	row, _, err := db.Trainer(ctx, tr)
	if err != nil {
		t.Fatal(err)
	}
	show := e.run(t, "trainer", "show", tr)
	t.Logf("trainer show:\n%s", show)
	checkSources(t, db, tr, row, true, show)
	est := (&alloc.CurveLearner{Settle: settle, MinSample: sample}).Estimate(row.Learn.Curve)
	got, _ := est.At(1)
	want := measuredRates(readSteps(t, log), settle)[1]
	t.Logf("1 node: learned %.1f samples/s, the log shows %.1f (%+.1f %%)", got, want, 100*(got/want-1))
	if want <= 0 || math.Abs(got/want-1) > 0.15 {
		t.Errorf("learned %.1f samples/s, the log shows %.1f: more than 15 %% apart", got, want)
	}
}
