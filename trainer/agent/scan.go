package agent

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/bftrainer/bftrainer/trainer/wire"
)

// What a degraded kill takes for ours, in order (wire.KilledProc.Why):
//
//   - a member of a launch's process group whose owner is the launch's;
//   - a process carrying a run token for this node (and Trainer);
//   - a Horovod worker for this node (HOROVOD_HOSTNAME) carrying one of
//     its Trainer's tokens;
//   - a process of a launch's owner started after the launch began, in no
//     other launch's group or cgroup: what cleared its environment and
//     left its group (setsid env -i, an environment zeroed in memory).
//
// Never: a process carrying a scheduler job's variable (Agent.JobMarkers),
// whatever else it carries — a main job submitted from inside a Trainer
// is the scheduler's; a process of another node's or Trainer's token;
// the owner rule on the controller, which users share, or for root (a
// Trainer may run as root only in tests, and root runs the machine).
const (
	whyToken = "token"
	whyHost  = "host"
	whyOwner = "owner"
)

// scanPlan is what the scan looks for.
type scanPlan struct {
	me         int
	leaderless map[int]wire.Entry // pgid → the launch whose supervisor is gone
	hosted     map[string]bool    // Trainers whose Horovod workers may be here
	anyHost    bool               // nothing known: any Horovod worker of ours for this node
	owners     map[int]uint64     // uid → start (clock ticks) of its earliest launch here
	envAll     bool               // read every process's environment
	envUIDs    map[int]bool       // else only these users'
	otherPGID  map[int]bool       // groups of other launches on this machine
}

// plan decides whether a scan is needed and what it looks for: with
// cgroup containment and only launches in cgroups, none is.
func (k *killing) plan() *scanPlan {
	p := &scanPlan{me: os.Getpid(), leaderless: map[int]wire.Entry{}, hosted: map[string]bool{},
		owners: map[int]uint64{}, envUIDs: map[int]bool{}, otherPGID: map[int]bool{}}
	need := k.cg == nil || k.a.Sweep
	for _, e := range k.ents {
		switch {
		case e.Hosted:
			p.hosted[e.Trainer] = true
			p.envUIDs[e.UID] = true
			need = true
		case e.Cgroup == "":
			need = true
			p.envUIDs[e.UID] = true
			if _, killed := k.groups[e.PGID]; !killed && e.PGID > 1 {
				p.leaderless[e.PGID] = e
			}
			if e.Node != wire.ControllerNode && e.Ticks > 0 && e.UID != 0 {
				if t, ok := p.owners[e.UID]; !ok || e.Ticks < t {
					p.owners[e.UID] = e.Ticks
				}
			}
		}
	}
	if !need {
		return nil
	}
	if k.cg == nil || k.a.Sweep {
		// Nothing may be known of what runs here (a registry lost, a
		// configuration that pointed elsewhere): read everyone's marks.
		p.envAll = true
		p.anyHost = len(k.ents) == 0
	}
	if len(p.owners) > 0 {
		k.otherGroups(p)
	}
	return p
}

// otherGroups collects the process groups of every other launch recorded
// on this machine: the owner rule leaves their members alone.
func (k *killing) otherGroups(p *scanPlan) {
	nodes, _ := k.a.Registry.Nodes()
	for _, n := range nodes {
		ents, _ := k.a.Registry.Entries(n)
		for _, e := range ents {
			if (n != k.node || (k.trainer != "" && e.Trainer != k.trainer)) && e.PGID > 1 {
				p.otherPGID[e.PGID] = true
			}
		}
	}
}

// scan finds what of ours no cgroup holds, and kills each as it is found:
// one pass over /proc, then again while a pass found something (children
// forked before their parent died), until the deadline.
func (k *killing) scan() {
	defer k.done("scan")
	p := k.plan()
	if p == nil {
		return
	}
	s := k.a.scanner()
	notOurs := map[int]uint64{} // pid → start ticks: judged once
	for {
		before := len(k.pids)
		s.each(func(pr *Proc) bool {
			if pr.PID == p.me || pr.PID == 1 || pr.Dead() {
				return true
			}
			if t, ok := notOurs[pr.PID]; ok && t == pr.Ticks {
				return true
			}
			// A process whose environment read empty is judged again
			// next pass: caught in the middle of an exec (the launch's
			// sh exec'ing its program), it carries its token a moment
			// later, with the same pid and start time.
			s.envEmpty = false
			if !k.judge(p, &s, pr) && !s.envEmpty {
				notOurs[pr.PID] = pr.Ticks
			}
			return time.Now().Before(k.deadline)
		})
		found := k.pids[before:]
		if len(found) == 0 || !time.Now().Before(k.deadline) {
			return
		}
		waitExit(found, k.deadline)
	}
}

// judge takes one process for ours (and kills it) or not.
func (k *killing) judge(p *scanPlan, s *scanner, pr *Proc) bool {
	if i, ok := k.groups[pr.PGID]; ok {
		g := &k.rep.Groups[i]
		g.PIDs = append(g.PIDs, pr.PID)
		k.pids = append(k.pids, pr.PID)
		return true
	}
	if e, ok := p.leaderless[pr.PGID]; ok && pr.UID == e.UID {
		k.holders([]int{pr.PID})
		k.killGroup(e, pr)
		k.pids = append(k.pids, pr.PID)
		return true
	}
	if p.envAll || p.envUIDs[pr.UID] {
		s.environ(pr)
	}
	if pr.Job {
		return false // a scheduler job's, whatever else it carries
	}
	if t, ok := pr.Token(); ok {
		mine := k.trainer == "" || t.Trainer == k.trainer
		switch {
		case mine && t.Node == k.node:
			k.killProc(pr, whyToken)
			return true
		case mine && pr.Host == k.node && (p.hosted[t.Trainer] || p.anyHost):
			k.killProc(pr, whyHost)
			return true
		}
		return false // another node's or Trainer's launch
	}
	if since, ok := p.owners[pr.UID]; ok && pr.Ticks >= since && !p.otherPGID[pr.PGID] && !k.inOtherCgroup(pr.PID) {
		k.killProc(pr, whyOwner)
		return true
	}
	return false
}

// killProc sends SIGKILL to one process and reports it.
func (k *killing) killProc(pr *Proc, why string) {
	k.holders([]int{pr.PID})
	if err := syscall.Kill(pr.PID, syscall.SIGKILL); err != nil {
		return // gone meanwhile
	}
	k.rep.Procs = append(k.rep.Procs, wire.KilledProc{PID: pr.PID, PGID: pr.PGID, Comm: pr.Comm, Run: pr.Run, Why: why, Signal: "SIGKILL"})
	k.pids = append(k.pids, pr.PID)
}

// inOtherCgroup reports whether the process is in a live launch cgroup
// this kill did not kill: another launch's, contained.
func (k *killing) inOtherCgroup(pid int) bool {
	if k.cg == nil {
		return false
	}
	b, err := os.ReadFile(procRoot + "/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return false
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		path, ok := bytes.CutPrefix(line, []byte("0::"))
		if !ok {
			continue
		}
		dir := k.cg.Mount + string(path)
		return len(dir) > len(k.cg.Root) && dir[:len(k.cg.Root)+1] == k.cg.Root+"/"
	}
	return false
}
