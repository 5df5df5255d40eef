package trainer

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
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

// Kind is a launcher as registered: its name (the submission's
// --launcher), how it checks a submitted spec, and how it is built from
// its settings ([trainer.launcher.NAME] of the configuration).
type Kind struct {
	Name string
	// CheckSpec validates a launch spec as submitted.
	CheckSpec func(spec json.RawMessage) error
	// New builds the launcher; decode fills its settings struct (already
	// holding the defaults) from the configuration.
	New func(decode func(settings any) error) (Launcher, error)
}

// The launchers bftrainer ships. Adding one: its file (a Kind and its
// Launcher), its tests, its docs, and one line here.
func init() {
	Register(execKind)
	Register(torchrunKind)
	Register(horovodKind)
	Register(elasticKind)
}

// Launcher names of those shipped.
const (
	Exec     = "exec"
	Torchrun = "torchrun"
	Horovod  = "horovod"
	Elastic  = "elastic"
)

var (
	kindsMu sync.RWMutex
	kinds   = map[string]Kind{}
)

// Register adds a launcher kind; a test may register a toy one. It
// panics on an empty or repeated name (a programming error).
func Register(k Kind) {
	kindsMu.Lock()
	defer kindsMu.Unlock()
	if k.Name == "" || k.CheckSpec == nil || k.New == nil {
		panic("trainer: Register: incomplete launcher kind " + k.Name)
	}
	if _, dup := kinds[k.Name]; dup {
		panic("trainer: Register: launcher " + k.Name + " registered twice")
	}
	kinds[k.Name] = k
}

// Kinds returns the registered launchers' names, sorted.
func Kinds() []string {
	kindsMu.RLock()
	defer kindsMu.RUnlock()
	out := make([]string, 0, len(kinds))
	for n := range kinds {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func kind(name string) (Kind, error) {
	kindsMu.RLock()
	k, ok := kinds[name]
	kindsMu.RUnlock()
	if !ok {
		return Kind{}, fmt.Errorf("launcher %q: want one of %s", name, strings.Join(Kinds(), ", "))
	}
	return k, nil
}

// CheckLaunch validates a submission's launcher and launch spec: the one
// check every front door (CLI, spool, reconciler) uses.
func CheckLaunch(launcher string, spec json.RawMessage) error {
	k, err := kind(launcher)
	if err != nil {
		return err
	}
	return k.CheckSpec(spec)
}

// Build builds every registered launcher; decode(name, settings) fills a
// launcher's settings from the configuration (nil: the defaults).
func Build(decode func(name string, settings any) error) (map[string]Launcher, error) {
	out := map[string]Launcher{}
	for _, name := range Kinds() {
		k, _ := kind(name)
		d := func(settings any) error {
			if decode == nil {
				return nil
			}
			return decode(name, settings)
		}
		l, err := k.New(d)
		if err != nil {
			return nil, fmt.Errorf("launcher %s: %w", name, err)
		}
		out[name] = l
	}
	return out, nil
}
