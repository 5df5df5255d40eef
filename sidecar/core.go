// Package sidecar is bftrainer's application core: every front door — a
// scheduler hook, a CLI command, a spooled request, the reconcile service —
// calls one Core, which owns the policy between the store, the pool, the
// allocator, the schedulers and the Trainer runner.
//
// Hooks are the instant path (Core.Hook): they record what the scheduler
// did (a job takes nodes, a job ends) in the journal — never in the
// database, which any reader could make them wait for — kill what runs on
// a node being reclaimed, nudge the reconciler and return, within their
// deadline and whatever goes wrong (fail open); they never solve and never
// wait for a re-plan. The reconciler is the serialised path
// (Core.Reconcile): one process at a time (a lock file beside the
// database) records the journal in the history, exactly once, folds the
// events recorded since the last round into the pool, keeps released
// nodes pending until the scheduler says they are exactly idle (whichever
// process runs the round), decides (pool.Decide), asks the scheduler about
// nodes it is about to start Trainers on, saves the decision and hands the
// desired state to the runner; it loops while new events arrive. Status
// says how far the saved state can be trusted (Core.Status). Trainer
// requests (Submit, Cancel, Progress) are checked and authorised by one
// set of functions, whether they arrive from the CLI, the spool or the
// fold. The core translates between the vocabularies of the packages it
// joins; cmd/bftrainer only builds it from the configuration and prints.
// Doctor checks a site's wiring of all of it (doctor.go).
// Its Options are split by speed: HookOptions for the hook path, the rest
// for rounds and commands.
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
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/hooks"
	"github.com/bftrainer/bftrainer/journal"
	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/store"
	"github.com/bftrainer/bftrainer/trainer"
)

// Options are everything the core is built with: the configuration's
// values and the parts cmd injects. The zero value of a field is a stated
// default. They are split by speed: Hook holds what only the hook path
// reads (a scheduler's prolog, milliseconds, failing open), the rest is
// what rounds and commands read.
type Options struct {
	Database     string      // the SQLite file
	DatabaseMode os.FileMode // of a database the core creates; 0: 0644
	// Journal is the hooks' drop directory (journal.Journal.Dir); "":
	// "journal" beside the database. JournalFallback takes what it cannot
	// (another filesystem); "": none.
	Journal         string
	JournalFallback string
	Spool           string // unprivileged users' request directory
	RunnerState     string // the runner's state directory (its Horovod host files); "": none

	Pool           pool.Config
	Solvers        Solvers // nil: BuiltinSolvers
	Solver         string  // pool.solver; "": the first
	SolverSettings SolverSettings

	Launchers trainer.Kinds // nil: trainer.Builtin
	// Start is what a submission is checked against, that its Trainer
	// could ever start here; nil: no check (nothing is started:
	// trainer.transport = "none").
	Start *StartOptions

	Schedulers hooks.Registry    // nil: hooks.Builtin
	Scheduler  string            // hooks.scheduler: "" detects it in hooks, the registry's default for listings
	Listings   map[string]string // each listing's and planner's program by its Key; "" turns it off
	// PlanEvery is how often a reconciler reads the scheduler's plan (a
	// round between reads uses the last answer; 0: every round), and
	// PlanTimeout how long a read may take (0: 3s). PlanLead is
	// pool.Config.PlanLead; when the pool's PlanSlack is 0 it is set to
	// PlanEvery + Interval, how late a round may notice a planned start.
	PlanEvery, PlanTimeout, PlanLead time.Duration

	// Admins reports whether a user may act on any Trainer (root always
	// may).
	Admins func(user string) bool
	// Runner builds the Trainer runner for a round; nil, or a nil
	// Runner, records the plan and starts nothing.
	Runner func() (Runner, error)
	// Trigger starts or nudges a reconciler after a hook recorded a
	// reclaim or a release, or a round left released nodes completing;
	// nil: a service picks the events up.
	Trigger func() error

	IdleWait time.Duration // how long released nodes may take to be exactly idle
	// StartCheck: a round asks the scheduler about a node it is about to
	// start a Trainer on when the node's last event is older than this
	// (0: always); negative: never.
	StartCheck time.Duration
	Poll       time.Duration // pause between rounds while waiting for them
	Interval   time.Duration // the reconciler service's interval (status: how long work may wait)
	MaxRounds  int           // rounds per Reconcile; 0: 100
	// MetricsFile is where each round writes the Prometheus metrics
	// (Reconciler.Metrics); "": none.
	MetricsFile string

	User func() string    // who runs a CLI command; nil: "root"
	Now  func() time.Time // nil: time.Now
	Log  *log.Logger      // diagnostics of rounds and commands; nil: discarded
	Hook HookOptions      // the hook path's
}

