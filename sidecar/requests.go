package sidecar

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/names"
	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/store"
	"github.com/bftrainer/bftrainer/trainer"
)

// SubmitRequest is a Trainer's submission, and the detail of a submit
// event. Max 0 means the curve's last point; an empty ID is generated.
type SubmitRequest struct {
	ID      string       `json:"id"`
	Min     int          `json:"min"`
	Max     int          `json:"max"`
	Curve   alloc.Curve  `json:"curve"`
	Weight  float64      `json:"weight,omitempty"`
	RUp     float64      `json:"rescale_up_s"`
	RDown   float64      `json:"rescale_down_s"`
	Samples float64      `json:"samples,omitempty"`
	Launch  store.Launch `json:"launch"`
	// Model names what it trains (optional): a learning Trainer is planned
	// on the curve learned of the others of its model (pool/models.go).
	Model string `json:"model,omitempty"`
}

// spec is what the pool takes from the request.
func (r *SubmitRequest) spec(owner string, at time.Time) pool.Spec {
	return pool.Spec{ID: r.ID, Owner: owner, Min: r.Min, Max: r.Max, Curve: r.Curve,
		Weight: r.Weight, RUp: r.RUp, RDown: r.RDown, Samples: r.Samples, Submit: at, Model: r.Model}
}

// exitDetail is the detail of an exit event.
type exitDetail struct {
	Status pool.Status `json:"status"`
	Note   string      `json:"note,omitempty"`
	// Progress, on an end row: "measured" when the Trainer reported its
	// progress (or its log was read), "modelled" when the row's value is
	// the pool's model of it.
	Progress string `json:"progress,omitempty"`
}

// progressDetail is the detail of a progress event.
type progressDetail struct {
	Nodes int `json:"nodes,omitempty"` // the nodes it trained on since its previous report
}

// Receipt says how a request was taken.
type Receipt struct {
	ID      string // the Trainer's name (generated for a submission without one)
	Spooled bool   // dropped in the spool for the root reconciler, not recorded yet
	// Unchecked is why the caller's right to act on the Trainer could not
	// be checked before spooling (the database unreadable): the reconciler
	// checks it, with the same rule, and refuses the request if need be.
	Unchecked error
}

// checkSubmit is the one check of a submission, wherever it comes from
// (the CLI, the spool, the fold): the Trainer's name, its launcher and
// launch spec, and its model as the pool would take it.
func checkSubmit(cfg pool.Config, launchers trainer.Kinds, id string, req *SubmitRequest) error {
	if err := names.ValidateTrainer(id); err != nil {
		return err
	}
	if err := launchers.CheckLaunch(req.Launch.Launcher, req.Launch.Spec); err != nil {
		return err
	}
	if req.Model != "" {
		if err := names.ValidateTrainer(req.Model); err != nil {
			return fmt.Errorf("model %q: 1 to 64 letters, digits and - _ . (not first): %w", req.Model, names.ErrTrainer)
		}
	}
	return cfg.CheckSpec(req.spec("", time.Time{}))
}

// mayAct is the one authorisation rule: user may act on a Trainer owned
// by owner when it is the owner, an admin (root always is), or nobody —
// events the reconciler writes itself (the runner's exits) have no user.
func mayAct(user, owner string, admin func(string) bool) bool {
	return user == "" || user == owner || user == "root" || (admin != nil && admin(user))
}

