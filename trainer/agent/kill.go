package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bftrainer/bftrainer/names"
	"github.com/bftrainer/bftrainer/trainer/wire"
	"golang.org/x/sys/unix"
)

// Stop kills one Trainer's processes on a node and forgets its entry; it
// returns once they are gone (or the wait is over).
func (a *Agent) Stop(ctx context.Context, node, trainer string) (wire.KillReport, error) {
	if err := names.ValidateTrainer(trainer); err != nil {
		return wire.KillReport{}, err
	}
	lk, err := a.Registry.Lock(ctx, node)
	if err != nil {
		return wire.KillReport{}, err
	}
	defer lk.Unlock()
	return a.kill(ctx, node, trainer, nil)
}

// KillAll kills every Trainer process on the node — the reclaim, in the
// node's prolog. With fence, starts are refused afterwards until Clean
// lifts the fence (the job's epilog) or the controller does (unfence,
// once the scheduler says the node is idle). The kill comes first: the
// fence is written after it, and a fence that cannot be written (a full
// registry filesystem) is an error in the report, never a kill not done.
func (a *Agent) KillAll(ctx context.Context, node string, fence bool) (wire.KillReport, error) {
	return a.reclaim(ctx, node, fence, false)
}

// Clean kills every Trainer process on the node and lifts the fence: the
// scheduler's job there ended (its epilog).
func (a *Agent) Clean(ctx context.Context, node string) (wire.KillReport, error) {
	return a.reclaim(ctx, node, false, true)
}

func (a *Agent) reclaim(ctx context.Context, node string, fence, unfence bool) (wire.KillReport, error) {
	if err := names.ValidateNode(node); err != nil {
		return wire.KillReport{}, err
	}
	if a.Sweep {
		// No configuration: the registry and cgroups are the built-in
		// ones, perhaps another install's. Kill what runs as this node and
		// write nothing there: no lock file, fence, entry removed or
		// cgroup removed.
		return a.killWith(ctx, node, "", nil, afterKill{readOnly: true})
	}
	// The lock keeps a start from slipping between the kill and the
	// fence. Waiting for it is bounded: past half of what is left, kill
	// without it.
	lctx, cancel := context.WithTimeout(ctx, a.lockWait(ctx))
	lk, lerr := a.Registry.Lock(lctx, node)
	cancel()
	defer lk.Unlock()
	return a.killWith(ctx, node, "", nil, afterKill{fence: fence, unfence: unfence, lockErr: lerr})
}

// lockWait is how long a reclaim waits for the node's lock.
func (a *Agent) lockWait(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return max(time.Until(d)/2, time.Millisecond)
	}
	return a.killWait() / 2
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// killing is one kill in progress: what it found, killed and waits for.
type killing struct {
	a        *Agent
	node     string
	trainer  string // "" for all
	rep      wire.KillReport
	deadline time.Time
	start    time.Time
	stage    time.Time
	cg       *Cgroups
	ents     []wire.Entry
	errs     []error
	// what to wait for
	dirs   []string
	pids   []int
	groups map[int]int // killed process groups → index in rep.Groups
	// why containment is degraded for this kill ("" for none)
	degraded []string
	// the device files (DeviceGlob), expanded on the first process to
	// look at: a node that holds nothing of ours never lists /dev
	devices     map[string]bool
	devicesRead bool
}

// kill is Stop (trainer set) or the reclaim (trainer ""), the node's lock
// held (or not obtainable). extra are entries not (or no longer) in the
// registry. The stages run in order; none stops the next.
func (a *Agent) kill(ctx context.Context, node, trainer string, extra []wire.Entry) (wire.KillReport, error) {
	return a.killWith(ctx, node, trainer, extra, afterKill{})
}

// afterKill is what a reclaim writes once its processes are gone: the
// fence (or its lifting), before the registry is tidied — on a full
// filesystem the fence matters more.
type afterKill struct {
	fence, unfence bool
	lockErr        error // the node's lock could not be had: killed without it
	readOnly       bool  // kill only; change nothing in the registry or the cgroup tree
}

