package trainer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/bftrainer/bftrainer/names"
	"github.com/bftrainer/bftrainer/trainer/wire"
)

// Transport runs "bftrainer node-agent ARGS…" as root on a node, with
// stdin as its standard input, and returns its standard output.
type Transport interface {
	Agent(ctx context.Context, node string, args []string, stdin []byte) ([]byte, error)
}

// AgentError is a node agent that failed or could not be reached.
type AgentError struct {
	Node        string
	Op          string
	Unreachable bool // the node did not answer (ssh could not connect)
	Stderr      string
	Err         error
}

func (e *AgentError) Error() string {
	what := "failed"
	if e.Unreachable {
		what = "unreachable"
	}
	msg := fmt.Sprintf("%s on %s %s: %v", e.Op, e.Node, what, e.Err)
	if s := strings.TrimSpace(e.Stderr); s != "" {
		msg += ": " + lastLines(s, 3)
	}
	return msg
}

func (e *AgentError) Unwrap() error { return e.Err }

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// Local runs the node agent on this machine: Argv is the command that
// runs bftrainer (its path, and --config FILE when there is one).
type Local struct {
	Argv []string
}

// Agent runs the node agent as a child process, never through a shell.
func (l Local) Agent(ctx context.Context, node string, args []string, stdin []byte) ([]byte, error) {
	if err := names.ValidateNode(node); err != nil {
		return nil, err
	}
	if len(l.Argv) == 0 {
		return nil, errors.New("local transport: no bftrainer command")
	}
	argv := append(append(append([]string{}, l.Argv[1:]...), "node-agent"), args...)
	return runAgent(exec.CommandContext(ctx, l.Argv[0], argv...), node, op(args), stdin, false)
}

// SSH runs the node agent over the system OpenSSH client, as User (root)
// on the node, non-interactively. Node names reach ssh only after
// names.ValidateNode (letters, digits, - _ ., never a leading '-');
// the remote command is one string of individually quoted words; the
// launch itself travels on standard input.
type SSH struct {
	Program        string        // the ssh client; "" means ssh
	Config         string        // ssh -F FILE; "" means the user's and system defaults
	Identity       string        // ssh -i FILE
	User           string        // "" means root
	ConnectTimeout time.Duration // 0 means 10 s
	Remote         []string      // the command that runs bftrainer on the nodes (path, --config FILE)
}

// Command builds the ssh command that runs remote (argv on the node) on
// node. It is exported for tests and tools; Agent uses it.
func (s SSH) Command(ctx context.Context, node string, remote []string) (*exec.Cmd, error) {
	if err := names.ValidateNode(node); err != nil {
		return nil, err
	}
	if len(remote) == 0 {
		return nil, errors.New("ssh: empty remote command")
	}
	user := s.User
	if user == "" {
		user = "root"
	}
	if err := names.ValidateUser(user); err != nil {
		return nil, err
	}
	timeout := s.ConnectTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	prog := s.Program
	if prog == "" {
		prog = "ssh"
	}
	args := []string{}
	if s.Config != "" {
		args = append(args, "-F", s.Config)
	}
	// BatchMode: never prompt (no password, no passphrase, no unknown host
	// key question); -T: no terminal; ConnectTimeout bounds a dead node.
	args = append(args, "-o", "BatchMode=yes", "-o", "ConnectTimeout="+strconv.Itoa(max(1, int(timeout.Round(time.Second)/time.Second))), "-T")
	if s.Identity != "" {
		args = append(args, "-i", s.Identity)
	}
	// "--" after the destination: OpenSSH parses options after the host
	// name too, and the command is no option.
	args = append(args, user+"@"+node, "--", wire.ShellJoin(remote))
	return exec.CommandContext(ctx, prog, args...), nil
}

// Agent runs the node agent on node over ssh.
func (s SSH) Agent(ctx context.Context, node string, args []string, stdin []byte) ([]byte, error) {
	cmd, err := s.Command(ctx, node, append(append(append([]string{}, s.Remote...), "node-agent"), args...))
	if err != nil {
		return nil, &AgentError{Node: node, Op: op(args), Err: err}
	}
	return runAgent(cmd, node, op(args), stdin, true)
}

func op(args []string) string {
	if len(args) == 0 {
		return "node-agent"
	}
	return args[0]
}

// runAgent runs cmd and sorts its failures: ssh exits 255 when it could
// not connect or authenticate (the node agent itself never exits 255).
func runAgent(cmd *exec.Cmd, node, op string, stdin []byte, viaSSH bool) ([]byte, error) {
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	cmd.WaitDelay = 2 * time.Second // a remote that keeps our pipes open cannot hang us
	err := cmd.Run()
	if err == nil {
		return out.Bytes(), nil
	}
	ae := &AgentError{Node: node, Op: op, Stderr: errb.String(), Err: err}
	var ee *exec.ExitError
	if viaSSH && errors.As(err, &ee) && ee.ExitCode() == 255 {
		ae.Unreachable = true
	}
	if !errors.As(err, &ee) {
		ae.Unreachable = viaSSH // could not even run ssh, or the context ended
	}
	return out.Bytes(), ae
}
