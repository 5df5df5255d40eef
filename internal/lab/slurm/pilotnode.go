package slurm

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/bftrainer/bftrainer/store"
	"github.com/bftrainer/bftrainer/trainer/trainertest"
)

// The pilot runs the transport contrib/slurm/README.md tells a site to
// run, ssh, to one sshd per node (trainertest.NodeSSHD): the
// node-unreachable nemesis stops one node's sshd, so that node alone
// stops answering the reconciler.

// pilotRecover bounds the wait for the Trainers to match the pool again
// once the node's sshd is back.
const pilotRecover = time.Minute

// sshTransport starts one sshd per lab node under the lab's directory,
// node i on 127.0.0.(i+2), and sets s to the ssh transport through them,
// one shared connection per node (ControlMaster, as docs/trainers.md
// tells a site: the second full pilot's unfence, start and stop took
// 0.5–0.65 s each, mostly the handshake on two busy cores).
func (p *pilot) sshTransport(s *Settings) error {
	addrs := map[string]string{}
	for i, n := range p.c.Lab.Nodes {
		addrs[n] = fmt.Sprintf("127.0.0.%d", i+2)
	}
	sshd, err := trainertest.StartNodeSSHD(filepath.Join(p.c.Dir, "sshd"), addrs, true)
	if err != nil {
		return fmt.Errorf("per-node sshd: %w", err)
	}
	p.sshd = sshd
	s.Transport, s.SSHConfig = "ssh", sshd.Config
	return nil
}

// unreachable stops the sshd of one node a Trainer holds, with Trainer
// processes on it, for NemesisHold, then starts it again: a node the
// reconciler cannot reach, while its own prolog (which needs no ssh)
// must still reclaim it at once when a main job lands. It reports the
// reconciler's actions on the node that failed as unreachable, the main
// jobs that landed there meanwhile and what their prologs killed, and
// how long the Trainers took to match the pool again once sshd was back
// (a Problem when they did not within pilotRecover).
func (p *pilot) unreachable(ctx context.Context) (string, error) {
	held, err := p.c.In.Held(ctx)
	if err != nil {
		return "", err
	}
	var nodes []string
	for _, ns := range held {
		nodes = append(nodes, ns...)
	}
	if len(nodes) == 0 {
		return "no node held by a Trainer: nothing stopped", nil
	}
	slices.Sort(nodes)
	p.rng.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
	var node string
	var procs []Proc
	for _, n := range nodes {
		if procs, err = p.c.In.TrainerProcs(n); err != nil {
			return "", err
		}
		if len(procs) > 0 {
			node = n
			break
		}
	}
	if node == "" {
		return "no Trainer process on the held nodes: nothing stopped", nil
	}
	startID, err := p.c.LastEventID(ctx)
	if err != nil {
		return "", err
	}
	from := time.Now()
	if err := p.sshd.Stop(node); err != nil {
		return "", err
	}
	sleepCtx(ctx, p.o.NemesisHold)
	if err := p.sshd.Start(node); err != nil {
		return fmt.Sprintf("node=%s procs=%d", node, len(procs)), fmt.Errorf("start %s's sshd again: %w", node, err)
	}
	to := time.Now()
	matched := "true"
	if err := p.c.TrainersMatchPool(ctx, pilotRecover); err != nil {
		matched = "false"
		p.problem(fmt.Sprintf("node-unreachable: %s's sshd back for %s: %v", node, pilotRecover, err))
	}
	matchS := time.Since(to).Seconds()
	// Every unreachable failure on the node since the stop: none can
	// come after sshd accepted again, so late rows of a round that began
	// in the window count too.
	evs, err := p.c.In.Events(ctx, store.Filter{Kinds: []store.Kind{store.KindAction, store.KindLeave, store.KindKill}, Node: node, AfterID: startID})
	if err != nil {
		return "", err
	}
	unreach, killed := 0, 0.0
	var jobs, kills, killErrs []string
	for _, e := range evs {
		switch {
		case e.Kind == store.KindAction && strings.Contains(e.Error, "unreachable"):
			unreach++
		case e.At.Before(from) || e.At.After(to):
		case e.Kind == store.KindLeave:
			jobs = append(jobs, e.Job)
		case e.Kind == store.KindKill:
			kills = append(kills, e.Context)
			killed += e.Value
			if e.Error != "" {
				killErrs = append(killErrs, e.Error)
			}
		}
	}
	what := fmt.Sprintf("node=%s procs=%d sshd_down_s=%.1f unreachable_actions=%d main_jobs_landed=%d kill_rows=%d (%s) killed_groups=%.0f kill_errors=%d trainers_match_pool=%s after_s=%.1f",
		node, len(procs), to.Sub(from).Seconds(), unreach, len(jobs), len(kills), strings.Join(kills, ","), killed, len(killErrs), matched, matchS)
	if len(killErrs) > 0 {
		p.problem(fmt.Sprintf("node-unreachable: a kill on %s failed: %s", node, killErrs[0]))
	}
	return what, nil
}

// problem records what was not normal, from a nemesis running beside
// the pass.
func (p *pilot) problem(s string) {
	p.resMu.Lock()
	defer p.resMu.Unlock()
	p.res.Problems = append(p.res.Problems, s)
}
