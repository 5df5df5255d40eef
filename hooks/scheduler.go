package hooks

import (
	"fmt"
	"slices"
	"strings"
)

// Input is one hook call as the process sees it: everything a scheduler's
// parser may read.
type Input struct {
	// Env is the hook's environment (os.LookupEnv for a real hook).
	Env Env
	// Args are the hook's arguments after bftrainer's own: none for a
	// Slurm hook, the hook's name for LSF's wrapper ("pre_exec"), the
	// script's "$0" "$@" for PBS.
	Args []string
	// Hostname is the host the hook runs on (os.Hostname).
	Hostname string
	// ReadFile reads the node files a scheduler names (os.ReadFile).
	ReadFile func(string) ([]byte, error)
}

// arg returns Args[i], or "" past its end.
func (in Input) arg(i int) string {
	if i < len(in.Args) {
		return in.Args[i]
	}
	return ""
}

// Scheduler is one batch scheduler bftrainer is wired into, as a value:
// how its hook calls are recognised and decoded, how its own view of node
// states is read, and where its snippets for sysadmins live. Adding a
// scheduler is its own file (this value and its parsers, its job
// markers among them), its tests, its contrib/ directory and one line in
// Builtin; configuration, `hook`, `sync`, the reconciler's idle checks
// and the node agent find it there.
//
// Optional capabilities are pointer or function fields, nil when a
// scheduler does not offer them (Listing, Plan, Accounting and Wiring are such).
type Scheduler struct {
	// Name is how the configuration (hooks.scheduler), `bftrainer hook
	// NAME`, `sync --scheduler` and Call.Scheduler spell it.
	Name string
	// Contrib is the directory, from the repository root, of its hook
	// wrappers and configuration snippets.
	Contrib string
	// Usage says, for `bftrainer hook --help`, how its hooks call
	// bftrainer (indented lines).
	Usage string
	// JobMarkers are the environment variables the scheduler sets in
	// every process of its jobs. The node agent spares a process that
	// carries one, whatever else it carries (a main job submitted from
	// inside a Trainer inherits the Trainer's run token), and removes
	// them from every Trainer launch. A scheduler without one would have
	// its jobs taken for ours: Builtin's are checked to have some.
	JobMarkers []string
	// Detect reports whether a hook call is this scheduler's, from its
	// environment and arguments. Registry.Detect asks each scheduler in
	// order; the first that says yes wins.
	Detect func(in Input) bool
	// BareCall reports whether the binary run with no arguments at all is
	// this scheduler's hook (Slurm runs its hooks that way, with no PATH
	// and no arguments); nil when its hooks always say `bftrainer hook`.
	BareCall func(env Env) bool
	// Parse decodes a hook call. On error the Call still holds what was
	// decoded before the problem (Context and Action first, then Local),
	// so that a caller that must fail open can still act on this node.
	Parse func(in Input) (Call, error)
	// Listing reads the scheduler's own node states, for `sync` and for
	// the reconciler's idle checks; nil when it has none.
	Listing *Listing
	// Plan reads the scheduler's planned starts of pending jobs, for the
	// reconciler's graceful moves; nil when it states none (LSF, PBS).
	Plan *Planner
	// Accounting reads the scheduler's own records of its jobs, for the
	// audit; nil when it has none bftrainer reads.
	Accounting *Accounting
	// Wiring checks the scheduler's own view of its configuration against
	// what bftrainer needs, for `bftrainer doctor`; nil when bftrainer
	// does not read it.
	Wiring *Wiring
}

// Registry is the schedulers one bftrainer knows, in detection order. It
// is a plain value handed to whoever needs it (the configuration, the
// application core, tests that add a toy scheduler): there is no global
// list to mutate.
type Registry []Scheduler

// Builtin returns the schedulers bftrainer ships, in detection order
// (Slurm first: a Slurm hook wins over stray LSF or PBS variables). A new
// scheduler's one registration line goes here.
func Builtin() Registry {
	return Registry{slurm, lsf, pbs, gridEngine}
}

// Lookup returns the scheduler named name.
func (r Registry) Lookup(name string) (Scheduler, bool) {
	for _, s := range r {
		if s.Name == name {
			return s, true
		}
	}
	return Scheduler{}, false
}

// Detect returns the first scheduler whose Detect recognises the call.
func (r Registry) Detect(in Input) (Scheduler, bool) {
	for _, s := range r {
		if s.Detect != nil && s.Detect(in) {
			return s, true
		}
	}
	return Scheduler{}, false
}

// BareCall reports whether the binary run with no arguments in env is a
// scheduler's hook call.
func (r Registry) BareCall(env Env) bool {
	for _, s := range r {
		if s.BareCall != nil && s.BareCall(env) {
			return true
		}
	}
	return false
}

// Default is the scheduler assumed where the configuration names none and
// nothing is there to detect (sync, the reconciler's idle checks): the
// first registered.
func (r Registry) Default() (Scheduler, bool) {
	if len(r) == 0 {
		return Scheduler{}, false
	}
	return r[0], true
}

// JobMarkers returns every registered scheduler's job markers, sorted,
// each once: what the node agent is built with (cmd's wiring), so that a
// scheduler's markers live in its own value and nowhere else.
func (r Registry) JobMarkers() []string {
	var out []string
	for _, s := range r {
		out = append(out, s.JobMarkers...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Names returns the schedulers' names, in order.
func (r Registry) Names() []string {
	out := make([]string, len(r))
	for i, s := range r {
		out[i] = s.Name
	}
	return out
}

// Choose returns the scheduler named name, or, when name is empty, the one
// Detect recognises in the call.
func (r Registry) Choose(name string, in Input) (Scheduler, error) {
	if name != "" {
		s, ok := r.Lookup(name)
		if !ok {
			return Scheduler{}, fmt.Errorf("unknown scheduler %q (want %s)", name, r.want())
		}
		return s, nil
	}
	s, ok := r.Detect(in)
	if !ok {
		return Scheduler{}, fmt.Errorf("no scheduler hook environment found (%s)", r.want())
	}
	return s, nil
}

// Validate checks a scheduler's name: one of the registry's, or empty
// (detect it, or take the default).
func (r Registry) Validate(name string) error {
	if _, ok := r.Lookup(name); ok || name == "" {
		return nil
	}
	return fmt.Errorf("unknown scheduler %q (want %s)", name, r.want())
}

func (r Registry) want() string {
	n := r.Names()
	switch len(n) {
	case 0:
		return "none is registered"
	case 1:
		return n[0]
	}
	return strings.Join(n[:len(n)-1], ", ") + " or " + n[len(n)-1]
}
