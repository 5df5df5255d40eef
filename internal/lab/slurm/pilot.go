package slurm

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/bftrainer/bftrainer/accounting"
	"github.com/bftrainer/bftrainer/sidecar"
	"github.com/bftrainer/bftrainer/sim"
	"github.com/bftrainer/bftrainer/trainer/trainertest"
)

// The pilot (issue 27): a slice of a real job log replayed on the lab,
// bftrainer wired as contrib/slurm/README.md tells a sysadmin, a queue of
// real Trainers harvesting what the log leaves idle, a nemesis, and then
// the checks a site would run before letting a sidecar near production:
// its own accounting against the history (bftrainer audit), every job's
// own watch for Trainer processes, the same slice again without
// bftrainer for the queue wait, and the replay's prediction from the
// pilot's own sacct.

// Nemeses a pilot can run, each once, at a random moment of the pass with
// bftrainer. Those that are the machine's and not bftrainer's — the
// slurmctld restart and the burst (environmental) — run in every pass, at
// the same moment: the passes without bftrainer are the paired
// comparison for the queue wait, and a slurmctld down for seconds or a
// hundred jobs at once delay main jobs whether bftrainer is there or not.
const (
	NemesisCtld       = "slurmctld-restart"    // slurmctld stopped (TERM) and started again on its state
	NemesisReconciler = "reconciler-kill"      // the reconciler service killed -9, restarted 5 s later as systemd's Restart=always
	NemesisNode       = "node-unreachable"     // the sshd of one node with Trainer processes stopped for NemesisHold (the pilot runs the ssh transport, one sshd per node)
	NemesisWorker     = "worker-crash"         // one train.py worker of an elastic Trainer killed -9
	NemesisDBReadOnly = "db-readonly"          // the database's filesystem (its own tmpfs) remounted read-only for NemesisHold
	NemesisBurst      = "burst"                // BurstJobs sbatch at once
	pilotWatchPeriod  = 200 * time.Millisecond // the job's watch looks this often (checkScript)
)

// AllNemeses is every nemesis, in the order their lines print.
var AllNemeses = []string{NemesisCtld, NemesisReconciler, NemesisNode, NemesisWorker, NemesisDBReadOnly, NemesisBurst}

// PilotOptions says what pilot to run.
type PilotOptions struct {
	Repo   string  // the bftrainer module's directory
	Log    string  // the SWF job log
	From   int     // the slice's first job: index among the log's usable jobs, in file order
	Jobs   int     // jobs in the slice
	Nodes  int     // lab nodes (the pilot: ≥ 8; CI: 6)
	Prefix string  // node names; "" means "plab"
	Speed  float64 // time compression: a log second is 1/Speed s here
	// Trainers in the queue: train.py on the elastic runtime, on torchrun,
	// and exec Trainers (a shell and two sleeps).
	Elastic, Torchrun, Exec int
	Nemeses                 []string      // of AllNemeses
	NemesisHold             time.Duration // how long the node stays unreachable and the database read-only; 0 means a minute
	BurstJobs               int           // the burst's sbatch count; 0 means 100
	Without                 bool          // run the slice twice more without bftrainer: the paired comparison, and its noise
	Seed                    uint64        // the nemeses' moments and the node they pick
	Drain                   time.Duration // bound on the wait for the slice's last jobs after the last submit; 0 means 5 min
	SyncEvery               time.Duration // the sync timer, compressed; 0 means a minute
	// JournalPath runs the guide's optional bftrainer-journal.path with
	// the service: a reconcile the moment a hook writes (pathunit.go).
	JournalPath bool
	Solver      string // pool.solver, live and in the replay's prediction; "" means the default, adaptive
	// TrainerCPU is trainer.cpu_priority ("" means the default, normal).
	// The lab's nodes share this machine's cores with slurmctld, the
	// slurmds and every main job; on a cluster a Trainer's CPU is its own
	// node's. "idle" (SCHED_IDLE) is the lab's stand-in for that.
	TrainerCPU string
	Keep       bool // keep the lab's directory (the history, the replay's inputs) for a look afterwards
	Logf       func(format string, args ...any)
}

// PilotJob is one job of the slice, scaled to the lab.
type PilotJob struct {
	LogID int64         // its number in the log
	At    time.Duration // its submit time from the slice's first, compressed
	Nodes int           // ceil(log nodes × lab nodes / machine nodes), at least 1
	Hold  time.Duration // its run time, compressed
	Limit int           // sbatch --time, minutes
}

// ScaleSlice takes jobs [from, from+n) of the log and scales them to a lab
// of nodes: sizes proportional to the log's machine and rounded up (≥ 1
// node), submit and run times divided by speed, and the requested
// walltime divided by speed too, but never below the run time (in 26 %
// of Theta's jobs the run outlived the request; Slurm would kill them at
// the limit where Theta let them run), plus 30 s for the job's own
// checks, in whole minutes (sbatch's unit).
func ScaleSlice(l *sim.SWFLog, from, n, nodes int, speed float64) ([]PilotJob, error) {
	if from < 0 || n <= 0 || from+n > len(l.Jobs) {
		return nil, fmt.Errorf("slice %d+%d: the log has %d usable jobs", from, n, len(l.Jobs))
	}
	if !(speed > 0) || nodes <= 0 {
		return nil, fmt.Errorf("slice: speed %v and nodes %d must be positive", speed, nodes)
	}
	machine := l.MachineNodes()
	js := l.Jobs[from : from+n]
	t0 := js[0].Submit
	for _, j := range js {
		t0 = min(t0, j.Submit)
	}
	scale := func(sec int64) time.Duration { return time.Duration(float64(sec) / speed * float64(time.Second)) }
	out := make([]PilotJob, 0, n)
	for _, j := range js {
		p := PilotJob{LogID: j.ID, At: scale(j.Submit - t0), Hold: scale(j.Run)}
		p.Nodes = min(nodes, max(1, int(math.Ceil(float64(j.Nodes)*float64(nodes)/float64(machine)))))
		req := max(j.ReqTime, j.Run)
		p.Limit = max(1, int(math.Ceil((scale(req) + 30*time.Second).Minutes())))
		out = append(out, p)
	}
	slices.SortStableFunc(out, func(a, b PilotJob) int { return int(a.At - b.At) })
	return out, nil
}

