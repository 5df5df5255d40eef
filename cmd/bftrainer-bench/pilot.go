package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/bftrainer/bftrainer/internal/lab/slurm"
)

// pilotCommand is issue 27's pilot (slurm.Pilot): a slice of a real job
// log (an SWF file, Theta 2022 by default) replayed with sbatch on the
// Slurm lab (accounting on, bftrainer wired as contrib/slurm/README.md
// says: hooks, the reconciler as a service, the sync timer, metrics),
// Trainers harvesting what it leaves idle, the nemeses at random moments,
// then the same slice twice without bftrainer, bftrainer audit and the replay's
// prediction from the pass's own sacct:
//
//	pilot log=… slice=… nodes=… speed=… main_jobs=… failed=… requeued=… drained=… trainer_beside_main_s=… audit_violations=… events_lost=… wait_p50_ms=… wait_p99_ms=… wait_without_p50_ms=… wait_without_p99_ms=… harvested_node_h=… predicted_node_h=… ratio=… wait_without2_p50_ms=… wait_without2_p99_ms=… wait_goal=… trainer_cpu=… trainer_procs_not_idle=…/…
//	pilot wait pass=with|without|without2 jobs=… sched_p50_ms=… sched_p99_ms=… launch_p50_ms=… launch_p99_ms=… overrun_p50_ms=… overrun_p99_ms=… rpc_all_queries=…
//	pilot harvest idle_node_h=… used_node_h=… held_node_h=… fault_node_h=… startup_node_h=… completing_node_h=… reconcile_node_h=… no_demand_node_h=… beside_node_s=… samples=… max_gap_s=… fault_idle_node_h=… used_outside_faults=…
//	pilot nemesis=<name> at_s=<x> <what happened> [window_idle_node_h=… window_lost_node_h=…]
//
// harvested_node_h is the node-hours USED by Trainers: idle by sacct with
// a Trainer process alive on the node, sampled every second; ratio is it
// over the replay's used_node_h. The harvest line splits the idle
// node-hours by stage (used; fault: not used while a nemesis held a part
// of the system down; startup: held with no process yet, completing: the
// pool has not got the node back since the job ended, reconcile: free
// while a Trainer could grow, no_demand: free while none could; they sum
// to idle_node_h), with used_outside_faults (the share of the idle time
// outside the nemeses' windows that was used), held_node_h (the nodes the pool
// showed held: the old measure) and beside_node_s (a Trainer process seen
// on a node while a main job surely ran there: a cross-check of the jobs'
// own watches); see internal/lab/slurm/harvest.go. A nemesis that held a
// part of the system down in the pass with bftrainer says what it cost:
// the idle node-hours within its window and those no Trainer used there
// (window_lost_node_h; windows that overlap share their moments).
//
// Every nemesis line and every problem found (a job not normal, an audit
// row) is printed; the command fails when the pilot found a problem. A
// job submitted as slurmctld went down (within 2 s before its restart, or
// while it was down) whose script never ran is the restart's loss, in
// every pass alike: the slurmctld-restart line says main_jobs_lost=N and
// which, and it is not counted failed.
type pilotCommand struct {
	stdout, stderr io.Writer
}

func (c *pilotCommand) Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("pilot", flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	repo := fs.String("repo", ".", "the bftrainer module's directory (lab.sh and ./cmd/bftrainer are found there)")
	data := fs.String("data", "../shared/data", "the shared data `directory` (theta/)")
	log := fs.String("log", "", "an SWF job `file` (default: DATA/theta/theta_2022.swf)")
	from := fs.Int("from", 15000, "the slice's first job (index among the log's usable jobs)")
	jobs := fs.Int("jobs", 60, "jobs in the slice")
	nodes := fs.Int("nodes", 8, "lab nodes")
	speed := fs.Float64("speed", 400, "time compression: a log second is 1/`X` s")
	elastic := fs.Int("elastic", 2, "elastic train.py Trainers in the queue")
	torchrun := fs.Int("torchrun", 1, "torchrun train.py Trainers")
	execs := fs.Int("exec", 1, "exec Trainers (a shell and two sleeps)")
	nemeses := fs.String("nemesis", strings.Join(slurm.AllNemeses, ","), "nemeses, comma-separated ("+strings.Join(slurm.AllNemeses, ", ")+"; \"\": none)")
	hold := fs.Duration("nemesis-hold", time.Minute, "how long a node stays unreachable and the database read-only")
	without := fs.Bool("without", true, "run the slice twice more without bftrainer, for the queue wait and its noise")
	seed := fs.Uint64("seed", 1, "`SEED` of the nemeses' moments")
	solver := fs.String("solver", "adaptive", "pool.solver, live and in the replay's prediction")
	journalPath := fs.Bool("journal-path", true, "run the guide's optional bftrainer-journal.path: a reconcile the moment a hook writes, not only at the service's tick")
	trainerCPU := fs.String("trainer-cpu", "idle", "trainer.cpu_priority of the Trainers (normal or idle). The lab's nodes share this machine's cores with slurmctld, the slurmds and every main job, where on a cluster a Trainer's CPU is its own node's: idle (SCHED_IDLE) is the lab's stand-in for that")
	keep := fs.Bool("keep", false, "keep the lab's directory (the history, the replay's inputs)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *log == "" {
		*log = filepath.Join(*data, "theta", "theta_2022.swf")
	}
	if _, err := os.Stat(*log); err != nil {
		return fmt.Errorf("pilot: %w (-data or -log)", err)
	}
	var ns []string
	for _, n := range strings.Split(*nemeses, ",") {
		if n = strings.TrimSpace(n); n != "" {
			ns = append(ns, n)
		}
	}
	repoAbs, err := filepath.Abs(*repo)
	if err != nil {
		return err
	}
	r, err := slurm.Pilot(ctx, slurm.PilotOptions{Repo: repoAbs, Log: *log, From: *from, Jobs: *jobs, Nodes: *nodes, Speed: *speed,
		Elastic: *elastic, Torchrun: *torchrun, Exec: *execs, Nemeses: ns, NemesisHold: *hold, Without: *without, Seed: *seed, Solver: *solver, JournalPath: *journalPath, TrainerCPU: *trainerCPU, Keep: *keep,
		Logf: func(format string, args ...any) { fmt.Fprintf(c.stderr, "bftrainer-bench: "+format+"\n", args...) }})
	if err != nil {
		if r != nil {
			for _, p := range r.Problems {
				fmt.Fprintf(c.stderr, "bftrainer-bench: pilot: %s\n", p)
			}
		}
		return fmt.Errorf("pilot: %w", err)
	}
	fmt.Fprintln(c.stdout, r.Line())
	for _, w := range r.WaitSplits {
		fmt.Fprintln(c.stdout, w.Line())
	}
	fmt.Fprintln(c.stdout, r.HarvestLine())
	for _, l := range r.NemesisLines() {
		fmt.Fprintln(c.stdout, l)
	}
	for _, n := range r.TrainerNotes {
		fmt.Fprintf(c.stdout, "pilot note=%q\n", n)
	}
	for _, p := range r.Problems {
		fmt.Fprintf(c.stderr, "bftrainer-bench: pilot: %s\n", p)
	}
	fmt.Fprintf(c.stderr, "bftrainer-bench: pilot: %s of wall time\n", r.Wall.Round(time.Second))
	if len(r.Problems) > 0 {
		return fmt.Errorf("pilot: %d problem(s) found (above)", len(r.Problems))
	}
	return nil
}
