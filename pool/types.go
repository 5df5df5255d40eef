// Package pool is the idle pool as a state machine: nodes join and leave,
// Trainers are submitted, admitted, rescaled, preempted, finished and
// cancelled, and every sample gained or lost is booked.
//
// It is pure: time comes in with each event, there is no I/O, no clock and
// no process. The live sidecar loads a State from the store, applies the
// events, makes one decision (Pool.Decide: the solver's plan, committed,
// with one policy for an empty pool and a failing solver, see Propose) and
// saves the State back; a replay drives the same Pool, and the same
// Decide, over a whole trace in memory. One implementation of the
// semantics serves both.
//
// Accounting follows the reference replayer (see the notes, §3.1): between
// two events a running Trainer progresses at its rate (samples/s at its
// node count, 0 below its minimum); a rescale decided at one event costs
// R·P(C) samples (R_up or R_down seconds at the throughput of the size it
// had before the decision), charged against the next interval; a reclaim
// that takes nodes from a Trainer costs R_down·rate once per event,
// however many nodes it loses. Between events the pool can be advanced to
// the moment a Trainer reaches its samples or a queued one's submit time
// comes (NextCompletion, NextAdmission, Advance), as the live sidecar sees
// a Trainer exit or a submission when it happens.
//
// The pool also keeps what it has observed of idle periods (Totals.Idle:
// how long they lasted, how often nodes came free), which the adaptive
// allocator reads through Problem.
package pool

import (
	"time"

	"github.com/bftrainer/bftrainer/alloc"
)

// Status is a Trainer's life-cycle state.
type Status string

// Trainer states.
const (
	Queued    Status = "queued"    // submitted, waiting for a slot (max_trainers)
	Running   Status = "running"   // admitted; may hold 0 nodes
	Finished  Status = "finished"  // reached its samples or exited 0
	Cancelled Status = "cancelled" // cancelled by its owner or an admin
	Failed    Status = "failed"    // exited non-zero everywhere
)

// Active reports whether the Trainer still takes part in decisions.
func (s Status) Active() bool { return s == Queued || s == Running }

// Spec is what a user submits.
type Spec struct {
	ID       string
	Owner    string // Unix user
	Min, Max int
	Curve    alloc.Curve
	Weight   float64
	RUp      float64 // seconds lost per scale-up, as submitted (a prior: see Trainer.RescaleUp)
	RDown    float64 // seconds lost per scale-down or reclaim, as submitted
	Samples  float64 // samples to process; 0 means until it exits
	Submit   time.Time
	// Model names what it trains ("": unsaid); a learning Trainer is
	// planned on the curve of the others of its model (models.go).
	Model string
}

// Trainer is a Trainer's state in the pool.
type Trainer struct {
	Spec
	Status   Status
	Admitted time.Time // zero while queued
	Ended    time.Time // zero while active
	Nodes    []alloc.Node

	Rate        float64 // samples/s now (0 below Min)
	PendingCost float64 // rescale cost booked at the last decision, charged next
	Done        float64 // samples processed (estimated, or as last reported)
	RescaleLoss float64 // samples lost to rescaling
	PreemptLoss float64 // samples lost to reclaims
	Rescales    int
	Preemptions int
	NodeSeconds float64 // node-seconds held
	// Measured are the rescale costs measured on its processes; with
	// RUp and RDown as priors they make RescaleUp and RescaleDown.
	Measured Costs
	// Learn is what the pool learns of its scaling curve (learn.go).
	Learn Learning
	// Starts are its failed starts in a row (starts.go).
	Starts Starts
}

// NodeState is where a node is, as far as the pool knows.
type NodeState string

// Node states.
const (
	Idle    NodeState = "idle"    // in the pool (free or held by a Trainer)
	Busy    NodeState = "busy"    // the scheduler runs a job on it
	Pending NodeState = "pending" // a job ended on it; not yet exactly idle
)