// ReadSlice reads an SWF log and scales a slice of it (ScaleSlice).
func ReadSlice(path string, from, n, nodes int, speed float64) ([]PilotJob, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("job log: %w", err)
	}
	defer f.Close()
	l, err := sim.ReadSWF(f)
	if err != nil {
		return nil, fmt.Errorf("job log %s: %w", path, err)
	}
	return ScaleSlice(l, from, n, nodes, speed)
}

// NemesisReport is what one nemesis did.
type NemesisReport struct {
	Name string
	At   time.Duration // from the pass's start
	// Span is how long it held a part of the system down from At
	// (slurmctld, the reconciler service, the database's filesystem, a
	// node's sshd); 0 for one that is a moment (a crash, a burst).
	Span time.Duration
	What string // what happened, in words
	Err  error  // the nemesis itself could not act
	// Harvest is, for one with a Span in the pass with bftrainer, the
	// idle node-time in its window and what of it no Trainer used.
	Harvest *WindowHarvest
}

// PilotResult is what a pilot measured.
type PilotResult struct {
	Log                       string
	From, Jobs, Nodes         int
	Speed                     float64
	MainJobs                  int // jobs of the first pass: the slice and the burst
	Failed, Requeued, Drained int
	BesideS                   float64 // seconds a main job's own watch saw a Trainer process on its nodes
	AuditViolations           int
	EventsLost                int // jobs in sacct on pool nodes without their prolog_slurmctld or epilog_slurmctld in the history
	Wait, WaitWithout         []time.Duration
	WaitWithout2              []time.Duration // the second pass without bftrainer: how much two passes without differ
	// Waits split, one line a pass: what Slurm took (submit to the
	// allocation's start), what the start took (the allocation to the
	// job's first line: prologs and launch), and how much longer than
	// their hold the jobs ran (turnover).
	WaitSplits                 []WaitSplit
	HarvestedNodeH, PredictedH float64 // node-hours used by Trainers (Harvest.UsedH), and by the replay's Trainers
	Harvest                    Harvest // the idle node-hours by stage (harvest.go)
	Nemeses                    []NemesisReport
	// Problems are what was not normal about main jobs, and the
	// Trainers' own failures, in words (empty on a clean pilot).
	Problems []string
	// TrainerNotes say what became of the Trainers the nemeses hit.
	TrainerNotes []string
	TrainerCPU   string // trainer.cpu_priority of the pass with bftrainer
	Wall         time.Duration
}

// Line is the pilot's result line.
func (r *PilotResult) Line() string {
	ms := func(ds []time.Duration, q float64) string {
		if len(ds) == 0 {
			return "NaN"
		}
		return fmt.Sprintf("%.0f", Quantile(Millis(ds...), q))
	}
	ratio := math.NaN()
	if r.PredictedH > 0 {
		ratio = r.HarvestedNodeH / r.PredictedH
	}
	return fmt.Sprintf("pilot log=%s slice=%d+%d nodes=%d speed=%g main_jobs=%d failed=%d requeued=%d drained=%d trainer_beside_main_s=%.1f "+
		"audit_violations=%d events_lost=%d wait_p50_ms=%s wait_p99_ms=%s wait_without_p50_ms=%s wait_without_p99_ms=%s "+
		"harvested_node_h=%.3f predicted_node_h=%.3f ratio=%.2f wait_without2_p50_ms=%s wait_without2_p99_ms=%s wait_goal=%s "+
		"trainer_cpu=%s trainer_procs_not_idle=%d/%d",
		filepath.Base(r.Log), r.From, r.Jobs, r.Nodes, r.Speed, r.MainJobs, r.Failed, r.Requeued, r.Drained, r.BesideS,
		r.AuditViolations, r.EventsLost, ms(r.Wait, 0.5), ms(r.Wait, 0.99), ms(r.WaitWithout, 0.5), ms(r.WaitWithout, 0.99),
		r.HarvestedNodeH, r.PredictedH, ratio, ms(r.WaitWithout2, 0.5), ms(r.WaitWithout2, 0.99), r.WaitGoal(),
		r.TrainerCPU, r.Harvest.NotIdle, r.Harvest.ClassChecks)
}

// WaitGoal says whether the queue wait met issue 27's goal: with
// bftrainer, p50 and p99 differ from the first pass without by no more
// than the two passes without differ from each other, or by under 1 s.
// "unknown" without two passes without.
func (r *PilotResult) WaitGoal() string {
	if len(r.Wait) == 0 || len(r.WaitWithout) == 0 || len(r.WaitWithout2) == 0 {
		return "unknown"
	}
	for _, q := range []float64{0.5, 0.99} {
		with, w1, w2 := waitQ(r.Wait, q), waitQ(r.WaitWithout, q), waitQ(r.WaitWithout2, q)
		if math.Abs(with-w1) > max(math.Abs(w1-w2), 1000) {
			return "missed"
		}
	}
	return "met"
}

// waitQ is a quantile of waits in milliseconds.
func waitQ(ds []time.Duration, q float64) float64 { return Quantile(Millis(ds...), q) }

// WaitSplit is where one pass's waits went (its slice's jobs).
type WaitSplit struct {
	Pass                   string
	Jobs                   int
	Sched, Launch, Overrun []time.Duration
	RPC                    string // slurmctld's RPCs during the pass, all/queries (sdiag; rpcCounts)
}

// Line is the split's line.
func (w WaitSplit) Line() string {
	q := func(ds []time.Duration, q float64) string {
		if len(ds) == 0 {
			return "NaN"
		}
		return fmt.Sprintf("%.0f", waitQ(ds, q))
	}
	return fmt.Sprintf("pilot wait pass=%s jobs=%d sched_p50_ms=%s sched_p99_ms=%s launch_p50_ms=%s launch_p99_ms=%s overrun_p50_ms=%s overrun_p99_ms=%s rpc_all_queries=%s",
		w.Pass, w.Jobs, q(w.Sched, 0.5), q(w.Sched, 0.99), q(w.Launch, 0.5), q(w.Launch, 0.99), q(w.Overrun, 0.5), q(w.Overrun, 0.99), w.RPC)
}

