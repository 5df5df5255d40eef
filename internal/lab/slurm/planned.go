package slurm

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/bftrainer/bftrainer/store"
)

// PlannedOptions shapes one arm of PlannedReclaim.
type PlannedOptions struct {
	Plan bool          // read the scheduler's plan; off, the main job's prologs kill
	Lead time.Duration // reconciler.plan_lead; 0 means 30 s
	K    int           // steps at the kept size that measure the change; 0 means 5
}

// PlannedResult is what one arm saw.
type PlannedResult struct {
	Plan    bool
	Trainer *Torch
	Main    *Job // B
	Report  JobReport
	Taken   []string // the Trainer's nodes B takes
	Kept    string   // the one it keeps
	Moves   []store.Event
	Kills   []store.Event // B's kill rows that killed something (one per node)
	// Preempts are the Trainer's preempt rows (reclaims that took nodes
	// from it); by Trainer, not by job: a reclaim the reconciler's
	// start check saw before the prolog's leave was folded has none.
	Preempts []store.Event
	// Off is when the Trainer was off B's nodes (plan on: the last of
	// its move rows and stop actions); Lead is B's first line minus Off.
	Off  time.Time
	Lead time.Duration
	// Change is the Trainer's shrink to the kept node, from its
	// progress log (Change.Lost: MeasureChange's definition).
	Change Change
	// After counts the Trainer's complete steps on the kept node after
	// B's first line (it trained on while B ran).
	After int
}

// plannedLimit is job A's --time: B is planned at its end.
const plannedLimit = "1"

