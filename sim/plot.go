package sim

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// trainerColours cycle over the Trainers' bands; neighbours in admission order differ.
var trainerColours = [...]string{
	"#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#edc948",
	"#76b7b2", "#e15759", "#9c755f", "#ff9da7", "#bab0ac",
}

// The timeline's canvas, in SVG user units (pixels at 96 dpi: 10 × 4.4 inches).
const (
	plotW, plotH             = 960.0, 420.0
	marginL, marginR         = 64.0, 24.0
	marginTop, marginBottom  = 58.0, 48.0
	fontSize, titleFontSize  = 12.0, 14.0
	legendLine, legendIndent = 16.0, 10.0
)

// WriteTimelineSVG draws a replay's timeline (res.Timeline) with WriteTimeline; under
// the title a second line states the range drawn: the hours replayed, from when, and
// why the replay ended there.
func WriteTimelineSVG(w io.Writer, res *Result, title string) error {
	if res.Timeline == nil || len(res.Timeline.Times) == 0 {
		return fmt.Errorf("timeline: no samples (set Options.Timeline)")
	}
	return WriteTimeline(w, res.Timeline, title, subtitle(res))
}

// WriteTimeline draws tl as an SVG on w: the nodes each Trainer holds, stacked in
// admission order (one colour per Trainer, cycling, by Share.Trainer), whose top is the
// nodes used, and the idle nodes offered as a line, over hours from the first sample.
// Values are steps: each sample holds until the next. The title and the subtitle under
// it are the caller's: they should say what the x-range is (a replay's hours, a live
// window).
//
// It is a small SVG writer of its own, not a plotting library: every bftrainer process —
// each scheduler hook among them — would otherwise pay that library's initialisation.
func WriteTimeline(w io.Writer, tl *Timeline, title, sub string) error {
	if tl == nil || len(tl.Times) == 0 {
		return fmt.Errorf("timeline: no samples")
	}
	c := newCanvas(w, tl)
	c.header(title, sub)
	c.grid()
	c.bands()
	c.steps(tl.Used, `stroke="#303030" stroke-width="0.8" stroke-dasharray="3 3"`)
	c.steps(tl.Idle, `stroke="#000" stroke-width="1"`)
	c.axes()
	c.legend()
	c.printf("</svg>\n")
	if c.err != nil {
		return fmt.Errorf("timeline: %w", c.err)
	}
	if err := c.w.Flush(); err != nil {
		return fmt.Errorf("timeline: %w", err)
	}
	return nil
}

// subtitle states the x-range drawn, so that the title never promises more than the
// plot shows (a replay stops once every Trainer has finished).
func subtitle(res *Result) string {
	tl := res.Timeline
	t0, end := tl.Times[0], tl.Times[len(tl.Times)-1]
	why := "the trace ended"
	if s := res.Summary; s.Finished == s.Trainers {
		why = "every Trainer had finished"
	}
	return fmt.Sprintf("hours 0–%s from %s UTC: the %d events replayed, until %s",
		Hours(end.Sub(t0)), t0.UTC().Format("2006-01-02 15:04"), res.Summary.Events, why)
}

// Hours formats a plot's x-range as its titles give it: hours with one decimal.
func Hours(d time.Duration) string {
	return strconv.FormatFloat(d.Hours(), 'f', 1, 64)
}

// canvas maps hours and node counts to SVG coordinates and writes elements.
type canvas struct {
	w      *bufio.Writer
	err    error
	tl     *Timeline
	x      []float64 // hours of each sample from t0, and the last again (no width)
	hours  float64   // x range: [0, hours]
	top    float64   // y range: [0, top]
	x0, x1 float64   // plot area
	y0, y1 float64   // y0 bottom, y1 top
}

func newCanvas(w io.Writer, tl *Timeline) *canvas {
	c := &canvas{w: bufio.NewWriter(w), tl: tl,
		x0: marginL, x1: plotW - marginR, y0: plotH - marginBottom, y1: marginTop}
	n := len(tl.Times)
	c.x = make([]float64, n+1)
	for i, t := range tl.Times {
		c.x[i] = t.Sub(tl.Times[0]).Hours()
	}
	c.x[n] = c.x[n-1]
	c.hours = max(c.x[n], 1.0/60) // at least a minute wide
	most := 1
	for _, v := range tl.Idle {
		most = max(most, v)
	}
	c.top = 1.25 * float64(most) // headroom for the legend
	return c
}