// NemesisLines are one line per nemesis.
func (r *PilotResult) NemesisLines() []string {
	var out []string
	for _, n := range r.Nemeses {
		s := fmt.Sprintf("pilot nemesis=%s at_s=%.1f %s", n.Name, n.At.Seconds(), n.What)
		if h := n.Harvest; h != nil {
			s += fmt.Sprintf(" window_idle_node_h=%.3f window_lost_node_h=%.3f", h.IdleH, h.LostH)
		}
		if n.Err != nil {
			s += fmt.Sprintf(" error=%q", n.Err.Error())
		}
		out = append(out, s)
	}
	return out
}

// pilotTrainer is a Trainer the pilot submitted.
type pilotTrainer struct {
	name     string
	launcher string
	min, max int
	curve    []float64 // samples/s on 1..max nodes
}

// pilot is a running pilot.
type pilot struct {
	o       PilotOptions
	jobs    []PilotJob
	c       *Cluster
	rng     *rand.Rand
	dbDir   string // the database's own filesystem, "" when not mounted
	svcMu   sync.Mutex
	svc     *Service
	trains  []pilotTrainer
	crashed string // the Trainer whose worker the worker-crash nemesis killed
	// pathGate: the journal path unit's reconciles hold it shared, the
	// read-only fault exclusively while it remounts.
	pathGate sync.RWMutex
	sshd     *trainertest.NodeSSHD
	resMu    sync.Mutex // res's lists, which a nemesis appends to during the pass
	res      *PilotResult
}

// Pilot runs a pilot on a fresh lab and returns what it measured. The
// error is for a pilot that could not run; what it found wrong is in
// the result (Failed, Problems, …).
func Pilot(ctx context.Context, o PilotOptions) (res *PilotResult, err error) {
	t0 := time.Now()
	if o.Prefix == "" {
		o.Prefix = "plab"
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if o.NemesisHold <= 0 {
		o.NemesisHold = time.Minute
	}
	if o.BurstJobs <= 0 {
		o.BurstJobs = 100
	}
	if o.Drain <= 0 {
		o.Drain = 5 * time.Minute
	}
	if o.SyncEvery <= 0 {
		o.SyncEvery = time.Minute
	}
	if o.Solver == "" {
		o.Solver = "adaptive"
	}
	for _, n := range o.Nemeses {
		if !slices.Contains(AllNemeses, n) {
			return nil, fmt.Errorf("pilot: no nemesis %q (%s)", n, strings.Join(AllNemeses, ", "))
		}
	}
	if err := NeedAccounting(); err != nil {
		return nil, err
	}
	jobs, err := ReadSlice(o.Log, o.From, o.Jobs, o.Nodes, o.Speed)
	if err != nil {
		return nil, err
	}
	p := &pilot{o: o, jobs: jobs, rng: rand.New(rand.NewPCG(o.Seed, 27))}
	p.res = &PilotResult{Log: o.Log, From: o.From, Jobs: o.Jobs, Nodes: o.Nodes, Speed: o.Speed, TrainerCPU: cmp.Or(o.TrainerCPU, "normal")}
	// Ended jobs stay in scontrol for the whole pilot: each is checked
	// after the pass.
	p.c, err = Up(ctx, ClusterOptions{Repo: o.Repo, Nodes: o.Nodes, Prefix: o.Prefix, Accounting: true,
		Extra: []string{"MinJobAge=7200"}, Logf: o.Logf})
	if err != nil {
		return nil, err
	}
	defer func() {
		p.stopService()
		if p.sshd != nil {
			p.sshd.Close()
		}
		if p.dbDir != "" {
			if o.Keep {
				// The database's filesystem goes with the unmount.
				exec.Command("cp", "-a", p.dbDir, filepath.Join(p.c.Dir, "db-kept")).Run()
			}
			p.unmount()
		}
		if o.Keep {
			o.Logf("pilot: kept %s (bft/db or db-kept: the history; replay/: the replay's inputs)", p.c.Dir)
		}
		if derr := p.c.Down(context.Background(), o.Keep); derr != nil && err == nil {
			err = derr
		}
	}()
	if slices.Contains(o.Nemeses, NemesisDBReadOnly) {
		// Its own small filesystem, so that read-only is a real mount:
		// the reconciler runs as root, which file modes do not stop.
		p.dbDir = filepath.Dir(p.c.In.DB)
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64m,mode=0755", "bftpilot", p.dbDir).CombinedOutput(); err != nil {
			p.dbDir = ""
			return nil, fmt.Errorf("mount the database's filesystem: %w: %s", err, out)
		}
	}
	// The guide: the ssh transport, the reconciler as a service
	// (spawn_reconciler never), metrics for node_exporter, sync at boot
	// and by its timer; with JournalPath, its optional path unit too (in
	// the pass with bftrainer).
	// The defaults a site starts from: the default solver (the
	// replay's prediction uses the same), and the scheduler's plan read
	// (scheduler.squeue), so that Trainers move off nodes backfill plans
	// for a pending job before it lands.
	s := p.c.Settings
	if err := p.sshTransport(&s); err != nil {
		return nil, err
	}
	s.Spawn = "never"
	s.Solver = o.Solver
	s.Plan = true
	if o.TrainerCPU != "" {
		s.Extra = fmt.Sprintf("cpu_priority = %q", o.TrainerCPU)
	}
	s.Metrics = filepath.Join(p.c.Dir, "metrics", "bftrainer.prom")
	if err := os.MkdirAll(filepath.Dir(s.Metrics), 0o755); err != nil {
		return nil, err
	}
	if err := p.c.Configure(s); err != nil {
		return nil, err
	}
	if _, err := p.c.Run(ctx, "sync"); err != nil {
		return nil, err
	}
	if err := p.startService(); err != nil {
		return nil, err
	}
	if err := p.submitTrainers(ctx); err != nil {
		return p.res, err
	}
	with, err := p.pass(ctx, "with", true)
	if err != nil {
		return p.res, err
	}
	p.res.MainJobs = len(with.runs)
	p.res.Wait = with.waits
	p.res.WaitSplits = append(p.res.WaitSplits, with.split)
	p.res.Failed, p.res.Requeued, p.res.BesideS = with.failed, with.requeued, with.beside
	p.res.Problems = append(p.res.Problems, with.problems...)
	if bad, err := p.c.Lab.Drained(ctx); err == nil {
		p.res.Drained = len(bad)
		for _, b := range bad {
			p.res.Problems = append(p.res.Problems, "drained: "+b)
		}
	}
	err = p.check(ctx, with)
	p.res.Nemeses = with.nemeses // with each fault window's cost (check)
	if err != nil {
		return p.res, err
	}
	p.stopService()
	if err := p.cancelTrainers(ctx); err != nil {
		return p.res, err
	}
	if o.Without {
		if err := p.c.In.SetHooks(ctx, p.c.Lab, false); err != nil {
			return p.res, err
		}
		// Twice: the second says how much two passes alike differ on
		// this machine, the measure of the first's difference.
		for i, name := range []string{"without", "without2"} {
			without, err := p.pass(ctx, name, false)
			if err != nil {
				return p.res, err
			}
			if i == 0 {
				p.res.WaitWithout = without.waits
			} else {
				p.res.WaitWithout2 = without.waits
			}
			p.res.WaitSplits = append(p.res.WaitSplits, without.split)
			for _, pr := range without.problems {
				p.res.Problems = append(p.res.Problems, name+" bftrainer: "+pr)
			}
			for _, n := range without.nemeses {
				n.Name += "-" + name
				p.res.Nemeses = append(p.res.Nemeses, n)
			}
		}
	}
	p.res.Wall = time.Since(t0)
	return p.res, nil
}

