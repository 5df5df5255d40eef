package trainer

// A Trainer's progress log: the launcher-side source of its throughput
// (docs/trainers.md, "Progress from the Trainer's log").

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/bftrainer/bftrainer/trainer/wire"
)

// ProgressLog is a progress log a Trainer's spec declares: a file on its
// nodes to which the training program appends a line as it goes (one per
// step, say). The runner reads its latest complete line now and then and
// turns it into what a `bftrainer progress` report says: the samples the
// whole job has done, at a time. A line is either a JSON object
//
//	{"time": 1795984786.971, "samples": 1056, "step": 31}
//
// (time: Unix seconds, a number or a string, or RFC 3339) or
// contrib/trainer/train.py's text form, Unix seconds first, then
// key=value words:
//
//	1795984786.971 node=B pid=430 rank=1 world=3 restart=0 step=31 samples=1056 loss=0.547927
//
// The samples are the value of SamplesKey ("samples" unless set); a line
// without it, when SamplesPerStep is set, counts step × SamplesPerStep.
// A "world" value, where there is one, is kept with the reading.
type ProgressLog struct {
	// Path is the file on the Trainer's nodes: absolute, or relative to
	// the spec's workdir.
	Path           string  `json:"path"`
	SamplesKey     string  `json:"samples_key,omitempty"`
	SamplesPerStep float64 `json:"samples_per_step,omitempty"`
}

// Reading is one line of a progress log: when it was written (by the
// node's clock) and the samples done then.
type Reading struct {
	At      time.Time
	Samples float64
	World   int // the line's "world", 0 when it has none
}

// Check validates a declared progress log.
func (p *ProgressLog) Check() error {
	if p.Path == "" || strings.ContainsRune(p.Path, 0) || strings.ContainsRune(p.Path, '\n') {
		return fmt.Errorf("progress log: path %q: want a file name", p.Path)
	}
	if strings.ContainsAny(p.SamplesKey, " =\n\t\"\x00") {
		return fmt.Errorf("progress log: samples key %q: want a plain word", p.SamplesKey)
	}
	if s := p.SamplesPerStep; s < 0 || math.IsNaN(s) || math.IsInf(s, 0) {
		return fmt.Errorf("progress log: samples per step %v: want ≥ 0", s)
	}
	return nil
}

// Resolve returns the log's absolute path on the nodes: Path, or Path
// below workdir when it is relative.
func (p *ProgressLog) Resolve(workdir string) (string, error) {
	path := p.Path
	if !filepath.IsAbs(path) {
		if !filepath.IsAbs(workdir) {
			return "", fmt.Errorf("progress log %q is relative, and the workdir %q is not absolute", p.Path, workdir)
		}
		path = filepath.Join(workdir, path)
	}
	path = filepath.Clean(path)
	return path, wire.ValidateLogPath(path)
}

func (p *ProgressLog) samplesKey() string {
	if p.SamplesKey == "" {
		return "samples"
	}
	return p.SamplesKey
}

// ParseLine reads one line of a progress log; ok is false for a line that
// says no time or no samples (a line of other output, one cut short).
func (p *ProgressLog) ParseLine(line string) (r Reading, ok bool) {
	line = strings.TrimSpace(line)
	if strings.HasPrefix(line, "{") {
		return p.parseJSON(line)
	}
	fs := strings.Fields(line)
	if len(fs) < 2 {
		return r, false
	}
	at, err := parseTime(fs[0])
	if err != nil {
		return r, false
	}
	vals := map[string]string{}
	for _, f := range fs[1:] {
		if k, v, ok := strings.Cut(f, "="); ok {
			vals[k] = v
		}
	}
	num := func(k string) (float64, bool) {
		v, ok := vals[k]
		if !ok {
			return 0, false
		}
		x, err := strconv.ParseFloat(v, 64)
		return x, err == nil
	}
	return p.reading(at, num)
}

func (p *ProgressLog) parseJSON(line string) (r Reading, ok bool) {
	var m map[string]json.RawMessage
	dec := json.NewDecoder(strings.NewReader(line))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		return r, false
	}
	raw, ok := m["time"]
	if !ok {
		return r, false
	}
	var at time.Time
	var s string
	var n json.Number
	switch {
	case json.Unmarshal(raw, &n) == nil:
		at, ok = unixNumber(n.String())
	case json.Unmarshal(raw, &s) == nil:
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
			at, ok = t, true
		} else {
			at, ok = unixNumber(s)
		}
	default:
		ok = false
	}
	if !ok {
		return r, false
	}
	num := func(k string) (float64, bool) {
		raw, ok := m[k]
		if !ok {
			return 0, false
		}
		var x float64
		if json.Unmarshal(raw, &x) != nil {
			return 0, false
		}
		return x, true
	}
	return p.reading(at, num)
}

// reading is a line's samples (or steps) and world, given how to read a
// number of it.
func (p *ProgressLog) reading(at time.Time, num func(key string) (float64, bool)) (Reading, bool) {
	r := Reading{At: at}
	samples, ok := num(p.samplesKey())
	if !ok && p.SamplesPerStep > 0 {
		var step float64
		if step, ok = num("step"); ok {
			samples = step * p.SamplesPerStep
		}
	}
	if !ok || samples < 0 || math.IsNaN(samples) || math.IsInf(samples, 0) {
		return r, false
	}
	r.Samples = samples
	if w, ok := num("world"); ok && w >= 1 && w == math.Trunc(w) && w < 1e6 {
		r.World = int(w)
	}
	return r, true
}

func unixNumber(s string) (time.Time, bool) {
	t, err := parseTime(s)
	return t, err == nil
}

// parseTime reads Unix seconds (wire.ParseUnix) no later than year
// 9999: a later time cannot be saved (JSON's RFC 3339).
func parseTime(s string) (time.Time, error) {
	t, err := wire.ParseUnix(s)
	if err != nil || t.Unix() <= 0 || t.Year() > 9999 {
		return time.Time{}, errors.New("not Unix seconds")
	}
	return t, nil
}

// LastReading is the latest complete line of a log's end that reads as
// progress (ParseLine). t.Data's bytes after its last newline are a line
// still being written (or torn by a kill), and, when t does not start at
// the file's beginning, its bytes before the first newline are a line's
// end: both are left out.
func (p *ProgressLog) LastReading(t wire.Tail) (Reading, bool) {
	data := t.Data
	end := bytes.LastIndexByte(data, '\n')
	if end < 0 {
		return Reading{}, false
	}
	data = data[:end]
	start := 0
	if t.Offset > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			return Reading{}, false
		}
		start = i + 1
	}
	data = data[start:]
	for len(data) > 0 {
		i := bytes.LastIndexByte(data, '\n')
		line := data[i+1:]
		if r, ok := p.ParseLine(string(line)); ok {
			return r, true
		}
		if i < 0 {
			break
		}
		data = data[:i]
	}
	return Reading{}, false
}
