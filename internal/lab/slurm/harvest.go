package slurm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bftrainer/bftrainer/accounting"
	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/trainer/agent"
	"golang.org/x/sys/unix"
)

// The pilot's harvest (issue 27's goal: node-hours used by Trainers
// against the replay's prediction, the rest explained by stage).
//
// Once a second the sampler (harvestSampler.sample) records, per lab
// node, what the pool's saved state says of it (held for a Trainer; free:
// joined and lent to none) and whether a Trainer process is alive on it,
// and whether any admitted Trainer could take another node. After the
// pass, splitHarvest takes the idle node-time from sacct (a node is busy
// from a job's Start to its End; idle otherwise, over the accounting's
// first start to last end) and files each idle instant under exactly one
// stage, by the sample nearest in time (each sample stands for the time
// from halfway after the one before to halfway before the one after):
//
//   - used: a Trainer process is alive on the node;
//   - startup: the pool holds the node for a Trainer, no process yet;
//   - completing: neither held nor free: the pool has not got the node
//     back since sacct's End (the epilog and Slurm's COMPLETING, then the
//     reconciler folding the join; also the second sacct's whole-second
//     End leaves before the job's real end);
//   - reconcile: free in the pool while an admitted Trainer is below its
//     maximum (and not backing off after failed starts): the time until a
//     reconciler round gives it, or the solver's choice not to grow (a
//     rescale worth less than it costs over tfwd — the replay makes the
//     same choice);
//   - no_demand: free while no admitted Trainer could take it.
//
// Across the stages, fault: an idle instant not used while a nemesis held
// a part of the system down (slurmctld restarting, the reconciler service
// killed, the database read-only, a node's sshd stopped: each nemesis's
// window, NemesisReport.Span) is filed there whatever its stage would be;
// fault_idle is all idle time in those windows, used or not, and
// used_outside_faults the share of the idle time outside them that was
// used: what the system harvests when nothing is broken, beside the whole
// pass's figure that the result line's ratio gives.
//
// held is the old measure (nodes the pool shows held, over the whole
// span, busy or not). beside is a cross-check of the jobs' own watches:
// the node-time (in the span) of samples that saw a Trainer process alive on a node,
// taken at an instant when a main job surely ran there — from the job's
// first line (its own clock: with PrologFlags=Alloc every node's prolog,
// the Trainer's kill, is done by then; sacct's Start is the allocation,
// before the prologs, and its step start is slurmctld's launch, before
// them too) to sacct's End.
//
// Where the processes are seen: the lab's cgroup subtree
// (Install.CgroupRoot: ROOT/TRAINER/NODE@NONCE, one leaf per launch, whose
// cgroup.events says "populated 1" while a live process is in it; a
// zombie is not) — a directory walk and a small read per launch. The
// run-token scan (Install.TrainerProcs) reads every process's stat and
// whole environment: about 10 ms a call with 370 processes of 6 kB
// environments on this 2-core machine, measured, where the walk is well
// under a millisecond. The scan stays as the fallback where there is no
// subtree (no cgroup2, containment degraded), and as a cross-check every
// harvestCheckEvery samples (Harvest.ProcChecks, ProcMismatches).

// harvestCheckEvery is how many samples apart the cgroup source is
// checked against the run-token scan.
const harvestCheckEvery = 30

