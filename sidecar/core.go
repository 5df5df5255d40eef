// Package sidecar is bftrainer's application core: every front door — a
// scheduler hook, a CLI command, a spooled request, the reconcile service —
// calls one Core, which owns the policy between the store, the pool, the
// allocator, the schedulers and the Trainer runner.
//
// Hooks are the instant path (Core.Hook): they record what the scheduler
// did (a job takes nodes, a job ends), kill what runs on a node being
// reclaimed, nudge the reconciler and return, within their deadline and
// whatever goes wrong (fail open); they never solve and never wait for a
// re-plan. The reconciler is the serialised path (Core.Reconcile): one
// process at a time (a lock file beside the database) folds the events
// recorded since the last round into the pool, waits for released nodes to
// be exactly idle, decides (pool.Decide), saves the decision and hands the
// desired state to the runner; it loops while new events arrive. Trainer
// requests (Submit, Cancel, Progress) are checked and authorised by one
// set of functions, whether they arrive from the CLI, the spool or the
// fold. The core translates between the vocabularies of the packages it
// joins; cmd/bftrainer only builds it from the configuration and prints.
package sidecar

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/hooks"
	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/store"
)

// Options are everything the core is built with: the configuration's
// values and the parts cmd injects. The zero value of a field is a stated
// default.
type Options struct {
	Database     string      // the SQLite file
	DatabaseMode os.FileMode // of a database the core creates; 0: 0644
	Spool        string      // unprivileged users' request directory
	RunnerState  string      // the runner's state directory (its Horovod host files); "": none

	Pool           pool.Config
	Solvers        Solvers // nil: BuiltinSolvers
	Solver         string  // pool.solver; "": the first
	SolverSettings SolverSettings

	Schedulers hooks.Registry    // nil: hooks.Builtin
	Scheduler  string            // hooks.scheduler: "" detects it in hooks, the registry's default for listings
	Listings   map[string]string // each listing's program by Listing.Key; "" turns it off

	// Admins reports whether a user may act on any Trainer (root always
	// may).
	Admins func(user string) bool
	// Runner builds the Trainer runner for a round; nil, or a nil
	// Runner, records the plan and starts nothing.
	Runner func() (Runner, error)
	// Killer kills our processes on this node in its prolog and epilog;
	// nil: nothing to kill here.
	Killer Killer
	// RemoteKiller kills and cleans up on another node, through its node
	// agent, for a hook that is the only one its scheduler runs for a job
	// (hooks.Call.OnlyHook: Grid Engine's prolog and epilog, on the job's
	// master host); nil: those nodes are left to the reconciler's runner.
	RemoteKiller Killer
	// Trigger starts or nudges a reconciler after a hook recorded a
	// reclaim or a release; nil: a service picks the events up.
	Trigger func() error

	HookDeadline time.Duration // a hook returns within it; 0: 2s
	IdleWait     time.Duration // how long released nodes may take to be exactly idle
	Poll         time.Duration // pause between rounds while waiting for them
	MaxRounds    int           // rounds per Reconcile; 0: 100
	MetricsFile  string        // Prometheus metrics written after each round (Reconciler.Metrics); "": none

	// ConfigErr is why the configuration did not load, when it did not.
	// A hook then records nothing (it does not know the database) but
	// still kills on its node; nothing else should run.
	ConfigErr error

	User     func() string                // who runs a CLI command; nil: "root"
	Hostname func() (string, error)       // nil: os.Hostname
	ReadFile func(string) ([]byte, error) // node files hooks name; nil: os.ReadFile
	Now      func() time.Time             // nil: time.Now
	Log      *log.Logger                  // diagnostics of rounds and commands; nil: discarded
	HookLog  *log.Logger                  // what hooks swallowed; nil: Log
	Started  time.Time                    // when the process started, for a hook's latency; zero: Hook's entry
}

// Core is the application core built from Options. It holds no open
// database: each call opens what it needs, as a short-lived process does.
type Core struct {
	o      Options
	solver alloc.Solver // built on first use
}

// New builds the core; it fails only on an unknown solver.
func New(o Options) (*Core, error) {
	if o.Solvers == nil {
		o.Solvers = BuiltinSolvers()
	}
	if o.Schedulers == nil {
		o.Schedulers = hooks.Builtin()
	}
	if o.DatabaseMode == 0 {
		o.DatabaseMode = 0o644
	}
	if o.HookDeadline <= 0 {
		o.HookDeadline = 2 * time.Second
	}
	if o.MaxRounds <= 0 {
		o.MaxRounds = 100
	}
	if o.User == nil {
		o.User = func() string { return "root" }
	}
	if o.Hostname == nil {
		o.Hostname = os.Hostname
	}
	if o.ReadFile == nil {
		o.ReadFile = os.ReadFile
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = log.New(io.Discard, "", 0)
	}
	if o.HookLog == nil {
		o.HookLog = o.Log
	}
	s, err := o.Solvers.New(o.Solver, o.SolverSettings)
	if err != nil {
		return nil, fmt.Errorf("pool.solver: %w", err)
	}
	return &Core{o: o, solver: s}, nil
}