func (c *canvas) printf(format string, args ...any) {
	if c.err == nil {
		_, c.err = fmt.Fprintf(c.w, format, args...)
	}
}

func (c *canvas) px(hours float64) float64 { return c.x0 + (c.x1-c.x0)*hours/c.hours }
func (c *canvas) py(nodes float64) float64 { return c.y0 - (c.y0-c.y1)*nodes/c.top }

// num formats a coordinate: one decimal is a tenth of a pixel.
func num(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

func (c *canvas) header(title, sub string) {
	c.printf(`<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="%s" height="%s" viewBox="0 0 %s %s" font-family="sans-serif" font-size="%s">
<rect width="100%%" height="100%%" fill="#fff"/>
<text x="%s" y="22" font-size="%s" text-anchor="middle">%s</text>
<text x="%s" y="40" fill="#444" text-anchor="middle">%s</text>
`, num(plotW), num(plotH), num(plotW), num(plotH), num(fontSize),
		num((c.x0+c.x1)/2), num(titleFontSize), escape(title), num((c.x0+c.x1)/2), escape(sub))
}

// grid draws light lines at the labelled ticks, under the data.
func (c *canvas) grid() {
	c.printf(`<g stroke="#e4e4e4" stroke-width="1">` + "\n")
	for _, t := range hourTicks(c.hours) {
		if t.label != "" {
			c.printf(`<line x1="%s" y1="%s" x2="%s" y2="%s"/>`+"\n", num(c.px(t.v)), num(c.y0), num(c.px(t.v)), num(c.y1))
		}
	}
	for _, t := range countTicks(c.top) {
		if t.label != "" {
			c.printf(`<line x1="%s" y1="%s" x2="%s" y2="%s"/>`+"\n", num(c.x0), num(c.py(t.v)), num(c.x1), num(c.py(t.v)))
		}
	}
	c.printf("</g>\n")
}

// bands draws each Trainer's band over every run of consecutive samples where it
// holds nodes, stacked in admission order, as one filled polygon per run.
func (c *canvas) bands() {
	type run struct {
		start   int
		lo, hi  []float64
		trainer int32
	}
	open := map[int32]*run{}
	closeRun := func(r *run) {
		var b strings.Builder
		for k := range r.hi {
			s := r.start + k
			fmt.Fprintf(&b, "%s,%s %s,%s ", num(c.px(c.x[s])), num(c.py(r.hi[k])), num(c.px(c.x[s+1])), num(c.py(r.hi[k])))
		}
		for k := len(r.lo) - 1; k >= 0; k-- {
			s := r.start + k
			fmt.Fprintf(&b, "%s,%s %s,%s ", num(c.px(c.x[s+1])), num(c.py(r.lo[k])), num(c.px(c.x[s])), num(c.py(r.lo[k])))
		}
		c.printf(`<polygon fill="%s" points="%s"/>`+"\n", trainerColours[int(r.trainer)%len(trainerColours)], strings.TrimSpace(b.String()))
	}
	var prev []Share
	for s, shares := range c.tl.Shares {
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
				closeRun(open[sh.Trainer])
				delete(open, sh.Trainer)
			}
		}
		prev = shares
	}
	for _, sh := range prev {
		closeRun(open[sh.Trainer])
	}
}

// steps draws v as a step line: each sample holds until the next.
func (c *canvas) steps(v []int, style string) {
	var b strings.Builder
	for i := range v {
		y := num(c.py(float64(v[i])))
		fmt.Fprintf(&b, "%s,%s %s,%s ", num(c.px(c.x[i])), y, num(c.px(c.x[i+1])), y)
	}
	c.printf(`<polyline fill="none" %s points="%s"/>`+"\n", style, strings.TrimSpace(b.String()))
}

