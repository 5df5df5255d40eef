package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/trainer/wire"
)

// TestDoctor runs "node-agent doctor HOOK" as the controller's doctor
// does: the answer is JSON with this binary's version, whether the hook
// is an executable file here, the containment this node has (what
// Report says), and its clock.
func TestDoctor(t *testing.T) {
	dir := t.TempDir()
	hook := filepath.Join(dir, "bftrainer")
	if err := os.WriteFile(hook, []byte("stand-in"), 0o755); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	a := &Agent{Version: "1.2.3"}
	for _, tc := range []struct {
		hook, err string
		ok        bool
	}{
		{hook: hook, ok: true},
		{hook: filepath.Join(dir, "gone"), err: "no such file"},
		{hook: plain, err: "not an executable file"},
	} {
		var out bytes.Buffer
		before := time.Now()
		if err := a.Main(context.Background(), []string{"doctor", tc.hook}, nil, &out); err != nil {
			t.Fatal(err)
		}
		var got wire.NodeCheck
		if err := json.Unmarshal(out.Bytes(), &got); err != nil {
			t.Fatalf("answer %q: %v", out.String(), err)
		}
		if got.Version != "1.2.3" || got.Hook != tc.hook || got.HookOK != tc.ok || !strings.Contains(got.HookErr, tc.err) {
			t.Errorf("doctor %s: %+v, want version 1.2.3, hook ok %v, error %q", tc.hook, got, tc.ok, tc.err)
		}
		if got.Containment != a.Mode() {
			t.Errorf("containment %q, Mode says %q", got.Containment, a.Mode())
		}
		if got.Time.Before(before) || got.Time.After(time.Now()) {
			t.Errorf("time %v, not between the call's start and end", got.Time)
		}
	}
	if err := a.Main(context.Background(), []string{"doctor", "a", "b"}, nil, &bytes.Buffer{}); err == nil {
		t.Error("doctor with two arguments: no error")
	}
}
