package trainer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bftrainer/bftrainer/internal/atomicfile"
	"github.com/bftrainer/bftrainer/trainer/wire"
)

// horovodKind runs an Elastic Horovod Trainer: horovodrun on the
// controller, told its hosts by a discovery script (`bftrainer hosts
// TRAINER`, which prints a host file the runner replaces atomically);
// horovodrun starts the workers on the hosts itself, over the owner's
// ssh, and never kills those of a host that leaves: we do, once its
// discovery has seen the host go (so that Horovod takes it for a
// removal, not a failure).
var horovodKind = Kind{
	Name:      Horovod,
	CheckSpec: CheckSpec,
	New: func(decode func(any) error) (Launcher, error) {
		s := HorovodSettings{Command: []string{"horovodrun"}, BlacklistCooldown: []int{10, 300}, DiscoveryWait: "5s"}
		if err := decode(&s); err != nil {
			return nil, err
		}
		return s.launcher()
	},
}

// HorovodSettings are [trainer.launcher.horovod].
type HorovodSettings struct {
	Command []string `toml:"command"` // horovodrun
	// BlacklistCooldown is horovodrun's --blacklist-cooldown-range
	// [MIN, MAX] seconds; [] leaves Horovod's default (for ever).
	BlacklistCooldown []int `toml:"blacklist_cooldown"`
	// DiscoveryWait bounds how long removing a host waits for
	// horovodrun's discovery to read the host file without it.
	DiscoveryWait string `toml:"discovery_wait"`
}

