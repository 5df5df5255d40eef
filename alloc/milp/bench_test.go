package milp_test

import (
	"fmt"
	"io"
	"testing"

	"github.com/bftrainer/bftrainer/alloc/alloctest"
	"github.com/bftrainer/bftrainer/alloc/milp"
)

// BenchmarkBuildWrite times Build and WriteMPS at Summit scale (the
// 10 × 4,654 model has ~93k binaries and ~191k rows; the 100 × 4,734 one
// writes ~234 MB).
func BenchmarkBuildWrite(b *testing.B) {
	for _, c := range []struct{ J, N, nmax int }{{10, 400, 64}, {10, 4654, 64}, {100, 4734, 64}} {
		p := alloctest.Summit(c.J, c.N, c.nmax, 1)
		b.Run(fmt.Sprintf("build/J=%d/N=%d", c.J, c.N), func(b *testing.B) {
			for b.Loop() {
				milp.Build(p)
			}
		})
		m := milp.Build(p)
		b.Run(fmt.Sprintf("write/J=%d/N=%d", c.J, c.N), func(b *testing.B) {
			for b.Loop() {
				if err := m.WriteMPS(io.Discard); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
