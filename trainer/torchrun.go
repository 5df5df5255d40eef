package trainer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bftrainer/bftrainer/trainer/wire"
)

// torchrunKind runs a TorchElastic Trainer: the same torchrun --nnodes=MIN:MAX
// on every node it holds, rendezvousing on a c10d store that runs on the
// controller. Adding a node starts an agent there; removing one kills that
// agent's whole process group (the others re-rendezvous without it).
var torchrunKind = Kind{
	Name:      Torchrun,
	CheckSpec: CheckSpec,
	New: func(decode func(any) error) (Launcher, error) {
		s := TorchrunSettings{
			Command:     []string{"/usr/bin/python3", "-m", "torch.distributed.run"},
			Python:      "/usr/bin/python3",
			MaxRestarts: 100,
			JoinTimeout: "600s",
			StorePorts:  "29400-29499",
		}
		if err := decode(&s); err != nil {
			return nil, err
		}
		return s.launcher()
	},
}

// TorchrunSettings are [trainer.launcher.torchrun].
type TorchrunSettings struct {
	Command     []string `toml:"command"`      // torchrun, e.g. /usr/bin/python3 -m torch.distributed.run
	Python      string   `toml:"python"`       // interpreter with torch: the store, the version check
	MaxRestarts int      `toml:"max_restarts"` // every scale-down costs each survivor one
	JoinTimeout string   `toml:"join_timeout"` // how long agents below MIN wait
	StorePorts  string   `toml:"store_ports"`  // LO-HI, ports for rendezvous stores on the controller
}

