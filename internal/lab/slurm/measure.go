package slurm

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/store"
	"github.com/bftrainer/bftrainer/trainer/wire"
)

// ctldTime matches the millisecond timestamp of a slurmctld log line
// (LogTimeFormat=iso8601_ms, local time).
var ctldTime = regexp.MustCompile(`^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})\] (.*)$`)

// CtldEvent returns the time of the first slurmctld log line matching re.
func (l *Lab) CtldEvent(re *regexp.Regexp) (time.Time, error) {
	log, err := l.CtldLog()
	if err != nil {
		return time.Time{}, err
	}
	for _, line := range strings.Split(log, "\n") {
		m := ctldTime.FindStringSubmatch(line)
		if m == nil || !re.MatchString(m[2]) {
			continue
		}
		return time.ParseInLocation("2006-01-02T15:04:05.000", m[1], time.Local)
	}
	return time.Time{}, fmt.Errorf("slurmctld log: no line matching %q", re)
}

// Allocated returns when slurmctld gave a job its nodes: the main
// scheduler logs "sched: Allocate JobId=N", the backfill scheduler
// "_start_job: Started JobId=N".
func (l *Lab) Allocated(job string) (time.Time, error) {
	return l.CtldEvent(regexp.MustCompile(`(Allocate|Started) JobId=` + job + `\b`))
}

// DelaySample is one main job's start: when sbatch ran, when slurmctld
// allocated it and when its first line ran.
type DelaySample struct {
	Job                  string
	Submit, Alloc, First time.Time
}

// StartDelay is sbatch to first line.
func (s DelaySample) StartDelay() time.Duration { return s.First.Sub(s.Submit) }

// AllocToStart is allocation to first line: what the prologs add, without
// the scheduler's own latency (its passes run once a second here).
func (s DelaySample) AllocToStart() time.Duration { return s.First.Sub(s.Alloc) }

// StartDelays submits runs main jobs of nodes nodes, one after the other,
// each ending at once after its check, and returns their start times.
// Before each it waits until every node is exactly idle and, with ready,
// until ready says the Trainers are back (so that every main job reclaims
// nodes that run Trainer processes). Every job must end normally.
func StartDelays(ctx context.Context, c *Cluster, runs, nodes int, ready func() (bool, error)) ([]DelaySample, error) {
	var out []DelaySample
	for i := 0; i < runs; i++ {
		if err := Poll(ctx, 2*time.Minute, func() (bool, error) {
			idle, err := c.Lab.IdleNodes(ctx)
			if err != nil || len(idle) != len(c.Lab.Nodes) {
				return false, err
			}
			if ready == nil {
				return true, nil
			}
			return ready()
		}); err != nil {
			return out, fmt.Errorf("before main job %d: %w", i+1, err)
		}
		smp, _, _, err := c.Lab.DelayJob(ctx, JobSpec{Nodes: nodes, Name: "delay"})
		if err != nil {
			return out, err
		}
		out = append(out, smp)
	}
	return out, nil
}

// DelayJob runs one main job to its end and returns when it was
// submitted, allocated and started, with its fields and report; it must
// have ended normally.
func (l *Lab) DelayJob(ctx context.Context, spec JobSpec) (DelaySample, JobInfo, JobReport, error) {
	j, err := l.Submit(ctx, spec)
	if err != nil {
		return DelaySample{}, nil, JobReport{}, err
	}
	info, err := j.WaitEnded(ctx, 2*time.Minute)
	if err != nil {
		return DelaySample{}, info, JobReport{}, err
	}
	r, err := j.Report()
	if err != nil {
		return DelaySample{}, info, r, err
	}
	if bad := Normal(info, r); bad != "" {
		return DelaySample{}, info, r, fmt.Errorf("main job %s: %s", j.ID, bad)
	}
	alloc, err := l.Allocated(j.ID)
	if err != nil {
		return DelaySample{}, info, r, err
	}
	return DelaySample{Job: j.ID, Submit: j.Submitted, Alloc: alloc, First: r.First}, info, r, nil
}

