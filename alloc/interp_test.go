package alloc

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestInterpAllIsInterp(t *testing.T) {
	for _, c := range []struct {
		xs []int
		ys []float64
	}{
		{[]int{0, 4}, []float64{0, 400}},
		{[]int{3}, []float64{7}},
		{[]int{2, 5, 9}, []float64{1.5, 3.25, 0.1}},
		{[]int{0, 1, 2, 64, 100}, []float64{0, 1e3, 1.9e3, 5e4, 5e4}},
	} {
		got := interpAll(c.xs, c.ys, make([]float64, 131))
		for x := range got {
			if want := Interp(c.xs, c.ys, x); got[x] != want {
				t.Fatalf("%v %v at %d: %v, Interp %v", c.xs, c.ys, x, got[x], want)
			}
		}
	}
}

// TestInterpAllIsInterpRandom: interpAll against Interp on random curves
// (a first point at 0 or past it, one point, plateaus, falling stretches),
// n below, within and past the points: the same value at every x.
func TestInterpAllIsInterpRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 9))
	for range 3000 {
		m := 1 + r.IntN(8)
		set := map[int]bool{}
		for len(set) < m {
			set[r.IntN(200)] = true
		}
		var xs []int
		for x := range set {
			xs = append(xs, x)
		}
		slices.Sort(xs)
		ys := make([]float64, len(xs))
		for i := range ys {
			switch r.IntN(4) {
			case 0:
				if i > 0 {
					ys[i] = ys[i-1] // plateau
					continue
				}
			case 1:
				ys[i] = -1e3 * r.Float64()
				continue
			}
			ys[i] = 1e5 * r.Float64()
		}
		n := r.IntN(300)
		got := interpAll(xs, ys, make([]float64, n+1))
		for x := range got {
			if want := Interp(xs, ys, x); got[x] != want {
				t.Fatalf("%v %v at %d: %v, Interp %v", xs, ys, x, got[x], want)
			}
		}
	}
}
