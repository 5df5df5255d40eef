package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/bftrainer/bftrainer/trainer/wire"
)

// Doctor says what `bftrainer doctor` checks on this node: containment
// (cgroup v2, cgroup.kill, the pids controller), this binary's version,
// whether hook (when given) is an executable file here, and the clock.
func (a *Agent) Doctor(hook string) wire.NodeCheck {
	r := wire.NodeCheck{Containment: a.Mode(), Version: a.Version, Kill: canKill()}
	v2, v1, err := mounts()
	if err == nil && len(v2) > 0 {
		r.CgroupV2 = true
		root := a.CgroupRoot
		if root == "" {
			root = filepath.Join(v2[0], "bftrainer")
		}
		// The subtree's own controllers where it exists, else those its
		// parent can give it.
		ctl, err := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
		if err != nil {
			ctl, _ = os.ReadFile(filepath.Join(filepath.Dir(root), "cgroup.controllers"))
		}
		// On a hybrid host the v1 pids hierarchy is mirrored (Cgroups'
		// v1 directories).
		r.Pids = slices.Contains(strings.Fields(string(ctl)), "pids") || v1["pids"] != ""
	}
	if hook != "" {
		r.Hook = hook
		st, err := os.Stat(hook)
		switch {
		case err != nil:
			r.HookErr = err.Error()
		case !st.Mode().IsRegular() || st.Mode()&0o111 == 0:
			r.HookErr = fmt.Sprintf("%s is not an executable file (%s)", hook, st.Mode())
		default:
			r.HookOK = true
		}
	}
	r.Time = a.now()
	return r
}