// axes draws both axes with their ticks and labels.
func (c *canvas) axes() {
	c.printf(`<g stroke="#000" stroke-width="1"><line x1="%s" y1="%s" x2="%s" y2="%s"/><line x1="%s" y1="%s" x2="%s" y2="%s"/></g>`+"\n",
		num(c.x0), num(c.y0), num(c.x1), num(c.y0), num(c.x0), num(c.y0), num(c.x0), num(c.y1))
	for _, t := range hourTicks(c.hours) {
		x, l := c.px(t.v), 3.0
		if t.label != "" {
			l = 6
			c.printf(`<text x="%s" y="%s" text-anchor="middle">%s</text>`+"\n", num(x), num(c.y0+20), t.label)
		}
		c.printf(`<line stroke="#000" x1="%s" y1="%s" x2="%s" y2="%s"/>`+"\n", num(x), num(c.y0), num(x), num(c.y0+l))
	}
	for _, t := range countTicks(c.top) {
		y, l := c.py(t.v), 3.0
		if t.label != "" {
			l = 6
			c.printf(`<text x="%s" y="%s" text-anchor="end">%s</text>`+"\n", num(c.x0-9), num(y+4), t.label)
		}
		c.printf(`<line stroke="#000" x1="%s" y1="%s" x2="%s" y2="%s"/>`+"\n", num(c.x0-l), num(y), num(c.x0), num(y))
	}
	c.printf(`<text x="%s" y="%s" text-anchor="middle">hours from start</text>`+"\n", num((c.x0+c.x1)/2), num(plotH-10))
	c.printf(`<text transform="translate(16 %s) rotate(-90)" text-anchor="middle">nodes</text>`+"\n", num((c.y0+c.y1)/2))
}

// legend names the three things drawn, top left inside the plot.
func (c *canvas) legend() {
	x, y := c.x0+legendIndent, c.y1+legendLine
	c.printf(`<g>
<rect x="%s" y="%s" width="%s" height="%s" fill="#fff" fill-opacity="0.85"/>
<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#000" stroke-width="1"/><text x="%s" y="%s">idle nodes</text>
<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#303030" stroke-width="0.8" stroke-dasharray="3 3"/><text x="%s" y="%s">nodes used</text>
<rect x="%s" y="%s" width="24" height="9" fill="%s"/><text x="%s" y="%s">nodes per Trainer (stacked, admission order)</text>
</g>
`, num(x-4), num(y-legendLine+2), "320", num(3*legendLine+4),
		num(x), num(y-4), num(x+24), num(y-4), num(x+30), num(y),
		num(x), num(y+legendLine-4), num(x+24), num(y+legendLine-4), num(x+30), num(y+legendLine),
		num(x), num(y+2*legendLine-9), trainerColours[0], num(x+30), num(y+2*legendLine))
}

// tick is an axis mark; an empty label marks a minor tick.
type tick struct {
	v     float64
	label string
}

// hourTicks marks hours from 0 to span with labels every round step — 10 or 30
// minutes (labelled h:mm), then 1, 2, 3, 4, 6, 12 or 24 hours, then days — chosen for at most 16
// labels, and unlabelled ticks between: every hour up to 6-hour steps, quarter steps
// beyond, so that hours can be read off any plot.
func hourTicks(span float64) []tick {
	steps := []float64{1.0 / 6, 0.5, 1, 2, 3, 4, 6, 12, 24, 48, 72, 168, 336, 720}
	step := steps[len(steps)-1]
	for _, s := range steps {
		if span/s <= 15 { // 16 labels, 0 included
			step = s
			break
		}
	}
	minor := step / 4
	switch {
	case step <= 1:
		minor = step / 2
	case step <= 6:
		minor = 1
	}
	per := int(math.Round(step / minor))
	var ts []tick
	for k := 0; float64(k)*minor <= span*(1+1e-9); k++ {
		t := tick{v: float64(k) * minor}
		if k%per == 0 {
			t.label = strconv.FormatFloat(t.v, 'f', -1, 64)
			if h, m := math.Modf(t.v); m != 0 {
				t.label = fmt.Sprintf("%d:%02d", int(h), int(math.Round(m*60))) // h:mm
			}
		}
		ts = append(ts, t)
	}
	return ts
}

// countTicks marks node counts from 0 to top with integer labels every round step (1,
// 2 or 5 times a power of ten, about five of them), with an unlabelled tick between.
func countTicks(top float64) []tick {
	step := niceCeil(max(top, 1) / 5)
	var ts []tick
	for k := 0; float64(k)*step <= top; k++ {
		v := float64(k) * step
		ts = append(ts, tick{v: v, label: strconv.FormatFloat(v, 'f', -1, 64)})
		if mid := v + step/2; mid <= top {
			ts = append(ts, tick{v: mid})
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

// escape makes text safe inside an SVG element.
func escape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}