func (p *pilot) startService() error {
	p.svcMu.Lock()
	defer p.svcMu.Unlock()
	svc, err := p.c.StartService(2 * time.Second)
	if err != nil {
		return fmt.Errorf("reconciler service: %w", err)
	}
	p.svc = svc
	return nil
}

func (p *pilot) stopService() {
	p.svcMu.Lock()
	defer p.svcMu.Unlock()
	p.svc.Kill()
	p.svc = nil
}

// submitTrainers submits the queue: elastic train.py Trainers, torchrun
// ones, exec ones, as the Trainers' owner.
func (p *pilot) submitTrainers(ctx context.Context) error {
	curve := func(n int) []float64 {
		var c []float64
		for _, pt := range torchCurve[:n] {
			_, v, _ := strings.Cut(pt, ":")
			f, _ := strconv.ParseFloat(v, 64)
			c = append(c, f)
		}
		return c
	}
	mx := min(4, p.o.Nodes)
	for i := range p.o.Elastic {
		t, err := p.c.SubmitElastic(ctx, fmt.Sprintf("el%d", i), 1, mx)
		if err != nil {
			return fmt.Errorf("submit elastic Trainer: %w", err)
		}
		p.trains = append(p.trains, pilotTrainer{t.Name, "elastic", 1, mx, curve(mx)})
	}
	for i := range p.o.Torchrun {
		t, err := p.c.SubmitTorch(ctx, fmt.Sprintf("tr%d", i), 1, min(3, mx))
		if err != nil {
			return fmt.Errorf("submit torchrun Trainer: %w", err)
		}
		p.trains = append(p.trains, pilotTrainer{t.Name, "torchrun", 1, min(3, mx), curve(min(3, mx))})
	}
	for i := range p.o.Exec {
		name, err := p.c.SubmitSleeper(ctx, fmt.Sprintf("ex%d", i))
		if err != nil {
			return fmt.Errorf("submit exec Trainer: %w", err)
		}
		p.trains = append(p.trains, pilotTrainer{name, "exec", 1, 1, []float64{10}})
	}
	p.o.Logf("pilot: %d Trainers submitted", len(p.trains))
	return nil
}

func (p *pilot) cancelTrainers(ctx context.Context) error {
	act, err := p.c.Active(ctx)
	if err != nil || len(act) == 0 {
		return err
	}
	return p.c.Cancel(ctx, act...)
}

// pilotRun is one main job of a pass.
type pilotRun struct {
	spec  PilotJob
	burst bool
	job   *Job
}

// passResult is what one pass measured.
type passResult struct {
	start, end       time.Time
	runs             []*pilotRun
	waits            []time.Duration // the slice's jobs: sbatch to the job's first line
	failed, requeued int
	lost             []string // jobs lost to slurmctld's restart (lostToRestart), not counted failed: ID:STATE
	beside           float64
	problems         []string
	nemeses          []NemesisReport
	harvest          *harvestSampler // with bftrainer: the pool and the Trainer processes, every second
	split            WaitSplit
}

