package alloc

import "testing"

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
		got := interpAll(c.xs, c.ys, 130)
		for x := range got {
			if want := Interp(c.xs, c.ys, x); got[x] != want {
				t.Fatalf("%v %v at %d: %v, Interp %v", c.xs, c.ys, x, got[x], want)
			}
		}
	}
}