// Submit checks a submission and records it (then re-plans), or, when
// this process may not write the database, spools it for the root
// reconciler, which checks it again: a spooled file need not come from
// this code.
func (c *Core) Submit(ctx context.Context, req SubmitRequest) (Receipt, error) {
	now := c.o.Now()
	if req.ID == "" {
		req.ID = fmt.Sprintf("%s-%s", c.o.User(), strconv.FormatInt(now.UnixMilli(), 36))
	}
	if req.Max == 0 && len(req.Curve.Nodes) > 0 {
		req.Max = req.Curve.Nodes[len(req.Curve.Nodes)-1]
	}
	if err := checkSubmit(c.o.Pool, c.o.Launchers, req.ID, &req); err != nil {
		return Receipt{}, invalid(err)
	}
	if c.o.Start != nil {
		if err := c.o.Start.check(c.o.User(), req.Launch); err != nil {
			return Receipt{}, fmt.Errorf("trainer %q can never start: %w", req.ID, err)
		}
	}
	detail, err := json.Marshal(req)
	if err != nil {
		return Receipt{}, err
	}
	return c.request(ctx, store.Event{At: now, Kind: store.KindSubmit, Source: "cli", Trainer: req.ID, Detail: detail})
}

// Cancel cancels a Trainer. It is refused at once when the Trainer is not
// active or not the caller's, whether the request would be recorded or
// spooled; the reconciler checks a spooled one again.
func (c *Core) Cancel(ctx context.Context, id string) (Receipt, error) {
	if err := names.ValidateTrainer(id); err != nil {
		return Receipt{}, invalid(err)
	}
	unchecked, err := c.authorise(ctx, id, "cancel")
	if err != nil {
		return Receipt{}, err
	}
	rc, err := c.request(ctx, store.Event{At: c.o.Now(), Kind: store.KindCancel, Source: "cli", Trainer: id})
	rc.Unchecked = unchecked
	return rc, err
}

// Progress records a Trainer's report of the samples it has processed so
// far (its total). Only its owner's processes (or root, or an admin) may
// send one: refused at once otherwise, and by the fold for a spooled one.
//
// nodes, when > 0, is how many nodes the Trainer trained on since its
// previous report (its detail `{"nodes":N}`): the curve learner then
// tells a Trainer still at its old size, or restarting, from its rate
// (pool.ProgressOn).
func (c *Core) Progress(ctx context.Context, id string, samples float64, nodes int) (Receipt, error) {
	if err := names.ValidateTrainer(id); err != nil {
		return Receipt{}, invalid(err)
	}
	if samples < 0 || samples != samples {
		return Receipt{}, invalid(fmt.Errorf("samples must be ≥ 0"))
	}
	if nodes < 0 {
		return Receipt{}, invalid(fmt.Errorf("nodes must be ≥ 0"))
	}
	unchecked, err := c.authorise(ctx, id, "report progress for")
	if err != nil {
		return Receipt{}, err
	}
	ev := store.Event{At: c.o.Now(), Kind: store.KindProgress, Source: "trainer", Trainer: id, Value: samples, HasVal: true}
	if nodes > 0 {
		ev.Detail, _ = json.Marshal(progressDetail{Nodes: nodes}) // cannot fail
	}
	rc, err := c.request(ctx, ev)
	rc.Unchecked = unchecked
	return rc, err
}

// authorise is the front door's check of a request on a Trainer: it must
// be active and the caller may act on it (mayAct), read from the
// database, which every user may read. When it cannot be read, unchecked
// says why and the request goes on: the reconciler decides by the same
// rule. err refuses the request (ErrDenied, or no such active Trainer).
func (c *Core) authorise(ctx context.Context, id, verb string) (unchecked, err error) {
	db, err := c.openRead(ctx)
	if err != nil {
		if c.canWrite() {
			return nil, err // we would record it directly: the same error then
		}
		return err, nil
	}
	tr, ok, err := db.Trainer(ctx, id)
	db.Close()
	if err != nil {
		if c.canWrite() {
			return nil, err
		}
		return err, nil
	}
	if !ok || !tr.Status.Active() {
		if ok {
			return nil, fmt.Errorf("no active Trainer named %q: it is %s", id, tr.Status)
		}
		return nil, fmt.Errorf("no active Trainer named %q", id)
	}
	if me := c.o.User(); !mayAct(me, tr.Owner, c.o.Admins) {
		return nil, fmt.Errorf("%w: %s may not %s %s, which belongs to %s", ErrDenied, me, verb, id, tr.Owner)
	}
	return nil, nil
}

