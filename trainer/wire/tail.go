package wire

import (
	"errors"
	"path/filepath"
	"strings"
)

// TailRequest asks a node agent for the end of a Trainer's progress log
// ("node-agent tail NODE TRAINER", on standard input): the file at Path,
// absolute, read as the owner of the Trainer's launch on the node.
type TailRequest struct {
	Path string `json:"path"`
	Run  string `json:"run"` // the Trainer's run: a launch of another submission of the name is refused
}

// Tail is the end of a progress log: its last bytes (at most MaxTail),
// where they start in the file, and the file's size. Missing is set when
// there is no such file (yet): not an error.
type Tail struct {
	Missing bool   `json:"missing,omitempty"`
	Size    int64  `json:"size"`
	Offset  int64  `json:"offset"` // of Data's first byte: 0 when Data is the whole file
	Data    []byte `json:"data,omitempty"`
}

// MaxTail bounds the bytes of a progress log a node agent returns.
const MaxTail = 16 << 10

// ValidateLogPath checks a progress log's path as a node agent receives
// it: absolute, clean, no NUL.
func ValidateLogPath(p string) error {
	switch {
	case p == "":
		return errors.New("progress log: empty path")
	case strings.ContainsRune(p, 0):
		return errors.New("progress log: NUL in path")
	case !filepath.IsAbs(p):
		return errors.New("progress log: path " + p + " is not absolute")
	}
	return nil
}