// pass submits the slice (each job at its time), runs the nemeses (with
// bftrainer; the burst in both passes), waits for every job to end and
// reads what each job saw.
func (p *pilot) pass(ctx context.Context, name string, with bool) (*passResult, error) {
	r := &passResult{start: time.Now(), split: WaitSplit{Pass: name}}
	window := p.jobs[len(p.jobs)-1].At
	// slurmctld's RPC counts from now (sdiag): what bftrainer asks of it.
	if _, err := p.c.Lab.Output(ctx, "sdiag", "--reset"); err != nil {
		p.o.Logf("pilot: sdiag --reset: %v", err)
	}
	p.o.Logf("pilot: pass %s bftrainer: %d jobs over %s", name, len(p.jobs), window.Round(time.Second))
	var mu sync.Mutex
	add := func(run *pilotRun) {
		mu.Lock()
		r.runs = append(r.runs, run)
		mu.Unlock()
	}
	var errs []error
	var errMu sync.Mutex
	fail := func(err error) {
		errMu.Lock()
		errs = append(errs, err)
		errMu.Unlock()
	}
	// The nemeses' moments: the same seed gives both passes' bursts the
	// same moment.
	rng := rand.New(rand.NewPCG(p.o.Seed, 5))
	var wg sync.WaitGroup
	for _, n := range AllNemeses {
		at := time.Duration((0.15 + 0.6*rng.Float64()) * float64(window))
		if !slices.Contains(p.o.Nemeses, n) || (!with && n != NemesisBurst && n != NemesisCtld) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !sleepCtx(ctx, time.Until(r.start.Add(at))) {
				return
			}
			rep := p.nemesis(ctx, n, r.start, add)
			p.o.Logf("pilot: nemesis %s at %.1f s: %s (%v)", n, rep.At.Seconds(), rep.What, rep.Err)
			mu.Lock()
			r.nemeses = append(r.nemeses, rep)
			mu.Unlock()
		}()
	}
	// With bftrainer: the pool and the Trainer processes, every second,
	// and the sync timer's command.
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	if with && p.o.JournalPath {
		sampler.Add(1)
		go func() {
			defer sampler.Done()
			runs, failed := p.c.In.journalPath(ctx, stop, p.pathGate.RLocker())
			p.o.Logf("pilot: bftrainer-journal.path started %d reconciles (%d failed)", runs, failed)
		}()
	}
	if with {
		r.harvest = newHarvestSampler(p.c.In, p.c.Lab.Nodes)
		sampler.Add(1)
		go func() {
			defer sampler.Done()
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			lastSync := time.Now()
			for {
				select {
				case <-stop:
					return
				case <-ctx.Done():
					return
				case now := <-tick.C:
					r.harvest.sample(ctx)
					if now.Sub(lastSync) >= p.o.SyncEvery {
						lastSync = now
						if out, err := p.c.Run(ctx, "sync"); err != nil {
							p.o.Logf("pilot: sync: %v", err)
						} else if strings.TrimSpace(out) != "" {
							p.o.Logf("pilot: sync: %s", strings.Join(strings.Fields(out), " "))
						}
					}
				}
			}
		}()
	}
	for _, j := range p.jobs {
		if !sleepCtx(ctx, time.Until(r.start.Add(j.At))) {
			break
		}
		job, err := p.c.Lab.Submit(ctx, p.spec(j))
		if err != nil {
			fail(err)
			continue
		}
		add(&pilotRun{spec: j, job: job})
	}
	wg.Wait()
	// Every job ended (squeue lists none of ours), bounded.
	err := Poll(ctx, p.o.Drain, func() (bool, error) {
		act, err := p.c.Lab.ActiveJobs(ctx)
		if err != nil {
			return false, nil // slurmctld restarting
		}
		mu.Lock()
		defer mu.Unlock()
		for _, run := range r.runs {
			if slices.Contains(act, run.job.ID) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		fail(fmt.Errorf("pass %s: jobs still queued or running after %s: %w", name, p.o.Drain, err))
	}
	r.end = time.Now()
	close(stop)
	sampler.Wait()
	if out, err := p.c.Lab.Output(ctx, "sdiag"); err == nil {
		r.split.RPC = rpcCounts(out)
	} else {
		p.o.Logf("pilot: sdiag: %v", err)
	}
	for _, run := range r.runs {
		p.read(ctx, r, run)
	}
	for i, n := range r.nemeses {
		if strings.HasPrefix(n.Name, NemesisCtld) {
			r.nemeses[i].What += fmt.Sprintf(" main_jobs_lost=%d", len(r.lost))
			if len(r.lost) > 0 {
				r.nemeses[i].What += " (" + strings.Join(r.lost, ",") + ": submitted as it went down, the script never ran)"
			}
		}
	}
	p.o.Logf("%s", r.split.Line())
	p.o.Logf("pilot: pass %s ended after %s: %d jobs, %d failed, %d requeued", name, r.end.Sub(r.start).Round(time.Second),
		len(r.runs), r.failed, r.requeued)
	return r, errors.Join(errs...)
}

// restartSlack is how long before slurmctld's restart a job may have been
// submitted and still be lost to it (its allocation and launch in flight).
const restartSlack = 2 * time.Second

// windows returns the pass's nemeses that keep says, each from its
// moment for as long as it held something down (Span).
func (r *passResult) windows(keep func(NemesisReport) bool) []interval {
	var out []interval
	for _, n := range r.nemeses {
		if keep(n) {
			a := r.start.Add(n.At)
			out = append(out, interval{a, a.Add(n.Span)})
		}
	}
	return out
}

// restarts returns the pass's slurmctld restarts.
func (r *passResult) restarts() []interval {
	return r.windows(func(n NemesisReport) bool { return strings.HasPrefix(n.Name, NemesisCtld) })
}

// lostToRestart reports a job that a slurmctld restart lost, not
// bftrainer: submitted within restartSlack before a restart began or
// while slurmctld was down, and its script never ran (no first line). A
// job that ran at all, or came at another time, is not.
func lostToRestart(submitted, first time.Time, restarts []interval) bool {
	if !first.IsZero() {
		return false
	}
	for _, iv := range restarts {
		if !submitted.Before(iv.a.Add(-restartSlack)) && !submitted.After(iv.b) {
			return true
		}
	}
	return false
}

// spec is a slice job as sbatch takes it: the lab's main job, watching
// its nodes for Trainer processes all the while it holds them.
func (p *pilot) spec(j PilotJob) JobSpec {
	return JobSpec{Nodes: j.Nodes, Hold: j.Hold, Watch: true, Name: fmt.Sprintf("swf%d", j.LogID),
		Args: []string{"--time", strconv.Itoa(j.Limit)}}
}

// read checks one ended job: its state, its requeues, what its own
// watch saw; and its wait when it is the slice's.
func (p *pilot) read(ctx context.Context, r *passResult, run *pilotRun) {
	info, err := p.c.Lab.Job(ctx, run.job.ID)
	if err != nil {
		r.failed++
		r.problems = append(r.problems, fmt.Sprintf("job %s: %v", run.job.ID, err))
		return
	}
	rep, err := run.job.Report()
	if (info["JobState"] != "COMPLETED" || info["ExitCode"] != "0:0") && lostToRestart(run.job.Submitted, rep.First, r.restarts()) {
		// Submitted as slurmctld went down, its script never ran: the
		// restart's loss, said on its nemesis line, in every pass alike.
		r.lost = append(r.lost, fmt.Sprintf("%s:%s", run.job.ID, info["JobState"]))
		return
	}
	if err != nil {
		r.problems = append(r.problems, fmt.Sprintf("job %s: output: %v", run.job.ID, err))
	}
	if info["JobState"] != "COMPLETED" || info["ExitCode"] != "0:0" {
		r.failed++
	}
	if info["Restarts"] != "0" {
		r.requeued++
	}
	r.beside += float64(len(rep.Found)) * pilotWatchPeriod.Seconds()
	for _, procs := range rep.Procs {
		if procs != "none" {
			r.beside += pilotWatchPeriod.Seconds()
		}
	}
	if bad := Normal(info, rep); bad != "" {
		r.problems = append(r.problems, fmt.Sprintf("job %s (%s): %s", run.job.ID, info["JobName"], bad))
	}
	if !run.burst && !rep.First.IsZero() {
		r.waits = append(r.waits, run.job.StartDelay(rep))
		r.split.Jobs++
		// scontrol's times are whole seconds in slurmctld's zone (this
		// machine's).
		const layout = "2006-01-02T15:04:05"
		start, err1 := time.ParseInLocation(layout, info["StartTime"], time.Local)
		end, err2 := time.ParseInLocation(layout, info["EndTime"], time.Local)
		if err1 == nil && err2 == nil {
			r.split.Sched = append(r.split.Sched, start.Sub(run.job.Submitted))
			r.split.Launch = append(r.split.Launch, rep.First.Sub(start))
			r.split.Overrun = append(r.split.Overrun, end.Sub(start)-run.spec.Hold)
		}
	}
}

// rpcCounts reads sdiag's "Remote Procedure Call statistics by message
// type" as "total/queries": every RPC slurmctld served, and those that
// only read its state (REQUEST_*_INFO*: sinfo, squeue, scontrol show —
// what bftrainer's rounds and syncs ask of it, with the harness's own
// polls in every pass). All run as root in the lab, so sdiag's split by
// user tells nothing.
func rpcCounts(sdiag string) string {
	_, rest, ok := strings.Cut(sdiag, "statistics by message type")
	if !ok {
		return ""
	}
	total, queries := 0, 0
	for _, line := range strings.Split(rest, "\n")[1:] {
		f := strings.Fields(line)
		if len(f) == 0 {
			break
		}
		// "REQUEST_NODE_INFO  ( 2007) count:15  ave_time:239  total_time:3596"
		for _, w := range f {
			if c, ok := strings.CutPrefix(w, "count:"); ok {
				n, _ := strconv.Atoi(c)
				total += n
				if strings.HasPrefix(f[0], "REQUEST_") && strings.Contains(f[0], "_INFO") {
					queries += n
				}
			}
		}
	}
	return fmt.Sprintf("%d/%d", total, queries)
}

// sleepCtx sleeps d (the workload's own clock: a job's submit time, a
// nemesis's moment); false if ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// nemesis runs one nemesis now and says what happened.
func (p *pilot) nemesis(ctx context.Context, name string, start time.Time, add func(*pilotRun)) (rep NemesisReport) {
	rep = NemesisReport{Name: name, At: time.Since(start)}
	switch name {
	case NemesisCtld:
		t := time.Now()
		_, rep.Err = p.c.Lab.script(ctx, "restart-ctld", p.c.Lab.Dir, "-q", "-t", "60")
		rep.Span = time.Since(t)
		rep.What = fmt.Sprintf("down_up_s=%.1f", rep.Span.Seconds())
	case NemesisReconciler:
		p.svcMu.Lock()
		rep.Err = p.svc.Kill()
		p.svc = nil
		p.svcMu.Unlock()
		// systemd's Restart=always, RestartSec=5 (the unit).
		sleepCtx(ctx, 5*time.Second)
		if err := p.startService(); err != nil {
			rep.Err = errors.Join(rep.Err, err)
		}
		rep.Span = time.Since(start) - rep.At
		rep.What = "killed=SIGKILL restarted_after_s=5"
	case NemesisNode:
		// At a moment when a Trainer holds a node: looked for every 2 s,
		// at most a minute.
		for i := 0; i < 30; i++ {
			t := time.Now()
			rep.What, rep.Err = p.unreachable(ctx)
			if rep.Err == nil && !strings.HasPrefix(rep.What, "no ") {
				rep.At, rep.Span = t.Sub(start), time.Since(t)
				break
			}
			if rep.Err != nil || !sleepCtx(ctx, 2*time.Second) {
				break
			}
		}
	case NemesisWorker:
		for i := 0; i < 30; i++ {
			if rep.What, rep.Err = p.crashWorker(); rep.Err != nil || !strings.HasPrefix(rep.What, "no ") || !sleepCtx(ctx, 2*time.Second) {
				break
			}
		}
	case NemesisDBReadOnly:
		var ro, rw time.Time
		if rep.What, ro, rw, rep.Err = p.readOnly(ctx); !ro.IsZero() {
			rep.At, rep.Span = ro.Sub(start), rw.Sub(ro)
		}
	case NemesisBurst:
		rep.What, rep.Err = p.burst(ctx, add)
	}
	return rep
}

// crashWorker kills one train.py worker of an elastic Trainer with
// SIGKILL, as an out-of-memory kill or a segfault would.
func (p *pilot) crashWorker() (string, error) {
	procs, err := p.c.In.TrainerProcs()
	if err != nil {
		return "", err
	}
	var cands []Proc
	for _, pr := range procs {
		t, ok := pr.Token()
		if !ok || !slices.ContainsFunc(p.trains, func(tr pilotTrainer) bool { return tr.name == t.Trainer && tr.launcher == "elastic" }) {
			continue
		}
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pr.PID))
		if strings.Contains(string(cmd), "train.py") {
			cands = append(cands, pr)
		}
	}
	if len(cands) == 0 {
		return "no elastic worker running: nothing killed", nil
	}
	slices.SortFunc(cands, func(a, b Proc) int { return a.PID - b.PID })
	// A worker of a Trainer that has others, where there is one: what
	// the elastic runtime does with the survivors is the question (a
	// Trainer whose only worker crashed has failed everywhere: it ends
	// failed).
	workers := map[string]int{}
	for _, pr := range cands {
		t, _ := pr.Token()
		workers[t.Trainer]++
	}
	if multi := slices.DeleteFunc(slices.Clone(cands), func(pr Proc) bool { t, _ := pr.Token(); return workers[t.Trainer] < 2 }); len(multi) > 0 {
		cands = multi
	}
	pr := cands[p.rng.IntN(len(cands))]
	t, _ := pr.Token()
	if err := syscall.Kill(pr.PID, syscall.SIGKILL); err != nil {
		return "", err
	}
	p.crashed = t.Trainer
	return fmt.Sprintf("trainer=%s node=%s pid=%d workers=%d killed=SIGKILL", t.Trainer, t.Node, pr.PID, workers[t.Trainer]), nil
}