// request records an input event as the caller, directly when this
// process may write the database (and re-plans, but for a progress
// report), or spools it for the root reconciler.
func (c *Core) request(ctx context.Context, ev store.Event) (Receipt, error) {
	ev.User = c.o.User()
	rc := Receipt{ID: ev.Trainer}
	if !c.canWrite() {
		sp := &spool{Dir: c.o.Spool}
		if _, err := sp.put(spoolRequest{Kind: ev.Kind, Trainer: ev.Trainer, Value: ev.Value, Detail: ev.Detail, At: ev.At}); err != nil {
			return rc, fmt.Errorf("%w%.0w", err, ErrSpool)
		}
		rc.Spooled = true
		return rc, nil
	}
	db, err := c.open(ctx)
	if err != nil {
		return rc, err
	}
	defer db.Close()
	if ev.Kind == store.KindSubmit {
		if _, exists, err := db.Trainer(ctx, ev.Trainer); err != nil {
			return rc, err
		} else if exists {
			return rc, invalid(fmt.Errorf("a Trainer named %q already exists; choose another name", ev.Trainer))
		}
	}
	if err := sealEnv(c.o.RunnerState, &ev); err != nil {
		return rc, err
	}
	if _, err := db.Append(ctx, ev); err != nil {
		return rc, err
	}
	if ev.Kind == store.KindProgress {
		return rc, nil
	}
	return rc, c.commandRound(ctx, db)
}

// sealEnv takes a submission's environment values out of its event before
// it is recorded (trainer.SealEnv): the database is every user's to read,
// the values are its owner's. They go to a root-only file under the
// runner's state, which the runner merges back when it starts the
// Trainer. A detail that does not decode is left to the fold to refuse.
func sealEnv(runnerState string, ev *store.Event) error {
	if ev.Kind != store.KindSubmit {
		return nil
	}
	var req SubmitRequest
	if json.Unmarshal(ev.Detail, &req) != nil {
		return nil
	}
	spec, err := trainer.SealEnv(runnerState, req.Launch.Spec)
	if err != nil {
		return fmt.Errorf("submit %q: %w", ev.Trainer, err)
	}
	if bytes.Equal(spec, req.Launch.Spec) {
		return nil
	}
	req.Launch.Spec = spec
	detail, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("submit %q: %w", ev.Trainer, err)
	}
	ev.Detail = detail
	return nil
}

// Nodes records that nodes join (join) or leave the pool, by hand or for a
// scheduler without hooks: exprs are names or hostlist expressions, job
// the scheduler job the change belongs to (guards against late events).
// It re-plans unless noReconcile, and returns the nodes recorded.
func (c *Core) Nodes(ctx context.Context, join bool, exprs []string, job string, noReconcile bool) ([]string, error) {
	kind := store.KindLeave
	if join {
		kind = store.KindJoin
	}
	if len(exprs) == 0 {
		return nil, invalid(fmt.Errorf("node %s: name at least one node (e.g. n[1-4])", kind))
	}
	var nodes []string
	seen := map[string]bool{}
	for _, e := range exprs {
		ns, err := names.ExpandHostlist(e)
		if err != nil {
			return nil, invalid(err)
		}
		for _, n := range ns {
			if !seen[n] {
				seen[n] = true
				nodes = append(nodes, n)
			}
		}
	}
	if job != "" {
		if err := names.ValidateJob(job); err != nil {
			return nil, invalid(err)
		}
	}
	db, err := c.open(ctx)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	if _, err := db.Append(ctx, store.Event{At: c.o.Now(), Kind: kind, Source: "cli", Context: "node " + string(kind),
		Job: job, User: c.o.User(), Nodes: nodes}); err != nil {
		return nil, err
	}
	if noReconcile {
		return nodes, nil
	}
	return nodes, c.commandRound(ctx, db)
}
