package trainer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bftrainer/bftrainer/internal/atomicfile"
	"github.com/bftrainer/bftrainer/trainer/wire"
)

// mpiKind runs an MPI Trainer: the site's mpirun (Open MPI) or mpiexec
// (MPICH's Hydra) on the controller as the driver, over the Trainer's
// nodes, with bftrainer as its remote shell (mpiland.go) so that every
// daemon and rank lands in the run's cgroup on its node. Every change of
// the nodes restarts the MPI job on the new host list (the restart path):
// a grow or shrink first tells the ranks (SIGUSR1 through mpirun) to
// checkpoint at a step boundary and exit; a reclaim stops the survivors
// at once, and they resume from the last checkpoint.
var mpiKind = Kind{
	Name:      MPI,
	CheckSpec: CheckSpec,
	New: func(decode func(any) error) (Launcher, error) {
		s := MPISettings{Flavor: "auto", SSH: []string{"ssh"}, Drain: "60s", ExecWait: "30s"}
		if err := decode(&s); err != nil {
			return nil, err
		}
		return s.launcher()
	},
}

// MPI flavours: how the launcher's command line is spelled.
const (
	FlavorAuto    = "auto"
	FlavorOpenMPI = "openmpi" // mpirun / orterun of Open MPI 4.x
	FlavorHydra   = "hydra"   // mpiexec of MPICH (Hydra)
)

// MPISettings are [trainer.launcher.mpi].
type MPISettings struct {
	// Command is the site's launcher; empty: the first of mpirun,
	// mpiexec found on the controller's PATH when a Trainer starts.
	Command []string `toml:"command"`
	// Flavor is auto (from the command's --version), openmpi or hydra.
	Flavor string `toml:"flavor"`
	// Args are extra arguments, after bftrainer's, before the program.
	Args []string `toml:"args"`
	// SSH is the owner's ssh to the nodes, which the remote shell runs
	// (e.g. ["ssh", "-F", "/etc/bftrainer/ssh_config"]); [] when the
	// nodes are this machine (transport local: tests, the bench).
	SSH []string `toml:"ssh"`
	// Drain bounds how long a grow or shrink waits for the ranks to
	// checkpoint and exit before they are killed.
	Drain string `toml:"drain"`
	// ExecWait bounds how long a daemon's mpi-exec waits for its
	// node's landing to listen.
	ExecWait string `toml:"exec_wait"`
}