// SleepersReady reports whether every node holds a live process of one of
// the install's Trainers.
func (c *Cluster) SleepersReady() (bool, error) {
	ps, err := c.In.TrainerProcs()
	if err != nil {
		return false, err
	}
	on := map[string]bool{}
	for _, p := range ps {
		if t, ok := p.Token(); ok {
			on[t.Node] = true
		}
	}
	for _, n := range c.Lab.Nodes {
		if !on[n] {
			return false, nil
		}
	}
	return true, nil
}

// TrainersMatchPool waits, at most timeout, until the processes agree
// with the pool: every node the pool gives a Trainer runs a process of
// that Trainer, and no Trainer process runs anywhere else. (An exec
// Trainer runs on the first of its nodes only.)
func (c *Cluster) TrainersMatchPool(ctx context.Context, timeout time.Duration) error {
	var last string
	err := Poll(ctx, timeout, func() (bool, error) {
		nodes, err := c.In.PoolNodes(ctx)
		if err != nil {
			return false, err
		}
		ps, err := c.In.TrainerProcs()
		if err != nil {
			return false, err
		}
		running := map[string]map[string]bool{} // node → Trainers with a process there
		for _, p := range ps {
			if t, ok := p.Token(); ok && t.Node != wire.ControllerNode {
				if running[t.Node] == nil {
					running[t.Node] = map[string]bool{}
				}
				running[t.Node][t.Trainer] = true
			}
		}
		var diff []string
		for _, n := range c.Lab.Nodes {
			want := nodes[n].Trainer
			if nodes[n].State != pool.Idle {
				want = ""
			}
			for tr := range running[n] {
				if tr != want {
					diff = append(diff, fmt.Sprintf("%s runs %s, the pool says %q", n, tr, want))
				}
			}
			if want != "" && !running[n][want] && !c.execElsewhere(nodes, want, n, running) {
				diff = append(diff, fmt.Sprintf("%s should run %s", n, want))
			}
		}
		slices.Sort(diff)
		last = strings.Join(diff, "; ")
		return len(diff) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("the Trainer processes and the pool disagree (%s): %w", last, err)
	}
	return nil
}

// execElsewhere reports an exec Trainer that runs on another of its
// nodes: it has one process, on the first node of its set.
func (c *Cluster) execElsewhere(nodes map[string]pool.Node, id, node string, running map[string]map[string]bool) bool {
	for n, p := range nodes {
		if n != node && p.Trainer == id && running[n][id] {
			return true
		}
	}
	return false
}

// KillMs returns the ms of every node-local kill recorded since id (the
// prolog's reclaim: the Trainer's process groups SIGKILLed and confirmed
// gone), only those that killed something.
func (c *Cluster) KillMs(ctx context.Context, afterID int64) ([]float64, error) {
	evs, err := c.In.Events(ctx, store.Filter{Kinds: []store.Kind{store.KindKill}, AfterID: afterID})
	if err != nil {
		return nil, err
	}
	var out []float64
	for _, e := range evs {
		if e.Value >= 1 && e.Error == "" && e.HasMs {
			out = append(out, e.Ms)
		}
	}
	return out, nil
}

// HookMs returns the ms of every hook call of a context recorded since id
// (process start to recording: what the hook itself takes, exec and exit
// aside).
func (c *Cluster) HookMs(ctx context.Context, context_ string, afterID int64) ([]float64, error) {
	evs, err := c.In.Events(ctx, store.Filter{Kinds: []store.Kind{store.KindHook}, AfterID: afterID})
	if err != nil {
		return nil, err
	}
	var out []float64
	for _, e := range evs {
		if e.Context == context_ && e.HasMs {
			out = append(out, e.Ms)
		}
	}
	return out, nil
}

// LastEventID returns the newest event's id (0 for an empty history).
func (c *Cluster) LastEventID(ctx context.Context) (int64, error) {
	evs, err := c.In.Events(ctx, store.Filter{Desc: true, Limit: 1})
	if err != nil || len(evs) == 0 {
		return 0, err
	}
	return evs[0].ID, nil
}

// SideOptions shapes the side-by-side run (scenario 7).
type SideOptions struct {
	TrainerNodes int           // nodes the Trainer runs on; the others are held by a long main job. 0 means all but 2
	MainNodes    int           // the main job's -N; 0 means 2
	Hold         time.Duration // the main job's run time; 0 means 20 s
	Window       time.Duration // Trainer progress is counted from the main job's sbatch for this long; 0 means 60 s
}

// SideResult is one approach's figures.
type SideResult struct {
	Approach    string // bftrainer or scavenger
	Main        *Job
	Info        JobInfo
	Report      JobReport
	StartDelay  time.Duration // sbatch to the main job's first line
	Reclaim     time.Duration // bftrainer: the slowest node prolog's kill; scavenger: preemption to the main job's allocation
	NodeSeconds float64       // node-seconds the Trainer spent training in the window
	Samples     float64       // samples it gained in the window
	Restarts    string        // scavenger: the Trainer job's requeue count
	Lost        bool          // bftrainer: the Trainer ended on the reclaim (it must not)
	TrainerLog  string
}

// SideBySide runs the same main job against the same Trainer
// (contrib/trainer/train.py, torchrun, CPU) twice on this cluster: first
// with bftrainer (hooks on; the Trainer on idle nodes, reclaimed by the
// node prologs), then with Slurm's own preemption (hooks off; the Trainer
// a requeueable job in the scavenger partition, PreemptMode=REQUEUE,
// GraceTime=0). The cluster must be reset (hooks on, no Trainer, all
// idle); it is left with hooks on and all idle.
func SideBySide(ctx context.Context, c *Cluster, o SideOptions) (bf, scav SideResult, err error) {
	if o.TrainerNodes <= 0 {
		o.TrainerNodes = len(c.Lab.Nodes) - 2
	}
	if o.MainNodes <= 0 {
		o.MainNodes = 2
	}
	if o.Hold <= 0 {
		o.Hold = 20 * time.Second
	}
	if o.Window <= 0 {
		o.Window = 60 * time.Second
	}
	if o.TrainerNodes >= len(c.Lab.Nodes) || o.MainNodes > o.TrainerNodes {
		return bf, scav, fmt.Errorf("side by side: %d Trainer nodes and a %d-node main job do not fit %d nodes", o.TrainerNodes, o.MainNodes, len(c.Lab.Nodes))
	}
	if bf, err = sideBftrainer(ctx, c, o); err != nil {
		return bf, scav, fmt.Errorf("bftrainer side: %w", err)
	}
	scav, err = sideScavenger(ctx, c, o)
	if herr := c.In.SetHooks(ctx, c.Lab, true); herr != nil && err == nil {
		err = herr
	}
	if err != nil {
		return bf, scav, fmt.Errorf("scavenger side: %w", err)
	}
	return bf, scav, nil
}

// holdRest starts a long main job on the nodes the Trainer does not get.
func holdRest(ctx context.Context, c *Cluster, o SideOptions) (*Job, error) {
	rest := c.Lab.Nodes[o.TrainerNodes:]
	h, err := c.Lab.Submit(ctx, JobSpec{Nodes: len(rest), NodeList: strings.Join(rest, ","), Held: true, Name: "hold"})
	if err != nil {
		return nil, err
	}
	if _, err := h.WaitChecked(ctx, time.Minute); err != nil {
		return nil, err
	}
	return h, nil
}

// endHold lets the long job go and waits until every node is idle.
func endHold(ctx context.Context, c *Cluster, h *Job) error {
	if err := h.Release(); err != nil {
		return err
	}
	if _, err := h.WaitEnded(ctx, time.Minute); err != nil {
		return err
	}
	return c.Lab.WaitIdle(ctx, time.Minute)
}

// measureMain submits the main job, waits for it and for the window's
// end, and fills in what the job itself says.
func measureMain(ctx context.Context, c *Cluster, o SideOptions, r *SideResult) error {
	j, err := c.Lab.Submit(ctx, JobSpec{Nodes: o.MainNodes, Hold: o.Hold, Name: "main-" + r.Approach})
	if err != nil {
		return err
	}
	r.Main = j
	if r.Info, err = j.WaitEnded(ctx, o.Hold+3*time.Minute); err != nil {
		return err
	}
	if r.Report, err = j.Report(); err != nil {
		return err
	}
	if bad := Normal(r.Info, r.Report); bad != "" {
		return fmt.Errorf("main job %s: %s", j.ID, bad)
	}
	r.StartDelay = j.StartDelay(r.Report)
	// The window is a measurement interval: waiting for its end is the
	// condition itself.
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Until(j.Submitted.Add(o.Window))):
	}
	steps, err := ReadSteps(r.TrainerLog)
	if err != nil {
		return err
	}
	end := j.Submitted.Add(o.Window)
	r.NodeSeconds = NodeSeconds(steps, j.Submitted, end)
	r.Samples = samplesGained(steps, j.Submitted, end)
	return nil
}

