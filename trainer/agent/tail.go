package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/bftrainer/bftrainer/names"
	"github.com/bftrainer/bftrainer/trainer/wire"
)

// tailTimeout bounds the owner's reader of a progress log.
const tailTimeout = 10 * time.Second

// Tail returns the end of a Trainer's progress log on the node (the
// runner parses it, trainer.LastReading), read with the permissions of
// the owner of the Trainer's launch there — never as root: the path is
// the submitter's word. Only a node with a launch of the request's run
// answers; a file that does not exist (yet) is Missing, not an error.
func (a *Agent) Tail(ctx context.Context, node, trainer string, req wire.TailRequest) (wire.Tail, error) {
	if err := names.ValidateNode(node); err != nil {
		return wire.Tail{}, err
	}
	if err := names.ValidateTrainer(trainer); err != nil {
		return wire.Tail{}, err
	}
	if err := wire.ValidateLogPath(req.Path); err != nil {
		return wire.Tail{}, err
	}
	e, ok, err := a.Registry.Entry(node, trainer)
	if err != nil {
		return wire.Tail{}, err
	}
	if !ok || (req.Run != "" && e.Run != req.Run) {
		return wire.Tail{}, fmt.Errorf("tail %s on %s: no launch of run %s here", trainer, node, req.Run)
	}
	if e.UID == os.Geteuid() {
		return ReadTail(req.Path)
	}
	if os.Geteuid() != 0 {
		return wire.Tail{}, fmt.Errorf("tail %s on %s: only root may read as %s", trainer, node, e.Owner)
	}
	own, err := a.owner(e.Owner)
	if err != nil {
		return wire.Tail{}, fmt.Errorf("tail %s on %s: %w", trainer, node, err)
	}
	if own.uid != e.UID {
		return wire.Tail{}, fmt.Errorf("tail %s on %s: %s is uid %d now, the launch's is %d", trainer, node, e.Owner, own.uid, e.UID)
	}
	return a.tailAs(ctx, own, req.Path)
}

// tailAs runs the reader ("node-agent read-tail") as the owner.
func (a *Agent) tailAs(ctx context.Context, own owner, path string) (wire.Tail, error) {
	self := a.Self
	if self == "" {
		var err error
		if self, err = os.Executable(); err != nil {
			return wire.Tail{}, err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, tailTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, self, "node-agent", "read-tail")
	cmd.Env = []string{"PATH=" + safePath}
	cmd.Dir = "/"
	cmd.Stdin = strings.NewReader(path)
	// The reader runs as the owner, who may tamper with it: its answer
	// is bounded (the tail in base64, and room for the rest).
	out, errb := &capped{n: 2*wire.MaxTail + 4096}, &capped{n: 4096}
	cmd.Stdout, cmd.Stderr = out, errb
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(own.uid), Gid: uint32(own.gid), Groups: own.groups}}
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		return wire.Tail{}, fmt.Errorf("read %s as uid %d: %w: %s", path, own.uid, err, strings.TrimSpace(errb.String()))
	}
	var t wire.Tail
	if out.over {
		return wire.Tail{}, fmt.Errorf("read %s: answer longer than %d bytes", path, out.n)
	}
	if err := json.Unmarshal(out.Bytes(), &t); err != nil {
		return wire.Tail{}, fmt.Errorf("read %s: unreadable answer: %w", path, err)
	}
	return t, nil
}

// ReadTail reads the end of the file at path, at most wire.MaxTail bytes:
// opened without blocking (a FIFO cannot hang it) and read only when it is
// a regular file.
func ReadTail(path string) (wire.Tail, error) {
	if err := wire.ValidateLogPath(path); err != nil {
		return wire.Tail{}, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if errors.Is(err, os.ErrNotExist) {
		return wire.Tail{Missing: true}, nil
	}
	if err != nil {
		return wire.Tail{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return wire.Tail{}, err
	}
	if !st.Mode().IsRegular() {
		return wire.Tail{}, fmt.Errorf("progress log %s: not a regular file", path)
	}
	size := st.Size()
	off := max(0, size-wire.MaxTail)
	buf := make([]byte, size-off)
	n, err := f.ReadAt(buf, off)
	if err != nil && !errors.Is(err, io.EOF) { // EOF: truncated meanwhile
		return wire.Tail{}, err
	}
	return wire.Tail{Size: size, Offset: off, Data: buf[:n]}, nil
}

// readTailMain is "node-agent read-tail", run as the owner: the path on
// standard input, the wire.Tail on standard output.
func readTailMain(stdin io.Reader, stdout io.Writer) error {
	b, err := io.ReadAll(io.LimitReader(stdin, 4096))
	if err != nil {
		return err
	}
	t, err := ReadTail(string(b))
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(t)
}

// capped keeps the first n bytes written to it and notes the rest.
type capped struct {
	bytes.Buffer
	n    int
	over bool
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.n - c.Len(); len(p) > room {
		c.over = true
		c.Buffer.Write(p[:max(0, room)])
		return len(p), nil
	}
	return c.Buffer.Write(p)
}