// Harvest is how a pass's idle node-time was spent.
type Harvest struct {
	// IdleH is the lab's nodes' idle node-hours by sacct over the
	// accounting's span; UsedH + FaultH + StartupH + CompletingH +
	// ReconcileH + NoDemandH is IdleH.
	IdleH, UsedH, StartupH, CompletingH, ReconcileH, NoDemandH float64
	// FaultH is idle time not used while a nemesis held a part of the
	// system down (slurmctld, the reconciler service, the database, a
	// node's sshd: NemesisReport.Span), whatever its stage otherwise;
	// FaultIdleH all idle time in those windows, FaultUsedH the used.
	FaultH, FaultIdleH, FaultUsedH float64
	// Windows are each fault window's own idle node-hours and those of
	// them not used, in the order the windows were given (a moment in
	// two overlapping windows is in both): what each nemesis cost.
	Windows []WindowHarvest
	HeldH   float64 // node-hours the pool showed held, busy or not (the old measure)
	BesideS float64 // node-seconds a Trainer process was seen on a node a main job surely held
	Samples int
	MaxGap  time.Duration // the longest time between two samples
	// The sampler's own cost and its cross-check (in the log, not the
	// line): failed samples, mean time of the pool's read and of the
	// processes' read, and the run-token scans against the cgroups.
	Failed                     int
	PoolRead, ProcRead         time.Duration
	ProcSource                 string // "cgroup", "token" or "cgroup+token" (the fallback used at times)
	ProcChecks, ProcMismatches int    // node-checks of the cgroup source against the scan, and the nodes they disagreed on
	// ClassChecks are the Trainers' own processes (not root's
	// supervisors) whose scheduling class the cross-check read; NotIdle
	// those of them not at SCHED_IDLE (trainer.cpu_priority).
	ClassChecks, NotIdle int
	CheckRead            time.Duration
}

// WindowHarvest is one fault window's idle node-hours and those of them
// no Trainer used.
type WindowHarvest struct{ IdleH, LostH float64 }

// StagesH is the sum of the stages.
func (h Harvest) StagesH() float64 {
	return h.UsedH + h.FaultH + h.StartupH + h.CompletingH + h.ReconcileH + h.NoDemandH
}

// UsedOutsideFaults is the share of the idle time outside the nemeses'
// windows that Trainers used; NaN when there is none.
func (h Harvest) UsedOutsideFaults() float64 {
	return (h.UsedH - h.FaultUsedH) / (h.IdleH - h.FaultIdleH)
}

// HarvestLine is the pilot's harvest line: the idle node-hours and how
// they were spent.
func (r *PilotResult) HarvestLine() string {
	h := r.Harvest
	return fmt.Sprintf("pilot harvest idle_node_h=%.3f used_node_h=%.3f held_node_h=%.3f fault_node_h=%.3f startup_node_h=%.3f completing_node_h=%.3f "+
		"reconcile_node_h=%.3f no_demand_node_h=%.3f beside_node_s=%.1f samples=%d max_gap_s=%.1f fault_idle_node_h=%.3f used_outside_faults=%.2f",
		h.IdleH, h.UsedH, h.HeldH, h.FaultH, h.StartupH, h.CompletingH, h.ReconcileH, h.NoDemandH, h.BesideS, h.Samples, h.MaxGap.Seconds(),
		h.FaultIdleH, h.UsedOutsideFaults())
}

// harvestSample is what the sampler saw at one instant.
type harvestSample struct {
	at     time.Time
	held   []string // nodes the pool lends to a Trainer
	free   []string // nodes in the pool lent to none
	procs  []string // nodes with a live Trainer process
	demand bool     // an admitted Trainer could take another node
}

// harvestStage is one stage of an idle node-second.
type harvestStage int

const (
	stageUsed  harvestStage = iota
	stageFault              // set by the split from the nemeses' windows, not by a sample
	stageStartup
	stageCompleting
	stageReconcile
	stageNoDemand
	nStages
)

// stage files a node's idle time at this sample.
func (s *harvestSample) stage(node string) harvestStage {
	switch {
	case slices.Contains(s.procs, node):
		return stageUsed
	case slices.Contains(s.held, node):
		return stageStartup
	case !slices.Contains(s.free, node):
		return stageCompleting
	case s.demand:
		return stageReconcile
	}
	return stageNoDemand
}

// harvestSampler samples the pool and the Trainer processes of a pass.
type harvestSampler struct {
	in      *Install
	nodes   []string
	samples []harvestSample
	failed  int
	lastErr error
	// The cost of each read, summed, and the sources used.
	poolRead, procRead, checkRead time.Duration
	cgroup, token                 int
	checks, mismatches            int
	classChecks, notIdle          int
}

