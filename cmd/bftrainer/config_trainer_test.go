package main

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/bftrainer/bftrainer/trainer/trainertest"
)

// TestEtcIsDefaults: etc/bftrainer.toml documents every key with its
// default, so loading it gives exactly the built-in defaults — once its
// paths are rewritten for this binary's directories as make install
// rewrites them (the tests' binary has its own: TestMain).
func TestEtcIsDefaults(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(trainertest.RepoRoot(t), "etc", "bftrainer.toml"))
	if err != nil {
		t.Fatal(err)
	}
	etc := regexp.MustCompile(`/var/(lib|log|spool)/bftrainer`).ReplaceAllString(string(b), localStateDir+"/$1/bftrainer")
	etc = strings.ReplaceAll(etc, "/run/bftrainer", runStateDir+"/bftrainer")
	path := filepath.Join(t.TempDir(), "bftrainer.toml")
	if err := os.WriteFile(path, []byte(etc), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := loadConfig(path, true)
	if err != nil {
		t.Fatal(err)
	}
	got.path, got.Trainer.Launcher, got.fallbackSet = "", nil, false
	if want := defaults(); !reflect.DeepEqual(got, want) {
		t.Fatalf("etc/bftrainer.toml differs from the defaults:\n got %+v\nwant %+v", got.Trainer, want.Trainer)
	}
}

func TestTrainerConfigValidate(t *testing.T) {
	tests := []struct {
		name, toml, err string
	}{
		{"ssh", "[trainer]\ntransport = \"ssh\"\n", ""},
		{"unknown transport", "[trainer]\ntransport = \"rsh\"\n", "trainer.transport"},
		{"relative registry", "[trainer]\nregistry = \"run/nodes\"\n", "trainer.registry"},
		{"ssh user as option", "[trainer]\nssh_user = \"-oProxyCommand=x\"\n", "trainer.ssh_user"},
		{"ssh user with host", "[trainer]\nssh_user = \"root@evil\"\n", "trainer.ssh_user"},
		{"ports reversed", "[trainer.launcher.torchrun]\nstore_ports = \"29500-29400\"\n", "launcher torchrun: store_ports"},
		{"ports garbage", "[trainer.launcher.torchrun]\nstore_ports = \"any\"\n", "store_ports"},
		{"cooldown beyond Horovod's bound", "[trainer.launcher.horovod]\nblacklist_cooldown = [10, 4000]\n", "blacklist_cooldown"},
		{"no cooldown", "[trainer.launcher.horovod]\nblacklist_cooldown = []\n", ""},
		{"empty torchrun", "[trainer.launcher.torchrun]\ncommand = []\n", "launcher torchrun: command"},
		{"unknown launcher", "[trainer.launcher.mpirun]\ncommand = [\"x\"]\n", "trainer.launcher.mpirun: no such launcher"},
		{"unknown launcher key", "[trainer.launcher.torchrun]\ncomand = []\n", "unknown key trainer.launcher.torchrun.comand"},
		{"mpi-elastic", "[trainer.launcher.mpi-elastic]\ncommand = [\"mpirun\"]\npythonpath = \"/opt/bft\"\nready_timeout = \"30s\"\n", ""},
		{"mpi-elastic flavor", "[trainer.launcher.mpi-elastic]\nflavor = \"lam\"\n", "launcher mpi-elastic: flavor"},
		{"mpi-elastic timeouts", "[trainer.launcher.mpi-elastic]\nform_timeout = \"10s\"\n", "launcher mpi-elastic: form_timeout"},
		{"mpi-elastic no drain", "[trainer.launcher.mpi-elastic]\ndrain = \"10s\"\n", "unknown key trainer.launcher.mpi-elastic.drain"},
		{"containment", "[trainer]\ncontainment = \"off\"\npids_max = 512\nmemory_max = \"8G\"\n", ""},
		{"unknown containment", "[trainer]\ncontainment = \"maybe\"\n", "trainer.containment"},
		{"idle Trainers", "[trainer]\ncpu_priority = \"idle\"\n", ""},
		{"unknown cpu priority", "[trainer]\ncpu_priority = \"low\"\n", "trainer.cpu_priority"},
		{"memory garbage", "[trainer]\nmemory_max = \"lots\"\n", "trainer.memory_max"},
		{"relative device glob", "[trainer]\ndevice_glob = \"nvidia*\"\n", "trainer.device_glob"},
		{"world-writable database", "database_mode = \"0666\"\n", "database_mode"},
		{"not octal", "database_mode = \"rw-r--r--\"\n", "octal"},
		{"unknown key", "[trainer]\nregistery = \"/x\"\n", "unknown key trainer.registery"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "c.toml")
			if err := os.WriteFile(p, []byte(tt.toml), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := loadConfig(p, true)
			switch {
			case tt.err == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Fatalf("error %v, want one containing %q", err, tt.err)
			}
		})
	}
}