func sideBftrainer(ctx context.Context, c *Cluster, o SideOptions) (r SideResult, err error) {
	r.Approach = "bftrainer"
	hold, err := holdRest(ctx, c, o)
	if err != nil {
		return r, err
	}
	if _, err := c.Run(ctx, "sync"); err != nil {
		return r, err
	}
	submitted := time.Now()
	tr, err := c.SubmitTorch(ctx, fmt.Sprintf("side%d", submitted.Unix()%100000), 1, o.TrainerNodes)
	if err != nil {
		return r, err
	}
	r.TrainerLog = tr.Log
	c.Logf("side by side, bftrainer: Trainer %s submitted; waiting for world %d", tr.Name, o.TrainerNodes)
	if _, err := WaitRounds(ctx, tr.Log, submitted, 5, 3*time.Minute, OnNodes(c.Lab.Nodes[:o.TrainerNodes]...)); err != nil {
		return r, err
	}
	if err := measureMain(ctx, c, o, &r); err != nil {
		return r, err
	}
	kills, err := c.In.Events(ctx, store.Filter{Kinds: []store.Kind{store.KindKill}, Job: r.Main.ID})
	if err != nil {
		return r, err
	}
	for _, k := range kills {
		if k.Value >= 1 {
			r.Reclaim = max(r.Reclaim, time.Duration(k.Ms*float64(time.Millisecond)))
		}
	}
	act, err := c.Active(ctx)
	if err != nil {
		return r, err
	}
	if r.Lost = !slices.Contains(act, tr.Name); !r.Lost {
		if err := c.Cancel(ctx, tr.Name); err != nil {
			return r, err
		}
	}
	return r, endHold(ctx, c, hold)
}

