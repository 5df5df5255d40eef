package sim

// What the allocator knows of the workload's curves (Options.Curves): the
// curves as given (today's replay), learned from measurements (the
// allocator sees only what the Trainer achieved at the counts it ran, with
// a stated, seeded noise; the accounting uses the true curves), or assumed
// linear from the one-node throughput. The learning is the pool's, the
// same code live and in a replay (pool/learn.go); the replay only stands
// in for the Trainer's progress reports.

import (
	"math/rand/v2"
	"time"

	"github.com/bftrainer/bftrainer/pool"
)

// DefaultCurveNoise is the relative standard deviation of a measured rate
// in a learned-curves replay when Options.CurveNoise is 0.
const DefaultCurveNoise = 0.05

// measurer draws the replay's measurements: for one interval between two
// events at a constant count, the Trainer's true rate there times
// max(0, 1 + noise·z), z standard normal, from a PCG seeded by the
// options (the same replay measures the same).
type measurer struct {
	p     *pool.Pool
	noise float64
	rng   *rand.Rand
}

func newMeasurer(p *pool.Pool, opt Options) *measurer {
	noise := opt.CurveNoise
	switch {
	case noise == 0:
		noise = DefaultCurveNoise
	case noise < 0:
		noise = 0
	}
	return &measurer{p: p, noise: noise, rng: rand.New(rand.NewPCG(opt.CurveSeed, 0x13c))}
}

// observe records every running Trainer's interval up to at.
func (m *measurer) observe(at time.Time) {
	if m == nil {
		return
	}
	m.p.ObserveRunning(at, func(t *pool.Trainer) float64 {
		return m.p.TrueRate(t) * max(0, 1+m.noise*m.rng.NormFloat64())
	})
}