func (s TorchrunSettings) launcher() (*torchrun, error) {
	var errs []error
	if len(s.Command) == 0 {
		errs = append(errs, errors.New("command: empty"))
	}
	if s.MaxRestarts < 1 {
		errs = append(errs, errors.New("max_restarts: want ≥ 1"))
	}
	join, err := time.ParseDuration(s.JoinTimeout)
	if err != nil || join < time.Second {
		errs = append(errs, fmt.Errorf("join_timeout: %q, want a duration of at least 1s", s.JoinTimeout))
	}
	ports, err := ParsePorts(s.StorePorts)
	if err != nil {
		errs = append(errs, fmt.Errorf("store_ports: %w", err))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &torchrun{s: s, join: join, ports: ports}, nil
}

// ParsePorts reads "LO-HI".
func ParsePorts(s string) ([2]int, error) {
	lo, hi, ok := strings.Cut(s, "-")
	a, err1 := strconv.Atoi(strings.TrimSpace(lo))
	b, err2 := strconv.Atoi(strings.TrimSpace(hi))
	if !ok || err1 != nil || err2 != nil || a < 1 || b < a || b > 65535 {
		return [2]int{}, fmt.Errorf("%q: want LO-HI, 1 ≤ LO ≤ HI ≤ 65535", s)
	}
	return [2]int{a, b}, nil
}

type torchrun struct {
	s     TorchrunSettings
	join  time.Duration
	ports [2]int
}

// torchState is a torchrun Trainer's own state: its rendezvous id (fresh
// per store: a run id that finished stays closed on its store) and its
// store's port.
type torchState struct {
	RunID string `json:"run_id,omitempty"`
	Port  int    `json:"port,omitempty"`
}

// torchShared is what every torchrun Trainer shares: torch's version on
// the controller, detected once.
type torchShared struct {
	Torch string `json:"torch,omitempty"`
}

const storeRole = "store"

// TorchrunArgs is the torchrun command for one node of a Trainer: the
// same on every node but for the log directory. Why each flag:
//
//   - the underscore spellings (--nproc_per_node, --rdzv_backend, …): torch
//     1.13, Debian's, knows only those; 2.x accepts both spellings.
//   - --nnodes=MIN:MAX: elastic; a round forms with MIN..MAX agents.
//   - c10d rendezvous on a store that runs on the controller, and
//     is_host=false on every agent: no agent hosts the store, so losing any
//     node (the first one too) is an ordinary scale-down, never the end of
//     the job.
//   - no --rdzv_id: the rendezvous id goes in the environment
//     (rendezvousEnv), where only the owner and root can read it; ps
//     shows a command line to everyone.
//   - --max_restarts large: every scale-down costs each survivor one.
//   - last_call_timeout=1 (whole seconds only in 1.13) and
//     --monitor_interval=1: a scale-up costs ~5 s instead of ~37 s.
//   - join_timeout: how long agents below MIN wait before giving up.
//   - -r 1 -t 1 with --log_dir: the defaults (-r 0 -t 0) crash the 1.13
//     agent on Python 3.11 (Std.from_str iterates an IntFlag) right after
//     the first rendezvous — and the crash closes the rendezvous.
//   - --no_python when the program is not a Python script: torchrun then
//     runs it directly.
func TorchrunArgs(torchrun []string, minNodes, maxNodes, procs int, endpoint string, maxRestarts int, join time.Duration, logDir string, argv []string) []string {
	args := slices.Clone(torchrun)
	args = append(args,
		fmt.Sprintf("--nnodes=%d:%d", minNodes, maxNodes),
		fmt.Sprintf("--nproc_per_node=%d", max(1, procs)),
		"--rdzv_backend=c10d",
		"--rdzv_endpoint="+endpoint,
		fmt.Sprintf("--max_restarts=%d", maxRestarts),
		fmt.Sprintf("--rdzv_conf=is_host=false,last_call_timeout=1,join_timeout=%d", max(1, int(join/time.Second))),
		"--monitor_interval=1",
		"-r", "1", "-t", "1",
		"--log_dir="+logDir,
	)
	switch {
	case isPython(argv[0]) && len(argv) > 1 && argv[1] == "-m" && len(argv) > 2:
		// python -m module args: torchrun's own -m, with its interpreter.
		args = append(args, "-m")
		args = append(args, argv[2:]...)
	case isPython(argv[0]) && len(argv) > 1 && !strings.HasPrefix(argv[1], "-"):
		// python script args: torchrun runs the script with its own
		// interpreter (the workers use the agent's sys.executable).
		args = append(args, argv[1:]...)
	case strings.HasSuffix(argv[0], ".py"):
		args = append(args, argv...)
	default:
		args = append(args, "--no_python")
		args = append(args, argv...)
	}
	return args
}

// rendezvousEnv carries the rendezvous id to torchrun: its --rdzv_id
// flag is an argparse action that reads PET_RDZV_ID when the flag is
// absent (torch.distributed.argparse_util.env, 1.13 and 2.x).
const rendezvousEnv = "PET_RDZV_ID"

// newRendezvousID is a torchrun Trainer's rendezvous id: fresh per store
// (a run id that finished normally stays closed on its store) and
// unguessable (128 random bits after the name): the c10d store keeps a
// rendezvous under torch.rendezvous.<id>, so the id is all that stands
// between a client that reaches the store and the rendezvous' keys.
func newRendezvousID(trainer string) string { return trainer + "-" + newRunSecret()[:32] }

// privateLogDir wraps a torchrun command so that its --log_dir is its
// owner's alone (0700) before torchrun starts: torchrun names the run's
// directory in it <rdzv_id>_<random> (torch's LocalElasticAgent), so a
// log directory anyone may list — created with the owner's umask, 0755
// as a rule, in a workdir others may enter — would hand the rendezvous id
// to every user who can reach the workdir. Only that directory changes:
// the agent and its workers keep the owner's umask. The shell execs
// torchrun, so the agent's command line is torchrun's own.
func privateLogDir(logDir string, argv []string) []string {
	return append([]string{"/bin/sh", "-c", `mkdir -p -- "$1" && chmod 0700 -- "$1" && shift && exec "$@"`, "bftrainer-torchrun", logDir}, argv...)
}

var pythonName = regexp.MustCompile(`^python(\d+(\.\d+)*)?$`)

func isPython(p string) bool { return pythonName.MatchString(filepath.Base(p)) }

// storeCode is the standalone c10d store: a TCPStore server that holds
// the rendezvous state of the Trainer's agents, none of which hosts it.
// It listens on every address whatever host it is given (1.13; 2.x's
// too) and has no authentication: the rendezvous id, unguessable and in
// the environment only, is all that separates Trainers. What stays open
// is in docs/trainers.md, "Who can reach a Trainer".
const storeCode = `import datetime, signal, sys
from torch.distributed import TCPStore
s = TCPStore(sys.argv[1], int(sys.argv[2]), None, True, datetime.timedelta(seconds=300), wait_for_workers=False)
print("store ready", flush=True)
while True:
    signal.pause()
`

// python is the interpreter with torch: the configured one, else the
// torchrun command's interpreter.
func (l *torchrun) python() string {
	if l.s.Python != "" {
		return l.s.Python
	}
	if len(l.s.Command) > 0 && isPython(l.s.Command[0]) {
		return l.s.Command[0]
	}
	return "python3"
}

// torchVersion returns torch.__version__ of the configured interpreter,
// detected once (and recorded in the runner's state).
func (l *torchrun) torchVersion(ctx context.Context, t *Run) string {
	var sh torchShared
	t.Shared(&sh)
	if sh.Torch != "" {
		return sh.Torch
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, l.python(), "-c", "import torch, sys; sys.stdout.write(torch.__version__)").Output()
	if err != nil {
		t.Logf("torch version: %v", err)
		return ""
	}
	sh.Torch = strings.TrimSpace(string(out))
	t.SetShared(sh)
	return sh.Torch
}

// Apply stops the agents of removed nodes (the others re-rendezvous
// without them), keeps a store, and starts an agent on each new node.
func (l *torchrun) Apply(ctx context.Context, t *Run) []Action {
	spec, err := DecodeSpec(t.Want.Spec)
	if err != nil {
		return []Action{{Trainer: t.ID, Op: "start", Err: err}}
	}
	acts := t.StopNodes(ctx, t.Removed())
	if len(t.Want.Nodes) == 0 {
		return acts // the store stays: the same run resumes when nodes come back
	}
	var st torchState
	t.LoadState(&st)
	if t.Role(storeRole) == nil {
		if len(t.Rec.Nodes) > 0 {
			// Agents of a store that is gone cannot rendezvous again:
			// restart them with the new one.
			acts = append(acts, t.StopNodes(ctx, t.Launched())...)
			if len(t.Rec.Nodes) > 0 {
				return acts
			}
		}
		a := l.startStore(ctx, t, &st)
		acts = append(acts, a)
		if a.Err != nil {
			return acts
		}
		t.SaveState(st)
		t.Save() // a store we started and forgot would run forever
	}
	endpoint := net.JoinHostPort(t.Address(), strconv.Itoa(st.Port))
	return append(acts, t.StartNodes(ctx, "start", t.Added(), func(n string) wire.Launch {
		env := t.Env(spec, map[string]string{"LOGLEVEL": "INFO", "OMP_NUM_THREADS": "1"})
		env["NODE_TAG"] = n
		env[rendezvousEnv] = st.RunID // the environment, never argv: its owner's and root's alone
		logDir := filepath.Join("bftrainer-logs", t.ID, n)
		argv := TorchrunArgs(l.s.Command, t.Want.Min, t.Want.Max, spec.Slots(), endpoint, l.s.MaxRestarts, l.join, logDir, spec.Argv)
		return wire.Launch{Argv: privateLogDir(logDir, argv), Env: env, Workdir: spec.Workdir}
	})...)
}

// Stop stops the agents, then the store: it outlives them.
func (l *torchrun) Stop(ctx context.Context, t *Run) ([]Action, bool) {
	return t.StopNodesThenRole(ctx, storeRole, "store-stop")
}

// Ended: a store that ended takes the rendezvous with it (the next round
// starts a new one, with a fresh rendezvous id, and restarts the agents);
// the Trainer ended once its agents all did.
func (l *torchrun) Ended(t *Run, roles map[string]Seen) (*Exit, []Action) {
	acts := t.RoleEnded(roles, storeRole, "rendezvous store ended; a new one is started")
	return NodesEnded(t), acts
}

// startStore starts the Trainer's rendezvous store on the controller, as
// the owner, on a free port, and waits until it accepts connections:
// agents started before that fail at once (is_host=false).
func (l *torchrun) startStore(ctx context.Context, t *Run, st *torchState) Action {
	begin := time.Now()
	act := Action{Trainer: t.ID, Op: "store-start"}
	version := l.torchVersion(ctx, t)
	used := map[int]bool{}
	for _, p := range t.Peers() {
		var ps torchState
		if len(p.State) > 0 && json.Unmarshal(p.State, &ps) == nil && ps.Port > 0 && p.Roles[storeRole] != nil {
			used[ps.Port] = true
		}
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := freePort(l.ports, used)
		if err != nil {
			act.Err, act.Took = err, time.Since(begin)
			return act
		}
		used[port] = true
		a, ok := t.StartRole(ctx, storeRole, "store-start", wire.Launch{Workdir: "/",
			Argv: []string{l.python(), "-c", storeCode, t.Address(), strconv.Itoa(port)},
			Env:  map[string]string{"OMP_NUM_THREADS": "1"}})
		if !ok {
			act.Err, act.Took = a.Err, time.Since(begin)
			return act
		}
		tok := t.Role(storeRole).Token
		if err := waitStore(ctx, t, tok, net.JoinHostPort(t.Address(), strconv.Itoa(port))); err != nil {
			lastErr = err
			t.StopRole(ctx, storeRole, "store-stop")
			continue // most likely the port was taken meanwhile
		}
		st.Port, st.RunID = port, newRendezvousID(t.ID)
		act.Took = time.Since(begin)
		// The note names the store, never the rendezvous id (notes are
		// logged and kept in the history).
		act.Note = fmt.Sprintf("c10d store on %s, torch %s", net.JoinHostPort(t.Address(), strconv.Itoa(port)), version)
		return act
	}
	act.Err, act.Took = fmt.Errorf("rendezvous store: %w", lastErr), time.Since(begin)
	return act
}

// waitStore waits until the store accepts connections, or ended.
func waitStore(ctx context.Context, t *Run, token, addr string) error {
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; ; i++ {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("store on %s not ready after 60 s: %w", addr, err)
		}
		if i%10 == 9 { // every second: did it die?
			if sts, lerr := t.List(ctx, wire.ControllerNode); lerr == nil {
				for _, s := range sts {
					if s.Trainer == t.ID && s.Token == token && s.State != wire.StateRunning {
						return fmt.Errorf("store on %s ended (%s)", addr, s.State)
					}
				}
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// freePort finds a port in the range nobody listens on now.
func freePort(rng [2]int, used map[int]bool) (int, error) {
	lo, hi := rng[0], rng[1]
	if lo <= 0 || hi < lo {
		return 0, errors.New("no port range for rendezvous stores")
	}
	for p := lo; p <= hi; p++ {
		if used[p] {
			continue
		}
		l, err := net.Listen("tcp", ":"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		l.Close()
		return p, nil
	}
	return 0, fmt.Errorf("no free port in %d-%d for a rendezvous store", lo, hi)
}