func newHarvestSampler(in *Install, nodes []string) *harvestSampler {
	return &harvestSampler{in: in, nodes: nodes}
}

// sample takes one sample now; a sample that cannot be read whole is
// left out (counted in failed: the time goes to its neighbours).
func (s *harvestSampler) sample(ctx context.Context) {
	at := time.Now().Round(0) // the wall clock, as sacct's times and the jobs' first lines
	hs, err := s.read(ctx, at)
	if err != nil {
		s.failed++
		s.lastErr = err
		return
	}
	s.samples = append(s.samples, hs)
	if len(s.samples)%harvestCheckEvery == 0 {
		t := time.Now()
		procs, err := s.tokenNodes()
		s.classes()
		s.checkRead += time.Since(t)
		if err == nil {
			for _, n := range s.nodes {
				s.checks++
				if slices.Contains(procs, n) != slices.Contains(hs.procs, n) {
					s.mismatches++
				}
			}
		}
	}
}

func (s *harvestSampler) read(ctx context.Context, at time.Time) (harvestSample, error) {
	hs := harvestSample{at: at}
	t := time.Now()
	db, err := s.in.OpenDB(ctx)
	if err != nil {
		return hs, err
	}
	// Opened and closed each time: a handle kept open would hold the
	// database's files and keep the db-readonly nemesis from remounting.
	snap, err := db.Load(ctx)
	db.Close()
	if err != nil {
		return hs, err
	}
	for _, n := range snap.State.Nodes {
		if n.State != pool.Idle || !slices.Contains(s.nodes, n.Name) {
			continue
		}
		if n.Trainer != "" {
			hs.held = append(hs.held, n.Name)
		} else {
			hs.free = append(hs.free, n.Name)
		}
	}
	for _, tr := range snap.State.Trainers {
		if tr.Status == pool.Running && (tr.Max <= 0 || len(tr.Nodes) < tr.Max) && !tr.Starts.RetryAt.After(at) {
			hs.demand = true
		}
	}
	s.poolRead += time.Since(t)
	t = time.Now()
	procs, ok, err := cgroupNodes(s.in.CgroupRoot)
	if err == nil && !ok {
		s.token++
		procs, err = s.tokenNodes()
	} else if err == nil {
		s.cgroup++
	}
	s.procRead += time.Since(t)
	if err != nil {
		return hs, err
	}
	for _, n := range procs {
		if slices.Contains(s.nodes, n) {
			hs.procs = append(hs.procs, n)
		}
	}
	return hs, nil
}

// classes reads the scheduling class of each Trainer process of the
// owner's (the supervisors are root's, in the normal class by design).
func (s *harvestSampler) classes() {
	ps, err := s.in.TrainerProcs()
	if err != nil {
		return
	}
	for _, p := range ps {
		if p.UID == 0 {
			continue
		}
		if attr, err := unix.SchedGetAttr(p.PID, 0); err == nil { // gone meanwhile: not counted
			if attr.Policy != unix.SCHED_IDLE && dying(p.PID) {
				continue // killed, tearing down in the normal class
			}
			s.classChecks++
			if attr.Policy != unix.SCHED_IDLE {
				s.notIdle++
			}
		}
	}
}

