package alloc_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/alloc/alloctest"
)

// BenchmarkScale times both solvers on the instances of issue 23's goals.
func BenchmarkScale(b *testing.B) {
	for _, c := range []struct{ J, N, nmax int }{
		{1000, 10624, 64}, {1000, 10624, 512}, {100, 10624, 10624}, {10, 4654, 4654},
	} {
		p := alloctest.Summit(c.J, c.N, c.nmax, 1)
		for _, s := range []alloc.Solver{alloc.Adaptive{}, alloc.Exact{}} {
			b.Run(fmt.Sprintf("%s/J=%d/N=%d/Nmax=%d", s.Name(), c.J, c.N, c.nmax), func(b *testing.B) {
				for b.Loop() {
					if _, err := s.Solve(context.Background(), p); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
