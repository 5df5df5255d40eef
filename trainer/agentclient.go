package trainer

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/bftrainer/bftrainer/trainer/wire"
)

// AgentClient calls the node agent ("bftrainer node-agent", package
// trainer/agent) over a Transport: one typed call per operation. It is
// the one place outside the agent that knows the agent's command line and
// its answers; the runner calls it for its nodes and the controller, and
// the core's hooks (sidecar.Killer) for the nodes of a job whose
// scheduler runs no hook there. The agent in process (NewNodeAgent) has
// the same methods.
type AgentClient struct {
	T Transport
}

// Start starts a launch on its node (l.Node) and returns what the agent
// started.
func (c AgentClient) Start(ctx context.Context, l wire.Launch) (wire.Started, error) {
	body, err := json.Marshal(l)
	if err != nil {
		return wire.Started{}, err
	}
	var s wire.Started
	if err := c.call(ctx, l.Node, []string{"start"}, body, &s); err != nil {
		return wire.Started{}, err
	}
	if s.Token == "" {
		return wire.Started{}, fmt.Errorf("start on %s: an answer without a run token", l.Node)
	}
	return s, nil
}

// Stop kills one Trainer's processes on node.
func (c AgentClient) Stop(ctx context.Context, node, trainer string) (wire.KillReport, error) {
	return c.kill(ctx, node, []string{"stop", node, trainer})
}

// KillAll kills every Trainer process on node; fence refuses new starts
// there until Clean or Unfence (a reclaim).
func (c AgentClient) KillAll(ctx context.Context, node string, fence bool) (wire.KillReport, error) {
	args := []string{"kill-all", node}
	if fence {
		args = []string{"kill-all", "--fence", node}
	}
	return c.kill(ctx, node, args)
}

// Clean kills what is left on node and lifts its fence (an epilog).
func (c AgentClient) Clean(ctx context.Context, node string) (wire.KillReport, error) {
	return c.kill(ctx, node, []string{"clean", node})
}

// List says what runs on node, by launch.
func (c AgentClient) List(ctx context.Context, node string) ([]wire.Status, error) {
	var sts []wire.Status
	err := c.call(ctx, node, []string{"list", node}, nil, &sts)
	return sts, err
}

// Unfence lifts node's reclaim fence.
func (c AgentClient) Unfence(ctx context.Context, node string) error {
	_, err := c.T.Agent(ctx, node, []string{"unfence", node}, nil)
	return err
}

// Tail reads the end of a Trainer's progress log on node.
func (c AgentClient) Tail(ctx context.Context, node, trainer string, req wire.TailRequest) (wire.Tail, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return wire.Tail{}, err
	}
	var t wire.Tail
	err = c.call(ctx, node, []string{"tail", node, trainer}, body, &t)
	return t, err
}

// Containment says how node contains Trainer processes: wire.Cgroup, or
// "degraded (reason)".
func (c AgentClient) Containment(ctx context.Context, node string) (string, error) {
	var r struct {
		Containment string `json:"containment"`
	}
	err := c.call(ctx, node, []string{"containment"}, nil, &r)
	return r.Containment, err
}

// Doctor asks node's agent what `bftrainer doctor` checks there, hook
// (when not "") among it: the path the scheduler's node hooks run.
func (c AgentClient) Doctor(ctx context.Context, node, hook string) (wire.NodeCheck, error) {
	args := []string{"doctor"}
	if hook != "" {
		args = append(args, hook)
	}
	var r wire.NodeCheck
	err := c.call(ctx, node, args, nil, &r)
	return r, err
}

// kill runs a stop or a kill: a kill that failed still says what it sent
// to which process, so its report is read whatever the error.
func (c AgentClient) kill(ctx context.Context, node string, args []string) (wire.KillReport, error) {
	out, err := c.T.Agent(ctx, node, args, nil)
	var rep wire.KillReport
	if jerr := json.Unmarshal(out, &rep); jerr != nil && err == nil {
		err = fmt.Errorf("%s on %s: unreadable answer %q", args[0], node, out)
	}
	return rep, err
}

// call runs one operation and decodes its answer into v.
func (c AgentClient) call(ctx context.Context, node string, args []string, stdin []byte, v any) error {
	out, err := c.T.Agent(ctx, node, args, stdin)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(out, v); err != nil {
		return fmt.Errorf("%s on %s: unreadable answer %q", args[0], node, out)
	}
	return nil
}

// Timed bounds every node-agent call of T by Timeout: a node that hangs
// after the ssh connection is up cannot hold the round or the hook.
type Timed struct {
	T       Transport
	Timeout time.Duration
}

// Agent runs the call with the bound.
func (t Timed) Agent(ctx context.Context, node string, args []string, stdin []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, t.Timeout)
	defer cancel()
	return t.T.Agent(ctx, node, args, stdin)
}
