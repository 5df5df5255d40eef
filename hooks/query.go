package hooks

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"

	"github.com/bftrainer/bftrainer/names"
)

// NodeStates runs the scheduler's own node listing and returns each node's
// state, with "idle" meaning exactly idle: usable now, no job, no epilog
// still running, not drained, responding. It is for the reconciler and
// sync, never for a hook's hot path.
type NodeStates struct {
	Scheduler string // Slurm, LSF or PBS
	Command   string // sinfo, bhosts or pbsnodes; absolute path recommended
}

// States returns the states of the given nodes (all nodes when nodes is
// empty).
func (q NodeStates) States(ctx context.Context, nodes []string) (map[string]string, error) {
	var args []string
	cmd := q.Command
	switch q.Scheduler {
	case Slurm:
		if cmd == "" {
			cmd = "sinfo"
		}
		args = []string{"-h", "-N", "-o", "%N %t"}
		if len(nodes) > 0 {
			args = append(args, "-n", names.CompressHostlist(nodes))
		}
	case LSF:
		if cmd == "" {
			cmd = "bhosts"
		}
		args = []string{"-w"}
	case PBS:
		if cmd == "" {
			cmd = "pbsnodes"
		}
		args = []string{"-a"}
	default:
		return nil, fmt.Errorf("node states: unknown scheduler %q", q.Scheduler)
	}
	out, err := exec.CommandContext(ctx, cmd, args...).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok && len(ee.Stderr) > 0 {
			return nil, fmt.Errorf("%s: %w: %s", cmd, err, strings.TrimSpace(string(ee.Stderr)))
		}
		return nil, fmt.Errorf("%s: %w", cmd, err)
	}
	var states map[string]string
	switch q.Scheduler {
	case Slurm:
		states, err = ParseSinfo(out)
	case LSF:
		states, err = ParseBhosts(out)
	default:
		states, err = ParsePbsnodes(out)
	}
	if err != nil {
		return nil, err
	}
	if len(nodes) > 0 {
		want := make(map[string]bool, len(nodes))
		for _, n := range nodes {
			want[n] = true
		}
		for n := range states {
			if !want[n] {
				delete(states, n)
			}
		}
	}
	return states, nil
}

// ParseSinfo reads `sinfo -h -N -o '%N %t'`. sinfo -N prints a node once
// per partition; a node in any non-idle state in any line is not idle.
// Only the exact compact state "idle" counts: "idle*" (not responding),
// "idle~" (powered off), "idle#" (powering up) and "comp" (epilog
// running) do not.
func ParseSinfo(out []byte) (map[string]string, error) {
	states := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for line := 1; sc.Scan(); line++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) != 2 {
			return nil, fmt.Errorf("sinfo line %d: want \"NODE STATE\", got %q", line, sc.Text())
		}
		if err := names.ValidateNode(f[0]); err != nil {
			return nil, fmt.Errorf("sinfo line %d: %w", line, err)
		}
		if prev, ok := states[f[0]]; ok && prev != "idle" {
			continue
		}
		states[f[0]] = f[1]
	}
	return states, sc.Err()
}

// ParseBhosts reads `bhosts -w`: a host is idle when its status is "ok"
// and it runs no job (NJOBS 0). From IBM's documentation; untested here
// (no LSF available).
func ParseBhosts(out []byte) (map[string]string, error) {
	states := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	header := true
	for line := 1; sc.Scan(); line++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if header {
			header = false
			if f[0] == "HOST_NAME" {
				continue
			}
		}
		if len(f) < 5 {
			return nil, fmt.Errorf("bhosts line %d: too few fields: %q", line, sc.Text())
		}
		if err := names.ValidateNode(f[0]); err != nil {
			return nil, fmt.Errorf("bhosts line %d: %w", line, err)
		}
		njobs, err := strconv.Atoi(f[4])
		if err != nil && f[4] != "-" {
			return nil, fmt.Errorf("bhosts line %d: NJOBS %q: %w", line, f[4], err)
		}
		st := f[1]
		if st == "ok" && njobs == 0 {
			st = "idle"
		}
		states[f[0]] = st
	}
	return states, sc.Err()
}

// ParsePbsnodes reads `pbsnodes -a`: blocks starting with the node name,
// then indented "key = value" lines. A node is idle when its state is
// "free" and it lists no jobs. From the OpenPBS and Torque documentation;
// untested here (no PBS available).
func ParsePbsnodes(out []byte) (map[string]string, error) {
	states := map[string]string{}
	var name, state string
	jobs := false
	flush := func() {
		if name == "" {
			return
		}
		if state == "free" && !jobs {
			state = "idle"
		}
		states[name] = state
		name, state, jobs = "", "", false
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for line := 1; sc.Scan(); line++ {
		t := sc.Text()
		if strings.TrimSpace(t) == "" {
			flush()
			continue
		}
		if t[0] != ' ' && t[0] != '\t' {
			flush()
			name = strings.TrimSpace(t)
			if err := names.ValidateNode(name); err != nil {
				return nil, fmt.Errorf("pbsnodes line %d: %w", line, err)
			}
			continue
		}
		k, v, ok := strings.Cut(strings.TrimSpace(t), "=")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "state":
			state = strings.TrimSpace(v)
		case "jobs":
			jobs = strings.TrimSpace(v) != ""
		}
	}
	flush()
	return states, sc.Err()
}