// dying reports whether process pid is being killed: with SIGKILL
// pending, or exiting (PF_EXITING, which only /proc/PID/stat shows and a
// zombie keeps); or gone. The node agent's kill moves a killed Trainer's
// threads back to the normal class after its cgroup.kill (trainer/agent's
// hasten), so that it tears down without waiting for idle CPU: such a
// process is outside SCHED_IDLE by design. A saturated CI run's pilot saw
// 2 of 12 so.
func dying(pid int) bool {
	st, err := agent.ProcStatus(pid)
	if err != nil {
		return true
	}
	for _, k := range []string{"SigPnd", "ShdPnd"} {
		if mask, err := strconv.ParseUint(st[k], 16, 64); err == nil && mask&(1<<(unix.SIGKILL-1)) != 0 {
			return true
		}
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// After the command's closing parenthesis: state, ppid, pgrp,
	// session, tty_nr, tpgid, flags.
	const pfExiting = 0x4
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) <= 6 {
		return false
	}
	flags, err := strconv.ParseUint(f[6], 10, 64)
	return err == nil && flags&pfExiting != 0
}

// tokenNodes are the nodes with a live process carrying a run token of
// one of the install's Trainers.
func (s *harvestSampler) tokenNodes() ([]string, error) {
	ps, err := s.in.TrainerProcs()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range ps {
		if t, ok := p.Token(); ok && !slices.Contains(out, t.Node) {
			out = append(out, t.Node)
		}
	}
	return out, nil
}

// cgroupNodes returns the nodes with a live process in a launch cgroup
// of the subtree root (ROOT/TRAINER/NODE@NONCE); ok is false where there
// is no subtree (root "", or not made: no launch contained in cgroups
// yet). A launch's cgroup removed while it is read has nothing in it.
func cgroupNodes(root string) (nodes []string, ok bool, err error) {
	if root == "" {
		return nil, false, nil
	}
	trainers, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	for _, t := range trainers {
		if !t.IsDir() {
			continue
		}
		leaves, err := os.ReadDir(filepath.Join(root, t.Name()))
		if err != nil {
			continue // removed meanwhile
		}
		for _, l := range leaves {
			node, _, isRun := strings.Cut(l.Name(), "@")
			if !l.IsDir() || !isRun || slices.Contains(nodes, node) {
				continue
			}
			if pop, err := populatedLeaf(filepath.Join(root, t.Name(), l.Name())); err == nil && pop {
				nodes = append(nodes, node)
			}
		}
	}
	return nodes, true, nil
}

// populatedLeaf reads a cgroup's cgroup.events: "populated 1" while a
// live process is in it or below.
func populatedLeaf(dir string) (bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	if err != nil {
		return false, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == "populated" {
			return strings.TrimSpace(v) != "0", nil
		}
	}
	return false, nil
}

// result is the split of the sampled pass over [from, to].
func (s *harvestSampler) result(nodes []string, jobs []accounting.Job, first map[string]time.Time, faults []interval, from, to time.Time) (Harvest, error) {
	h, err := splitHarvest(nodes, jobs, first, s.samples, faults, from, to)
	h.Failed = s.failed
	if n := len(s.samples) + s.failed; n > 0 {
		h.PoolRead = s.poolRead / time.Duration(n)
		h.ProcRead = s.procRead / time.Duration(n)
	}
	switch {
	case s.cgroup > 0 && s.token > 0:
		h.ProcSource = "cgroup+token"
	case s.cgroup > 0:
		h.ProcSource = "cgroup"
	case s.token > 0:
		h.ProcSource = "token"
	}
	h.ProcChecks, h.ProcMismatches = s.checks, s.mismatches
	h.ClassChecks, h.NotIdle = s.classChecks, s.notIdle
	if k := len(s.samples) / harvestCheckEvery; k > 0 {
		h.CheckRead = s.checkRead / time.Duration(k)
	}
	if err != nil && s.lastErr != nil {
		err = fmt.Errorf("%w (the last failed sample: %v)", err, s.lastErr)
	}
	return h, err
}

// interval is [a, b).
type interval struct{ a, b time.Time }

// overlap is the length of [a, b) ∩ [c, d).
func overlap(a, b, c, d time.Time) time.Duration {
	lo, hi := a, b
	if c.After(lo) {
		lo = c
	}
	if d.Before(hi) {
		hi = d
	}
	if hi.After(lo) {
		return hi.Sub(lo)
	}
	return 0
}

