package journal

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bftrainer/bftrainer/names"
	"github.com/bftrainer/bftrainer/store"
)

// version is the record format's version.
const version = 1

type wireRecord struct {
	V      int         `json:"v"`
	ID     string      `json:"id"`
	At     time.Time   `json:"at"`
	Events []wireEvent `json:"events"`
}

type wireEvent struct {
	At      time.Time       `json:"at"`
	Kind    store.Kind      `json:"kind"`
	Source  string          `json:"source,omitempty"`
	Context string          `json:"context,omitempty"`
	Job     string          `json:"job,omitempty"`
	Trainer string          `json:"trainer,omitempty"`
	User    string          `json:"user,omitempty"`
	Nodes   []string        `json:"nodes,omitempty"`
	Count   int             `json:"count,omitempty"`
	Value   *float64        `json:"value,omitempty"`
	Ms      *float64        `json:"ms,omitempty"`
	Detail  json.RawMessage `json:"detail,omitempty"`
	Error   string          `json:"error,omitempty"`
}

// recordName is a committed record's file name: it sorts in the hooks'
// order.
func recordName(at time.Time, id ID) string {
	return fmt.Sprintf("%019d-%s%s", at.UnixNano(), id, recordSuffix)
}

// parseName reads a committed record's name; ok is false for any other
// name.
func parseName(name string) (at int64, id ID, ok bool) {
	base, found := strings.CutSuffix(name, recordSuffix)
	ts, hexID, found2 := strings.Cut(base, "-")
	if !found || !found2 || len(ts) != 19 {
		return 0, ID{}, false
	}
	at, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || at < 0 {
		return 0, ID{}, false
	}
	id, err = ParseID(hexID)
	return at, id, err == nil
}

// encode fills in the record's id and time if unset, checks it as the
// reader will, and returns the file's bytes.
func encode(r *Record) ([]byte, error) {
	if r.At.IsZero() {
		r.At = time.Now()
	}
	if r.ID == (ID{}) {
		id, err := NewID()
		if err != nil {
			return nil, err
		}
		r.ID = id
	}
	w := wireRecord{V: version, ID: r.ID.String(), At: r.At.UTC()}
	for _, e := range r.Events {
		we := wireEvent{At: e.At.UTC(), Kind: e.Kind, Source: e.Source, Context: e.Context, Job: e.Job,
			Trainer: e.Trainer, User: e.User, Nodes: e.Nodes, Count: e.Count, Detail: e.Detail, Error: e.Error}
		if e.At.IsZero() {
			we.At = w.At
		}
		if e.HasVal {
			we.Value = &e.Value
		}
		if e.HasMs {
			we.Ms = &e.Ms
		}
		w.Events = append(w.Events, we)
	}
	if err := w.check(); err != nil {
		return nil, fmt.Errorf("record: %w", err)
	}
	b, err := json.Marshal(w)
	if err != nil {
		return nil, fmt.Errorf("record: %w", err)
	}
	b = append(b, '\n')
	if len(b) > MaxRecord {
		return nil, fmt.Errorf("record: %d bytes, more than %d", len(b), MaxRecord)
	}
	return b, nil
}

// decode reads a record file's bytes strictly: one JSON object, a
// newline, nothing else, no unknown field.
func decode(b []byte) (Record, error) {
	body, ok := bytes.CutSuffix(b, []byte("\n"))
	if !ok {
		return Record{}, errors.New("truncated: no final newline")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var w wireRecord
	if err := dec.Decode(&w); err != nil {
		return Record{}, fmt.Errorf("not a record: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Record{}, errors.New("not a record: data after the object")
	}
	if err := w.check(); err != nil {
		return Record{}, err
	}
	id, err := ParseID(w.ID)
	if err != nil {
		return Record{}, err
	}
	r := Record{ID: id, At: w.At}
	for _, we := range w.Events {
		e := store.Event{At: we.At, Kind: we.Kind, Source: we.Source, Context: we.Context, Job: we.Job,
			Trainer: we.Trainer, User: we.User, Nodes: we.Nodes, Count: we.Count, Detail: we.Detail, Error: we.Error}
		if we.Value != nil {
			e.Value, e.HasVal = *we.Value, true
		}
		if we.Ms != nil {
			e.Ms, e.HasMs = *we.Ms, true
		}
		r.Events = append(r.Events, e)
	}
	return r, nil
}

// check is what a record must be, for writer and reader alike.
func (w *wireRecord) check() error {
	if w.V != version {
		return fmt.Errorf("record version %d, want %d", w.V, version)
	}
	if _, err := ParseID(w.ID); err != nil {
		return err
	}
	if w.At.UnixNano() <= 0 {
		return fmt.Errorf("record time %v out of range", w.At)
	}
	if len(w.Events) == 0 || len(w.Events) > maxEvents {
		return fmt.Errorf("%d events, want 1 to %d", len(w.Events), maxEvents)
	}
	for i, e := range w.Events {
		if err := e.check(); err != nil {
			return fmt.Errorf("event %d: %w", i, err)
		}
	}
	return nil
}

func (e *wireEvent) check() error {
	if !slices.Contains(kinds, e.Kind) {
		return fmt.Errorf("kind %q is not one a hook writes", e.Kind)
	}
	if e.At.UnixNano() <= 0 {
		return fmt.Errorf("time %v out of range", e.At)
	}
	if e.Job != "" {
		if err := names.ValidateJob(e.Job); err != nil {
			return err
		}
	}
	if e.User != "" {
		if err := names.ValidateUser(e.User); err != nil {
			return err
		}
	}
	for _, n := range e.Nodes {
		if err := names.ValidateNode(n); err != nil {
			return err
		}
	}
	if len(e.Detail) > 0 && !json.Valid(e.Detail) {
		return errors.New("detail is not JSON")
	}
	return nil
}

// events are the record's events as the history keeps them, each with
// its origin.
func (r Record) events() []store.Event {
	out := make([]store.Event, len(r.Events))
	for i, e := range r.Events {
		e.ID = 0
		e.Origin = fmt.Sprintf("%s.%d", r.ID, i)
		out[i] = e
	}
	return out
}

// MarshalJSON writes the record as its file holds it, without the final
// newline: what a hook logs when neither the journal nor the fallback
// took the record, so that it can be put back by hand (saved, with a
// newline, as Name in the journal, mode 0640, owned by root).
func (r Record) MarshalJSON() ([]byte, error) {
	b, err := encode(&r)
	return bytes.TrimSuffix(b, []byte("\n")), err
}

// Name is the record's file name in the journal (its id and time must be
// set).
func (r Record) Name() string { return recordName(r.At, r.ID) }