func (s HorovodSettings) launcher() (*horovod, error) {
	var errs []error
	if len(s.Command) == 0 {
		errs = append(errs, errors.New("command: empty"))
	}
	if c := s.BlacklistCooldown; len(c) != 0 && (len(c) != 2 || c[0] < 1 || c[1] < c[0] || c[1] > 3600) {
		errs = append(errs, errors.New("blacklist_cooldown: want [] or [MIN, MAX] seconds with 1 ≤ MIN ≤ MAX ≤ 3600 (Horovod's bounds)"))
	}
	wait, err := time.ParseDuration(s.DiscoveryWait)
	if err != nil || wait < 0 {
		errs = append(errs, fmt.Errorf("discovery_wait: %q, want a duration", s.DiscoveryWait))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	h := &horovod{s: s, wait: wait}
	if len(s.BlacklistCooldown) == 2 {
		h.cooldown = [2]int{s.BlacklistCooldown[0], s.BlacklistCooldown[1]}
	}
	return h, nil
}

type horovod struct {
	s        HorovodSettings
	cooldown [2]int
	wait     time.Duration
}

const driverRole = "driver"

// HorovodArgs is the horovodrun command of a Trainer. Why each flag:
//
//   - --host-discovery-script: horovodrun runs it through a shell every
//     second; it is `bftrainer hosts TRAINER`, each word quoted.
//   - -np and --min-np: the slots of MIN nodes; --max-np always explicit:
//     left out, Horovod's code treats it as unbounded (its docs say -np).
//   - --blacklist-cooldown-range: a host whose worker we killed is
//     blacklisted by Horovod, by default forever; with a cooldown it may
//     come back when the node returns to the pool.
func HorovodArgs(horovodrun, hosts []string, trainer string, minNodes, maxNodes, slots int, cooldown [2]int, argv []string) []string {
	args := slices.Clone(horovodrun)
	args = append(args,
		"-np", strconv.Itoa(minNodes*slots),
		"--min-np", strconv.Itoa(minNodes*slots),
		"--max-np", strconv.Itoa(maxNodes*slots),
		"--host-discovery-script", wire.ShellJoin(append(slices.Clone(hosts), trainer)),
	)
	if cooldown[0] > 0 && cooldown[1] >= cooldown[0] {
		args = append(args, "--blacklist-cooldown-range", strconv.Itoa(cooldown[0]), strconv.Itoa(cooldown[1]))
	}
	return append(args, argv...)
}

// HostLines is a host file's content: "node:slots" per line, in order.
func HostLines(nodes []string, slots int) []byte {
	var b strings.Builder
	for _, n := range nodes {
		fmt.Fprintf(&b, "%s:%d\n", n, max(1, slots))
	}
	return []byte(b.String())
}

// HostFile is where the runner keeps a Horovod Trainer's current hosts,
// "node:slots" per line, replaced atomically each round; `bftrainer hosts`
// prints it (ReadHosts).
func HostFile(stateDir, trainer string) string { return filepath.Join(stateDir, "hosts", trainer) }

// seenFile is where `bftrainer hosts`, run by horovodrun as the Trainer's
// owner, tells the runner what horovodrun's discovery has read and acted
// on: the runner's handshake with Horovod's discovery. Root creates it
// (and empties it whenever the host file changes) and gives it to the
// owner; the owner can write only it.
func seenFile(stateDir, trainer string) string { return HostFile(stateDir, trainer) + ".seen" }

// seenAgain ends the seen file once the discovery script has printed the
// same host file twice in a row. Horovod's discovery is one loop — run the
// script, update its hosts and notify the workers, wait a second, run the
// script again — so the second call proves that the result of the first
// was applied: the host file's content alone only proves that the script
// printed it, not that horovodrun has read the script's output yet.
const seenAgain = "# read again\n"

// ReadHosts returns a Horovod Trainer's host file, and tells the runner
// that horovodrun's discovery read it: the content on the first call
// after a change, the content and seenAgain on the next.
func ReadHosts(stateDir, trainer string) ([]byte, error) {
	b, err := os.ReadFile(HostFile(stateDir, trainer))
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(seenFile(stateDir, trainer), os.O_RDWR|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return b, nil
	}
	defer f.Close()
	prev, _ := io.ReadAll(io.LimitReader(f, int64(len(b)+len(seenAgain)+1)))
	mark := b
	if bytes.Equal(prev, b) || bytes.Equal(prev, seenMark(b)) {
		mark = seenMark(b)
	}
	if !bytes.Equal(prev, mark) && f.Truncate(0) == nil {
		f.WriteAt(mark, 0)
	}
	return b, nil
}

// seenMark is the seen file once the discovery printed content twice.
func seenMark(content []byte) []byte { return append(slices.Clone(content), seenAgain...) }

// writeHosts replaces the Trainer's host file atomically (horovodrun
// reads it every second and must never see half of it); changed reports
// that it differed.
func writeHosts(t *Run, content []byte) (changed bool, err error) {
	p := HostFile(t.StateDir(), t.ID)
	if old, err := os.ReadFile(p); err == nil && bytes.Equal(old, content) {
		return false, nil
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return false, err
	}
	// Emptied before the change: a read of the old file recorded after
	// this differs from the new content, and a read twice of an earlier
	// file with the same content (A, B, A) counts for nothing.
	if err := makeSeen(seenFile(t.StateDir(), t.ID), t.Rec.Owner); err != nil {
		return false, err
	}
	// 0644: horovodrun runs as the Trainer's owner.
	return true, atomicfile.WriteFile(p, content, 0o644, false)
}

// makeSeen creates the handshake file, the owner's, if it is not there,
// and empties it if it is.
func makeSeen(path, owner string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
	if errors.Is(err, os.ErrExist) {
		return os.Truncate(path, 0)
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup(owner)
	if err != nil {
		return err
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return f.Chown(uid, gid)
}

// waitSeen waits, at most the discovery wait, until horovodrun's
// discovery has acted on content (the script printed it twice: see
// seenAgain); it reports whether it did.
func (h *horovod) waitSeen(ctx context.Context, t *Run, content []byte) bool {
	deadline := time.Now().Add(h.wait)
	p := seenFile(t.StateDir(), t.ID)
	want := seenMark(content)
	for {
		if b, err := os.ReadFile(p); err == nil && bytes.Equal(b, want) {
			return true
		}
		if !time.Now().Before(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Apply: new hosts are recorded on their nodes (a fenced node refuses,
// and is not listed), the host file lists them, removed hosts leave the
// file — and once the discovery read it, their workers are killed by us
// (Horovod never kills them) — and the driver runs while the Trainer has
// hosts.
func (h *horovod) Apply(ctx context.Context, t *Run) []Action {
	spec, err := DecodeSpec(t.Want.Spec)
	if err != nil {
		return []Action{{Trainer: t.ID, Op: "start", Err: err}}
	}
	acts := t.StartNodes(ctx, "add", t.Added(), func(string) wire.Launch { return wire.Launch{Hosted: true} })
	var listed []string
	for _, n := range t.Want.Nodes {
		if _, ok := t.Rec.Nodes[n]; ok {
			listed = append(listed, n)
		}
	}
	content := HostLines(listed, spec.Slots())
	ch, err := writeHosts(t, content)
	if err != nil {
		return append(acts, Action{Trainer: t.ID, Op: "hosts", Err: err})
	}
	if ch {
		acts = append(acts, Action{Trainer: t.ID, Op: "hosts", Note: fmt.Sprintf("%d host(s): %s", len(listed), strings.Join(listed, ","))})
	}
	removed := t.Removed()
	if len(t.Want.Nodes) == 0 && t.Role(driverRole) != nil {
		// Horovod dies when no host of the previous set remains; stop it
		// instead, and start it again (from the job's checkpoint) later.
		if a, ok := t.StopRole(ctx, driverRole, "driver-stop"); a.Op != "" || !ok {
			acts = append(acts, a)
		}
	} else if len(removed) > 0 && t.Role(driverRole) != nil && !h.waitSeen(ctx, t, content) {
		acts = append(acts, Action{Trainer: t.ID, Op: "hosts", Note: fmt.Sprintf("horovodrun's discovery did not read the host file within %v; removing %s anyway", h.wait, strings.Join(removed, ","))})
	}
	acts = append(acts, t.StopNodes(ctx, removed)...)
	if len(listed) > 0 && t.Role(driverRole) == nil {
		hosts := append(t.Self(), "hosts")
		argv := HorovodArgs(h.s.Command, hosts, t.ID, t.Want.Min, t.Want.Max, spec.Slots(), h.cooldown, spec.Argv)
		workdir := spec.Workdir
		if workdir == "" {
			workdir = "/"
		}
		a, _ := t.StartRole(ctx, driverRole, "driver-start", wire.Launch{Argv: argv, Workdir: workdir, Env: t.Env(spec, nil)})
		acts = append(acts, a)
	}
	return acts
}

// Stop stops the driver first (or it would start workers on the hosts
// about to be cleared), drops the host file, then kills the workers.
func (h *horovod) Stop(ctx context.Context, t *Run) ([]Action, bool) {
	var acts []Action
	if t.Role(driverRole) != nil {
		a, ok := t.StopRole(ctx, driverRole, "driver-stop")
		acts = append(acts, a)
		if !ok {
			return acts, false
		}
	}
	for _, p := range []string{HostFile(t.StateDir(), t.ID), seenFile(t.StateDir(), t.ID)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			acts = append(acts, Action{Trainer: t.ID, Op: "hosts", Err: err})
		}
	}
	a, done := t.StopAll(ctx)
	return append(acts, a...), done
}

// Ended: the driver's exit is the Trainer's; a driver that vanished is
// started again.
func (h *horovod) Ended(t *Run, roles map[string]Seen) (*Exit, []Action) {
	s, ok := roles[driverRole]
	switch {
	case !ok || !s.Known:
	case s.Gone:
		delete(t.Rec.Roles, driverRole)
		return nil, []Action{{Trainer: t.ID, Op: "gone", Note: "horovodrun vanished without an exit; it is started again"}}
	case s.Exited:
		st := Failed
		if s.Code == 0 {
			st = Finished
		}
		return &Exit{Trainer: t.ID, Status: st, Note: fmt.Sprintf("horovodrun exited %d", s.Code)}, nil
	}
	return nil, nil
}