// readOnly makes the database's filesystem read-only for NemesisHold; ro
// is when it became read-only (zero if it did not), rw when it was
// writable again.
func (p *pilot) readOnly(ctx context.Context) (what string, ro, rw time.Time, err error) {
	if p.dbDir == "" {
		return "", ro, rw, errors.New("the database is not on its own filesystem")
	}
	// The kernel refuses a read-only remount while a file on it is open
	// for writing ("mount point is busy"): a reconciler's round holds
	// the database (the service lets go of it between rounds, see
	// sidecar.Core.Watch). Tried every 100 ms for a moment between rounds,
	// for remountFor. With both cores saturated the service's rounds
	// (and the sampler's reads) can leave none for 30 s (a fresh-clone CI
	// run under a burner: 600 tries refused), so then a read-only bind
	// mount goes over the directory instead: as read-only for every open
	// from then on, the kernel takes it whoever writes; a round that
	// opened the database before finishes on the filesystem below, as
	// one that began just before a remount would have. The journal path
	// unit's reconciles are held back from the first try until the
	// filesystem is writable again (pathGate): they run back to back
	// through a burst, each holding the database, and while it is
	// read-only a record left in its journal (recorded in the stand-in,
	// but not removable) would start one after another for the minute,
	// which systemd's start limit stops after a few. The service's
	// rounds go on, on the stand-in (sidecar/standin.go).
	const remountFor = 5 * time.Second
	p.pathGate.Lock()
	defer p.pathGate.Unlock()
	tries, how := 0, "remount"
	err = Poll(ctx, remountFor, func() (bool, error) {
		tries++
		return exec.Command("mount", "-o", "remount,ro", p.dbDir).Run() == nil, nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Sprintf("remount_tries=%d", tries), ro, rw, ctx.Err()
		}
		if out, err := exec.Command("mount", "--bind", p.dbDir, p.dbDir).CombinedOutput(); err != nil {
			return fmt.Sprintf("remount_tries=%d", tries), ro, rw, fmt.Errorf("bind %s: %w: %s", p.dbDir, err, out)
		}
		if out, err := exec.Command("mount", "-o", "remount,bind,ro", p.dbDir, p.dbDir).CombinedOutput(); err != nil {
			exec.Command("umount", "-l", p.dbDir).Run()
			return fmt.Sprintf("remount_tries=%d", tries), ro, rw, fmt.Errorf("bind %s read-only: %w: %s", p.dbDir, err, out)
		}
		how = "bind"
	}
	ro = time.Now()
	sleepCtx(ctx, p.o.NemesisHold)
	// The rounds meanwhile ran on the stand-in (sidecar/standin.go).
	standin := sidecar.StandInPath(p.c.In.JournalFallback)
	_, err = os.Stat(standin)
	used := err == nil
	fb, _ := os.ReadDir(p.c.In.JournalFallback)
	if how == "remount" {
		if out, err := exec.Command("mount", "-o", "remount,rw", p.dbDir).CombinedOutput(); err != nil {
			return "", ro, rw, fmt.Errorf("remount rw: %w: %s", err, out)
		}
	} else if err := p.unbind(ctx); err != nil {
		return "", ro, rw, err
	}
	rw = time.Now()
	// Writable again: the next writer that finds it free moves it back.
	absorbed := "n/a"
	if used {
		t := time.Now()
		if err := Poll(ctx, time.Minute, func() (bool, error) { _, err := os.Stat(standin); return errors.Is(err, os.ErrNotExist), nil }); err != nil {
			absorbed = "no"
		} else {
			absorbed = fmt.Sprintf("%.1f", time.Since(t).Seconds())
		}
	}
	return fmt.Sprintf("mount=%s how=%s remount_tries=%d ro_s=%.1f standin=%t fallback_journal_files_at_end=%d standin_absorbed_after_s=%s",
		p.dbDir, how, tries, rw.Sub(ro).Seconds(), used, len(fb), absorbed), ro, rw, nil
}

