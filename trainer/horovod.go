package trainer

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// HorovodArgs is the horovodrun command of a Trainer. Why each flag:
//
//   - --host-discovery-script: horovodrun runs it through a shell every
//     second; it is `bftrainer hosts TRAINER`, each word quoted.
//   - -np and --min-np: the slots of MIN nodes; --max-np always explicit:
//     left out, Horovod's code treats it as unbounded (its docs say -np).
//   - --blacklist-cooldown-range: a host whose worker we killed is
//     blacklisted by Horovod, by default forever; with a cooldown it may
//     come back when the node returns to the pool.
func HorovodArgs(horovodrun, hosts []string, trainer string, minNodes, maxNodes, slots int, cooldown [2]int, argv []string) []string {
	args := slices.Clone(horovodrun)
	args = append(args,
		"-np", strconv.Itoa(minNodes*slots),
		"--min-np", strconv.Itoa(minNodes*slots),
		"--max-np", strconv.Itoa(maxNodes*slots),
		"--host-discovery-script", ShellJoin(append(slices.Clone(hosts), trainer)),
	)
	if cooldown[0] > 0 && cooldown[1] >= cooldown[0] {
		args = append(args, "--blacklist-cooldown-range", strconv.Itoa(cooldown[0]), strconv.Itoa(cooldown[1]))
	}
	return append(args, argv...)
}

// HostLines is a host file's content: "node:slots" per line, in order.
func HostLines(nodes []string, slots int) []byte {
	var b strings.Builder
	for _, n := range nodes {
		fmt.Fprintf(&b, "%s:%d\n", n, max(1, slots))
	}
	return []byte(b.String())
}

// writeHosts replaces the Trainer's host file atomically (a temporary
// file renamed over it: horovodrun reads it every second and must never
// see half of it); changed reports that it differed.
func (r *Runner) writeHosts(trainer string, content []byte) (changed bool, err error) {
	p := HostFile(r.StateDir, trainer)
	if old, err := os.ReadFile(p); err == nil && bytes.Equal(old, content) {
		return false, nil
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return false, err
	}
	// 0644: horovodrun runs as the Trainer's owner.
	return true, writeAtomic(p, content, 0o644)
}

// horovod applies one Elastic Horovod Trainer: the host file says which
// nodes it has (Horovod adds workers there by itself), the workers on
// removed nodes are killed by us (Horovod never kills them), and the
// driver runs on the controller while the Trainer has nodes.
func (r *Runner) horovod(ctx context.Context, w Want, tr *trainerRun, spec Spec) []Action {
	var acts []Action
	// The host file first: no new worker goes to a node being removed,
	// and the driver's first discovery (a failure there is fatal) finds it.
	if ch, err := r.writeHosts(w.ID, HostLines(w.Nodes, spec.Slots())); err != nil {
		return append(acts, Action{Trainer: w.ID, Op: "hosts", Err: err})
	} else if ch {
		acts = append(acts, Action{Trainer: w.ID, Op: "hosts", Note: fmt.Sprintf("%d host(s): %s", len(w.Nodes), strings.Join(w.Nodes, ","))})
	}
	if len(w.Nodes) == 0 && tr.Driver != nil {
		// Horovod dies when no host of the previous set remains; stop it
		// instead, and start it again (from the job's checkpoint) later.
		res := r.stop(ctx, r.Controller, w.ID, ControllerNode, "driver-stop")
		acts = append(acts, res.act)
		if res.ok {
			tr.Driver = nil
		}
	}
	acts = append(acts, r.stopNodes(ctx, w.ID, tr, removed(tr, w.Nodes))...)
	for _, n := range w.Nodes {
		if _, ok := tr.Nodes[n]; !ok {
			tr.Nodes[n] = &launched{Started: r.now().UTC()}
			acts = append(acts, Action{Trainer: w.ID, Node: n, Op: "add", Note: "listed for horovodrun's discovery"})
		}
	}
	if len(w.Nodes) > 0 && tr.Driver == nil {
		argv := HorovodArgs(r.Horovodrun, r.Hosts, w.ID, w.Min, w.Max, spec.Slots(), r.Cooldown, spec.Argv)
		workdir := spec.Workdir
		if workdir == "" {
			workdir = "/"
		}
		l := Launch{Trainer: w.ID, Node: ControllerNode, Owner: w.Owner, Argv: argv, Workdir: workdir,
			Env: r.env(spec, w.ID, nil), Token: NewToken(w.ID, ControllerNode).String()}
		res := r.start(ctx, r.Controller, l, "driver-start")
		acts = append(acts, res.act)
		if res.ok {
			tr.Driver = res.l
		}
	}
	return acts
}
