package trainer

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
)

// A Launcher knows how one kind of Trainer is started and scaled. The
// runner keeps what every launcher shares (which launch runs on which
// node, on the controller, whether it ended) and hands a launcher one
// Trainer at a time through a *Run, whose methods start and stop
// launches; the launcher keeps its own state in the Run (LoadState,
// SaveState) and its settings in itself.
type Launcher interface {
	// Apply starts, grows or shrinks the Trainer to t.Want.Nodes.
	Apply(ctx context.Context, t *Run) []Action
	// Stop stops all of the Trainer; done once nothing is left (else it
	// is called again next round).
	Stop(ctx context.Context, t *Run) (acts []Action, done bool)
	// Ended says whether the Trainer ended by itself, given what its
	// launches on the controller did (roles; its nodes' exits are in
	// t.Rec.Nodes already); nil while it runs.
	Ended(t *Run, roles map[string]Seen) (*Exit, []Action)
}

// Kind is a launcher as registered (Builtin): its name (the submission's
// --launcher), how it checks a submitted spec, and how it is built from
// its settings ([trainer.launcher.NAME] of the configuration).
type Kind struct {
	// Name is how the submission (--launcher), the configuration
	// ([trainer.launcher.NAME]) and the runner's state spell it.
	Name string
	// CheckSpec validates a launch spec as submitted.
	CheckSpec func(spec json.RawMessage) error
	// New builds the launcher; decode fills its settings struct (already
	// holding the defaults) from the configuration.
	New func(decode func(settings any) error) (Launcher, error)
}

// Launcher names of those shipped.
const (
	Exec     = "exec"
	Torchrun = "torchrun"
	Horovod  = "horovod"
	Elastic  = "elastic"
	MPI      = "mpi"
	// MPIElastic is the MPI fast path: the elastic runtime, its first
	// workers started by mpirun.
	MPIElastic = "mpi-elastic"
)

// Kinds is the launchers one bftrainer knows, in the order help texts
// list them. It is a plain value handed to whoever needs it (the
// configuration, the submission check, the runner, tests that add a toy
// launcher): there is no global list to mutate.
type Kinds []Kind

// Builtin returns the launchers bftrainer ships. Adding one: its file (a
// Kind and its Launcher), its tests, its docs, and one line here.
func Builtin() Kinds {
	return Kinds{execKind, torchrunKind, horovodKind, elasticKind, mpiKind, mpiElasticKind}
}

// Names returns the launchers' names, in order.
func (ks Kinds) Names() []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = k.Name
	}
	return out
}

// Lookup returns the launcher named name.
func (ks Kinds) Lookup(name string) (Kind, error) {
	for _, k := range ks {
		if k.Name == name {
			return k, nil
		}
	}
	return Kind{}, fmt.Errorf("launcher %q: want one of %s", name, strings.Join(ks.Names(), ", "))
}

// CheckLaunch validates a submission's launcher and launch spec: the one
// check every front door (CLI, spool, reconciler) uses.
func (ks Kinds) CheckLaunch(launcher string, spec json.RawMessage) error {
	k, err := ks.Lookup(launcher)
	if err != nil {
		return err
	}
	return k.CheckSpec(spec)
}

// Build builds every launcher; decode(name, settings) fills a launcher's
// settings from the configuration (nil: the defaults). An incomplete or
// repeated kind is an error: a programming one, said at start-up.
func (ks Kinds) Build(decode func(name string, settings any) error) (map[string]Launcher, error) {
	out := map[string]Launcher{}
	for _, k := range ks {
		if k.Name == "" || k.CheckSpec == nil || k.New == nil {
			return nil, fmt.Errorf("launcher %q: incomplete kind (want Name, CheckSpec and New)", k.Name)
		}
		if _, dup := out[k.Name]; dup {
			return nil, fmt.Errorf("launcher %s: registered twice", k.Name)
		}
		d := func(settings any) error {
			if decode == nil {
				return nil
			}
			return decode(k.Name, settings)
		}
		l, err := k.New(d)
		if err != nil {
			return nil, fmt.Errorf("launcher %s: %w", k.Name, err)
		}
		out[k.Name] = l
	}
	return out, nil
}
