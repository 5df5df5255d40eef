package trainer

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"

	"github.com/bftrainer/bftrainer/internal/atomicfile"
)

// A Trainer's environment (`submit --env KEY=VALUE`) may hold its owner's
// secrets: tokens, passwords. The database is every user's to read (mode
// 0644: `trainer list` and `show` work for anyone), so the values never
// reach it. When a submission is recorded, SealEnv takes them out of the
// launch spec — the names stay, each with an empty value, so that `trainer
// show` may say which names were set — and writes them to a root-only
// file under the runner's state (StateDir/env/REF, 0600 in a 0700
// directory), REF a fresh random name the spec carries as env_ref. The
// runner merges them back (OpenEnv) when it hands the spec to a
// launcher; the values then travel as they always did, in the start
// request to the node agent (root) and into the owner's processes'
// environments (/proc/PID/environ: the owner's and root's).
//
// REF is drawn per submission, never derived from the Trainer's name: a
// second submission of a name (refused by the fold, or a new Trainer
// after the first was forgotten) cannot overwrite the first one's
// values, and a user who names an env_ref in a spooled spec gains
// nothing, since SealEnv replaces whatever ref a submission carries.

// envDir is the directory of sealed environments under the runner's state.
func envDir(stateDir string) string { return filepath.Join(stateDir, "env") }

// envRef is what a sealed spec's env_ref looks like: 32 hex digits.
var envRef = regexp.MustCompile(`^[0-9a-f]{32}$`)

// ErrEnvLost is OpenEnv's error for a spec whose sealed values are gone.
var ErrEnvLost = errors.New("its environment (--env values) is not in the runner's state: resubmit it")

// SealEnv takes the environment's values out of a launch spec (a JSON
// object; any other spec, or one without env, is returned as it is but
// for an env_ref it carried, which is dropped): it writes them to a new
// root-only file below stateDir and returns the spec with each value
// empty and env_ref naming the file. With stateDir "" (no runner: nothing
// is ever started) the values are dropped.
func SealEnv(stateDir string, spec json.RawMessage) (json.RawMessage, error) {
	var obj map[string]json.RawMessage
	if len(spec) == 0 || json.Unmarshal(spec, &obj) != nil || obj == nil {
		return spec, nil // not an object: the launcher's check refuses it
	}
	_, hadRef := obj["env_ref"]
	delete(obj, "env_ref")
	var env map[string]string
	if raw, ok := obj["env"]; ok {
		if err := json.Unmarshal(raw, &env); err != nil {
			return spec, nil // the launcher's check refuses it
		}
	}
	if len(env) == 0 {
		if !hadRef {
			return spec, nil
		}
		return marshalSpec(obj)
	}
	names := make(map[string]string, len(env))
	for k := range env {
		names[k] = ""
	}
	obj["env"], _ = json.Marshal(names)
	if stateDir != "" {
		b := make([]byte, 16)
		rand.Read(b)
		ref := hex.EncodeToString(b)
		if err := writeEnv(stateDir, ref, env); err != nil {
			return nil, err
		}
		obj["env_ref"], _ = json.Marshal(ref)
	}
	return marshalSpec(obj)
}

func marshalSpec(obj map[string]json.RawMessage) (json.RawMessage, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("seal environment: %w", err)
	}
	return b, nil
}

// writeEnv writes a sealed environment, root's alone.
func writeEnv(stateDir, ref string, env map[string]string) error {
	dir := envDir(stateDir)
	// The state directory is 0755 (Runner.save: owners read their host
	// files below it); only env/ is root's alone.
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return fmt.Errorf("seal environment: %w", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("seal environment: %w", err)
	}
	// MkdirAll keeps an existing directory's mode: make sure it is 0700.
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("seal environment: %w", err)
	}
	b, err := json.Marshal(env)
	if err != nil {
		return fmt.Errorf("seal environment: %w", err)
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, ref), b, 0o600, true); err != nil {
		return fmt.Errorf("seal environment: %w", err)
	}
	return nil
}

// OpenEnv returns a launch spec with its sealed environment merged back
// (env holds the values, env_ref is gone); a spec without env_ref is
// returned as it is (a spec recorded before sealing holds its values).
func OpenEnv(stateDir string, spec json.RawMessage) (json.RawMessage, error) {
	if !bytes.Contains(spec, []byte(`"env_ref"`)) {
		return spec, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(spec, &obj); err != nil {
		return nil, fmt.Errorf("launch spec: %w", err)
	}
	raw, ok := obj["env_ref"]
	if !ok {
		return spec, nil
	}
	var ref string
	if err := json.Unmarshal(raw, &ref); err != nil || !envRef.MatchString(ref) {
		return nil, fmt.Errorf("launch spec: env_ref %s is not a sealed environment's name", raw)
	}
	if stateDir == "" {
		return nil, ErrEnvLost
	}
	b, err := os.ReadFile(filepath.Join(envDir(stateDir), ref))
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrEnvLost
	}
	if err != nil {
		return nil, fmt.Errorf("sealed environment: %w", err)
	}
	var env map[string]string
	if err := json.Unmarshal(b, &env); err != nil {
		return nil, fmt.Errorf("sealed environment %s: %w", ref, err)
	}
	delete(obj, "env_ref")
	obj["env"], _ = json.Marshal(env)
	return marshalSpec(obj)
}
