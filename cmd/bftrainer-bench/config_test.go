package main

import (
	"path/filepath"
	"testing"

	"github.com/BurntSushi/toml"
)

// TestLocalConfig: the configuration reclaim and rescale share is TOML
// whose added lines land in [trainer] (and the tables after it), with the
// paths under the run's directory.
func TestLocalConfig(t *testing.T) {
	dir := t.TempDir()
	text := localConfig(dir, "/sys/fs/cgroup/bench", "containment = \"off\"\n[trainer.launcher.elastic]\nstore_ports = \"1-2\"\n")
	var c struct {
		Database string
		Hooks    struct {
			SpawnReconciler string `toml:"spawn_reconciler"`
		}
		Trainer struct {
			Transport   string
			CgroupRoot  string `toml:"cgroup_root"`
			Containment string
			Launcher    map[string]map[string]string
		}
	}
	if _, err := toml.Decode(text, &c); err != nil {
		t.Fatalf("%v in\n%s", err, text)
	}
	if c.Database != filepath.Join(dir, "db", "bftrainer.db") || c.Hooks.SpawnReconciler != "never" ||
		c.Trainer.Transport != "local" || c.Trainer.CgroupRoot != "/sys/fs/cgroup/bench" || c.Trainer.Containment != "off" ||
		c.Trainer.Launcher["elastic"]["store_ports"] != "1-2" {
		t.Errorf("decoded %+v from\n%s", c, text)
	}
}