// PlannedReclaim runs issue 15's scenario once, with the plan on or
// ignored. An elastic Trainer (contrib/trainer/train.py on the elastic
// launcher, min 1, max 3) takes three nodes; job A holds the fourth
// free node with a 1-minute limit; job B needs A's node and two of the
// Trainer's (not the one with rank 0), so it waits for A. Plan on:
// Slurm's backfill pass plans B at A's limit, the reconciler service
// reads it and, o.Lead ahead, shrinks the Trainer off B's two nodes at
// a step boundary; A runs to its limit and B finds its nodes free. Plan
// off: A is released once B is pending (nothing happens before B lands
// without a plan, so running A to its limit would only cost a minute),
// and B's prologs kill the Trainer's workers on its two nodes; the
// survivor goes on. Either way the Trainer ends up training on the kept
// node; the change is measured from its progress log. Nodes beyond the
// first four are held by a long job meanwhile. The cluster must be
// reset; it is left reset.
func PlannedReclaim(ctx context.Context, c *Cluster, o PlannedOptions) (r PlannedResult, err error) {
	if o.Lead <= 0 {
		o.Lead = 30 * time.Second
	}
	if o.K <= 0 {
		o.K = 5
	}
	r.Plan = o.Plan
	if len(c.Lab.Nodes) < 4 {
		return r, fmt.Errorf("planned reclaim: %d nodes, want at least 4", len(c.Lab.Nodes))
	}
	s := c.Settings
	s.Plan, s.PlanLead = o.Plan, o.Lead
	if err := c.Configure(s); err != nil {
		return r, err
	}
	var jobs []*Job
	var svc *Service
	defer func() {
		for _, j := range jobs {
			j.Release()
		}
		if kerr := svc.Kill(); kerr != nil && err == nil {
			err = kerr
		}
		if rerr := c.Reset(ctx); rerr != nil && err == nil {
			err = rerr
		}
	}()
	if len(c.Lab.Nodes) > 4 {
		rest := c.Lab.Nodes[4:]
		h, err := c.Lab.Submit(ctx, JobSpec{Nodes: len(rest), NodeList: strings.Join(rest, ","), Held: true, Name: "hold"})
		if err != nil {
			return r, err
		}
		jobs = append(jobs, h)
		if _, err := h.WaitChecked(ctx, time.Minute); err != nil {
			return r, err
		}
	}
	// The pool learns the idle nodes from the scheduler.
	if _, err := c.Run(ctx, "sync"); err != nil {
		return r, err
	}
	if svc, err = c.StartService(time.Second); err != nil {
		return r, err
	}
	arm := "off"
	if o.Plan {
		arm = "on"
	}
	submitted := time.Now()
	if r.Trainer, err = c.SubmitElastic(ctx, fmt.Sprintf("plan%s%d", arm, submitted.UnixMilli()%100000), 1, 3); err != nil {
		return r, err
	}
	c.Logf("planned reclaim, plan %s: Trainer %s submitted; waiting for world 3", arm, r.Trainer.Name)
	full, err := WaitRounds(ctx, r.Trainer.Log, submitted, 3, 3*time.Minute, func(r Round) bool { return r.World == 3 })
	if err != nil {
		return r, err
	}
	free := ""
	for _, n := range c.Lab.Nodes[:4] {
		if !slices.Contains(full.Nodes, n) {
			free = n
		}
	}
	// B takes the nodes of ranks 1 and 2; rank 0's stays with the Trainer.
	steps, err := ReadSteps(r.Trainer.Log)
	if err != nil {
		return r, err
	}
	for _, st := range steps {
		if st.World == 3 && st.Step == full.Step && st.Rank == 0 {
			r.Kept = st.Node
		}
	}
	for _, n := range full.Nodes {
		if n != r.Kept {
			r.Taken = append(r.Taken, n)
		}
	}
	if free == "" || r.Kept == "" || len(r.Taken) != 2 {
		return r, fmt.Errorf("planned reclaim: the Trainer's world 3 ran on %v (rank 0 on %q); no free node of %v left for job A", full.Nodes, r.Kept, c.Lab.Nodes[:4])
	}
	a, err := c.Lab.Submit(ctx, JobSpec{Nodes: 1, NodeList: free, Held: true, Name: "a", Args: []string{"--time=" + plannedLimit}})
	if err != nil {
		return r, err
	}
	jobs = append(jobs, a)
	if _, err := a.WaitChecked(ctx, time.Minute); err != nil {
		return r, err
	}
	bNodes := append([]string{free}, r.Taken...)
	slices.Sort(bNodes)
	r.Main, err = c.Lab.Submit(ctx, JobSpec{Nodes: 3, NodeList: strings.Join(bNodes, ","), Held: true, Watch: true, Name: "b",
		Args: []string{"--time=" + plannedLimit}})
	if err != nil {
		return r, err
	}
	jobs = append(jobs, r.Main)
	c.Logf("planned reclaim, plan %s: job A %s holds %s; job B %s waits for %v", arm, a.ID, free, r.Main.ID, bNodes)
	if !o.Plan {
		if err := Poll(ctx, time.Minute, func() (bool, error) {
			info, err := c.Lab.Job(ctx, r.Main.ID)
			return info["JobState"] == "PENDING", err
		}); err != nil {
			return r, fmt.Errorf("job B %s never pending: %w", r.Main.ID, err)
		}
		if err := a.Release(); err != nil {
			return r, err
		}
	}
	if r.Report, err = r.Main.WaitChecked(ctx, 3*time.Minute); err != nil {
		return r, err
	}
	if r.Moves, err = c.In.Events(ctx, store.Filter{Kinds: []store.Kind{store.KindMove}, Job: r.Main.ID}); err != nil {
		return r, err
	}
	kills, err := c.In.Events(ctx, store.Filter{Kinds: []store.Kind{store.KindKill}, Job: r.Main.ID})
	if err != nil {
		return r, err
	}
	for _, k := range kills {
		if k.Value > 0 {
			r.Kills = append(r.Kills, k)
		}
	}
	if len(r.Moves) > 0 {
		if r.Off, err = c.offAt(ctx, r.Trainer.Name, r.Moves, r.Taken); err != nil {
			return r, err
		}
		r.Lead = r.Report.First.Sub(r.Off)
	}
	// The Trainer trains on: k steps on the kept node measure the
	// change, and it still trains once B runs.
	after := r.Report.First
	if _, err := WaitRounds(ctx, r.Trainer.Log, after, 2, 2*time.Minute, OnNodes(r.Kept)); err != nil {
		return r, fmt.Errorf("the Trainer did not train on after job B began: %w", err)
	}
	err = Poll(ctx, 2*time.Minute, func() (bool, error) {
		steps, err := ReadSteps(r.Trainer.Log)
		if err != nil {
			return false, err
		}
		var ok bool
		r.Change, ok = MeasureChange(steps, full.Done, 3, 1, o.K)
		r.After = 0
		for _, rd := range rounds(steps, after) {
			if rd.World == 1 && slices.Equal(rd.Nodes, []string{r.Kept}) {
				r.After++
			}
		}
		return ok, nil
	})
	if err != nil {
		return r, fmt.Errorf("the Trainer's change from world 3 to 1 (%s): %w", r.Trainer.Log, err)
	}
	// The reconciler records a reclaim's preempt when it folds the
	// prologs' leave, after B began: with the plan off, wait (bounded)
	// for rows covering B's nodes; what is there then is the answer.
	var qerr error
	Poll(ctx, 30*time.Second, func() (bool, error) {
		if r.Preempts, qerr = c.In.Events(ctx, store.Filter{Kinds: []store.Kind{store.KindPreempt}, Trainer: r.Trainer.Name}); qerr != nil {
			return false, qerr
		}
		var off []string
		for _, p := range r.Preempts {
			off = append(off, p.Nodes...)
		}
		return o.Plan || !slices.ContainsFunc(r.Taken, func(n string) bool { return !slices.Contains(off, n) }), nil
	})
	return r, qerr
}

