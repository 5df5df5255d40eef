package slurm

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"
)

// journalPathEvery is how often the pilot's stand-in for
// bftrainer-journal.path looks at the journal: systemd watches it with
// inotify, so a record is taken up within milliseconds there.
const journalPathEvery = 50 * time.Millisecond

// ServiceNice is the Nice= of the guide's reconciler units
// (contrib/slurm/bftrainer-reconcile.service and
// bftrainer-reconcile-now.service): the lab runs its service and the
// path unit's reconciles at it, as systemd would.
const ServiceNice = 5

// journalPath is the guide's optional bftrainer-journal.path and
// bftrainer-reconcile-now.service (contrib/slurm), as systemd runs them:
// while the journal directory is not empty (DirectoryNotEmpty=), one
// `bftrainer reconcile` at a time, at Nice=5, started again after each
// ends while records remain — so that a hook's record is folded the
// moment it lands, not at the service's next tick. It runs until stop is
// closed and returns how many reconciles it started and how many failed
// (one that finds the service's round holding the lock exits at once:
// not a failure). Each reconcile runs holding gate (nil: none), so that
// the pilot's own read-only fault can find a moment without one: the
// kernel refuses a read-only remount while a file on it is open for
// writing, and with this unit a burst of hook records keeps a reconcile
// running back to back.
func (in *Install) journalPath(ctx context.Context, stop <-chan struct{}, gate sync.Locker) (runs, failed int) {
	t := time.NewTicker(journalPathEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return runs, failed
		case <-ctx.Done():
			return runs, failed
		case <-t.C:
		}
		if !dirNotEmpty(in.Journal) {
			continue
		}
		if gate != nil {
			gate.Lock()
		}
		runs++
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		cmd := exec.CommandContext(rctx, "nice", "-n", strconv.Itoa(ServiceNice), in.Bin, "reconcile")
		cmd.Env, cmd.Dir = in.env(), "/"
		if err := cmd.Run(); err != nil {
			failed++
		}
		cancel()
		if gate != nil {
			gate.Unlock()
		}
	}
}

// dirNotEmpty is systemd's DirectoryNotEmpty=: the directory exists and
// holds an entry.
func dirNotEmpty(dir string) bool {
	f, err := os.Open(dir)
	if err != nil {
		return false
	}
	defer f.Close()
	names, _ := f.Readdirnames(1)
	return len(names) > 0
}