// HookOptions are what only the hook path reads: the node's kill, the
// deadline, and what the hook process knows of its own start.
type HookOptions struct {
	// Killer kills our processes on this node in its prolog and epilog;
	// nil: nothing to kill here.
	Killer Killer
	// RemoteKiller kills and cleans up on another node, through its node
	// agent, for a hook that is the only one its scheduler runs for a job
	// (hooks.Call.OnlyHook: Grid Engine's prolog and epilog, on the job's
	// master host); nil: those nodes are left to the reconciler's runner.
	RemoteKiller Killer
	// Deadline: a hook returns within it (twice it when its record is
	// still to be saved then; see Core.Hook); 0: 2s.
	Deadline time.Duration
	// ConfigErr is why the configuration did not load, when it did not.
	// A hook then records nothing (it does not know the database) but
	// still kills on its node; nothing else should run.
	ConfigErr error
	Hostname  func() (string, error)       // nil: os.Hostname
	ReadFile  func(string) ([]byte, error) // node files hooks name; nil: os.ReadFile
	Log       *log.Logger                  // what hooks swallowed; nil: Options.Log
	Started   time.Time                    // when the process started, for a hook's latency; zero: Hook's entry
	// Configured is when a hook's configuration was read (zero:
	// unknown); the hook's record splits its time there.
	Configured time.Time
}

// Core is the application core built from Options. It holds no open
// database: each call opens what it needs, as a short-lived process does.
type Core struct {
	o       Options
	solver  alloc.Solver // built on first use
	journal *journal.Journal

	// Tests: in place of the journal's Write and WriteFallback, and the
	// fallback's grace at a hook's deadline (0: Hook.Deadline).
	write, writeFallback func(journal.Record) (journal.Written, error)
	fallbackGrace        time.Duration
	afterDeadline        func() // tests: rescue has begun
}