// scavengerScript is the same Trainer as a Slurm batch job: the
// rendezvous store on the batch node, one torchrun agent per node with
// the same flags bftrainer uses, a fresh rendezvous id per incarnation
// (a requeued job starts again from the top and resumes from the
// checkpoint).
const scavengerScript = `#!/bin/bash
cd {{DIR}}
/usr/bin/python3 {{WORK}}/store.py --port {{PORT}} >>{{DIR}}/store.log 2>&1 &
for i in $(seq 1 300); do (exec 3<>/dev/tcp/127.0.0.1/{{PORT}}) 2>/dev/null && break; sleep 0.1; done
export LOGLEVEL=INFO OMP_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE=1
srun -N "$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 --kill-on-bad-exit=0 /bin/sh -c 'NODE_TAG=$SLURMD_NODENAME exec "$@"' sh \
	/usr/bin/python3 {{WORK}}/fast_torchrun.py --nnodes=1:{{MAX}} --nproc_per_node=1 --rdzv_backend=c10d \
	--rdzv_endpoint=127.0.0.1:{{PORT}} --rdzv_id=scav-$SLURM_JOB_ID-${SLURM_RESTART_COUNT:-0} --max_restarts=100 \
	--rdzv_conf=is_host=false,last_call_timeout=1,join_timeout=120 --monitor_interval=1 -r 1 -t 1 --log_dir={{DIR}}/tlogs \
	{{WORK}}/train.py --ckpt-dir {{DIR}}/ckpt --log {{DIR}}/progress.log --steps 1000000 --sleep 0.2 --pg-timeout 10
`