// unbind takes the read-only bind mount off the database's directory:
// refused while a process has the database open through it (a round's
// read-only open), so tried every 100 ms for 10 s, then detached lazily
// (new opens go to the writable filesystem below at once; the open ones
// keep the bind until they close).
func (p *pilot) unbind(ctx context.Context) error {
	if Poll(ctx, 10*time.Second, func() (bool, error) { return exec.Command("umount", p.dbDir).Run() == nil, nil }) == nil {
		return nil
	}
	if out, err := exec.Command("umount", "-l", p.dbDir).CombinedOutput(); err != nil {
		return fmt.Errorf("umount the read-only bind %s: %w: %s", p.dbDir, err, out)
	}
	return nil
}

// unmount takes the database's filesystem away once everything that
// held it is stopped; lazily if something still does.
func (p *pilot) unmount() {
	exec.Command("mount", "-o", "remount,rw", p.dbDir).Run()
	if out, err := exec.Command("umount", p.dbDir).CombinedOutput(); err != nil {
		p.o.Logf("pilot: umount %s: %v %s; detaching it", p.dbDir, err, out)
		exec.Command("umount", "-l", p.dbDir).Run()
	}
}

// burst submits BurstJobs one-node jobs at once (each its own sbatch, all
// started together).
func (p *pilot) burst(ctx context.Context, add func(*pilotRun)) (string, error) {
	t := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	ok := 0
	for i := range p.o.BurstJobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			spec := PilotJob{LogID: int64(-1 - i), Nodes: 1, Limit: 2}
			js := p.spec(spec)
			js.Name = "burst"
			job, err := p.c.Lab.Submit(ctx, js)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			ok++
			add(&pilotRun{spec: spec, burst: true, job: job})
		}()
	}
	wg.Wait()
	what := fmt.Sprintf("submitted=%d in_s=%.1f", ok, time.Since(t).Seconds())
	if len(errs) > 0 {
		return what, fmt.Errorf("%d sbatch failed, the first: %w", len(errs), errs[0])
	}
	return what, nil
}

