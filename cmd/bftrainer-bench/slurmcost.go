package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/bftrainer/bftrainer/internal/lab/slurm"
)

// measureCost is the hooks' cost to a main job (slurm.HookCost): two more
// clusters started beside the bench's, one without hooks and one with
// /bin/true as all four, and main jobs round-robin over the three, with
// the lab's fast scheduler settings and with Slurm's defaults. It prints
//
//	slurm hook_cost setting=<s> mode=<none|noop|bftrainer> start_p50=… start_p99=… sched_p50=… sched_p99=… alloc_p50=… alloc_p99=… epilog_p50=… epilog_p99=… n=…
//	slurm hook_cost setting=<s> over=<none|noop> alloc_added_p50=… alloc_added_p99=… epilog_added_p50=… epilog_added_p99=…
//	slurm hooks_added_ms over=noop p50=… p99=…
//	slurm hooks_added_ms over=none p50=… p99=…
//	slurm epilog_added_ms over=noop p50=… p99=…
//	slurm epilog_added_ms over=none p50=… p99=…
//
// start is sbatch to the job's first line; sched, sbatch to slurmctld's
// allocation; alloc, the allocation to the first line (what the prologs
// add to); epilog, a node's slurmd from the job's termination request to
// its epilog's end (what keeps the node COMPLETING); all in ms. An "added"
// figure is bftrainer's quantile minus the peer's; hooks_added_ms
// (allocation to first line) and epilog_added_ms pool both settings.
// sbatch to first line is sched plus alloc, and sched is the wait for the
// scheduler's next pass: its tick has a phase of its own in each cluster,
// and jobs submitted at a steady rhythm keep a steady phase to it, so
// start differs between the clusters by hundreds of ms for reasons that
// are not the hooks (none runs before the allocation). No start_added is
// printed for that reason.
// bftrainer's reconciler runs as a service (hooks.spawn_reconciler =
// "never"), as contrib/slurm/README.md installs it; its nodes hold no
// Trainer (the reclaim's cost is main_job_alloc_to_start_ms with=).
func measureCost(ctx context.Context, stdout io.Writer, cl *slurm.Cluster, logf func(string, ...any), runs int) (err error) {
	if err := cl.Reset(ctx); err != nil {
		return err
	}
	s := cl.Settings
	s.Spawn = "never"
	if err := cl.Configure(s); err != nil {
		return err
	}
	svc, err := cl.StartService(time.Second)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, svc.Kill()) }()
	logf("starting the peers: a cluster without hooks, one with /bin/true")
	modes := []slurm.CostMode{{Name: "none"}, {Name: "noop"}, {Name: "bftrainer", Lab: cl.Lab}}
	for i, p := range []struct{ prefix, hook string }{{"hcn", ""}, {"hct", "/bin/true"}} {
		l, lerr := cl.CostLab(ctx, modes[i].Name, p.prefix, p.hook)
		if lerr != nil {
			return fmt.Errorf("%s cluster: %w", modes[i].Name, lerr)
		}
		defer func() { err = errors.Join(err, l.Stop(context.Background())) }()
		modes[i].Lab = l
	}
	samples, err := slurm.HookCost(ctx, modes, slurm.CostSettings, runs, 2, logf)
	for _, m := range modes {
		// The bench's own measurements run with the lab's settings.
		if m.Lab == cl.Lab {
			err = errors.Join(err, m.Lab.SetSchedulerParameters(ctx, slurm.CostSettings[0].Value))
		}
	}
	if err != nil {
		return err
	}
	printCost(stdout, samples)
	return printStages(ctx, stdout, cl, samples)
}

// hookContexts are Slurm's four hook points, in the order a job meets them.
var hookContexts = []string{"prolog_slurmctld", "prolog_slurmd", "epilog_slurmd", "epilog_slurmctld"}