// offAt is when the Trainer was off the nodes: the last of its move rows
// and of its stop actions on them since the first move.
func (c *Cluster) offAt(ctx context.Context, trainer string, moves []store.Event, nodes []string) (time.Time, error) {
	off := moves[0].At
	for _, m := range moves {
		off = later(off, m.At)
	}
	stops, err := c.In.Events(ctx, store.Filter{Kinds: []store.Kind{store.KindAction}, Trainer: trainer, Since: moves[0].At.Add(-time.Second)})
	if err != nil {
		return off, err
	}
	for _, e := range stops {
		if e.Context == "stop" && len(e.Nodes) > 0 && slices.Contains(nodes, e.Nodes[0]) {
			off = later(off, e.At)
		}
	}
	return off, nil
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// PlannedLine is the bench line of plan-on and plan-off arms run in
// pairs: medians of their leads and lost training seconds, and the
// history rows the plan-on arms (moves, kills) and the plan-off ones
// (surprise_kills) recorded for their main jobs, in all: kill rows that
// killed something (one per node).
func PlannedLine(on, off []PlannedResult) string {
	var lead, lost, surprise []float64
	moves, kills, surpriseKills, nodes := 0, 0, 0, 0
	for _, r := range on {
		lead = append(lead, r.Lead.Seconds())
		lost = append(lost, r.Change.Lost)
		moves += len(r.Moves)
		kills += len(r.Kills)
		nodes = len(r.Taken)
	}
	for _, r := range off {
		surprise = append(surprise, r.Change.Lost)
		surpriseKills += len(r.Kills)
	}
	return fmt.Sprintf("slurm planned_reclaim lead_s=%.1f lost_s=%.3f vs_surprise_lost_s=%.3f moves=%d kills=%d surprise_kills=%d nodes=%d rounds=%d launcher=elastic",
		Quantile(lead, 0.5), Quantile(lost, 0.5), Quantile(surprise, 0.5), moves, kills, surpriseKills, nodes, min(len(on), len(off)))
}
