package trainer

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/bftrainer/bftrainer/internal/atomicfile"
	"github.com/bftrainer/bftrainer/trainer/wire"
)

// mpiElasticKind is the MPI fast path: a PyTorch Trainer on bftrainer's
// elastic runtime whose first workers are started the MPI way — the
// site's mpirun or mpiexec over the nodes, through bftrainer's remote
// shell and landings (mpiland.go), so that every daemon and rank is in
// the run's cgroup — and take their identity from their MPI rank
// (OMPI_COMM_WORLD_RANK, PMI_RANK). Each rank hands its program to its
// node's landing (mpi-rank) and the MPI job ends: the workers then live
// as the elastic launcher's do, kept alive across every later change —
// a grow by workers the node agent starts on the new nodes, admitted at
// a step boundary; a shrink or a reclaim by the runtime dropping them.
// It is the elastic launcher (elastic.go) with its first generation
// started by mpirun.
var mpiElasticKind = Kind{
	Name:      MPIElastic,
	CheckSpec: checkElasticSpec,
	New: func(decode func(any) error) (Launcher, error) {
		s := MPIElasticSettings{
			ElasticSettings: ElasticSettings{
				Python:            "/usr/bin/python3",
				PythonPath:        "/usr/local/lib/bftrainer/python",
				StorePorts:        "29700-29799",
				ReadyTimeout:      "60s",
				FormTimeout:       "40s",
				LeaveGrace:        "10s",
				CollectiveTimeout: "10s",
				JoinTimeout:       "30s",
			},
			Flavor: FlavorAuto, SSH: []string{"ssh"}, ExecWait: "30s",
		}
		if err := decode(&s); err != nil {
			return nil, err
		}
		return s.launcher()
	},
}

// MPIElasticSettings are [trainer.launcher.mpi-elastic]: the elastic
// launcher's settings and the mpi launcher's that start the first
// generation (no drain: nothing is ever drained).
type MPIElasticSettings struct {
	ElasticSettings
	// Command is the site's launcher; empty: the first of mpirun,
	// mpiexec found on the controller's PATH.
	Command []string `toml:"command"`
	// Flavor is auto (from the command's --version), openmpi or hydra.
	Flavor string `toml:"flavor"`
	// Args are extra arguments, after bftrainer's, before the program.
	Args []string `toml:"args"`
	// SSH is the owner's ssh to the nodes, which the remote shell runs.
	SSH []string `toml:"ssh"`
	// ExecWait bounds how long a daemon's mpi-exec, or a rank's mpi-rank,
	// waits for its node's landing to listen.
	ExecWait string `toml:"exec_wait"`
}

func (s MPIElasticSettings) launcher() (*elastic, error) {
	el, err := s.ElasticSettings.launcher()
	m, merr := MPISettings{Command: s.Command, Flavor: s.Flavor, Args: s.Args, SSH: s.SSH, Drain: "0s", ExecWait: s.ExecWait}.launcher()
	if err := errors.Join(err, merr); err != nil {
		return nil, err
	}
	el.mpi = m
	return el, nil
}

// MPIStartFile is the file a mpi-elastic Trainer's driver polls: the
// MPIStart of the generation to start.
func MPIStartFile(stateDir, trainer string) string {
	return filepath.Join(mpiDir(stateDir), trainer+".start")
}

// MPIElasticEnv names a first-generation worker's generation (a nonce)
// in its environment: the elastic runtime then takes its worker id from
// its MPI rank, MPIWorkerID.
const MPIElasticEnv = "BFTRAINER_ELASTIC_MPI"

// MPIWorkerID is the worker id of MPI rank rank of the generation nonce;
// python/bftrainer_elastic/runtime.py's mpi_worker_id is the same.
func MPIWorkerID(nonce string, rank int) string {
	return "mpi" + strconv.Itoa(rank) + "@" + nonce
}

