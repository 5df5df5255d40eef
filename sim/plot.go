package sim

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// trainerColours cycle over the Trainers' bands; neighbours in admission order differ.
var trainerColours = []color.NRGBA{
	{0x4e, 0x79, 0xa7, 0xff}, {0xf2, 0x8e, 0x2b, 0xff}, {0x59, 0xa1, 0x4f, 0xff},
	{0xb0, 0x7a, 0xa1, 0xff}, {0xed, 0xc9, 0x48, 0xff}, {0x76, 0xb7, 0xb2, 0xff},
	{0xe1, 0x57, 0x59, 0xff}, {0x9c, 0x75, 0x5f, 0xff}, {0xff, 0x9d, 0xa7, 0xff},
	{0xba, 0xb0, 0xac, 0xff},
}

// WriteTimelineSVG draws res.Timeline as an SVG on w: the nodes each Trainer holds,
// stacked in admission order (one colour per Trainer, cycling), whose top is the nodes
// used, and the idle nodes offered as a line, over hours from t0. Values are steps: each
// sample holds until the next.
func WriteTimelineSVG(w io.Writer, res *Result, title string) error {
	p, err := timelinePlot(res, title)
	if err != nil {
		return err
	}
	c := vgsvg.New(10*vg.Inch, 4*vg.Inch)
	p.Draw(draw.New(c))
	if _, err := c.WriteTo(w); err != nil {
		return fmt.Errorf("timeline: %w", err)
	}
	return nil
}

func timelinePlot(res *Result, title string) (*plot.Plot, error) {
	tl := res.Timeline
	if tl == nil || len(tl.Times) == 0 {
		return nil, fmt.Errorf("timeline: no samples (set Options.Timeline)")
	}
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "hours from start"
	p.Y.Label.Text = "nodes"
	t0 := tl.Times[0]
	n := len(tl.Times)
	x := make([]float64, n+1)
	for i, t := range tl.Times {
		x[i] = t.Sub(t0).Hours()
	}
	x[n] = x[n-1] // the last sample has no width

	// Each Trainer's band over every run of consecutive samples where it holds nodes.
	type run struct {
		start   int
		lo, hi  []float64
		trainer int32
	}
	open := map[int32]*run{}
	var bands []*plotter.Polygon
	closeRun := func(r *run) error {
		var ring plotter.XYs
		for k := range r.hi {
			s := r.start + k
			ring = append(ring, plotter.XY{X: x[s], Y: r.hi[k]}, plotter.XY{X: x[s+1], Y: r.hi[k]})
		}
		for k := len(r.lo) - 1; k >= 0; k-- {
			s := r.start + k
			ring = append(ring, plotter.XY{X: x[s+1], Y: r.lo[k]}, plotter.XY{X: x[s], Y: r.lo[k]})
		}
		pg, err := plotter.NewPolygon(ring)
		if err != nil {
			return err
		}
		pg.Color = trainerColours[int(r.trainer)%len(trainerColours)]
		pg.LineStyle.Width = 0
		bands = append(bands, pg)
		return nil
	}
	var prev []Share
	for s, shares := range tl.Shares {
		off := 0.0
		seen := make(map[int32]bool, len(shares))
		for _, sh := range shares {
			r := open[sh.Trainer]
			if r == nil {
				r = &run{start: s, trainer: sh.Trainer}
				open[sh.Trainer] = r
			}
			r.lo = append(r.lo, off)
			off += float64(sh.Nodes)
			r.hi = append(r.hi, off)
			seen[sh.Trainer] = true
		}
		// Close, in admission order, the runs of Trainers gone since the last sample.
		for _, sh := range prev {
			if !seen[sh.Trainer] {
				if err := closeRun(open[sh.Trainer]); err != nil {
					return nil, fmt.Errorf("timeline: %w", err)
				}
				delete(open, sh.Trainer)
			}
		}
		prev = shares
	}
	for _, sh := range prev {
		if err := closeRun(open[sh.Trainer]); err != nil {
			return nil, fmt.Errorf("timeline: %w", err)
		}
	}
	for _, b := range bands {
		p.Add(b)
	}

	step := func(v []int) plotter.XYs {
		xy := make(plotter.XYs, 0, 2*n)
		for i := range n {
			xy = append(xy, plotter.XY{X: x[i], Y: float64(v[i])}, plotter.XY{X: x[i+1], Y: float64(v[i])})
		}
		return xy
	}
	idle, err := plotter.NewLine(step(tl.Idle))
	if err != nil {
		return nil, fmt.Errorf("timeline: %w", err)
	}
	idle.Color = color.Black
	idle.Width = vg.Points(0.6)
	used, err := plotter.NewLine(step(tl.Used))
	if err != nil {
		return nil, fmt.Errorf("timeline: %w", err)
	}
	used.Color = color.NRGBA{0x30, 0x30, 0x30, 0xff}
	used.Width = vg.Points(0.4)
	used.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
	p.Add(idle, used)
	p.Legend.Add("idle nodes", idle)
	p.Legend.Add("nodes used", used)
	if len(bands) > 0 {
		p.Legend.Add("nodes per Trainer (stacked, admission order)", bands[0])
	}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.XOffs = vg.Points(8)
	p.Y.Min = 0
	top := 1
	for _, v := range tl.Idle {
		top = max(top, v)
	}
	p.Y.Max = 1.25 * float64(top) // headroom for the legend
	p.Y.Tick.Marker = plot.TickerFunc(countTicks)
	return p, nil
}

// countTicks marks node counts with integer labels every round step (1, 2 or 5
// times a power of ten, about five of them), with an unlabelled tick between.
func countTicks(lo, hi float64) []plot.Tick {
	step := niceCeil(max(hi-lo, 1) / 5)
	var ts []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi; v += step {
		ts = append(ts, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
		if mid := v + step/2; mid <= hi {
			ts = append(ts, plot.Tick{Value: mid})
		}
	}
	return ts
}

// niceCeil rounds x > 0 up to 1, 2 or 5 times a power of ten, so that the axis
// ends on a round number and its ticks are integers.
func niceCeil(x float64) float64 {
	m := math.Pow(10, math.Floor(math.Log10(x)))
	for _, f := range []float64{1, 2, 5, 10} {
		if f*m >= x {
			return f * m
		}
	}
	return 10 * m
}