func (s MPISettings) launcher() (*mpiLauncher, error) {
	var errs []error
	switch s.Flavor {
	case FlavorAuto, FlavorOpenMPI, FlavorHydra:
	default:
		errs = append(errs, fmt.Errorf("flavor: %q, want %s, %s or %s", s.Flavor, FlavorAuto, FlavorOpenMPI, FlavorHydra))
	}
	drain, err := time.ParseDuration(s.Drain)
	if err != nil || drain < 0 {
		errs = append(errs, fmt.Errorf("drain: %q, want a duration", s.Drain))
	}
	wait, err := time.ParseDuration(s.ExecWait)
	if err != nil || wait < time.Second {
		errs = append(errs, fmt.Errorf("exec_wait: %q, want a duration of at least 1s", s.ExecWait))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &mpiLauncher{s: s, drain: drain, wait: wait}, nil
}

type mpiLauncher struct {
	s     MPISettings
	drain time.Duration
	wait  time.Duration
}

// mpiState is an MPI Trainer's own state: the hosts of the MPI job that
// runs (ranks in this order, slots each), its generation (one per job
// started), the command line it runs, and when the last change began.
type mpiState struct {
	Hosts   []string `json:"hosts,omitempty"`
	Gen     int      `json:"gen"`
	Command []string `json:"command,omitempty"`
}

// mpiShared is what every MPI Trainer shares: the launcher found and its
// flavour.
type mpiShared struct {
	Command []string `json:"command,omitempty"`
	Flavor  string   `json:"flavor,omitempty"`
	Version string   `json:"version,omitempty"`
}

// MPIProgram finds the site's launcher: the configured command, or the
// first of mpirun, mpiexec on PATH; and its flavour (the configured one,
// or read from its --version: "Open MPI" or "HYDRA").
func MPIProgram(ctx context.Context, command []string, flavor string) (cmd []string, fl, version string, err error) {
	cmd = slices.Clone(command)
	if len(cmd) == 0 {
		for _, p := range []string{"mpirun", "mpiexec"} {
			if path, err := exec.LookPath(p); err == nil {
				cmd = []string{path}
				break
			}
		}
		if len(cmd) == 0 {
			return nil, "", "", errors.New("no mpirun or mpiexec on PATH (install Open MPI or MPICH, or set trainer.launcher.mpi.command)")
		}
	}
	// The driver runs with the node agent's PATH: give it the path found here.
	path, err := exec.LookPath(cmd[0])
	if err != nil {
		return nil, "", "", fmt.Errorf("mpi launcher: %w", err)
	}
	cmd[0] = path
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, verr := exec.CommandContext(ctx, cmd[0], append(cmd[1:], "--version")...).CombinedOutput()
	text := string(out)
	version = strings.TrimSpace(strings.SplitN(text, "\n", 2)[0])
	if flavor == "" || flavor == FlavorAuto {
		switch {
		case strings.Contains(text, "Open MPI") || strings.Contains(text, "OpenRTE"):
			flavor = FlavorOpenMPI
		case strings.Contains(text, "HYDRA"):
			flavor = FlavorHydra
			for _, l := range strings.Split(text, "\n") {
				if v, ok := strings.CutPrefix(strings.TrimSpace(l), "Version:"); ok {
					version = "HYDRA " + strings.TrimSpace(v)
					break
				}
			}
		default:
			return nil, "", "", fmt.Errorf("%s --version: neither Open MPI nor MPICH's Hydra (%v): set trainer.launcher.mpi.flavor", cmd[0], verr)
		}
	}
	return cmd, flavor, version, nil
}

// MPIArgs is the site launcher's command line for a Trainer on hosts,
// slots ranks each, rank r on hosts[r/slots]. Why each flag:
//
//   - Open MPI: plm_rsh_agent is bftrainer's remote shell (rsh, one path:
//     Open MPI splits the value on spaces); plm_rsh_no_tree_spawn: every
//     orted is started from the controller, never from another node
//     (whose remote shell would need the owner's ssh between nodes);
//     --host H:S,… with -np and --map-by slot: ranks fill a host's slots
//     in the order of the hosts.
//   - Hydra: -launcher ssh -launcher-exec rsh (Hydra calls it as ssh:
//     "-x HOST COMMAND"); -genvnone: the ranks keep their landing's
//     environment (the node's run token first, the Trainer's variables)
//     instead of mpiexec's, the controller's; -hosts H:S,… and -n: the
//     same order.
func MPIArgs(flavor string, command, rsh []string, extra []string, hosts []string, slots int, argv []string) []string {
	slots = max(1, slots)
	hs := make([]string, len(hosts))
	for i, h := range hosts {
		hs[i] = h + ":" + strconv.Itoa(slots)
	}
	n := strconv.Itoa(len(hosts) * slots)
	args := slices.Clone(command)
	switch flavor {
	case FlavorHydra:
		args = append(args, "-launcher", "ssh", "-launcher-exec", strings.Join(rsh, " "), "-genvnone",
			"-hosts", strings.Join(hs, ","), "-n", n)
	default:
		args = append(args, "--mca", "plm_rsh_agent", strings.Join(rsh, " "), "--mca", "plm_rsh_no_tree_spawn", "1",
			"--host", strings.Join(hs, ","), "-np", n, "--map-by", "slot")
	}
	args = append(args, extra...)
	return append(args, argv...)
}

// mpiDir is where the runner keeps MPI files (the remote-shell script,
// stop files): below its state directory, 0755, root's.
func mpiDir(stateDir string) string { return filepath.Join(stateDir, "mpi") }

// MPIStopFile is the file a Trainer's driver polls: the generation of
// the job to stop.
func MPIStopFile(stateDir, trainer string) string {
	return filepath.Join(mpiDir(stateDir), trainer+".stop")
}

// rshScript writes the remote-shell script (Hydra's -launcher-exec takes
// one program): it runs `bftrainer mpi-rsh` with mpirun's arguments.
func rshScript(stateDir string, self string) (string, error) {
	p := filepath.Join(mpiDir(stateDir), "rsh")
	content := []byte("#!/bin/sh\n# bftrainer's remote shell for MPI Trainers (trainer/mpiland.go)\nexec " + wire.ShellQuote(self) + " mpi-rsh \"$@\"\n")
	if old, err := os.ReadFile(p); err == nil && string(old) == string(content) {
		return p, nil
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return "", err
	}
	return p, atomicfile.WriteFile(p, content, 0o755, false)
}

const mpiLandOp = "land"

// Apply keeps one MPI job on the wanted nodes: nothing while it runs on
// exactly them; otherwise the job is stopped — on a grow or shrink the
// ranks are told first and given the drain bound to checkpoint and
// exit, on a reclaim (a node the scheduler took) at once — every landing
// is stopped (its cgroup with every daemon and rank in it), and the job
// starts again on the wanted nodes.
func (l *mpiLauncher) Apply(ctx context.Context, t *Run) []Action {
	spec, err := DecodeSpec(t.Want.Spec)
	if err != nil {
		return []Action{{Trainer: t.ID, Op: "start", Err: err}}
	}
	var st mpiState
	t.LoadState(&st)
	want := t.Want.Nodes
	running := t.Role(driverRole) != nil
	if running && slices.Equal(st.Hosts, want) && len(t.Added()) == 0 && len(t.Removed()) == 0 {
		return nil
	}
	begin := time.Now()
	var acts []Action
	from := len(st.Hosts)
	direction := mpiDirection(st.Hosts, want, t.Want.Taken, t.Rec.Nodes)
	if running {
		if direction != Reclaim {
			acts = append(acts, l.drainJob(ctx, t, st.Gen))
		}
		a, ok := t.StopRole(ctx, driverRole, "driver-stop")
		acts = append(acts, a)
		if !ok {
			return acts
		}
	}
	acts = append(acts, t.StopNodes(ctx, t.Launched())...)
	if len(t.Rec.Nodes) > 0 || len(want) == 0 {
		st.Hosts = nil
		t.SaveState(st)
		return acts // a node that did not answer: again next round
	}
	st.Gen++
	acts = append(acts, t.StartNodes(ctx, mpiLandOp, want, func(n string) wire.Launch {
		argv := append(t.nodeSelf(), "mpi-land", t.ID, n)
		return wire.Launch{Argv: argv, Env: mpiEnv(t, spec, st.Gen), Workdir: spec.Workdir}
	})...)
	var hosts []string
	for _, n := range want {
		if _, ok := t.Rec.Nodes[n]; ok {
			hosts = append(hosts, n)
		}
	}
	if len(hosts) == 0 {
		return acts
	}
	a := l.startDriver(ctx, t, spec, &st, hosts)
	acts = append(acts, a)
	if a.Err == nil && direction != "" {
		took := time.Since(begin)
		acts = append(acts, Action{Trainer: t.ID, Op: "rescale", Took: took,
			Note:     fmt.Sprintf("MPI job restarted: %d → %d node(s) (%s)", from, len(hosts), direction),
			Measured: &Measured{Direction: direction, From: from * spec.Slots(), To: len(hosts) * spec.Slots(), Seconds: took.Seconds()}})
	}
	return acts
}

// mpiDirection names the change from the job's hosts to want: "" when
// no job ran, Reclaim when a host of the job is gone (its landing killed
// by a prolog) or taken by the scheduler, else Up or Down.
func mpiDirection(hosts, want, taken []string, launched map[string]*Launched) string {
	if len(hosts) == 0 {
		return ""
	}
	for _, n := range hosts {
		if launched[n] == nil || (!slices.Contains(want, n) && slices.Contains(taken, n)) {
			return Reclaim
		}
	}
	if len(want) < len(hosts) {
		return Down
	}
	return Up
}

// nodeSelf is bftrainer's command on the nodes.
func (t *Run) nodeSelf() []string {
	if t.s.r.NodeBin != "" {
		return []string{t.s.r.NodeBin}
	}
	return []string{"bftrainer"}
}

// drainJob tells the ranks to checkpoint and exit (the stop file the
// driver polls) and waits, at most the drain bound, for the driver to
// end.
func (l *mpiLauncher) drainJob(ctx context.Context, t *Run, gen int) Action {
	begin := time.Now()
	act := Action{Trainer: t.ID, Op: "drain"}
	p := MPIStopFile(t.StateDir(), t.ID)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		act.Err = err
		return act
	}
	if err := atomicfile.WriteFile(p, []byte(strconv.Itoa(gen)+"\n"), 0o644, false); err != nil {
		act.Err = err
		return act
	}
	tok := t.Role(driverRole).Token
	deadline := time.Now().Add(l.drain)
	for {
		ended := true
		if sts, err := t.List(ctx, wire.ControllerNode); err == nil {
			for _, s := range sts {
				if s.Trainer == t.ID && s.Token == tok && s.State == wire.StateRunning {
					ended = false
				}
			}
		}
		if ended {
			act.Took = time.Since(begin)
			act.Note = fmt.Sprintf("the ranks checkpointed and exited (generation %d)", gen)
			return act
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			act.Took = time.Since(begin)
			act.Note = fmt.Sprintf("the ranks did not exit within %v: killed", l.drain)
			return act
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// MPIJobEnv names the MPI job in the ranks' environment: the Trainer's
// run and the job's generation, new on every restart (a program keys
// per-job files on it: a torch FileStore, say).
const MPIJobEnv = "BFTRAINER_MPI_JOB"

// mpiEnv is the environment of the driver and of the landings (so of
// every daemon and rank, whichever of the two the MPI passes on).
func mpiEnv(t *Run, spec Spec, gen int) map[string]string {
	env := t.Env(spec, map[string]string{"OMP_NUM_THREADS": "1"})
	env[MPIJobEnv] = fmt.Sprintf("%s-%d", t.Rec.Run, gen)
	return env
}

// startDriver starts mpirun (in bftrainer's mpi-driver) on the
// controller over hosts.
func (l *mpiLauncher) startDriver(ctx context.Context, t *Run, spec Spec, st *mpiState, hosts []string) Action {
	var sh mpiShared
	t.Shared(&sh)
	if len(sh.Command) == 0 || sh.Flavor == "" {
		cmd, fl, ver, err := MPIProgram(ctx, l.s.Command, l.s.Flavor)
		if err != nil {
			return Action{Trainer: t.ID, Op: "driver-start", Err: err}
		}
		sh = mpiShared{Command: cmd, Flavor: fl, Version: ver}
		t.SetShared(sh)
	}
	self := t.Self()
	if len(self) == 0 {
		return Action{Trainer: t.ID, Op: "driver-start", Err: errors.New("no bftrainer command on the controller (the runner's Self)")}
	}
	rsh, err := rshScript(t.StateDir(), self[0])
	if err != nil {
		return Action{Trainer: t.ID, Op: "driver-start", Err: fmt.Errorf("remote shell: %w", err)}
	}
	argv := MPIArgs(sh.Flavor, sh.Command, []string{rsh}, l.s.Args, hosts, spec.Slots(), spec.Argv)
	sshJSON, _ := json.Marshal(append([]string{}, l.s.SSH...))
	remoteJSON, _ := json.Marshal(t.nodeSelf())
	env := mpiEnv(t, spec, st.Gen)
	env[MPISSHEnv], env[MPIRemoteEnv] = string(sshJSON), string(remoteJSON)
	env[MPIExecWaitEnv] = l.wait.String()
	driver := append(slices.Clone(self), "mpi-driver", MPIStopFile(t.StateDir(), t.ID), strconv.Itoa(st.Gen), "--")
	driver = append(driver, argv...)
	workdir := spec.Workdir
	if workdir == "" {
		workdir = "/"
	}
	a, ok := t.StartRole(ctx, driverRole, "driver-start", wire.Launch{Argv: driver, Env: env, Workdir: workdir})
	if ok {
		st.Hosts, st.Command = hosts, argv
		a.Note = fmt.Sprintf("%s (%s, generation %d); %s%s", a.Note, sh.Version, st.Gen, LaunchedMark, wire.ShellJoin(argv))
	}
	t.SaveState(*st)
	return a
}

// Stop stops the driver (mpirun ends its daemons), then every landing
// (their cgroups, with whatever was left in them).
func (l *mpiLauncher) Stop(ctx context.Context, t *Run) ([]Action, bool) {
	var acts []Action
	if t.Role(driverRole) != nil {
		a, ok := t.StopRole(ctx, driverRole, "driver-stop")
		acts = append(acts, a)
		if !ok {
			return acts, false
		}
	}
	os.Remove(MPIStopFile(t.StateDir(), t.ID))
	a, done := t.StopAll(ctx)
	return append(acts, a...), done
}

// Ended: mpirun's exit is the Trainer's (the ranks exited: 0 finished);
// a driver that vanished (killed with the controller's processes) is
// started again with the nodes' landings.
func (l *mpiLauncher) Ended(t *Run, roles map[string]Seen) (*Exit, []Action) {
	s, ok := roles[driverRole]
	switch {
	case !ok || !s.Known:
	case s.Gone:
		delete(t.Rec.Roles, driverRole)
		return nil, []Action{{Trainer: t.ID, Op: "gone", Note: "mpirun vanished without an exit; the MPI job is started again"}}
	case s.Exited && s.Code != 0 && l.lostHost(t):
		// A reclaim killed a node's daemon and mpirun aborted the job:
		// not the Trainer's failure; the next round restarts it.
		delete(t.Rec.Roles, driverRole)
		return nil, []Action{{Trainer: t.ID, Op: "gone", Note: fmt.Sprintf("mpirun exited %d after a node of the job was reclaimed; the MPI job is started again", s.Code)}}
	case s.Exited:
		st := Failed
		if s.Code == 0 {
			st = Finished
		}
		return &Exit{Trainer: t.ID, Status: st, Note: fmt.Sprintf("mpirun exited %d", s.Code)}, nil
	}
	return nil, nil
}

// lostHost reports a host of the running job whose landing is gone.
func (l *mpiLauncher) lostHost(t *Run) bool {
	var st mpiState
	t.LoadState(&st)
	for _, n := range st.Hosts {
		if t.Rec.Nodes[n] == nil {
			return true
		}
	}
	return false
}