func (a *Agent) killWith(ctx context.Context, node, trainer string, extra []wire.Entry, m afterKill) (wire.KillReport, error) {
	k := &killing{a: a, node: node, trainer: trainer, start: time.Now(), groups: map[int]int{}}
	k.stage = k.start
	k.rep = wire.KillReport{Node: node, Trainer: trainer, Stages: map[string]float64{}}
	k.deadline = time.Now().Add(a.killWait())
	if d, ok := ctx.Deadline(); ok && d.Before(k.deadline) {
		k.deadline = d
	}
	k.cg, _ = a.cgroups()
	k.readEntries(extra)
	k.killCgroups()
	k.killGroups()
	k.scan()
	k.wait()
	if !m.readOnly {
		k.mark(m)
		k.removeCgroups()
		k.forget()
	}
	k.finish()
	return k.rep, errors.Join(k.errs...)
}

// done closes a stage: its time goes in the report.
func (k *killing) done(name string) {
	now := time.Now()
	k.rep.Stages[name] += ms(now.Sub(k.stage))
	k.stage = now
}

// readEntries reads the node's entries (of the Trainer, for a stop). An
// unreadable registry does not stop the kill: the cgroup tree and the
// scan do not need it.
func (k *killing) readEntries(extra []wire.Entry) {
	defer k.done("entries")
	ents, err := k.a.Registry.Entries(k.node)
	if err != nil {
		k.errs = append(k.errs, err)
		k.degraded = append(k.degraded, "registry unreadable")
	}
	ents = append(ents, extra...)
	if k.trainer != "" {
		ents = slices.DeleteFunc(ents, func(e wire.Entry) bool { return e.Trainer != k.trainer })
	}
	k.ents = ents
	for _, e := range ents {
		if e.Exit != nil {
			if k.rep.Exits == nil {
				k.rep.Exits = map[string]int{}
			}
			k.rep.Exits[e.Trainer] = e.Exit.Code
		}
	}
}

// killCgroups kills every launch cgroup of the node (or of the Trainer
// there): those the tree has, whatever the registry says, and those the
// entries name.
func (k *killing) killCgroups() {
	defer k.done("cgroup.kill")
	var dirs []string
	if k.cg != nil {
		runs, err := k.cg.Runs(k.node, k.trainer)
		if err != nil {
			k.errs = append(k.errs, fmt.Errorf("cgroups: %w", err))
		}
		dirs = runs
	}
	for _, e := range k.ents {
		if e.Cgroup != "" && !slices.Contains(dirs, e.Cgroup) {
			if _, err := os.Stat(e.Cgroup); err == nil {
				dirs = append(dirs, e.Cgroup)
			}
		}
	}
	slices.Sort(dirs)
	for _, d := range dirs {
		pids, _ := cgroupPIDs(d)
		k.holders(pids)
		if err := killCgroup(d); err != nil {
			k.errs = append(k.errs, fmt.Errorf("cgroup.kill %s: %w", d, err))
			continue
		}
		k.dirs = append(k.dirs, d)
		if k.a.IdleCPU {
			hasten(d)
		}
		if len(pids) > 0 {
			k.rep.Cgroups = append(k.rep.Cgroups, wire.KilledCgroup{Trainer: filepath.Base(filepath.Dir(d)), Path: d, PIDs: pids})
		}
	}
}

// killGroups kills the process groups of launches started without a
// cgroup, when their leader (the supervisor) is still the process we
// started: the pid with the start time we recorded. Groups whose leader
// is gone are left to the scan, which checks their members' owner.
func (k *killing) killGroups() {
	defer k.done("groups")
	type live struct {
		e      wire.Entry
		leader Proc
	}
	var kill []live
	for _, e := range k.ents {
		if e.Cgroup != "" || e.Hosted || e.PGID <= 1 {
			continue
		}
		k.degraded = append(k.degraded, "launch started without a cgroup")
		if p, ok := readProc(e.PGID); ok && !p.Dead() && e.Ticks != 0 && p.Ticks == e.Ticks {
			kill = append(kill, live{e, p})
		}
	}
	pgids := map[int]bool{}
	for _, l := range kill {
		pgids[l.e.PGID] = true
	}
	k.groupHolders(pgids)
	for _, l := range kill {
		k.killGroup(l.e, &l.leader)
		k.pids = append(k.pids, l.leader.PID)
	}
}

