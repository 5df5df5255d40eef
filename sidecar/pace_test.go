package sidecar

import (
	"context"
	"testing"

	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/trainer"
)

// pacedRunner is a fakeRunner whose launchers leave work for a round soon
// (workers starting) for the first `starting` Applies, and records how it
// was paced.
type pacedRunner struct {
	fakeRunner
	starting int
	paced    []bool
	pending  bool
}

func (p *pacedRunner) Pace(later bool) { p.paced = append(p.paced, later) }
func (p *pacedRunner) Pending() bool   { return p.pending }

func (p *pacedRunner) Apply(ctx context.Context, want []trainer.Want) []trainer.Action {
	p.pending = p.starting > 0
	p.starting--
	return p.fakeRunner.Apply(ctx, want)
}

// TestPacedRoundsComeBack: a round whose runner left workers starting
// asks for another (Round's again; Run then polls), told beforehand that
// one follows; a CLI command's round (NoPoll) is told none does, so its
// launchers wait themselves, and it asks for none. Once the workers are
// in, the rounds stop.
func TestPacedRoundsComeBack(t *testing.T) {
	ctx := context.Background()
	db := MustDB(t)
	submitted(t, db)
	p := &pacedRunner{starting: 2}
	r := &Reconciler{DB: db, Runner: p, Pool: pool.Config{TFwd: 10}}
	for i, want := range []bool{true, true, false} {
		again, err := r.Round(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if again != want || r.Pending != want {
			t.Fatalf("round %d: again %v, pending %v; want %v", i, again, r.Pending, want)
		}
	}
	if len(p.paced) != 3 || !p.paced[0] || !p.paced[2] {
		t.Fatalf("paced %v, want true for every round of a reconciler", p.paced)
	}

	q := &pacedRunner{starting: 1}
	c := &Reconciler{DB: db, Runner: q, Pool: pool.Config{TFwd: 10}, NoPoll: true}
	again, err := c.Round(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(q.paced) != 1 || q.paced[0] {
		t.Fatalf("a command's round paced %v, want [false]", q.paced)
	}
	if again {
		t.Fatal("a command's round asked for another")
	}
}
