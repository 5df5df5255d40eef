package trainer

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
)

// A run secret is what makes an elastic Trainer's store process and
// workers its owner's alone (docs/elastic.md, "Who may talk to a
// Trainer"): 32 random bytes, drawn per store process, kept in the
// runner's state (root's, 0600) and handed to the store process and each
// worker in its environment only — never on a command line (ps shows
// those to everyone), never in a file another user can read. A process's
// environment is readable by its owner and root alone
// (/proc/PID/environ is 0400 and needs ptrace access to the process).
// The python side of the derivations below is
// python/bftrainer_elastic/protocol.py.

// secretEnv carries the run secret to the store process and the workers.
const secretEnv = "BFTRAINER_ELASTIC_SECRET"

// newRunSecret draws a run secret: 64 lowercase hex digits.
func newRunSecret() string {
	b := make([]byte, 32)
	rand.Read(b) // never fails (crypto/rand.Read panics rather than return short)
	return hex.EncodeToString(b)
}

// deriveKey is HMAC-SHA256(secret, "bftrainer-elastic/"+purpose): each use
// of the secret its own key.
func deriveKey(secret, purpose string) []byte {
	raw, _ := hex.DecodeString(secret)
	m := hmac.New(sha256.New, raw)
	m.Write([]byte("bftrainer-elastic/" + purpose))
	return m.Sum(nil)
}

// controlMAC is the proof a control request carries: HMAC-SHA256 under
// the control key of the connection's server nonce, the request's
// sequence number on the connection and the request, newline-separated,
// as hex. Bound to the nonce and the count, a captured request is worth
// nothing on another connection or a second time on its own.
func controlMAC(key []byte, nonce string, seq int, line string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(nonce + "\n" + strconv.Itoa(seq) + "\n" + line))
	return hex.EncodeToString(m.Sum(nil))
}