// storeLaunch is the store process's launch; for mpi-elastic, inside the
// driver that also runs each generation's mpirun (the node agent keeps
// one launch per Trainer on the controller), with what mpirun and its
// remote shell need in its environment.
func (l *elastic) storeLaunch(t *Run, st *elasticState, env map[string]string) (wire.Launch, error) {
	argv := StoreArgs(l.s.Python, t.Address(), st.Store, st.Control)
	if l.mpi == nil {
		return wire.Launch{Workdir: "/", Argv: argv, Env: env}, nil
	}
	spec, err := DecodeSpec(t.Want.Spec)
	if err != nil {
		return wire.Launch{}, err
	}
	self := t.Self()
	if len(self) == 0 {
		return wire.Launch{}, errors.New("no bftrainer command on the controller (the runner's Self)")
	}
	start := MPIStartFile(t.StateDir(), t.ID)
	if err := os.Remove(start); err != nil && !errors.Is(err, os.ErrNotExist) {
		return wire.Launch{}, err // an older store's generations must not start
	}
	all := t.Env(spec, map[string]string{"OMP_NUM_THREADS": "1"})
	for k, v := range env {
		all[k] = v
	}
	sshJSON, _ := json.Marshal(append([]string{}, l.mpi.s.SSH...))
	remoteJSON, _ := json.Marshal(t.nodeSelf())
	all[MPISSHEnv], all[MPIRemoteEnv], all[MPIExecWaitEnv] = string(sshJSON), string(remoteJSON), l.mpi.wait.String()
	workdir := spec.Workdir
	if workdir == "" {
		workdir = "/"
	}
	return wire.Launch{Workdir: workdir, Env: all,
		Argv: append(append(self, "mpi-elastic-driver", start, "--"), argv...)}, nil
}

// mpiStart starts a generation with mpirun on nodes (a mpi-elastic
// Trainer with no worker): a worker landing on each, then the MPI job —
// rank r on the r-th node that started, in the order taken, its program
// `bftrainer mpi-rank -- PROGRAM…` — through the driver. The ranks'
// worker ids are known in advance (MPIWorkerID), so the round waits for
// them to be ready and lists them in rank order like any new worker.
func (r *elasticRound) mpiStart(spec Spec, nodes []string) {
	t, st, l := r.t, r.st, r.l
	nonce := wire.NewRun()[:8]
	st.MPIGen++
	r.acts = append(r.acts, t.StartNodes(r.ctx, "land", nodes, func(n string) wire.Launch {
		env := l.workerEnv(t, spec, n, "", st.Store, st.Secret)
		delete(env, "BFTRAINER_ELASTIC_ID")
		env[MPIElasticEnv] = nonce
		argv := append(t.nodeSelf(), "mpi-land", "--worker-wait", l.ready.String(), t.ID, n)
		return wire.Launch{Argv: argv, Env: env, Workdir: spec.Workdir}
	})...)
	var hosts []string
	for _, n := range nodes {
		if _, ok := t.Rec.Nodes[n]; ok {
			st.Workers[n] = MPIWorkerID(nonce, len(hosts))
			hosts = append(hosts, n)
		}
	}
	r.save()
	if len(hosts) == 0 {
		return
	}
	act := Action{Op: "driver-start"}
	var sh mpiShared
	t.Shared(&sh)
	if len(sh.Command) == 0 || sh.Flavor == "" {
		cmd, fl, ver, err := MPIProgram(r.ctx, l.mpi.s.Command, l.mpi.s.Flavor)
		if err != nil {
			act.Err = err
			r.act(act)
			return
		}
		sh = mpiShared{Command: cmd, Flavor: fl, Version: ver}
		t.SetShared(sh)
	}
	self := t.Self()
	if len(self) == 0 {
		act.Err = errors.New("no bftrainer command on the controller (the runner's Self)")
		r.act(act)
		return
	}
	rsh, err := rshScript(t.StateDir(), self[0])
	if err != nil {
		act.Err = fmt.Errorf("remote shell: %w", err)
		r.act(act)
		return
	}
	program := append(append(t.nodeSelf(), "mpi-rank", "--"), spec.Argv...)
	argv := MPIArgs(sh.Flavor, sh.Command, []string{rsh}, l.mpi.s.Args, hosts, 1, program)
	b, _ := json.Marshal(MPIStart{Gen: st.MPIGen, Argv: argv})
	if err := atomicfile.WriteFile(MPIStartFile(t.StateDir(), t.ID), b, 0o644, false); err != nil {
		act.Err = err
		r.act(act)
		return
	}
	act.Note = fmt.Sprintf("generation %d asked of the driver (%s), ranks %s on %v; %s%s",
		st.MPIGen, sh.Version, MPIWorkerID(nonce, 0), hosts, LaunchedMark, wire.ShellJoin(argv))
	r.act(act)
}

// mpiFresh: a mpi-elastic Trainer with no worker at all starts its next
// workers with mpirun.
func (r *elasticRound) mpiFresh() bool {
	return r.l.mpi != nil && len(r.st.Members) == 0 && len(r.st.Workers) == 0 &&
		!slices.ContainsFunc(r.t.Launched(), func(n string) bool { _, ok := r.st.Leaving[n]; return !ok })
}
