package wire

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/bftrainer/bftrainer/names"
)

// RunEnv is the environment variable that marks every process of one
// launch. The supervisor puts it first in the program's environment, so
// every descendant inherits it unless it clears its environment, and a
// scan of /proc finds it in the first bytes it reads.
const RunEnv = "BFTRAINER_RUN"

// HostEnv is Horovod's per-worker host name. Elastic Horovod starts its
// workers from the driver on the controller, over its own ssh, with the
// driver's environment (so with the driver's run token, whose node is the
// controller) plus this variable: it is how a node recognises a Horovod
// worker of ours that runs on it.
const HostEnv = "HOROVOD_HOSTNAME"

// ControllerNode is the registry key of the processes the runner keeps on
// the controller (torchrun's rendezvous store, the horovodrun driver). It
// is a valid node name that no cluster uses, so those processes never
// share a key with a Trainer node.
const ControllerNode = "_controller"

// Token names one launch: the Trainer, the node it runs on and a fresh
// nonce, written "trainer/node/nonce". Neither a Trainer name nor a node
// name can contain '/'.
type Token struct {
	Trainer, Node, Nonce string
}

func (t Token) String() string { return t.Trainer + "/" + t.Node + "/" + t.Nonce }

// NewToken returns a token with a fresh random nonce.
func NewToken(trainer, node string) Token {
	return Token{Trainer: trainer, Node: node, Nonce: NewRun()}
}

// NewRun returns a fresh identity: 16 lowercase hex digits.
func NewRun() string {
	b := make([]byte, 8)
	rand.Read(b) // never fails on Linux (Go 1.24+)
	return hex.EncodeToString(b)
}

// ParseToken reads a token written by String.
func ParseToken(s string) (Token, error) {
	parts := strings.Split(s, "/")
	if len(parts) != 3 {
		return Token{}, fmt.Errorf("run token %q: want trainer/node/nonce", s)
	}
	t := Token{Trainer: parts[0], Node: parts[1], Nonce: parts[2]}
	if err := names.ValidateTrainer(t.Trainer); err != nil {
		return Token{}, fmt.Errorf("run token: %w", err)
	}
	if err := names.ValidateNode(t.Node); err != nil {
		return Token{}, fmt.Errorf("run token: %w", err)
	}
	if t.Nonce == "" || len(t.Nonce) > 64 || strings.Trim(t.Nonce, "0123456789abcdef") != "" {
		return Token{}, fmt.Errorf("run token %q: nonce must be 1 to 64 lowercase hex digits", s)
	}
	return t, nil
}