// groupHolders adds to the report the members of the process groups that
// hold a device file, before the groups are killed: once killed, their
// descriptors are gone in a moment and the scan after the kill would see
// none (a GPU process's memory is freed later still, as its device file
// is released). It costs one pass over /proc, reading stat alone, and
// only on a node whose device glob matches something.
func (k *killing) groupHolders(pgids map[int]bool) {
	if len(pgids) == 0 {
		return
	}
	if !k.devicesRead {
		k.devices, k.devicesRead = k.a.deviceFiles(), true
	}
	if k.devices == nil {
		return
	}
	var s scanner
	var pids []int
	s.each(func(p *Proc) bool {
		if pgids[p.PGID] && !p.Dead() {
			pids = append(pids, p.PID)
		}
		return true
	})
	k.holders(pids)
}

// killGroup sends SIGKILL to an entry's process group, once.
func (k *killing) killGroup(e wire.Entry, member *Proc) {
	if i, ok := k.groups[e.PGID]; ok {
		if member != nil && !slices.Contains(k.rep.Groups[i].PIDs, member.PID) {
			k.rep.Groups[i].PIDs = append(k.rep.Groups[i].PIDs, member.PID)
		}
		return
	}
	// The whole group at once, never the torchrun agent's pid alone: its
	// worker shares the group and would be orphaned, training on. A kill
	// of a group is atomic against fork.
	if err := syscall.Kill(-e.PGID, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		k.errs = append(k.errs, fmt.Errorf("kill group %d of %s: %w", e.PGID, e.Trainer, err))
		return
	}
	g := wire.KilledGroup{Trainer: e.Trainer, PGID: e.PGID, Signal: "SIGKILL"}
	if member != nil {
		g.PIDs = []int{member.PID}
	}
	k.groups[e.PGID] = len(k.rep.Groups)
	k.rep.Groups = append(k.rep.Groups, g)
}

// wait waits until everything killed is gone: every cgroup empty, every
// signalled process exited, at most until the deadline.
func (k *killing) wait() {
	defer k.done("wait")
	for _, d := range k.dirs {
		if err := waitEmpty(d, k.deadline); err != nil {
			pids, _ := cgroupPIDs(d)
			k.rep.Survivors = append(k.rep.Survivors, pids...)
		}
	}
	k.rep.Survivors = append(k.rep.Survivors, waitExit(k.pids, k.deadline)...)
	if len(k.rep.Survivors) > 0 {
		slices.Sort(k.rep.Survivors)
		k.rep.Survivors = slices.Compact(k.rep.Survivors)
		k.errs = append(k.errs, fmt.Errorf("node %s: %w within %v of the kill's start: pids %v", k.node, ErrSurvivors, k.deadline.Sub(k.start).Round(time.Millisecond), k.rep.Survivors))
		var held []string
		for _, h := range k.rep.Holders {
			if slices.Contains(k.rep.Survivors, h.PID) {
				held = append(held, fmt.Sprintf("pid %d %s", h.PID, strings.Join(h.Files, ",")))
			}
		}
		if len(held) > 0 {
			k.errs = append(k.errs, fmt.Errorf("node %s: %w at the deadline: %s", k.node, ErrDeviceHeld, strings.Join(held, "; ")))
		}
	}
}

// mark writes the fence, or lifts it, after the kill. What fails here is
// an error of the report, never a kill not done.
func (k *killing) mark(m afterKill) {
	defer k.done("fence")
	var after []error
	if m.lockErr != nil {
		after = append(after, fmt.Errorf("killed without the node's lock: %w", m.lockErr))
	}
	if m.fence {
		if err := k.a.Registry.Fence(k.node, k.a.now()); err != nil {
			after = append(after, fmt.Errorf("fence: %w", err))
		}
	}
	if m.unfence {
		if err := k.a.Registry.Unfence(k.node); err != nil {
			after = append(after, fmt.Errorf("lift the fence: %w", err))
		}
	}
	for _, e := range after {
		k.rep.Errors = append(k.rep.Errors, e.Error())
	}
	k.errs = append(k.errs, after...)
}

// removeCgroups removes the empty cgroups.
func (k *killing) removeCgroups() {
	defer k.done("rmdir")
	for _, d := range k.dirs {
		if pop, _ := Populated(d); pop {
			continue // survivors: kept for the next kill
		}
		var v1 []string
		if k.cg != nil {
			v1 = k.cg.v1Mirrors(d)
		}
		for _, e := range k.ents {
			if e.Cgroup == d {
				v1 = append(v1, e.V1...)
			}
		}
		slices.Sort(v1)
		if err := k.removeDir(d, slices.Compact(v1)); err != nil {
			k.errs = append(k.errs, err)
		}
	}
}

