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
// progress log it declares (a shell loop, 64 samples per node per step,
// resuming from its log's last count when restarted: no torch), is learned
// from that log alone: submitted without a curve, it is measured on one
// node, grown to two by the learned estimate, measured there; the learned
// rate at each count is within 15 % of what the log itself shows, and
// every curve row, the pool's counts and trainer show say the samples came
// from the log.
func TestExecLearnsFromLog(t *testing.T) {
	const settle, sample = 2.0, 1.0
	e := newTrainerEnv(t, "ssh", 2, fmt.Sprintf("allow_root_owner = true\nprogress_log_every = \"1s\"\nprogress_log_timeout = \"20s\"\n[pool]\ncurve_settle = %g\ncurve_sample = %g\n", settle, sample))
	tr := uniq("pl")
	killLeftovers(t, tr)
	log := filepath.Join(e.work, "p.log")
	db := e.openDB(t)
	ctx := context.Background()
	e.run(t, "node", "join", "n1")
	loop := `n=$(echo "$BFTRAINER_NODES" | tr , ' ' | wc -w); s=$(tail -n 1 p.log 2>/dev/null | sed 's/.*samples=//'); s=${s:-0}; ` +
		`while :; do s=$((s+64*n)); echo "$(date +%s.%N) node=n1 rank=0 world=$n samples=$s" >> p.log; sleep 0.05; done`
	e.run(t, "trainer", "submit", "--name", tr, "--launcher", "exec", "--min", "1", "--max", "2", "--workdir", e.work,
		"--progress-log", "p.log", "--", "/bin/sh", "-c", loop)
	waitSettled(t, e, db, tr, 1, 3)
	e.run(t, "node", "join", "n2")
	waitSettled(t, e, db, tr, 2, 3)
	e.run(t, "trainer", "cancel", tr)
	row, _, err := db.Trainer(ctx, tr)
	if err != nil {
		t.Fatal(err)
	}
	show := e.run(t, "trainer", "show", tr)
	t.Logf("trainer show:\n%s", show)
	checkSources(t, db, tr, row, true, show)
	est := (&alloc.CurveLearner{Settle: settle, MinSample: sample}).Estimate(row.Learn.Curve)
	measured := measuredRates(readSteps(t, log), settle)
	for _, n := range []int{1, 2} {
		got, _ := est.At(n)
		want := measured[n]
		t.Logf("%d nodes: learned %.1f samples/s, the log shows %.1f (%+.1f %%)", n, got, want, 100*(got/want-1))
		if want <= 0 || math.Abs(got/want-1) > 0.15 {
			t.Errorf("%d nodes: learned %.1f samples/s, the log shows %.1f: more than 15 %% apart", n, got, want)
		}
	}
}
