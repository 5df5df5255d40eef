package alloc_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/alloc/alloctest"
)

func BenchmarkExact(b *testing.B) {
	for _, c := range []struct{ J, N, nmax int }{
		{10, 400, 64}, {10, 4654, 64}, {10, 4654, 4654}, {100, 4734, 64}, {100, 4734, 4734},
	} {
		p := alloctest.Summit(c.J, c.N, c.nmax, 1)
		b.Run(fmt.Sprintf("J=%d/N=%d/Nmax=%d", c.J, c.N, c.nmax), func(b *testing.B) {
			for b.Loop() {
				if _, err := (alloc.Exact{}).Solve(context.Background(), p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkOptimalCounts(b *testing.B) {
	for _, c := range []struct{ J, N, nmax int }{
		{10, 400, 64}, {100, 4734, 64},
	} {
		p := alloctest.Summit(c.J, c.N, c.nmax, 1)
		b.Run(fmt.Sprintf("J=%d/N=%d/Nmax=%d", c.J, c.N, c.nmax), func(b *testing.B) {
			for b.Loop() {
				alloc.OptimalCounts(p)
			}
		})
	}
}