// printStages writes where the bftrainer cluster's hook calls spent their
// own time (the stages_ms of their records: from the process's first
// line of Go to the record, exec and the runtime's start aside):
//
//	slurm hook_stages_ms context=<c> total_p50=… total_p99=… config_p50=… config_p99=… decode_p50=… act_p50=… act_p99=… n=…
func printStages(ctx context.Context, w io.Writer, cl *slurm.Cluster, ss []slurm.CostSample) error {
	type figs struct{ total, config, decode, act []float64 }
	by := map[string]*figs{}
	for _, s := range ss {
		if s.Mode != "bftrainer" {
			continue
		}
		evs, err := cl.HookEvents(ctx, s.Job)
		if err != nil {
			return err
		}
		for hc, es := range evs {
			for _, e := range es {
				var d struct {
					Stages map[string]float64 `json:"stages_ms"`
				}
				if json.Unmarshal(e.Detail, &d) != nil || d.Stages == nil {
					continue
				}
				f := by[hc]
				if f == nil {
					f = &figs{}
					by[hc] = f
				}
				f.total = append(f.total, e.Ms)
				f.config = append(f.config, d.Stages["config"])
				f.decode = append(f.decode, d.Stages["decode"])
				f.act = append(f.act, d.Stages["act"])
			}
		}
	}
	q := slurm.Quantile
	for _, hc := range hookContexts {
		f := by[hc]
		if f == nil {
			continue
		}
		fmt.Fprintf(w, "slurm hook_stages_ms context=%s total_p50=%.2f total_p99=%.2f config_p50=%.2f config_p99=%.2f decode_p50=%.2f act_p50=%.2f act_p99=%.2f n=%d\n",
			hc, q(f.total, 0.5), q(f.total, 0.99), q(f.config, 0.5), q(f.config, 0.99), q(f.decode, 0.5), q(f.act, 0.5), q(f.act, 0.99), len(f.total))
	}
	return nil
}

// costFigures are one mode's figures (ms) over a set of samples.
type costFigures struct{ start, sched, alloc, epilog []float64 }

func figuresOf(ss []slurm.CostSample, mode, setting string) costFigures {
	var f costFigures
	for _, s := range ss {
		if s.Mode != mode || (setting != "" && s.Setting != setting) {
			continue
		}
		f.start = append(f.start, slurm.Millis(s.StartDelay())...)
		f.sched = append(f.sched, slurm.Millis(s.Alloc.Sub(s.Submit))...)
		f.alloc = append(f.alloc, slurm.Millis(s.AllocToStart())...)
		f.epilog = append(f.epilog, slurm.Millis(s.Epilog...)...)
	}
	return f
}

// printCost writes measureCost's lines.
func printCost(w io.Writer, ss []slurm.CostSample) {
	q := slurm.Quantile
	modes := []string{"none", "noop", "bftrainer"}
	for _, st := range slurm.CostSettings {
		for _, m := range modes {
			f := figuresOf(ss, m, st.Name)
			fmt.Fprintf(w, "slurm hook_cost setting=%s mode=%s start_p50=%.1f start_p99=%.1f sched_p50=%.1f sched_p99=%.1f alloc_p50=%.1f alloc_p99=%.1f epilog_p50=%.1f epilog_p99=%.1f n=%d\n",
				st.Name, m, q(f.start, 0.5), q(f.start, 0.99), q(f.sched, 0.5), q(f.sched, 0.99), q(f.alloc, 0.5), q(f.alloc, 0.99), q(f.epilog, 0.5), q(f.epilog, 0.99), len(f.alloc))
		}
		bf := figuresOf(ss, "bftrainer", st.Name)
		for _, over := range []string{"none", "noop"} {
			p := figuresOf(ss, over, st.Name)
			fmt.Fprintf(w, "slurm hook_cost setting=%s over=%s alloc_added_p50=%.1f alloc_added_p99=%.1f epilog_added_p50=%.1f epilog_added_p99=%.1f\n",
				st.Name, over, q(bf.alloc, 0.5)-q(p.alloc, 0.5), q(bf.alloc, 0.99)-q(p.alloc, 0.99),
				q(bf.epilog, 0.5)-q(p.epilog, 0.5), q(bf.epilog, 0.99)-q(p.epilog, 0.99))
		}
	}
	bf := figuresOf(ss, "bftrainer", "")
	for _, over := range []string{"noop", "none"} {
		p := figuresOf(ss, over, "")
		fmt.Fprintf(w, "slurm hooks_added_ms over=%s p50=%.1f p99=%.1f\n", over, q(bf.alloc, 0.5)-q(p.alloc, 0.5), q(bf.alloc, 0.99)-q(p.alloc, 0.99))
	}
	for _, over := range []string{"noop", "none"} {
		p := figuresOf(ss, over, "")
		fmt.Fprintf(w, "slurm epilog_added_ms over=%s p50=%.1f p99=%.1f\n", over, q(bf.epilog, 0.5)-q(p.epilog, 0.5), q(bf.epilog, 0.99)-q(p.epilog, 0.99))
	}
}
