package slurm_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/internal/lab/slurm"
	"github.com/bftrainer/bftrainer/trainer/trainertest"
)

// TestSlurmMPI: an MPI Trainer (launcher mpi, Open MPI's mpirun,
// contrib/trainer/mpi_sgd.py with mpi4py) harvests the idle nodes of a
// real three-node Slurm cluster, as the Trainers' owner; a main job takes
// one of them: its node prolog kills the Trainer there before the job
// runs (the job finds nothing of ours on its node), and the Trainer
// trains on, restarted by the runner on the other two from its
// checkpoint.
func TestSlurmMPI(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real Slurm cluster and a real MPI job")
	}
	if err := slurm.Need(); err != nil {
		t.Skip(err)
	}
	mpirun, err := exec.LookPath("mpirun.openmpi")
	if err != nil {
		t.Skip("needs Open MPI (apt-get install openmpi-bin)")
	}
	if err := exec.Command("/usr/bin/python3", "-c", "import mpi4py, numpy").Run(); err != nil {
		t.Skip("needs mpi4py for /usr/bin/python3 (apt-get install python3-mpi4py)")
	}
	ctx := context.Background()
	root := trainertest.RepoRoot(t)
	c, err := slurm.Up(ctx, slurm.ClusterOptions{Repo: root, Nodes: 3, Prefix: "mpil", Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Down(context.Background(), false); err != nil {
			t.Errorf("stopping the cluster: %v", err)
		}
	})
	debugOnFailure(t, c)
	s := c.Settings
	// The lab's transport is local (every node is this machine): the
	// remote shell runs mpi-exec here instead of ssh.
	s.Extra = "[trainer.launcher.mpi]\nssh = []\ncommand = [\"" + mpirun + "\"]\n"
	if err := c.Configure(s); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "contrib/trainer/mpi_sgd.py"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.In.Work, "mpi_sgd.py"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	all := nodes(c, 1, 3)
	must[string](t)(c.Run(ctx, "sync"))
	if err := c.In.WaitPoolMatches(ctx, c.Lab, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	name := c.In.Name("mpi")
	dir := filepath.Join(c.In.Work, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, c.User.UID, c.User.GID); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, "progress.log")
	submitted := time.Now()
	must[string](t)(c.In.RunAs(ctx, c.User, "trainer", "submit", "--name", name, "--launcher", "mpi", "--min", "1", "--max", "3",
		"--curve", "1:100,2:200,3:300", "--rescale-up", "5", "--rescale-down", "5", "--workdir", dir, "--env", "PYTHONDONTWRITEBYTECODE=1", "--",
		"/usr/bin/python3", filepath.Join(c.In.Work, "mpi_sgd.py"), "--steps", "1000000", "--ckpt-dir", filepath.Join(dir, "ckpt"),
		"--log", log, "--sleep", "0.1"))
	must[string](t)(c.Run(ctx, "reconcile"))
	r, err := slurm.WaitRounds(ctx, log, submitted, 3, 3*time.Minute, slurm.OnNodes(all...))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the MPI Trainer trains at world 3 on %v, %.1f s after its submission", r.Nodes, r.At.Sub(submitted).Seconds())

	main, err := c.Lab.Submit(ctx, slurm.JobSpec{Nodes: 1, Held: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { main.Release() })
	jr, err := main.WaitChecked(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	info := must[slurm.JobInfo](t)(c.Lab.Job(ctx, main.ID))
	onMain := must[[]string](t)(info.Nodes())
	if len(onMain) != 1 || jr.Procs[onMain[0]] != "none" {
		t.Fatalf("the main job on %v found Trainer processes: %v", onMain, jr.Procs)
	}
	left := slices.DeleteFunc(slices.Clone(all), func(n string) bool { return n == onMain[0] })
	r, err = slurm.WaitRounds(ctx, log, main.Submitted, 3, 3*time.Minute, slurm.OnNodes(left...))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("main job %s took %s; the Trainer trains on at world %d on %v, %.1f s after sbatch", main.ID, onMain[0], r.World, r.Nodes, r.At.Sub(main.Submitted).Seconds())
}