// splitHarvest splits the nodes' idle time over [from, to] by stage (see
// the top of this file). jobs are sacct's allocations; first is each
// job's first line by its ID (zero or absent: its sacct Start is taken,
// for beside); samples are in time order.
func splitHarvest(nodes []string, jobs []accounting.Job, first map[string]time.Time, samples []harvestSample, faults []interval, from, to time.Time) (Harvest, error) {
	var h Harvest
	if !to.After(from) {
		return h, fmt.Errorf("harvest: an empty span %s to %s", from.Format(time.RFC3339), to.Format(time.RFC3339))
	}
	if len(samples) == 0 {
		return h, errors.New("harvest: no sample of the pool and the Trainer processes")
	}
	h.Samples = len(samples)
	// Wall-clock times only: a time.Now() also carries a monotonic
	// reading, which Sub uses when both times have one, so spans measured
	// against sacct's times would not tile to the nanosecond.
	from, to = from.Round(0), to.Round(0)
	samples = slices.Clone(samples)
	for i := range samples {
		samples[i].at = samples[i].at.Round(0)
	}
	// Each sample's span: from halfway after the one before (the span's
	// start for the first) to halfway before the next (its end for the
	// last).
	spans := make([]interval, len(samples))
	for i, s := range samples {
		if i > 0 && s.at.Before(samples[i-1].at) {
			return h, fmt.Errorf("harvest: sample %d at %s before the one before it", i, s.at.Format(time.RFC3339Nano))
		}
		spans[i].a, spans[i].b = from, to
		if i > 0 {
			prev := samples[i-1].at
			spans[i].a = prev.Add(s.at.Sub(prev) / 2)
			h.MaxGap = max(h.MaxGap, s.at.Sub(prev))
		}
		if i+1 < len(samples) {
			spans[i].b = s.at.Add(samples[i+1].at.Sub(s.at) / 2)
		}
	}
	windows := faults
	faults = union(faults)
	byWindow := make([]struct{ idle, lost time.Duration }, len(windows))
	var idle, held, beside, faultIdle, faultUsed time.Duration
	var stages [nStages]time.Duration
	for _, node := range nodes {
		var busy, hold []interval // sacct's holds; the certain ones (beside)
		for _, j := range jobs {
			if !slices.Contains(j.Nodes, node) {
				continue
			}
			busy = append(busy, interval{j.Start, j.End})
			sure := j.Start
			if f := first[j.ID]; !f.IsZero() {
				sure = f
			}
			hold = append(hold, interval{sure, j.End})
		}
		free := idleIntervals(busy, from, to)
		for _, iv := range free {
			idle += iv.b.Sub(iv.a)
		}
		for i := range samples {
			s, sp := &samples[i], spans[i]
			if !sp.b.After(sp.a) {
				continue
			}
			if slices.Contains(s.held, node) {
				held += overlap(sp.a, sp.b, from, to)
			}
			st := s.stage(node)
			for _, iv := range free {
				d := overlap(sp.a, sp.b, iv.a, iv.b)
				if d == 0 {
					continue
				}
				var inFault time.Duration
				lo, hi := maxTime(sp.a, iv.a), minTime(sp.b, iv.b)
				for _, f := range faults {
					inFault += overlap(lo, hi, f.a, f.b)
				}
				faultIdle += inFault
				for w, f := range windows {
					o := overlap(lo, hi, f.a, f.b)
					byWindow[w].idle += o
					if st != stageUsed {
						byWindow[w].lost += o
					}
				}
				if st == stageUsed {
					faultUsed += inFault
					stages[st] += d
					continue
				}
				stages[stageFault] += inFault
				stages[st] += d - inFault
			}
			if st == stageUsed {
				for _, iv := range hold {
					if !s.at.Before(iv.a) && s.at.Before(iv.b) {
						beside += overlap(sp.a, sp.b, maxTime(iv.a, from), minTime(iv.b, to))
					}
				}
			}
		}
	}
	hours := func(d time.Duration) float64 { return d.Hours() }
	h.IdleH, h.HeldH, h.BesideS = hours(idle), hours(held), beside.Seconds()
	h.UsedH, h.StartupH, h.CompletingH = hours(stages[stageUsed]), hours(stages[stageStartup]), hours(stages[stageCompleting])
	h.ReconcileH, h.NoDemandH = hours(stages[stageReconcile]), hours(stages[stageNoDemand])
	h.FaultH, h.FaultIdleH, h.FaultUsedH = hours(stages[stageFault]), hours(faultIdle), hours(faultUsed)
	for _, w := range byWindow {
		h.Windows = append(h.Windows, WindowHarvest{hours(w.idle), hours(w.lost)})
	}
	var sum time.Duration
	for _, d := range stages {
		sum += d
	}
	if sum != idle {
		// The spans tile [from, to] and the idle intervals are in it:
		// this is a bug in the split, never the run's.
		return h, fmt.Errorf("harvest: the stages sum to %s, the idle time is %s", sum, idle)
	}
	if math.IsNaN(h.IdleH) {
		return h, errors.New("harvest: idle time not a number")
	}
	return h, nil
}