// New builds the core; it fails only on an unknown solver.
func New(o Options) (*Core, error) {
	if o.Solvers == nil {
		o.Solvers = BuiltinSolvers()
	}
	if o.Schedulers == nil {
		o.Schedulers = hooks.Builtin()
	}
	if o.Launchers == nil {
		o.Launchers = trainer.Builtin()
	}
	if o.DatabaseMode == 0 {
		o.DatabaseMode = 0o644
	}
	if o.Journal == "" && o.Database != "" {
		o.Journal = filepath.Join(filepath.Dir(o.Database), "journal")
	}
	if o.Hook.Deadline <= 0 {
		o.Hook.Deadline = 2 * time.Second
	}
	if o.MaxRounds <= 0 {
		o.MaxRounds = 100
	}
	if o.User == nil {
		o.User = func() string { return "root" }
	}
	if o.Hook.Hostname == nil {
		o.Hook.Hostname = os.Hostname
	}
	if o.Hook.ReadFile == nil {
		o.Hook.ReadFile = os.ReadFile
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = log.New(io.Discard, "", 0)
	}
	if o.Hook.Log == nil {
		o.Hook.Log = o.Log
	}
	s, err := o.Solvers.New(o.Solver, o.SolverSettings)
	if err != nil {
		return nil, fmt.Errorf("pool.solver: %w", err)
	}
	return &Core{o: o, solver: s, journal: &journal.Journal{Dir: o.Journal, Fallback: o.JournalFallback}}, nil
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

// open opens the database for writing, creating it (or its stand-in while
// its filesystem is read-only: standin.go), and makes sure the hooks'
// journal exists beside it.
func (c *Core) open(ctx context.Context) (*store.DB, error) {
	return c.openWaiting(ctx, 0)
}

// openWaiting is open, waiting up to absorbWait for the stand-in's
// writers when it is to be absorbed (openWrite).
func (c *Core) openWaiting(ctx context.Context, absorbWait time.Duration) (*store.DB, error) {
	db, err := c.openWrite(ctx, absorbWait)
	if err != nil {
		return nil, err
	}
	if err := c.createJournal(); err != nil {
		c.o.Log.Printf("%v", err)
	}
	return db, nil
}

// createJournal makes the journal and its fallback (a tmpfs under /run is
// empty after a boot) with the database's group: the group its hooks run
// in (SlurmUser's). Existing ones are checked, not changed.
func (c *Core) createJournal() error {
	gid := -1
	for _, p := range []string{c.o.Database, filepath.Dir(c.o.Database)} {
		if fi, err := os.Stat(p); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				gid = int(st.Gid)
				break
			}
		}
	}
	var errs []error
	for _, d := range []string{c.o.Journal, c.o.JournalFallback} {
		if d == "" {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(d), 0o755); err != nil {
			errs = append(errs, fmt.Errorf("create journal: %w", err))
			continue
		}
		if err := journal.Create(d, gid); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// openRead opens the database for reading (for writing too when this
// process may), or its stand-in, read only, while there is one; a missing
// database is ErrNoDatabase rather than an empty one created on the spot.
func (c *Core) openRead(ctx context.Context) (*store.DB, error) {
	if s := c.StandIn(); s != "" {
		// Newer than the database while it is there; read only, since
		// a writer of it holds its lock (standin.go).
		return store.Open(ctx, s, store.Options{ReadOnly: true})
	}
	if _, err := os.Stat(c.o.Database); err != nil {
		return nil, fmt.Errorf("%w at %s: %w", ErrNoDatabase, c.o.Database, err)
	}
	if unix.Access(c.o.Database, unix.W_OK) == nil {
		return store.Open(ctx, c.o.Database, store.Options{Mode: c.o.DatabaseMode})
	}
	return store.Open(ctx, c.o.Database, store.Options{ReadOnly: true})
}

// canWrite reports whether this process may write the database (or create
// it, or its stand-in): requests are recorded directly then, spooled
// otherwise.
func (c *Core) canWrite() bool {
	if _, err := os.Stat(c.o.Database); err != nil {
		return unix.Access(filepath.Dir(c.o.Database), unix.W_OK) == nil || os.Geteuid() == 0
	}
	err := unix.Access(c.o.Database, unix.W_OK)
	if errors.Is(err, unix.EROFS) {
		// Read-only for everyone: one who may write the stand-in's
		// directory writes it instead (standin.go).
		if s, ok := c.standin(); ok {
			return unix.Access(filepath.Dir(s.path), unix.W_OK) == nil
		}
	}
	return err == nil
}

// Database is the database's path, for messages.
func (c *Core) Database() string { return c.o.Database }

// newReconciler builds the serialised re-plan on db, asking the
// configured scheduler's listing whether released nodes are exactly idle
// — whichever process runs the round — unless noScheduler: the caller
// then vouches that they are (reconcile --no-scheduler).
func (c *Core) newReconciler(db *store.DB, noScheduler bool) (*Reconciler, error) {
	r := &Reconciler{
		DB: db, Journal: c.journal, Pool: c.o.Pool, Solver: c.solver, Launchers: c.o.Launchers, Spool: &spool{Dir: c.o.Spool, RunnerState: c.o.RunnerState}, Admins: c.o.Admins,
		IdleWait: c.o.IdleWait, Poll: c.o.Poll, MaxRounds: c.o.MaxRounds, StartCheck: c.o.StartCheck, Metrics: c.o.MetricsFile, Database: c.o.Database,
		Backlog: func() (int, error) { n, _, err := c.journal.Backlog(); return n, err }, Now: c.o.Now, Log: c.o.Log,
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
	r.Scheduler, r.JoinReleases = c.idleCheck(noScheduler)
	if !noScheduler {
		r.Plan = c.planner()
	}
	if r.Pool.PlanLead == 0 {
		r.Pool.PlanLead = c.o.PlanLead
	}
	if r.Pool.PlanSlack == 0 {
		r.Pool.PlanSlack = c.o.PlanEvery + c.o.Interval
	}
	return r, nil
}

// planner returns the configured scheduler's plan reader, or nil when it
// has none or the configuration turned it off ("").
func (c *Core) planner() *planSource {
	s, ok := c.o.Schedulers.Default()
	if c.o.Scheduler != "" {
		s, ok = c.o.Schedulers.Lookup(c.o.Scheduler)
	}
	if !ok || s.Plan == nil {
		return nil
	}
	prog, set := c.o.Listings[s.Plan.Key]
	if !set {
		prog = s.Plan.Program
	}
	if prog == "" {
		return nil
	}
	// Not installed here (a site without the scheduler's client, a
	// schedule file Grid Engine does not write): no plan, as a listing
	// that is not installed asks nobody.
	if _, err := os.Stat(prog); err != nil {
		if _, err := exec.LookPath(prog); err != nil {
			return nil
		}
	}
	read := s.Plan.Read
	return &planSource{Name: s.Name, Every: c.o.PlanEvery, Timeout: c.o.PlanTimeout, Log: c.o.Log,
		Read: func(ctx context.Context) ([]hooks.PlannedStart, error) { return read(ctx, prog) }}
}

// idleCheck is how a round learns that released nodes are exactly idle:
// the configured scheduler's listing; or, when the configuration turned
// the listing off (or noScheduler), by taking the release's word
// (joinReleases). A listing configured but not installed here asks
// nobody and joins nothing: the releases wait for a round that can ask.
func (c *Core) idleCheck(noScheduler bool) (q nodeLister, joinReleases bool) {
	if noScheduler {
		return nil, true
	}
	q, off := c.listing("")
	return q, q == nil && off
}

// listing returns the node listing of the scheduler named (the configured
// one, or the registry's default, when name is ""), if it has one and its
// program is installed; off reports a scheduler without a listing, or one
// the configuration turned off ("").
func (c *Core) listing(name string) (q nodeLister, off bool) {
	if name == "" {
		name = c.o.Scheduler
	}
	s, ok := c.o.Schedulers.Default()
	if name != "" {
		s, ok = c.o.Schedulers.Lookup(name)
	}
	if !ok || s.Listing == nil {
		return nil, true
	}
	prog, set := c.o.Listings[s.Listing.Key]
	if !set {
		prog = s.Listing.Program
	}
	if prog == "" {
		return nil, true
	}
	if _, err := exec.LookPath(prog); err != nil {
		return nil, false
	}
	return hooks.Query{Listing: s.Listing, Program: prog}, false
}

// Reconcile runs rounds until no new event waits (Reconciler.Run); the
// scheduler is asked whether released nodes are idle unless noScheduler.
func (c *Core) Reconcile(ctx context.Context, noScheduler bool) error {
	db, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	return c.reconcile(ctx, db, noScheduler)
}

func (c *Core) reconcile(ctx context.Context, db *store.DB, noScheduler bool) error {
	r, err := c.newReconciler(db, noScheduler)
	if err != nil {
		return err
	}
	return r.Run(ctx)
}

// commandRound is the round a CLI command runs after recording its
// request: one pass, which does not wait for released nodes still
// completing; when it leaves some, a reconciler that does is started
// (where hooks may start one), else the service takes them.
func (c *Core) commandRound(ctx context.Context, db *store.DB) error {
	r, err := c.newReconciler(db, false)
	if err != nil {
		return err
	}
	r.NoPoll = true
	if err := r.Run(ctx); err != nil {
		return err
	}
	if r.Pending && c.o.Trigger != nil {
		if err := c.o.Trigger(); err != nil {
			c.o.Log.Printf("start reconciler: %v", err)
		}
	}
	return nil
}

// Watch reconciles every interval until ctx ends: the service form, which
// picks up spooled requests and events recorded by hooks that could not
// start a reconciler.
//
// The database is open only during a round, as it is for a hook's or a
// command's run: between rounds the service holds no file of it, so an
// admin can remount its filesystem (read-only for a backup, or to move
// it) or replace the file, and the next round opens what is there then.
// An open and close cost about half a millisecond (measured here);
// rounds are seconds apart. The Reconciler itself lives as long as the
// service (the scheduler plan's cache, for one, carries from round to
// round), and so does what the last save wrote (store.SaveMemory): the
// next round's save compares with it unless someone else wrote since.
func (c *Core) Watch(ctx context.Context, every time.Duration, noScheduler bool) error {
	const serviceAbsorbWait = 10 * time.Second
	t := time.NewTicker(every)
	defer t.Stop()
	var r *Reconciler
	var mem store.SaveMemory // what the last round's save wrote: the next compares with it
	// A service outlives what keeps the database from opening now (a
	// command holding its lock while it creates it, a filesystem not yet
	// mounted or read-only): it says why, once per reason, and tries
	// again at the next round.
	var said string
	for {
		db, err := c.openWaiting(ctx, serviceAbsorbWait)
		switch {
		case err != nil && ctx.Err() != nil:
			return nil
		case err != nil:
			if err.Error() != said {
				said = err.Error()
				c.o.Log.Printf("reconcile: %v; trying again every %v", err, every)
			}
		default:
			said = ""
			if r == nil {
				if r, err = c.newReconciler(db, noScheduler); err != nil {
					db.Close()
					return err
				}
			}
			db.Remember(mem)
			r.DB = db
			r.LockPath = db.Path() + ".lock" // the database's or the stand-in's
			if err := r.Run(ctx); err != nil {
				r.Log.Printf("reconcile: %v", err)
			}
			r.DB = nil
			mem = db.Memory()
			if err := db.Close(); err != nil {
				r.Log.Printf("reconcile: closing the database: %v", err)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