// Node is one node the pool knows about.
type Node struct {
	Name    string
	State   NodeState
	Since   time.Time // when it entered its state
	Order   int       // tie-break among nodes idle since the same instant
	Job     string    // scheduler job holding it (Busy) or that released it (Pending)
	Trainer string    // Trainer running on it (Idle), or ""
}

// Config holds the pool's policy.
type Config struct {
	MaxTrainers int // Trainers running at once; 0 means 10 (ignored with AutoAdmit)
	// AutoAdmit admits by value instead of up to MaxTrainers: at each
	// decision the first queued Trainer whose submit time has come is
	// admitted if the solver, given it beside the running ones, gives it
	// nodes (its marginal value beats growing the others), and so on down
	// the queue; see Decide.
	AutoAdmit bool
	TFwd      float64 // seconds the allocation is worth over
	Objective alloc.Objective
	Semantics alloc.Semantics
	// PlanLead is how long before a main job's planned start (SetPlan)
	// Trainers are moved off its nodes; 0 means each Trainer's R_down plus
	// PlanSlack (see Pool.Lead). PlanSlack covers how late the caller may
	// notice (a live reconciler's interval and plan cache); 0 in a replay,
	// which decides exactly then (NextMove).
	PlanLead, PlanSlack time.Duration
	// PlanHorizon is which planned nodes the allocator sees with a short
	// horizon (alloc.Node.Until): none ("", PlanUnpriced), PlanStable or
	// PlanPriced. Moves and the nodes kept free within a lead do not
	// depend on it.
	PlanHorizon PlanHorizon
	// KillLoss is progress a reclaim (the prolog's kill) loses beyond the
	// Trainer's ReclaimDown — a stated model input for a replay (e.g. the
	// work since the last checkpoint, half a checkpoint interval on
	// average); 0, the paper's model, charges a kill as a shrink. Live it
	// stays 0: a measured reclaim already holds what a kill lost.
	KillLoss time.Duration
	// Curves is which curve the allocator sees (learn.go); "" is
	// CurvesGiven.
	Curves CurveMode
	// Learner holds the curve learner's settings; the zero value is its
	// default.
	Learner alloc.CurveLearner
	// StartRetries is how many failed starts in a row end a Trainer
	// failed, StartBackoff how long it waits after its first (doubling
	// after each further one); 0: DefaultStartRetries, DefaultStartBackoff
	// (starts.go).
	StartRetries int
	StartBackoff time.Duration
}

// State is the pool's whole state as plain data, for the store.
type State struct {
	Now      time.Time
	Nodes    []Node
	Trainers []Trainer // active ones, in admission then submission order
	Totals   Totals
}

// Totals are pool-wide counters since the pool began.
type Totals struct {
	IdleNodeSeconds float64 // node-seconds of idle nodes offered
	UsedNodeSeconds float64 // node-seconds held by Trainers
	Samples         float64 // samples processed (net of losses)
	RescaleLoss     float64
	PreemptLoss     float64
	Rescales        int
	Preemptions     int // Trainer-events that lost nodes to a reclaim (surprises: the prolog's kill)
	// Moves counts the Trainer-events that moved off nodes planned for a
	// main job before it landed (graceful shrinks, SetPlan), MoveLoss the
	// samples they cost; they are not in these Totals' RescaleLoss or
	// Rescales (a Trainer's own RescaleLoss and Rescales include them).
	Moves    int
	MoveLoss float64
	// Probes counts the rescales that were the curve learner's probes
	// (learn.go), of Rescales.
	Probes int
	// Overshoot is the samples processed past a Trainer's target before
	// the pool saw it finish (trimmed off Samples): work an event-driven
	// replay books after the Trainer was done.
	Overshoot float64
	// Idle counts the idle periods that ended (a node idle since Since
	// left the pool), by length: what the pool has observed of how long
	// nodes stay idle (alloc.AdaptiveHorizon reads it).
	Idle alloc.IdleHistory
	// Models are the scaling shapes learned of the Trainers that ended,
	// by model name (models.go).
	Models []ModelCurve `json:",omitempty"`
}
