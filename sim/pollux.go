package sim

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// polluxGPUsPerNode is the node of the Pollux measurements: 4 T4 GPUs.
const polluxGPUsPerNode = 4

// polluxRescale is the rescale delay the Pollux simulator assumes, in seconds, both ways.
const polluxRescale = 30.0

// polluxCurve reads one model's measured step times (the Pollux artifact's
// placements.csv and scalability.csv, in dir) and returns its throughput on whole nodes:
// at n nodes with every GPU used (4n replicas), samples/s = replicas × local_bsz /
// step_time, the best over the batch sizes measured. placements.csv gives 1–4 nodes
// (placements "4", "44", …), scalability.csv the larger counts (6, 8, 12, 16). Node
// counts measured in neither are left out (the curve interpolates between them).
func polluxCurve(dir string) (nodes []int, throughput []float64, err error) {
	best := map[int]float64{}
	note := func(n int, v float64) {
		if v > best[n] {
			best[n] = v
		}
	}
	err = readCSVRows(filepath.Join(dir, "placements.csv"), []string{"placement", "local_bsz", "step_time"}, func(f []string) error {
		pl := f[0]
		if strings.Trim(pl, "4") != "" {
			return nil // not every node full
		}
		bsz, step, err := bszStep(f[1], f[2])
		if err != nil {
			return err
		}
		note(len(pl), float64(polluxGPUsPerNode*len(pl))*bsz/step)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	err = readCSVRows(filepath.Join(dir, "scalability.csv"), []string{"num_nodes", "num_replicas", "local_bsz", "step_time"}, func(f []string) error {
		n, err1 := strconv.Atoi(f[0])
		r, err2 := strconv.Atoi(f[1])
		if err := errors.Join(err1, err2); err != nil {
			return err
		}
		if n <= 0 || r != polluxGPUsPerNode*n {
			return nil
		}
		bsz, step, err := bszStep(f[2], f[3])
		if err != nil {
			return err
		}
		note(n, float64(r)*bsz/step)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	if len(best) == 0 {
		return nil, nil, fmt.Errorf("pollux %s: no measurement on whole nodes", dir)
	}
	nodes = []int{0}
	throughput = []float64{0}
	for n := range best {
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	for _, n := range nodes[1:] {
		throughput = append(throughput, best[n])
	}
	return nodes, throughput, nil
}

func bszStep(b, s string) (bsz, step float64, err error) {
	bsz, err1 := strconv.ParseFloat(b, 64)
	step, err2 := strconv.ParseFloat(s, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, 0, err
	}
	if !(bsz > 0) || !(step > 0) {
		return 0, 0, fmt.Errorf("batch size %v, step time %v: want both > 0", bsz, step)
	}
	return bsz, step, nil
}

// readCSVRows calls row with the named columns of every data row of a CSV file.
func readCSVRows(path string, cols []string, row func([]string) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	r := csv.NewReader(f)
	head, err := r.Read()
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	idx := make([]int, len(cols))
	for i, c := range cols {
		if idx[i] = slices.Index(head, c); idx[i] < 0 {
			return fmt.Errorf("%s: no column %q", path, c)
		}
	}
	out := make([]string, len(cols))
	for line := 2; ; line++ {
		rec, err := r.Read()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		for i, k := range idx {
			out[i] = rec[k]
		}
		if err := row(out); err != nil {
			return fmt.Errorf("%s line %d: %w", path, line, err)
		}
	}
}

// PolluxWorkload builds n Trainers from the Pollux measurements of the models in dir
// (one subdirectory per model, read by polluxCurve), dealt round robin in name order, one
// submitted every 36 s from start, as the paper's 1000-job workloads. Each runs on 1 to
// its curve's last node count (16), rescales at polluxRescale both ways, and has work
// single-node time of work: samples = work × its throughput on one node, so every
// model's Trainer is as long on dedicated nodes. The allocator's metric is the speedup
// over one node (as in the paper's ImageNet-spdup workload): one model's samples are not
// another's, so their throughputs do not add up to anything.
func PolluxWorkload(dir string, n int, start time.Time, work time.Duration) ([]Job, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("pollux workload: %w", err)
	}
	type model struct {
		name  string
		nodes []int
		tp    []float64
	}
	var models []model
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		ns, tp, err := polluxCurve(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("pollux workload: %w", err)
		}
		models = append(models, model{e.Name(), ns, tp})
	}
	if len(models) == 0 {
		return nil, fmt.Errorf("pollux workload: no model directory in %s", dir)
	}
	jobs := make([]Job, n)
	for i := range jobs {
		m := models[i%len(models)]
		one := jobCurveAt(m.nodes, m.tp, 1)
		speedup := make([]float64, len(m.tp))
		for k, v := range m.tp {
			speedup[k] = v / one
		}
		jobs[i] = Job{
			ID: fmt.Sprintf("P%05d", i), Model: m.name,
			Submit: start.Add(time.Duration(i) * 36 * time.Second),
			RUp:    polluxRescale, RDown: polluxRescale,
			Min: 1, Max: m.nodes[len(m.nodes)-1],
			Samples: work.Seconds() * one,
			Nodes:   m.nodes, Throughput: m.tp, Metric: speedup,
		}
	}
	return jobs, nil
}

// ShiftWorkload returns the jobs with their submit times moved so that the first is at
// start, the gaps between them kept.
func ShiftWorkload(jobs []Job, start time.Time) []Job {
	if len(jobs) == 0 {
		return nil
	}
	first := jobs[0].Submit
	for _, j := range jobs[1:] {
		if j.Submit.Before(first) {
			first = j.Submit
		}
	}
	d := start.Sub(first)
	out := slices.Clone(jobs)
	for i := range out {
		out[i].Submit = out[i].Submit.Add(d)
	}
	return out
}

// BusyWeek returns the start of the trace's first busy week: the weeks are the 7-day
// spans from the first event, and a week is busy when its time-weighted mean idle node
// count is among the lowest quarter of all whole weeks'. ok is false for a trace shorter
// than a week.
func BusyWeek(t *Trace) (start time.Time, ok bool) {
	if len(t.Events) == 0 {
		return time.Time{}, false
	}
	const week = 7 * 24 * time.Hour
	t0 := t.Events[0].Time
	weeks := int(t.Events[len(t.Events)-1].Time.Sub(t0) / week)
	if weeks == 0 {
		return time.Time{}, false
	}
	area := make([]float64, weeks) // idle node-seconds per week
	idle := 0
	for i, e := range t.Events {
		idle += len(e.Joined) - len(e.Left)
		from, to := e.Time, t0.Add(time.Duration(weeks)*week)
		if i+1 < len(t.Events) && t.Events[i+1].Time.Before(to) {
			to = t.Events[i+1].Time
		}
		for from.Before(to) {
			w := int(from.Sub(t0) / week)
			end := t0.Add(time.Duration(w+1) * week)
			if to.Before(end) {
				end = to
			}
			area[w] += float64(idle) * end.Sub(from).Seconds()
			from = end
		}
	}
	sorted := slices.Clone(area)
	slices.Sort(sorted)
	quartile := sorted[(len(sorted)-1)/4]
	for w, a := range area {
		if a <= quartile {
			return t0.Add(time.Duration(w) * week), true
		}
	}
	return time.Time{}, false // unreachable: the quartile is one of the weeks
}
