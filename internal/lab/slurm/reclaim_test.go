package slurm_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/internal/lab/slurm"
	"github.com/bftrainer/bftrainer/store"
	"github.com/bftrainer/bftrainer/trainer/trainertest"
	"github.com/bftrainer/bftrainer/trainer/wire"
)

// lookScript is a main job that, as its first act — after every node
// prolog returned — lists what the Trainers' owner still runs on the
// machine (every node of the lab is this machine), from /proc.
const lookScript = `#!/bin/sh
left=""
for p in /proc/[0-9]*; do
	[ "$(stat -c %%u "$p" 2>/dev/null)" = %d ] || continue
	state=$(sed 's/.*) //' "$p/stat" 2>/dev/null | cut -c1)
	[ "$state" = Z ] || [ -z "$state" ] || left="$left ${p#/proc/}"
done
echo "owner-procs:$left"
`

// TestSlurmReclaimEscapes is issue 10's proof on the real reclaim path: a
// one-node Slurm cluster, an exec Trainer on its node playing one trick
// of trainertest.Escapes (and a fork storm, a registry filesystem full,
// 300 processes with 1.9 MB environments), then a main job on the node:
// its own first look at /proc, after the node prolog returned, finds
// nothing of the Trainer's owner. Once with cgroup containment (the kill
// report says cgroup, clean), once with it switched off (degraded, and the
// report names what may escape).
func TestSlurmReclaimEscapes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real Slurm cluster")
	}
	if err := slurm.Need(); err != nil {
		t.Skip(err)
	}
	ctx := context.Background()
	c, err := slurm.Up(ctx, slurm.ClusterOptions{Repo: trainertest.RepoRoot(t), Nodes: 1, Prefix: "rlab", Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Down(context.Background(), false); err != nil {
			t.Errorf("stopping the cluster: %v", err)
		}
	})
	// The registry on a small filesystem of its own, to fill it later.
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs", c.In.Registry).CombinedOutput(); err != nil {
		t.Fatalf("mount a tmpfs on the registry: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", c.In.Registry).Run() })
	debugOnFailure(t, c)
	must[string](t)(c.Run(ctx, "sync"))
	look := filepath.Join(c.Lab.JobsDir(), "look.sh")
	if err := os.WriteFile(look, []byte(fmt.Sprintf(lookScript, c.User.UID)), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"cgroup", "degraded"} {
		t.Run(mode, func(t *testing.T) {
			s := c.Settings
			s.Spawn = "never" // the node prolog alone kills: no re-plan races it
			if mode == "degraded" {
				s.Extra = `containment = "off"`
			}
			cases := append([]trainertest.Escape{}, trainertest.Escapes...)
			cases = append(cases, trainertest.Escape{Kind: "registry-full", Pids: 1, Script: trainertest.Escapes[0].Script},
				trainertest.ManyEnv(300, 1900<<10))
			for _, e := range cases {
				if e.Storm && mode == "degraded" {
					continue // nothing bounds it without a pids controller
				}
				t.Run(e.Kind, func(t *testing.T) {
					s := s
					if e.Storm {
						s.Extra = "pids_max = 64" // bounded, or it would take the machine
					}
					if err := c.Configure(s); err != nil {
						t.Fatal(err)
					}
					reclaimEscape(t, c, look, mode, e)
				})
			}
		})
	}
}

// reclaimEscape runs one escape against the reclaim.
func reclaimEscape(t *testing.T, c *slurm.Cluster, look, mode string, e trainertest.Escape) {
	ctx := context.Background()
	name := c.In.Name(e.Kind)
	dir := filepath.Join(c.In.Work, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, c.User.UID, c.User.GID); err != nil {
		t.Fatal(err)
	}
	must[string](t)(c.In.RunAs(ctx, c.User, "trainer", "submit", "--name", name, "--launcher", "exec", "--min", "1", "--max", "1",
		"--curve", "1:10", "--workdir", "/", "--env", "ESC_DIR="+dir, "--", "/bin/sh", "-c", e.Program()))
	must[string](t)(c.Run(ctx, "reconcile"))
	pids := trainertest.WaitEscape(t, dir, 60*time.Second)
	if e.Kind == "registry-full" {
		filler := filepath.Join(c.In.Registry, "filler")
		trainertest.Fill(t, filler)
		t.Cleanup(func() { os.Remove(filler) })
	}
	job := must[*slurm.Job](t)(c.Lab.Submit(ctx, slurm.JobSpec{Nodes: 1, Script: look}))
	info := must[slurm.JobInfo](t)(job.WaitEnded(ctx, 2*time.Minute))
	out, _ := os.ReadFile(job.Out)
	if info["JobState"] != "COMPLETED" {
		t.Fatalf("the main job ended %s:\n%s", info["JobState"], out)
	}
	left, ok := strings.CutPrefix(strings.TrimSpace(string(out)), "owner-procs:")
	if !ok {
		t.Fatalf("the main job printed %q", out)
	}
	if left = strings.TrimSpace(left); left != "" {
		t.Errorf("the main job found the Trainer's processes %s beside it", left)
	}
	if alive := trainertest.Alive(pids); len(alive) > 0 {
		t.Errorf("the escape's pids %v survived the reclaim", alive)
	}
	rep := killReport(t, c, job.ID)
	switch mode {
	case "cgroup":
		if rep.Containment != wire.Cgroup || (!rep.Clean && e.Kind != "registry-full") {
			t.Errorf("the kill says containment %q, clean %v: %s", rep.Containment, rep.Clean, rep)
		}
	default:
		if !strings.HasPrefix(rep.Containment, wire.Degraded+" (") || rep.Clean || rep.Escapes != wire.DegradedEscapes {
			t.Errorf("the degraded kill says containment %q, clean %v, escapes %q", rep.Containment, rep.Clean, rep.Escapes)
		}
	}
	if e.Kind == "registry-full" && (len(rep.Errors) == 0 || !strings.Contains(rep.Errors[0], "no space left")) {
		t.Errorf("the fence that could not be written is not in the report: %s", rep)
	}
	t.Logf("%s: containment %s, clean %v, killed %d of %d in %.1f ms (groups %d, one by one %d; stages %v)", e.Kind, rep.Containment, rep.Clean, rep.Count(), len(pids), rep.Ms, len(rep.Groups), len(rep.Procs), rep.Stages)
	must[string](t)(c.In.RunAs(ctx, c.User, "trainer", "cancel", name))
	must[string](t)(c.Run(ctx, "reconcile"))
	if err := slurm.Poll(ctx, time.Minute, func() (bool, error) { return len(trainertest.UIDProcs(c.User.UID)) == 0, nil }); err != nil {
		t.Fatalf("the cancelled Trainer's processes do not end: %v", err)
	}
}

// killReport is the node prolog's kill report for a job, from the history.
func killReport(t *testing.T, c *slurm.Cluster, job string) wire.KillReport {
	t.Helper()
	evs := must[[]store.Event](t)(c.In.Events(context.Background(), store.Filter{Kinds: []store.Kind{store.KindKill}, Job: job}))
	if len(evs) == 0 {
		t.Fatalf("no kill recorded for job %s", job)
	}
	var rep wire.KillReport
	if err := json.Unmarshal(evs[0].Detail, &rep); err != nil {
		t.Fatalf("kill report %s: %v", evs[0].Detail, err)
	}
	return rep
}
