package trainer

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSealEnv: a spec's environment values leave it for a root-only file
// under the runner's state, the names stay; OpenEnv gives the values
// back; a ref a submission carries is replaced, never followed; a lost
// file is an error, not an empty environment.
func TestSealEnv(t *testing.T) {
	state := filepath.Join(t.TempDir(), "runner")
	spec := json.RawMessage(`{"argv":["/bin/true"],"env":{"TOKEN":"v4lue","PATH_X":"/a b"},"env_ref":"00000000000000000000000000000000"}`)
	sealed, err := SealEnv(state, spec)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(sealed), "v4lue") || strings.Contains(string(sealed), "/a b") {
		t.Fatalf("sealed spec holds a value: %s", sealed)
	}
	s, err := DecodeSpec(sealed)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Env) != 2 || s.Env["TOKEN"] != "" || s.EnvRef == "" || s.EnvRef == strings.Repeat("0", 32) {
		t.Fatalf("sealed spec %+v: want the names with empty values and a fresh ref", s)
	}
	for _, c := range []struct {
		path string
		mode os.FileMode
	}{{state, 0o755}, {envDir(state), 0o700}, {filepath.Join(envDir(state), s.EnvRef), 0o600}} {
		fi, err := os.Stat(c.path)
		if err != nil || fi.Mode().Perm() != c.mode {
			t.Fatalf("%s: %v %v, want %v", c.path, fi.Mode(), err, c.mode)
		}
	}
	opened, err := OpenEnv(state, sealed)
	if err != nil {
		t.Fatal(err)
	}
	o, err := DecodeSpec(opened)
	if err != nil || o.EnvRef != "" || o.Env["TOKEN"] != "v4lue" || o.Env["PATH_X"] != "/a b" || o.Argv[0] != "/bin/true" {
		t.Fatalf("opened spec %+v (%v)", o, err)
	}
	// Two submissions, two files: the second cannot overwrite the first.
	again, _ := SealEnv(state, spec)
	if a, _ := DecodeSpec(again); a.EnvRef == s.EnvRef {
		t.Fatal("a second submission reused the first's sealed file")
	}
	// A spec without env stays as it is; one with a ref of its own
	// loses it.
	plain := json.RawMessage(`{"argv":["/bin/true"]}`)
	if got, _ := SealEnv(state, plain); string(got) != string(plain) {
		t.Fatalf("spec without env changed: %s", got)
	}
	if got, _ := SealEnv(state, json.RawMessage(`{"argv":["/bin/true"],"env_ref":"`+s.EnvRef+`"}`)); strings.Contains(string(got), "env_ref") {
		t.Fatalf("a submitted env_ref survived sealing: %s", got)
	}
	// Lost, or not a ref: refused.
	os.Remove(filepath.Join(envDir(state), s.EnvRef))
	if _, err := OpenEnv(state, sealed); !errors.Is(err, ErrEnvLost) {
		t.Fatalf("lost environment: %v, want ErrEnvLost", err)
	}
	if _, err := OpenEnv(state, json.RawMessage(`{"argv":["/bin/true"],"env_ref":"../runner.json"}`)); err == nil {
		t.Fatal("a ref outside env/ was followed")
	}
	// A spec recorded before sealing keeps its values.
	old := json.RawMessage(`{"argv":["/bin/true"],"env":{"A":"b"}}`)
	if got, err := OpenEnv(state, old); err != nil || string(got) != string(old) {
		t.Fatalf("unsealed spec: %s %v", got, err)
	}
	// No runner state (nothing is started): the values are dropped.
	nostate, err := SealEnv("", spec)
	if err != nil || strings.Contains(string(nostate), "v4lue") || strings.Contains(string(nostate), "env_ref") {
		t.Fatalf("sealed without state: %s %v", nostate, err)
	}
}
