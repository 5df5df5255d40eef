package trainer

import (
	"context"
	"slices"
	"strings"

	"github.com/bftrainer/bftrainer/trainer/wire"
)

// execKind runs any program on the first node of the Trainer's set,
// telling it the set (BFTRAINER_NODES, BFTRAINER_NODEFILE); a change of
// the set restarts it. It has no settings.
var execKind = Kind{
	Name:      Exec,
	CheckSpec: CheckSpec,
	New: func(decode func(any) error) (Launcher, error) {
		var none struct{}
		return execLauncher{}, decode(&none)
	},
}

type execLauncher struct{}

// execState is the node list the program was started with.
type execState struct {
	List []string `json:"list,omitempty"`
}

func (execLauncher) Apply(ctx context.Context, t *Run) []Action {
	spec, err := DecodeSpec(t.Want.Spec)
	if err != nil {
		return []Action{{Trainer: t.ID, Op: "start", Err: err}}
	}
	var st execState
	t.LoadState(&st)
	var acts []Action
	if len(t.Rec.Nodes) > 0 && !slices.Equal(st.List, t.Want.Nodes) {
		acts = append(acts, t.StopNodes(ctx, t.Launched())...)
		if len(t.Rec.Nodes) > 0 {
			return acts // retried next round
		}
		st.List = nil
		t.SaveState(st)
	}
	if len(t.Want.Nodes) == 0 || len(t.Rec.Nodes) > 0 {
		return acts
	}
	first := t.Want.Nodes[0]
	a := t.StartNodes(ctx, "start", []string{first}, func(string) wire.Launch {
		return wire.Launch{Argv: spec.Argv, Workdir: spec.Workdir, Env: t.Env(spec, nil), Nodes: t.Want.Nodes}
	})
	if _, ok := t.Rec.Nodes[first]; ok {
		a[0].Note += "; nodes " + strings.Join(t.Want.Nodes, ",")
		st.List = slices.Clone(t.Want.Nodes)
		t.SaveState(st)
	}
	return append(acts, a...)
}

func (execLauncher) Stop(ctx context.Context, t *Run) ([]Action, bool) { return t.StopAll(ctx) }

func (execLauncher) Ended(t *Run, _ map[string]Seen) (*Exit, []Action) { return NodesEnded(t), nil }
