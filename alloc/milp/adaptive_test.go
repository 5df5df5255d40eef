package milp_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/alloc/alloctest"
	"github.com/bftrainer/bftrainer/alloc/milp"
)

// adaptiveProblems returns random problems with the inputs of
// alloc.AdaptiveHorizon (node ages in cohorts, an idle history, remaining
// work): 1–5 Trainers, 0–16 nodes, every objective, both semantics.
func adaptiveProblems(seed uint64, n int) []*alloc.Problem {
	r := rand.New(rand.NewPCG(seed, 12))
	objs := []alloc.Objective{alloc.Throughput, alloc.Speedup, alloc.Metric}
	ps := make([]*alloc.Problem, n)
	for i := range ps {
		ps[i] = alloctest.Problem(r, alloctest.Options{
			Trainers:  1 + r.IntN(5),
			Nodes:     r.IntN(17),
			Semantics: alloc.Semantics(r.IntN(4) / 3), // a quarter Reference
			Objective: objs[r.IntN(len(objs))],
			Nice:      true,
			Adaptive:  true,
		})
	}
	return ps
}

// withoutPreprocessing returns CBC run with its preprocessing off, through
// a wrapper script in a temporary directory.
//
// CBC 2.10.8's preprocessing was seen to return a worse "optimal" answer
// than alloc.Adaptive's plan (which alloc.Check proves feasible) on 1 of
// the 340 random problems of TestCBCMatchesAdaptive and
// TestSolverAdaptivePlans (adaptiveProblems(7, 20)[17]: CBC 88814.95, the
// feasible 90363.24, which CBC itself finds without preprocessing; on an
// earlier version of the objective the same problem showed it too, and CBC
// found the better plan with the counts fixed). A MILP answer below the
// DP's cannot show the DP wrong, so the checks re-solve such a problem
// without preprocessing and require agreement then; an answer above the
// DP's always fails.
func withoutPreprocessing(t *testing.T) milp.Backend {
	t.Helper()
	prog, err := exec.LookPath("cbc")
	if err != nil {
		t.Skipf("skipping: %v", err)
	}
	path := filepath.Join(t.TempDir(), "cbc-nopreprocess")
	script := fmt.Sprintf("#!/bin/sh\nm=\"$1\"; shift\nexec %s \"$m\" -preprocess off \"$@\"\n", prog)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return milp.CBC{Path: path}
}

// preprocessingMisses counts the problems withoutPreprocessing was needed on.
var preprocessingMisses atomic.Int64

// TestCBCMatchesAdaptive is the proof that alloc.Adaptive solves its
// objective exactly: on 320 random problems the node-level MILP with the
// same objective, solved by CBC, finds node sets that satisfy every
// constraint and are worth what Adaptive's counts are worth, to 1e-9.
func TestCBCMatchesAdaptive(t *testing.T) {
	b := requireBackend(t, milp.CBC{})
	n := 320
	if testing.Short() {
		n = 40
	}
	var optimal, infeasible, grew atomic.Int64
	start := time.Now()
	t.Run("problems", func(t *testing.T) {
		for i, p := range adaptiveProblems(2106, n) {
			t.Run(fmt.Sprintf("%s-%03d", p.Semantics, i), func(t *testing.T) {
				t.Parallel()
				switch checkAgainst(t, b, p, alloc.Adaptive{}, alloc.AdaptiveHorizon{}) {
				case milp.Optimal:
					optimal.Add(1)
				case milp.Infeasible:
					infeasible.Add(1)
				}
				if pl, _ := (alloc.Adaptive{}).Solve(context.Background(), p); pl != nil {
					for _, a := range pl.Trainers {
						if a.To != a.From {
							grew.Add(1)
							break
						}
					}
				}
			})
		}
	})
	t.Logf("cbc: %d problems: %d optimal, %d infeasible, %d with a rescale, %d re-solved without preprocessing; %v",
		n, optimal.Load(), infeasible.Load(), grew.Load(), preprocessingMisses.Load(), time.Since(start).Round(time.Millisecond))
}

// TestSolverAdaptivePlans runs the alloc.Solver adapter with the adaptive
// pricing: its plans pass alloc.Check and match Adaptive's objective.
func TestSolverAdaptivePlans(t *testing.T) {
	s := milp.Solver{Backend: requireBackend(t, milp.CBC{}), TimeLimit: time.Minute, Pricing: alloc.AdaptiveHorizon{}}
	solverPlans(t, s, alloc.Adaptive{}, adaptiveProblems(7, 20))
}
