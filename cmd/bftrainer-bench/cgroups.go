package main

import (
	"os"
	"path/filepath"
	"time"

	"github.com/bftrainer/bftrainer/trainer/agent"
	"github.com/bftrainer/bftrainer/trainer/wire"
)

// benchCgroups returns a cgroup subtree of the bench's own (the
// configuration's trainer.cgroup_root) and a function that removes it,
// killing what is left in it; "" where there is no cgroup2 mount (the
// agent then runs degraded).
func benchCgroups(name string) (root string, remove func()) {
	m, err := agent.CgroupMount()
	if err != nil {
		return "", func() {}
	}
	root = filepath.Join(m, "bftrainer-bench-"+name+"-"+wire.NewRun()[:8])
	return root, func() {
		if _, err := os.Stat(root); err != nil {
			return
		}
		if cg, err := agent.OpenCgroups(root); err == nil {
			cg.RemoveAll(10 * time.Second)
		}
	}
}