func (k *killing) removeDir(d string, v1 []string) error {
	if k.cg != nil {
		return k.cg.remove(d, v1)
	}
	return (&Cgroups{}).remove(d, v1)
}

// forget removes the entries once nothing of them survives; with
// survivors they stay, for the next kill to find.
func (k *killing) forget() {
	defer k.done("registry")
	if len(k.rep.Survivors) > 0 {
		return
	}
	for _, e := range k.ents {
		if e.Node != k.node {
			continue
		}
		if err := k.a.Registry.Remove(k.node, e.Trainer); err != nil {
			k.errs = append(k.errs, fmt.Errorf("registry: %w", err))
			continue
		}
		if !slices.Contains(k.rep.Removed, e.Trainer) {
			k.rep.Removed = append(k.rep.Removed, e.Trainer)
		}
	}
}

// finish says how the processes were contained, and whether the node is
// provably clean of ours.
func (k *killing) finish() {
	if _, reason := k.a.cgroups(); reason != "" {
		k.degraded = append([]string{reason}, k.degraded...)
	}
	if k.a.Sweep {
		k.degraded = append([]string{"no configuration: built-in paths and a scan for run tokens"}, k.degraded...)
	}
	slices.Sort(k.degraded[min(1, len(k.degraded)):])
	k.degraded = slices.Compact(k.degraded)
	if len(k.degraded) == 0 {
		k.rep.Containment = wire.Cgroup
		k.rep.Clean = len(k.errs) == 0 && len(k.rep.Survivors) == 0 // an error after the kill too: said, not hidden
	} else {
		k.rep.Containment = degraded(strings.Join(k.degraded, "; "))
		k.rep.Escapes = wire.DegradedEscapes
	}
	k.rep.Ms = ms(time.Since(k.start))
}

// deviceFiles expands the device glob; nil when there is none here (no
// GPU on this node): the kill then looks at no file descriptor.
func (a *Agent) deviceFiles() map[string]bool {
	if a.DeviceGlob == "" {
		return nil
	}
	files, err := filepath.Glob(a.DeviceGlob)
	if err != nil || len(files) == 0 {
		return nil
	}
	m := map[string]bool{}
	for _, f := range files {
		m[f] = true
	}
	return m
}

// holders adds to the report the processes among pids that hold one of
// the device files open.
func (k *killing) holders(pids []int) {
	if len(pids) == 0 {
		return
	}
	if !k.devicesRead {
		k.devices, k.devicesRead = k.a.deviceFiles(), true
	}
	if k.devices == nil {
		return
	}
	for _, pid := range pids {
		fdDir := procRoot + "/" + strconv.Itoa(pid) + "/fd"
		ents, err := os.ReadDir(fdDir)
		if err != nil {
			continue
		}
		var files []string
		for _, e := range ents {
			if t, err := os.Readlink(fdDir + "/" + e.Name()); err == nil && k.devices[t] && !slices.Contains(files, t) {
				files = append(files, t)
			}
		}
		if len(files) > 0 {
			comm, _ := os.ReadFile(procRoot + "/" + strconv.Itoa(pid) + "/comm")
			slices.Sort(files)
			k.rep.Holders = append(k.rep.Holders, wire.Holder{PID: pid, Comm: strings.TrimSpace(string(comm)), Files: files})
		}
	}
}

// waitExit waits until the processes have exited (zombies count: they run
// nothing and hold no file) or the deadline passes, without polling /proc:
// a pidfd becomes readable when its process exits. It returns those still
// running at the deadline.
func waitExit(pids []int, deadline time.Time) []int {
	type watched struct {
		pid int
		fd  int
	}
	var ws []watched
	for _, pid := range pids {
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue // already gone
		}
		defer unix.Close(fd)
		ws = append(ws, watched{pid, fd})
	}
	for len(ws) > 0 {
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		fds := make([]unix.PollFd, len(ws))
		for i, w := range ws {
			fds[i] = unix.PollFd{Fd: int32(w.fd), Events: unix.POLLIN}
		}
		n, err := unix.Poll(fds, int(left.Milliseconds())+1)
		if err != nil && !errors.Is(err, unix.EINTR) {
			break
		}
		if n <= 0 {
			continue
		}
		kept := ws[:0]
		for i, w := range ws {
			if fds[i].Revents == 0 {
				kept = append(kept, w)
			}
		}
		ws = kept
	}
	var left []int
	for _, w := range ws {
		left = append(left, w.pid)
	}
	return left
}
