package wire

import (
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"time"
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

// ParseUnix reads "seconds.fraction" (date +%s.%N, Python's time.time()
// printed) exactly: a float64 would round the nanoseconds.
func ParseUnix(s string) (time.Time, error) {
	sec, frac, _ := strings.Cut(s, ".")
	a, err := strconv.ParseInt(sec, 10, 64)
	if err != nil {
		return time.Time{}, err
	}
	var ns int64
	if frac != "" {
		if len(frac) > 9 {
			frac = frac[:9]
		}
		frac += strings.Repeat("0", 9-len(frac))
		if ns, err = strconv.ParseInt(frac, 10, 64); err != nil || ns < 0 {
			return time.Time{}, errors.New("bad fraction of a second")
		}
	}
	return time.Unix(a, ns), nil
}