// Errors a front door may turn into a hint or an exit status.
var (
	// ErrNoDatabase: nothing has been recorded yet.
	ErrNoDatabase = errors.New("no database")
	// ErrInvalid wraps every refusal of a request as given (a bad name,
	// bounds, curve or launch; a Trainer that already exists): the
	// caller's mistake, not the system's.
	ErrInvalid = errors.New("invalid request")
	// ErrDenied: the caller may not act on that Trainer.
	ErrDenied = errors.New("permission denied")
	// ErrNotWritable: this process may not write the database.
	ErrNotWritable = errors.New("database not writable")
	// ErrSpool: a request could not be spooled.
	ErrSpool = errors.New("spool")
)

func invalid(err error) error { return fmt.Errorf("%w%.0w", err, ErrInvalid) }

// open opens the database for writing, creating it.
func (c *Core) open(ctx context.Context) (*store.DB, error) {
	db, err := store.Open(ctx, c.o.Database, store.Options{Mode: c.o.DatabaseMode})
	if err != nil {
		if errors.Is(err, os.ErrPermission) || errors.Is(err, unix.EACCES) || errors.Is(err, unix.EROFS) {
			return nil, fmt.Errorf("%w%.0w", err, ErrNotWritable)
		}
		return nil, err
	}
	return db, nil
}

// openRead opens the database for reading (for writing too when this
// process may); a missing database is ErrNoDatabase rather than an empty
// one created on the spot.
func (c *Core) openRead(ctx context.Context) (*store.DB, error) {
	if _, err := os.Stat(c.o.Database); err != nil {
		return nil, fmt.Errorf("%w at %s: %w", ErrNoDatabase, c.o.Database, err)
	}
	if unix.Access(c.o.Database, unix.W_OK) == nil {
		return store.Open(ctx, c.o.Database, store.Options{Mode: c.o.DatabaseMode})
	}
	return store.Open(ctx, c.o.Database, store.Options{ReadOnly: true})
}

// canWrite reports whether this process may write the database (or create
// it): requests are recorded directly then, spooled otherwise.
func (c *Core) canWrite() bool {
	if _, err := os.Stat(c.o.Database); err != nil {
		return unix.Access(filepath.Dir(c.o.Database), unix.W_OK) == nil || os.Geteuid() == 0
	}
	return unix.Access(c.o.Database, unix.W_OK) == nil
}

// Database is the database's path, for messages.
func (c *Core) Database() string { return c.o.Database }

// newReconciler builds the serialised re-plan on db. withScheduler asks the
// configured scheduler's listing whether released nodes are idle (when it
// has one and its program is installed).
func (c *Core) newReconciler(db *store.DB, withScheduler bool) (*Reconciler, error) {
	r := &Reconciler{
		DB: db, Pool: c.o.Pool, Solver: c.solver, Spool: &spool{Dir: c.o.Spool}, Admins: c.o.Admins,
		IdleWait: c.o.IdleWait, Poll: c.o.Poll, MaxRounds: c.o.MaxRounds, Metrics: c.o.MetricsFile, Now: c.o.Now, Log: c.o.Log,
	}
	if c.o.Runner != nil {
		run, err := c.o.Runner()
		if err != nil {
			return nil, err
		}
		if run != nil {
			r.Runner = run
		}
	}
	if withScheduler {
		if q, ok := c.query(""); ok {
			r.Scheduler = q
		}
	}
	return r, nil
}

// query returns the node listing of the scheduler named (the configured
// one, or the registry's default, when name is ""), if it has one and its
// program is installed.
func (c *Core) query(name string) (nodeLister, bool) {
	if name == "" {
		name = c.o.Scheduler
	}
	s, ok := c.o.Schedulers.Default()
	if name != "" {
		s, ok = c.o.Schedulers.Lookup(name)
	}
	if !ok || s.Listing == nil {
		return nil, false
	}
	prog, set := c.o.Listings[s.Listing.Key]
	if !set {
		prog = s.Listing.Program
	}
	if prog == "" {
		return nil, false
	}
	if _, err := exec.LookPath(prog); err != nil {
		return nil, false
	}
	return hooks.Query{Listing: s.Listing, Program: prog}, true
}

// Reconcile runs rounds until no new event waits (Reconciler.Run); the
// scheduler is asked whether released nodes are idle unless noScheduler.
func (c *Core) Reconcile(ctx context.Context, noScheduler bool) error {
	db, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	return c.reconcile(ctx, db, !noScheduler)
}

func (c *Core) reconcile(ctx context.Context, db *store.DB, withScheduler bool) error {
	r, err := c.newReconciler(db, withScheduler)
	if err != nil {
		return err
	}
	return r.Run(ctx)
}

// Watch reconciles every interval until ctx ends: the service form, which
// picks up spooled requests and events recorded by hooks that could not
// start a reconciler.
func (c *Core) Watch(ctx context.Context, every time.Duration, noScheduler bool) error {
	db, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	r, err := c.newReconciler(db, !noScheduler)
	if err != nil {
		return err
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := r.Run(ctx); err != nil {
			r.Log.Printf("reconcile: %v", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