func sideScavenger(ctx context.Context, c *Cluster, o SideOptions) (r SideResult, err error) {
	r.Approach = "scavenger"
	if err := c.In.SetHooks(ctx, c.Lab, false); err != nil {
		return r, err
	}
	hold, err := holdRest(ctx, c, o)
	if err != nil {
		return r, err
	}
	dir := filepath.Join(c.In.Work, fmt.Sprintf("%s-scav%d", c.In.Tag, time.Now().Unix()%100000))
	if err := c.ownedDir(dir); err != nil {
		return r, err
	}
	port, err := freeTCPPort()
	if err != nil {
		return r, err
	}
	script := strings.NewReplacer("{{DIR}}", dir, "{{WORK}}", c.In.Work, "{{PORT}}", strconv.Itoa(port),
		"{{MAX}}", strconv.Itoa(o.TrainerNodes)).Replace(scavengerScript)
	path := filepath.Join(dir, "scavenger.sh")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		return r, err
	}
	r.TrainerLog = filepath.Join(dir, "progress.log")
	submitted := time.Now()
	sj, err := c.Lab.Submit(ctx, JobSpec{Script: path, Nodes: o.TrainerNodes, Partition: "scavenger", Name: "scavenger",
		User: c.User, Args: []string{"--requeue"}})
	if err != nil {
		return r, err
	}
	defer func() {
		// The requeued Trainer would start again once the nodes are free:
		// it is over.
		if _, cerr := c.Lab.Output(ctx, "scancel", sj.ID); cerr != nil && err == nil {
			err = cerr
		}
		if herr := endHold(ctx, c, hold); herr != nil && err == nil {
			err = herr
		}
	}()
	c.Logf("side by side, scavenger: Trainer job %s submitted; waiting for world %d", sj.ID, o.TrainerNodes)
	if _, err := WaitRounds(ctx, r.TrainerLog, submitted, 5, 3*time.Minute, OnNodes(c.Lab.Nodes[:o.TrainerNodes]...)); err != nil {
		return r, err
	}
	if err := measureMain(ctx, c, o, &r); err != nil {
		return r, err
	}
	info, err := c.Lab.Job(ctx, sj.ID)
	if err != nil {
		return r, err
	}
	r.Restarts = info["Restarts"]
	preempted, err := c.Lab.CtldEvent(regexp.MustCompile(`preempted JobId=` + sj.ID + ` .*JobId=` + r.Main.ID + `\b`))
	if err != nil {
		return r, err
	}
	alloc, err := c.Lab.Allocated(r.Main.ID)
	if err != nil {
		return r, err
	}
	r.Reclaim = alloc.Sub(preempted)
	return r, nil
}

// freeTCPPort returns a port nobody listens on now.
func freeTCPPort() (int, error) {
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Quantile returns the nearest-rank quantile q of xs (0 for none).
func Quantile(xs []float64, q float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return store.Quantile(s, q)
}

// Millis converts durations to milliseconds.
func Millis(ds ...time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = float64(d.Microseconds()) / 1000
	}
	return out
}

// TorchDelays is what TorchStartDelays measured.
type TorchDelays struct {
	Samples []DelaySample
	StartID int64 // the kills of these main jobs are recorded after this event
	Lost    int   // Trainers that ended on a reclaim and were submitted again
}

// TorchStartDelays measures main jobs that reclaim a node from a running
// torchrun Trainer: the Trainer runs on all nodes but the last two (held
// by a long main job), each main job takes one of its nodes for a moment,
// and before the next one the Trainer is back at full size. The cluster
// must be reset; it is left reset but for the Trainer, which is
// cancelled.
func TorchStartDelays(ctx context.Context, c *Cluster, runs int) (td TorchDelays, err error) {
	o := SideOptions{TrainerNodes: len(c.Lab.Nodes) - 2}
	hold, err := holdRest(ctx, c, o)
	if err != nil {
		return td, err
	}
	defer func() {
		if herr := endHold(ctx, c, hold); herr != nil && err == nil {
			err = herr
		}
	}()
	if _, err := c.Run(ctx, "sync"); err != nil {
		return td, err
	}
	full := OnNodes(c.Lab.Nodes[:o.TrainerNodes]...)
	var tr *Torch
	defer func() {
		if tr == nil {
			return
		}
		if cerr := c.Cancel(ctx, tr.Name); cerr != nil && err == nil {
			err = cerr
		}
	}()
	var since time.Time
	if td.StartID, err = c.LastEventID(ctx); err != nil {
		return td, err
	}
	for i := 0; i < runs; i++ {
		act, err := c.Active(ctx)
		if err != nil {
			return td, err
		}
		if tr == nil || !slices.Contains(act, tr.Name) {
			if tr != nil {
				td.Lost++ // a reclaim should take a node from it, never end it
			}
			since = time.Now()
			if tr, err = c.SubmitTorch(ctx, fmt.Sprintf("delay%d", since.UnixMilli()%1000000), 1, o.TrainerNodes); err != nil {
				return td, err
			}
		}
		if _, err := WaitRounds(ctx, tr.Log, since, 3, 3*time.Minute, full); err != nil {
			return td, fmt.Errorf("before main job %d: %w", i+1, err)
		}
		smp, _, r, err := c.Lab.DelayJob(ctx, JobSpec{Nodes: 1, Name: "delay-torch"})
		if err != nil {
			return td, err
		}
		td.Samples = append(td.Samples, smp)
		since = r.End
	}
	return td, nil
}

