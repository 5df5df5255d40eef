package slurm

import (
	"math"
	"testing"
)

// logWorld appends steps first..last of a world on nodes, one every
// period seconds from start (each rank's line at the same moment but the
// last rank's, lag later), samples growing by batch × world a step from
// base; it returns the time and samples after the last.
func logWorld(steps []Step, nodes []string, first, last int, start, period, lag, base float64) ([]Step, float64, float64) {
	w := len(nodes)
	t, samples := start, base
	for s := first; s <= last; s++ {
		samples += float64(32 * w)
		for rank, n := range nodes {
			when := t
			if rank == w-1 {
				when += lag
			}
			steps = append(steps, Step{At: at(when), Node: n, Rank: rank, World: w, Step: s, Samples: samples})
		}
		t += period
	}
	return steps, t - period, samples
}

func TestMeasureChange(t *testing.T) {
	three := []string{"a", "b", "c"}
	for _, tc := range []struct {
		name   string
		build  func() []Step
		k      int
		ok     bool
		lost   float64
		redone int
	}{
		{
			// A graceful shrink: step 11 comes 0.25 s after step 10 (the
			// last rank's line), where an ordinary world-1 step takes
			// 0.2 s: 0.05 s lost.
			name: "graceful", k: 5, ok: true, lost: 0.05,
			build: func() []Step {
				s, end, samples := logWorld(nil, three, 1, 10, 0, 0.2, 0.01, 0)
				s, _, _ = logWorld(s, []string{"a"}, 11, 20, end+0.01+0.25, 0.2, 0, samples)
				return s
			},
		},
		{
			// A kill in step 11: only rank 0 logged it (not a complete
			// step); the survivor puts back step 10 and trains step 11
			// again at world 1, 1.5 s after step 10: 1.3 s lost.
			name: "kill in a step", k: 5, ok: true, lost: 1.3,
			build: func() []Step {
				s, end, samples := logWorld(nil, three, 1, 10, 0, 0.2, 0, 0)
				s = append(s, Step{At: at(end + 0.2), Node: "a", Rank: 0, World: 3, Step: 11, Samples: samples + 96})
				s, _, _ = logWorld(s, []string{"a"}, 11, 20, end+1.5, 0.2, 0, samples)
				return s
			},
		},
		{
			// A restart from a checkpoint 5 steps back: after a 1 s stall,
			// steps 6-10 are trained again at world 1 and step 11 is done
			// 2.2 s after step 10, at 672 samples where step 10 was at
			// 960. The kept node, trained on from step 10, would have
			// been at 960 + 2.2 s × 160/s: 640 samples more, 4 s lost.
			name: "redone from a checkpoint", k: 5, ok: true, lost: 4.0, redone: 5,
			build: func() []Step {
				s, end, samples := logWorld(nil, three, 1, 10, 0, 0.2, 0, 0)
				s, _, _ = logWorld(s, []string{"a"}, 6, 20, end+1.2, 0.2, 0, samples-5*96)
				return s
			},
		},
		{
			// An intermediate world of 2 trains steps 11-12 (128 samples)
			// before world 1 trains 13: 1.6 s from step 10 to 13, less
			// 1.0 s of world-1 training (160 samples/s) for the 160
			// samples gained: 0.6 s.
			name: "through an intermediate world", k: 5, ok: true, lost: 0.6,
			build: func() []Step {
				s, end, samples := logWorld(nil, three, 1, 10, 0, 0.2, 0, 0)
				s, end, samples = logWorld(s, []string{"a", "b"}, 11, 12, end+0.4, 0.2, 0, samples)
				s, _, _ = logWorld(s, []string{"a"}, 13, 20, end+1.0, 0.2, 0, samples)
				return s
			},
		},
		{
			// Not yet: 4 steps at world 1 of the 5 measured.
			name: "too few steps", k: 5, ok: false,
			build: func() []Step {
				s, end, samples := logWorld(nil, three, 1, 10, 0, 0.2, 0, 0)
				s, _, _ = logWorld(s, []string{"a"}, 11, 14, end+0.2, 0.2, 0, samples)
				return s
			},
		},
		{
			name: "no new world", k: 5, ok: false,
			build: func() []Step {
				s, _, _ := logWorld(nil, three, 1, 10, 0, 0.2, 0, 0)
				return s
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, ok := MeasureChange(tc.build(), at(-1), 3, 1, tc.k)
			if ok != tc.ok {
				t.Fatalf("MeasureChange ok = %v, want %v (%+v)", ok, tc.ok, c)
			}
			if !ok {
				return
			}
			if math.Abs(c.Lost-tc.lost) > 1e-6 || c.Redone != tc.redone {
				t.Errorf("lost %.6f s, redone %d; want %.6f s, %d (%+v)", c.Lost, c.Redone, tc.lost, tc.redone, c)
			}
			if c.LastOld.Step != 10 || c.LastOld.World != 3 {
				t.Errorf("last old step %d at world %d, want 10 at 3", c.LastOld.Step, c.LastOld.World)
			}
		})
	}
}
