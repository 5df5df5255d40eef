package alloctest

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/bftrainer/bftrainer/alloc"
)

// models are the seven measured Summit scaling curves of the paper's data
// (images/s at 1, 2, 4, …, 64 nodes; workloads/model-scalability.csv).
var models = [][]float64{
	{7115.3, 13071.7, 21066.1, 40484.9, 74002.9, 130762.0, 202135.4}, // AlexNet
	{1193.3, 2389.2, 4691.7, 9257.9, 18348.9, 36208.5, 70151.7},      // vgg16
	{5218.8, 10582.5, 20436.0, 39584.0, 78023.8, 144762.5, 262723.0}, // resnet18
	{989.9, 1952.5, 3849.8, 7608.1, 14993.2, 28812.2, 57773.9},       // DenseNet
	{3245.7, 6001.9, 11489.3, 23075.6, 43899.7, 83474.2, 160493.6},   // mnasnet1
	{2831.0, 5259.0, 9988.0, 20379.2, 38895.3, 74125.1, 145081.5},    // shufflenet
	{3039.9, 5893.0, 11386.0, 22024.8, 42488.4, 82268.3, 155213.8},   // mobilenet
}

// Summit returns a Summit-scale problem: J Trainers cycling through the
// seven measured curves, a pool of N nodes, N_max = nmax (curves beyond 64
// nodes continue doubling at the model's 32→64 efficiency), rescale costs
// U[17,19] s up and U[11,13] s down as in the paper's data, T_fwd = 10, and
// about half the Trainers already running on part of the pool.
func Summit(J, N, nmax int, seed uint64) *alloc.Problem {
	return SummitCohorts(J, N, nmax, 16, seed)
}

// SummitCohorts is Summit with nodes idle since the same instant in groups
// of cohort.
func SummitCohorts(J, N, nmax, cohort int, seed uint64) *alloc.Problem {
	r := rand.New(rand.NewPCG(seed, 1))
	p := &alloc.Problem{TFwd: 10, Objective: alloc.Throughput}
	base := time.Date(2021, 2, 10, 20, 21, 15, 0, time.UTC)
	nodes := make([]alloc.Node, N)
	for i := range nodes {
		nodes[i] = alloc.Node{Name: fmt.Sprintf("n%05d", i), Since: base.Add(-time.Duration(r.IntN(86400)) * time.Second), Order: i}
	}
	next := 0
	for j := 0; j < J; j++ {
		m := models[j%len(models)]
		xs := []int{0}
		ys := []float64{0}
		for i, v := range m {
			xs = append(xs, 1<<i)
			ys = append(ys, v)
		}
		ratio := m[6] / m[5]
		for x := 128; xs[len(xs)-1] < nmax; x *= 2 {
			x = min(x, nmax)
			prev := xs[len(xs)-1]
			ys = append(ys, ys[len(ys)-1]*(1+(ratio-1)*float64(x-prev)/float64(prev)))
			xs = append(xs, x)
		}
		t := alloc.Trainer{
			ID:    fmt.Sprintf("J%05d", j),
			Min:   1,
			Max:   nmax,
			Curve: alloc.Curve{Nodes: xs, Throughput: ys},
			RUp:   17 + 2*r.Float64(),
			RDown: 11 + 2*r.Float64(),
		}
		if j%2 == 0 {
			c := min(1+r.IntN(min(nmax, 64)), N-next)
			t.Held = nodes[next : next+c]
			next += c
		}
		p.Trainers = append(p.Trainers, t)
	}
	p.Free = nodes[next:]
	// What AdaptiveHorizon reads, from a stream of its own so the rest is
	// unchanged: an idle-period history, remaining work, and nodes idle
	// since instants of the last day — in groups of cohort consecutive
	// nodes (on the Summit trace idle nodes leave with the nodes that
	// became idle with them: 17.7 a group on average), or each its own
	// instant when cohort is 1 (the worst case for AdaptiveHorizon).
	ra := rand.New(rand.NewPCG(seed, 12))
	p.Now = base
	var at time.Time
	for i := range nodes {
		if i%cohort == 0 {
			at = base.Add(-time.Duration(ra.IntN(86400)) * time.Second)
		}
		nodes[i].Since = at
	}
	for j := range p.Trainers {
		t := &p.Trainers[j]
		t.Remaining = 1.3e8 * ra.Float64()
	}
	p.Idle = IdleHistory(ra, 20000)
	return p
}