// Sleepers keeps a one-node exec Trainer on every node: Ready reports
// whether each node runs one, after submitting a replacement for every
// sleeper that ended. They should never end: a reclaim takes a node from
// a Trainer, it does not end it. Lost counts those that did (see
// contrib/slurm/README.md, "Known issues"), so that a measurement can
// say so instead of stalling.
type Sleepers struct {
	c    *Cluster
	tag  string
	n    int
	Lost int
}

// NewSleepers submits one sleeper per node.
func (c *Cluster) NewSleepers(ctx context.Context, tag string) (*Sleepers, error) {
	s := &Sleepers{c: c, tag: tag}
	for range c.Lab.Nodes {
		if err := s.add(ctx); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (s *Sleepers) add(ctx context.Context) error {
	_, err := s.c.SubmitSleeper(ctx, fmt.Sprintf("%s%d", s.tag, s.n))
	s.n++
	return err
}

// Ready replaces lost sleepers and reports whether every node runs one.
func (s *Sleepers) Ready(ctx context.Context) (bool, error) {
	act, err := s.c.Active(ctx)
	if err != nil {
		return false, err
	}
	mine := 0
	for _, a := range act {
		if strings.HasPrefix(a, s.c.In.Name(s.tag)) {
			mine++
		}
	}
	for ; mine < len(s.c.Lab.Nodes); mine++ {
		s.Lost++
		if err := s.add(ctx); err != nil {
			return false, err
		}
	}
	return s.c.SleepersReady()
}

// HookPath is where a main job's start went, from slurmctld's allocation
// to the job's first line, read from slurmctld's log, bftrainer's hook
// records (a hook's time runs from its process start, after exec and the
// Go runtime's start, to its record) and the job's output.
type HookPath struct {
	ToCtldHook   time.Duration // allocation → PrologSlurmctld's process started
	CtldHook     time.Duration // PrologSlurmctld's own time
	ToNodeProlog time.Duration // its record → the first node Prolog's process started
	NodeProlog   time.Duration // first node Prolog started → the last one recorded
	ToFirstLine  time.Duration // the last node Prolog recorded → the job's first line
}

// Path reads a main job's HookPath; ok is false when its hooks did not
// all record (hooks off, or a hook that failed).
func (c *Cluster) Path(ctx context.Context, s DelaySample) (p HookPath, ok bool, err error) {
	hooks, err := c.HookEvents(ctx, s.Job)
	if err != nil {
		return p, false, err
	}
	ctld := hooks["prolog_slurmctld"]
	nodes := hooks["prolog_slurmd"]
	if len(ctld) != 1 || len(nodes) == 0 {
		return p, false, nil
	}
	end := func(e store.Event) time.Time { return e.At.Add(time.Duration(e.Ms * float64(time.Millisecond))) }
	first, last := nodes[0].At, end(nodes[0])
	for _, e := range nodes[1:] {
		if e.At.Before(first) {
			first = e.At
		}
		if end(e).After(last) {
			last = end(e)
		}
	}
	p.ToCtldHook = ctld[0].At.Sub(s.Alloc)
	p.CtldHook = end(ctld[0]).Sub(ctld[0].At)
	p.ToNodeProlog = first.Sub(end(ctld[0]))
	p.NodeProlog = last.Sub(first)
	p.ToFirstLine = s.First.Sub(last)
	return p, true, nil
}
