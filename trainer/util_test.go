package trainer

import (
	"os"
	"strings"
	"syscall"

	"github.com/bftrainer/bftrainer/trainer/trainertest"
)

var (
	currentUserName = trainertest.CurrentUser
	tokenProcs      = trainertest.Procs
	waitFor         = trainertest.WaitFor
)

// readFile returns a file's content, "" when absent.
func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

func mkfifo(path string) error { return syscall.Mkfifo(path, 0o644) }