// union merges intervals into disjoint ones, in time order; empty ones
// are dropped.
func union(ivs []interval) []interval {
	ivs = slices.DeleteFunc(slices.Clone(ivs), func(iv interval) bool { return !iv.b.After(iv.a) })
	slices.SortFunc(ivs, func(x, y interval) int { return x.a.Compare(y.a) })
	var out []interval
	for _, iv := range ivs {
		if n := len(out); n > 0 && !iv.a.After(out[n-1].b) {
			out[n-1].b = maxTime(out[n-1].b, iv.b)
			continue
		}
		out = append(out, iv)
	}
	return out
}

// idleIntervals is [from, to] less the busy intervals, in time order.
func idleIntervals(busy []interval, from, to time.Time) []interval {
	slices.SortFunc(busy, func(x, y interval) int { return x.a.Compare(y.a) })
	var out []interval
	at := from
	for _, b := range busy {
		if b.a.After(at) {
			out = append(out, interval{at, minTime(b.a, to)})
		}
		if b.b.After(at) {
			at = b.b
		}
		if !at.Before(to) {
			return out
		}
	}
	if to.After(at) {
		out = append(out, interval{at, to})
	}
	return out
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// harvest splits the pass's idle node-time (the harvest part of check):
// the jobs' first lines from their own output, the rest from sacct.
func (p *pilot) harvest(r *passResult, listing *accounting.Listing, from, to time.Time) (Harvest, error) {
	first := map[string]time.Time{}
	for _, run := range r.runs {
		if rep, err := run.job.Report(); err == nil {
			first[run.job.ID] = rep.First
		}
	}
	if r.harvest == nil {
		return Harvest{}, errors.New("harvest: the pass was not sampled")
	}
	// The fault windows are the nemeses with a Span, in order; each
	// window's cost goes on its own nemesis's report.
	faulty := func(n NemesisReport) bool { return n.Span > 0 }
	faults := r.windows(faulty)
	h, err := r.harvest.result(p.c.Lab.Nodes, listing.Jobs, first, faults, from, to)
	if err == nil {
		w := 0
		for i, n := range r.nemeses {
			if faulty(n) {
				r.nemeses[i].Harvest = &h.Windows[w]
				w++
			}
		}
	}
	p.o.Logf("pilot: harvest sampler: %d samples (%d failed), means: pool read %s, processes %s (%s), run-token scan %s (every %dth sample: %d node-checks, %d disagreeing)",
		h.Samples, h.Failed, h.PoolRead.Round(time.Microsecond), h.ProcRead.Round(time.Microsecond), h.ProcSource, h.CheckRead.Round(time.Microsecond),
		harvestCheckEvery, h.ProcChecks, h.ProcMismatches)
	return h, err
}
