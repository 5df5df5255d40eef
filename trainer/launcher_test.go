package trainer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/pool"
	"github.com/bftrainer/bftrainer/sidecar"
	"github.com/bftrainer/bftrainer/store"
	"github.com/bftrainer/bftrainer/trainer"
	"github.com/bftrainer/bftrainer/trainer/agent"
	"github.com/bftrainer/bftrainer/trainer/trainertest"
	"github.com/bftrainer/bftrainer/trainer/wire"
)

// The toy launcher, registered in this test file alone: one process per
// node it holds, its own spec, settings and state. It proves the seam: a
// launcher is one value added to the registry (Builtin's one line, here
// an append), and nothing else in bftrainer knows it.
var toyKind = trainer.Kind{
	Name: "toy",
	CheckSpec: func(raw json.RawMessage) error {
		var s toySpec
		if err := json.Unmarshal(raw, &s); err != nil {
			return err
		}
		if s.Seconds <= 0 {
			return fmt.Errorf("toy: seconds must be > 0")
		}
		return nil
	},
	New: func(decode func(any) error) (trainer.Launcher, error) {
		s := toySettings{Greeting: "hello"}
		err := decode(&s)
		return &toy{s: s}, err
	},
}

type toySpec struct {
	Seconds int `json:"seconds"`
}

type toySettings struct {
	Greeting string `toml:"greeting"`
}

// toyState is the toy's own state: how many rounds changed it.
type toyState struct {
	Changes int `json:"changes"`
}

type toy struct{ s toySettings }

func (l *toy) Apply(ctx context.Context, t *trainer.Run) []trainer.Action {
	var spec toySpec
	json.Unmarshal(t.Want.Spec, &spec)
	var st toyState
	t.LoadState(&st)
	acts := t.StopNodes(ctx, t.Removed())
	acts = append(acts, t.StartNodes(ctx, "start", t.Added(), func(n string) wire.Launch {
		return wire.Launch{Argv: []string{"/bin/sleep", fmt.Sprint(spec.Seconds)}, Workdir: "/",
			Env: map[string]string{"TOY_GREETING": l.s.Greeting}}
	})...)
	if len(acts) > 0 {
		st.Changes++
		t.SaveState(st)
	}
	return acts
}

func (l *toy) Stop(ctx context.Context, t *trainer.Run) ([]trainer.Action, bool) {
	return t.StopAll(ctx)
}

func (l *toy) Ended(t *trainer.Run, _ map[string]trainer.Seen) (*trainer.Exit, []trainer.Action) {
	return trainer.NodesEnded(t), nil
}

// TestToyLauncher drives the toy through the whole path: a submission
// checked by the registry, a round that starts it on its nodes through
// real node agents, a reclaim that shrinks it, a cancel that stops it.
func TestToyLauncher(t *testing.T) {
	a := trainertest.MustAgent(t)
	n1, n2 := a.N("n1"), a.N("n2")
	kinds := append(trainer.Builtin(), toyKind)
	ls, err := kinds.Build(func(name string, settings any) error {
		if name == "toy" {
			settings.(*toySettings).Greeting = "from the configuration"
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	local := trainer.Local{Argv: a.Argv}
	r := &trainer.Runner{Nodes: local, Controller: local, Launchers: ls, Kinds: kinds, StateDir: t.TempDir(), Address: "127.0.0.1"}
	db, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "b.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rec := &sidecar.Reconciler{DB: db, Runner: r, Launchers: kinds, Pool: pool.Config{TFwd: 10}}
	ctx := context.Background()
	owner := trainertest.CurrentUser(t)
	appendEv := func(evs ...store.Event) {
		t.Helper()
		if _, err := db.Append(ctx, evs...); err != nil {
			t.Fatal(err)
		}
	}
	round := func() {
		t.Helper()
		if _, err := rec.Round(ctx); err != nil {
			t.Fatal(err)
		}
	}
	running := func() []string {
		var out []string
		for _, p := range trainertest.Procs(t, func(tk wire.Token, p agent.Proc) bool { return tk.Trainer == "toy1" && p.Comm == "sleep" }) {
			tk, _ := p.Token()
			out = append(out, tk.Node)
		}
		slices.Sort(out)
		return out
	}
	if err := kinds.CheckLaunch("toy", json.RawMessage(`{"seconds":0}`)); err == nil {
		t.Fatal("the toy's own spec check was not used")
	}
	req, _ := json.Marshal(sidecar.SubmitRequest{ID: "toy1", Min: 1, Max: 2, Curve: alloc.Curve{Nodes: []int{0, 1, 2}, Throughput: []float64{0, 1, 2}},
		Launch: store.Launch{Launcher: "toy", Spec: json.RawMessage(`{"seconds":300}`)}})
	now := time.Now()
	appendEv(store.Event{At: now, Kind: store.KindJoin, Source: "test", Nodes: []string{n1, n2}},
		store.Event{At: now, Kind: store.KindSubmit, Source: "test", Trainer: "toy1", User: owner, Detail: req})
	round()
	trainertest.WaitFor(t, 10*time.Second, "the toy on both nodes", func() bool { return slices.Equal(running(), []string{n1, n2}) })
	for _, p := range trainertest.Procs(t, func(tk wire.Token, p agent.Proc) bool { return tk.Trainer == "toy1" && p.Comm == "sleep" }) {
		if env := trainertest.Environ(t, p.PID); env["TOY_GREETING"] != "from the configuration" {
			t.Fatalf("the toy's settings did not reach its processes: %q", env["TOY_GREETING"])
		}
	}

	// The scheduler takes n2: the round shrinks the toy.
	appendEv(store.Event{At: time.Now(), Kind: store.KindLeave, Source: "test", Job: "7", Nodes: []string{n2}})
	round()
	if got := running(); !slices.Equal(got, []string{n1}) {
		t.Fatalf("after the shrink the toy runs on %v, want [%s]", got, n1)
	}

	// The cancel stops it.
	appendEv(store.Event{At: time.Now(), Kind: store.KindCancel, Source: "test", Trainer: "toy1", User: owner})
	round()
	if got := running(); len(got) != 0 {
		t.Fatalf("after the cancel the toy runs on %v", got)
	}
	evs, err := db.Events(ctx, store.Filter{Trainer: "toy1", Kinds: []store.Kind{store.KindAction}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range evs {
		if e.Error != "" {
			t.Errorf("%s %v: %s", e.Context, e.Nodes, e.Error)
		}
		got = append(got, fmt.Sprint(e.Context, e.Nodes))
	}
	want := []string{fmt.Sprint("start", []string{n1}), fmt.Sprint("start", []string{n2}), fmt.Sprint("stop", []string{n2}), fmt.Sprint("stop", []string{n1})}
	if !slices.Equal(got, want) {
		t.Fatalf("history %v, want %v", got, want)
	}
}