// check runs the checks after the pass with bftrainer: every job start
// and end on a pool node in the history (against sacct), bftrainer audit
// over the pass, the Trainers' own state, and the replay's prediction
// from the pass's sacct.
func (p *pilot) check(ctx context.Context, r *passResult) error {
	from, to := r.start.Add(-time.Second), r.end.Add(time.Second)
	listing, raw, err := p.sacct(ctx, from, to, r)
	if err != nil {
		return err
	}
	for _, j := range listing.Jobs {
		if j.Running {
			continue
		}
		hooks, err := p.c.HookEvents(ctx, j.ID)
		if err != nil {
			return err
		}
		for _, hc := range []string{"prolog_slurmctld", "epilog_slurmctld"} {
			if n := len(hooks[hc]); n != 1 {
				p.res.Problems = append(p.res.Problems, fmt.Sprintf("job %s: %s recorded %d times, want 1", j.ID, hc, n))
				if n == 0 {
					p.res.EventsLost++
				}
			}
		}
	}
	// The audit, as a site runs it.
	out, aerr := p.c.Run(ctx, "audit", "--since", from.UTC().Format(time.RFC3339), "--until", to.UTC().Format(time.RFC3339), "--format", "json")
	var audit struct {
		Jobs       int               `json:"jobs"`
		Violations []json.RawMessage `json:"violations"`
	}
	if err := json.Unmarshal([]byte(out), &audit); err != nil {
		return fmt.Errorf("audit: %v (%w)", err, aerr)
	}
	p.res.AuditViolations = len(audit.Violations)
	for _, v := range audit.Violations {
		p.res.Problems = append(p.res.Problems, "audit: "+string(v))
	}
	// Harvest: node-hours used by Trainers (a Trainer process alive on an
	// idle node), the rest by stage, over the accounting's span (the
	// replay's: first start to last end).
	first, last := to, from
	for _, j := range listing.Jobs {
		if j.Start.Before(first) {
			first = j.Start
		}
		if !j.Running && j.End.After(last) {
			last = j.End
		}
	}
	if p.res.Harvest, err = p.harvest(r, listing, first, last); err != nil {
		return err
	}
	p.res.HarvestedNodeH = p.res.Harvest.UsedH
	p.res.PredictedH, err = p.predict(ctx, raw, r.start)
	if err != nil {
		return err
	}
	// The Trainers: none failed.
	db, err := p.c.In.OpenDB(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	ts, err := db.Trainers(ctx)
	if err != nil {
		return err
	}
	for _, t := range ts {
		switch {
		case string(t.Status) == "failed" && t.ID == p.crashed:
			p.res.TrainerNotes = append(p.res.TrainerNotes, fmt.Sprintf("Trainer %s failed after the worker-crash nemesis killed its worker", t.ID))
		case string(t.Status) == "failed":
			p.res.Problems = append(p.res.Problems, fmt.Sprintf("Trainer %s failed", t.ID))
		}
	}
	return nil
}

// sacct reads the accounting of [from, to] once it lists every job of the
// pass as ended (slurmctld sends it to slurmdbd asynchronously), bounded.
func (p *pilot) sacct(ctx context.Context, from, to time.Time, r *passResult) (*accounting.Listing, string, error) {
	const layout = "2006-01-02T15:04:05"
	var listing *accounting.Listing
	var out string
	err := Poll(ctx, 2*time.Minute, func() (bool, error) {
		cmd := p.c.Lab.Command(ctx, "sacct", "--allusers", "--allocations", "--parsable2",
			"--starttime", from.UTC().Format(layout), "--endtime", to.UTC().Format(layout),
			"--format", "JobID,Submit,Start,End,NNodes,NodeList,State")
		cmd.Env = append(cmd.Env, "TZ=UTC")
		b, err := cmd.Output()
		if err != nil {
			return false, nil
		}
		out = string(b)
		if listing, err = accounting.ReadSacct(strings.NewReader(out), time.UTC); err != nil {
			return false, err
		}
		ended := map[string]bool{}
		for _, j := range listing.Jobs {
			ended[j.ID] = !j.Running
		}
		for _, run := range r.runs {
			if !ended[run.job.ID] {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return nil, "", fmt.Errorf("sacct did not list every job of the pass as ended: %w", err)
	}
	return listing, out, nil
}

// predict replays the pass's own accounting (bftrainer replay --trace
// sacct) with the Trainers the pilot submitted, their rescale costs as
// the pilot measured them, and returns the node-hours the replay's
// Trainers used.
func (p *pilot) predict(ctx context.Context, sacct string, submit time.Time) (float64, error) {
	dir := filepath.Join(p.c.Dir, "replay")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	trace, nodes, work := filepath.Join(dir, "pass.sacct"), filepath.Join(dir, "nodes.csv"), filepath.Join(dir, "workload.csv")
	if err := os.WriteFile(trace, []byte(sacct), 0o644); err != nil {
		return 0, err
	}
	var nb strings.Builder
	nb.WriteString("node_idx,node_name\n")
	for i, n := range p.c.Lab.Nodes {
		fmt.Fprintf(&nb, "%d,%s\n", i, n)
	}
	if err := os.WriteFile(nodes, []byte(nb.String()), 0o644); err != nil {
		return 0, err
	}
	db, err := p.c.In.OpenDB(ctx)
	if err != nil {
		return 0, err
	}
	ts, err := db.Trainers(ctx)
	db.Close()
	if err != nil {
		return 0, err
	}
	var wb strings.Builder
	wb.WriteString("job,model,tsub,tcup_s,tcdw_s,jmin,jmax,pmax_samples,ns,ps,os\n")
	for _, tr := range p.trains {
		up, down := 0.0, 0.0
		for _, t := range ts {
			if t.ID == tr.name {
				up, down = t.RescaleUp(), t.RescaleDown()
			}
		}
		ns, ps := []string{"0"}, []string{"0"}
		for i, v := range tr.curve {
			ns = append(ns, strconv.Itoa(i+1))
			ps = append(ps, strconv.FormatFloat(v, 'f', -1, 64))
		}
		fmt.Fprintf(&wb, "%s,%s,%s,%g,%g,%d,%d,1e12,%s,%s,%s\n", tr.name, tr.launcher, submit.UTC().Format("2006-01-02 15:04:05"),
			up, down, tr.min, tr.max, strings.Join(ns, ";"), strings.Join(ps, ";"), strings.Join(ps, ";"))
		p.o.Logf("pilot: replay Trainer %s: R_up %.2f s, R_down %.2f s (measured, with the submitted prior)", tr.name, up, down)
	}
	if err := os.WriteFile(work, []byte(wb.String()), 0o644); err != nil {
		return 0, err
	}
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := p.c.In.RunEnv(rctx, []string{"TZ=UTC"}, "replay", "--trace", trace, "--nodes", nodes, "--workload", work,
		"--allocator", p.o.Solver, "--tfwd", "60", "--max-trainers", strconv.Itoa(len(p.trains)), "--format", "json")
	if err != nil {
		return 0, fmt.Errorf("replay: %w", err)
	}
	var sums []struct {
		UsedNodeHours float64 `json:"used_node_h"`
	}
	if err := json.Unmarshal([]byte(out), &sums); err != nil || len(sums) != 1 {
		return 0, fmt.Errorf("replay: its summary %q: %v", out, err)
	}
	return sums[0].UsedNodeHours, nil
}
