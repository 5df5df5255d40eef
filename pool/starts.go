package pool

import (
	"fmt"
	"slices"
	"time"

	"github.com/bftrainer/bftrainer/alloc"
)

// What a failed start costs a Trainer: a start that fails gives its nodes
// back at once (StartFailed), and the Trainer may not take nodes again
// until its back-off ends: DefaultStartBackoff after the first failure,
// doubling after each further one in a row; the DefaultStartRetries-th
// failure in a row ends it failed. With the defaults a Trainer that can
// never start is tried 5 times over 7.5 minutes (30 s, 1, 2, 4 min apart)
// and then ends.
const (
	DefaultStartRetries = 5
	DefaultStartBackoff = 30 * time.Second
)

// StartFailed is a change: a start failed and the Trainer gave the nodes
// back (Change.Nodes; Note: the reason, and until when it backs off).
const StartFailed Kind = "unstarted"

// Starts are a Trainer's failed starts in a row.
type Starts struct {
	Failures int       `json:"failures,omitempty"` // in a row; a start that ran resets it
	Last     string    `json:"last,omitempty"`     // the last failure's reason
	RetryAt  time.Time `json:"retry_at,omitzero"`  // it takes no node before this
}

// backingOff reports whether the Trainer may not take nodes now.
func (t *Trainer) backingOff(now time.Time) bool { return t.Starts.RetryAt.After(now) }

// Waiting reports whether an admitted Trainer holds no node: it runs
// nothing, whatever its status says.
func (t *Trainer) Waiting() bool { return t.Status == Running && len(t.Nodes) == 0 }

// startPolicy is the configuration's retries and back-off, defaults
// filled in.
func (c Config) startPolicy() (retries int, backoff time.Duration) {
	retries, backoff = c.StartRetries, c.StartBackoff
	if retries <= 0 {
		retries = DefaultStartRetries
	}
	if backoff <= 0 {
		backoff = DefaultStartBackoff
	}
	return retries, backoff
}

// StartFailed records that starting Trainer id on nodes failed (reason:
// why): those nodes go back to the free pool at once, with no progress,
// node-time or loss booked for them — nothing ran there — and the
// Trainer backs off, or, at its StartRetries-th failure in a row, ends
// failed with the reason. Nodes it does not hold are ignored. ended
// reports that it ended.
func (p *Pool) StartFailed(at time.Time, id string, nodes []string, reason string) (ended bool, err error) {
	t, ok := p.byID[id]
	if !ok {
		return false, fmt.Errorf("start failed %q: %w", id, ErrUnknownTrainer)
	}
	if t.Status != Running {
		return false, nil
	}
	if at.After(p.now) {
		p.accrue(at)
	}
	var back []alloc.Node
	t.Nodes = slices.DeleteFunc(t.Nodes, func(n alloc.Node) bool {
		if slices.Contains(nodes, n.Name) {
			back = append(back, n)
			return true
		}
		return false
	})
	for _, n := range back {
		if pn := p.nodes[n.Name]; pn != nil {
			pn.Trainer = ""
		}
		p.addFree(n)
	}
	if len(t.Nodes) == 0 {
		// The decision's booked cost was for a start that did not happen.
		t.PendingCost = 0
	}
	t.Rate = p.TrueRate(t)
	if len(back) > 0 {
		p.setCount(t)
	}
	retries, backoff := p.cfg.startPolicy()
	t.Starts.Failures++
	t.Starts.Last = reason
	if t.Starts.Failures >= retries {
		p.record(Change{Kind: StartFailed, Trainer: id, Nodes: alloc.Names(back),
			Note: fmt.Sprintf("%s (failure %d of %d: giving up)", reason, t.Starts.Failures, retries)})
		p.end(t, Failed, fmt.Sprintf("its start failed %d times in a row: %s", t.Starts.Failures, reason))
		p.Admit()
		return true, nil
	}
	wait := backoff << (t.Starts.Failures - 1)
	t.Starts.RetryAt = p.now.Add(wait)
	p.record(Change{Kind: StartFailed, Trainer: id, Nodes: alloc.Names(back),
		Note: fmt.Sprintf("%s (failure %d of %d: retried after %v)", reason, t.Starts.Failures, retries, wait)})
	return false, nil
}

// StartRan records that a start of Trainer id ran: its failures in a row
// are forgotten.
func (p *Pool) StartRan(id string) {
	if t, ok := p.byID[id]; ok {
		t.Starts = Starts{}
	}
}

// MeasuredDone is the samples the Trainer itself says it has processed:
// its last progress report, else its last progress-log reading; ok is
// false when it has said nothing, and Done is then the pool's model (its
// curve's rate over the time it held nodes), never a measurement.
func (t *Trainer) MeasuredDone() (samples float64, ok bool) {
	switch {
	case t.Learn.Reports > 0:
		return t.Learn.ReportDone, true
	case t.Learn.Readings > 0:
		return t.Learn.ReadDone, true
	}
	return 0, false
}
