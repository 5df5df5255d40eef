package trainer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

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
//   - --rdzv_id: fresh per store (a run id that finished normally stays
//     closed on its store).
//   - --max_restarts large: every scale-down costs each survivor one.
//   - last_call_timeout=1 (whole seconds only in 1.13) and
//     --monitor_interval=1: a scale-up costs ~5 s instead of ~37 s.
//   - join_timeout: how long agents below MIN wait before giving up.
//   - -r 1 -t 1 with --log_dir: the defaults (-r 0 -t 0) crash the 1.13
//     agent on Python 3.11 (Std.from_str iterates an IntFlag) right after
//     the first rendezvous — and the crash closes the rendezvous.
//   - --no_python when the program is not a Python script: torchrun then
//     runs it directly.
func TorchrunArgs(torchrun []string, minNodes, maxNodes, procs int, endpoint, runID string, maxRestarts int, join time.Duration, logDir string, argv []string) []string {
	args := slices.Clone(torchrun)
	args = append(args,
		fmt.Sprintf("--nnodes=%d:%d", minNodes, maxNodes),
		fmt.Sprintf("--nproc_per_node=%d", max(1, procs)),
		"--rdzv_backend=c10d",
		"--rdzv_endpoint="+endpoint,
		"--rdzv_id="+runID,
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

var pythonName = regexp.MustCompile(`^python(\d+(\.\d+)*)?$`)

func isPython(p string) bool { return pythonName.MatchString(filepath.Base(p)) }

// storeCode is the standalone c10d store: a TCPStore server that holds
// the rendezvous state of the Trainer's agents, none of which hosts it.
// It listens on every address whatever host it is given (1.13) and has no
// authentication: the rendezvous id is all that separates Trainers.
const storeCode = `import datetime, signal, sys
from torch.distributed import TCPStore
s = TCPStore(sys.argv[1], int(sys.argv[2]), None, True, datetime.timedelta(seconds=300), wait_for_workers=False)
print("store ready", flush=True)
while True:
    signal.pause()
`

// torchVersion returns torch.__version__ of the configured interpreter,
// detected once per state file (and recorded there).
func (r *Runner) torchVersion(ctx context.Context, st *runState) string {
	if st.Torch != "" {
		return st.Torch
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, r.python(), "-c", "import torch, sys; sys.stdout.write(torch.__version__)").Output()
	if err != nil {
		r.logf("torch version: %v", err)
		return ""
	}
	st.Torch = strings.TrimSpace(string(out))
	return st.Torch
}

// python is the interpreter with torch: the configured one, else the
// torchrun command's interpreter.
func (r *Runner) python() string {
	if r.Python != "" {
		return r.Python
	}
	if len(r.Torchrun) > 0 && isPython(r.Torchrun[0]) {
		return r.Torchrun[0]
	}
	return "python3"
}

// torchrun applies one torchrun Trainer: stop the agents of removed
// nodes (the others re-rendezvous without them), keep a store, start an
// agent on each new node.
func (r *Runner) torchrun(ctx context.Context, st *runState, w Want, tr *trainerRun, spec Spec, save func()) []Action {
	acts := r.stopNodes(ctx, w.ID, tr, removed(tr, w.Nodes))
	if len(w.Nodes) == 0 {
		return acts // the store stays: the same run resumes when nodes come back
	}
	if tr.Store == nil {
		if len(tr.Nodes) > 0 {
			// Agents of a store that is gone cannot rendezvous again:
			// restart them with the new one.
			acts = append(acts, r.stopNodes(ctx, w.ID, tr, slices.Sorted(maps.Keys(tr.Nodes)))...)
			if len(tr.Nodes) > 0 {
				return acts
			}
		}
		a := r.startStore(ctx, st, w, tr)
		acts = append(acts, a)
		if a.Err != nil {
			return acts
		}
		save() // a store we started and forgot would run forever
	}
	var starts []string
	for _, n := range w.Nodes {
		if _, ok := tr.Nodes[n]; !ok {
			starts = append(starts, n)
		}
	}
	endpoint := net.JoinHostPort(r.Address, strconv.Itoa(tr.Store.Port))
	for _, res := range r.each(starts, func(n string) nodeResult {
		env := r.env(spec, w.ID, map[string]string{"LOGLEVEL": "INFO", "OMP_NUM_THREADS": "1"})
		env["NODE_TAG"] = n
		argv := TorchrunArgs(r.Torchrun, w.Min, w.Max, spec.Slots(), endpoint, tr.RunID, r.MaxRestarts, r.JoinTimeout,
			filepath.Join("bftrainer-logs", w.ID, n), spec.Argv)
		l := Launch{Trainer: w.ID, Node: n, Owner: w.Owner, Argv: argv, Env: env, Workdir: spec.Workdir,
			Token: NewToken(w.ID, n).String()}
		return r.start(ctx, r.Nodes, l, "start")
	}) {
		acts = append(acts, res.act)
		if res.ok {
			tr.Nodes[res.node] = res.l
		}
	}
	return acts
}

// startStore starts the Trainer's rendezvous store on the controller, as
// the owner, on a free port, and waits until it accepts connections:
// agents started before that fail at once (is_host=false).
func (r *Runner) startStore(ctx context.Context, st *runState, w Want, tr *trainerRun) Action {
	begin := time.Now()
	act := Action{Trainer: w.ID, Op: "store-start"}
	version := r.torchVersion(ctx, st)
	used := map[int]bool{}
	for _, t := range st.Trainers {
		if t.Store != nil {
			used[t.Store.Port] = true
		}
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := freePort(r.StorePorts, used)
		if err != nil {
			act.Err, act.Took = err, time.Since(begin)
			return act
		}
		used[port] = true
		tok := NewToken(w.ID, ControllerNode)
		l := Launch{Trainer: w.ID, Node: ControllerNode, Owner: w.Owner, Workdir: "/",
			Argv:  []string{r.python(), "-c", storeCode, r.Address, strconv.Itoa(port)},
			Env:   map[string]string{"OMP_NUM_THREADS": "1"},
			Token: tok.String()}
		res := r.start(ctx, r.Controller, l, "store-start")
		if !res.ok {
			act.Err, act.Took = res.act.Err, time.Since(begin)
			return act
		}
		if err := r.waitStore(ctx, w.ID, res.l.Token, port); err != nil {
			lastErr = err
			r.stop(ctx, r.Controller, w.ID, ControllerNode, "store-stop")
			continue // most likely the port was taken meanwhile
		}
		res.l.Port = port
		tr.Store = res.l
		tr.RunID = w.ID + "-" + tok.Nonce
		act.Took = time.Since(begin)
		act.Note = fmt.Sprintf("c10d store on %s, rendezvous id %s, torch %s", net.JoinHostPort(r.Address, strconv.Itoa(port)), tr.RunID, version)
		return act
	}
	act.Err, act.Took = fmt.Errorf("rendezvous store: %w", lastErr), time.Since(begin)
	return act
}

// waitStore waits until the store accepts connections, or ended.
func (r *Runner) waitStore(ctx context.Context, id, token string, port int) error {
	addr := net.JoinHostPort(r.Address, strconv.Itoa(port))
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
			out, lerr := r.Controller.Agent(ctx, ControllerNode, []string{"list", ControllerNode}, nil)
			var sts []Status
			if lerr == nil && json.Unmarshal(out, &sts) == nil {
				for _, s := range sts {
					if s.Trainer == id && s.Token == token && s.State != StateRunning {
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
