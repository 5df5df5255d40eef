package trainertest

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// User is a throwaway account.
type User struct {
	Name     string
	UID, GID int
}

// MustUser creates a system user for the test and, when the test ends,
// kills its processes (by pid) and removes it. It skips without root.
func MustUser(tb testing.TB, prefix string) User {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root to create throwaway users")
	}
	if _, err := exec.LookPath("useradd"); err != nil {
		tb.Skip("needs useradd")
	}
	name := fmt.Sprintf("%s%04d", prefix, rand.IntN(10000))
	if out, err := exec.Command("useradd", "--system", "--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin", name).CombinedOutput(); err != nil {
		tb.Fatalf("useradd %s: %v\n%s", name, err, out)
	}
	u, err := user.Lookup(name)
	if err != nil {
		tb.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	tb.Cleanup(func() {
		deadline := time.Now().Add(10 * time.Second)
		for left := UIDProcs(uid); len(left) > 0 && time.Now().Before(deadline); left = UIDProcs(uid) {
			for _, pid := range left {
				syscall.Kill(pid, syscall.SIGKILL)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if out, err := exec.Command("userdel", name).CombinedOutput(); err != nil {
			tb.Logf("userdel %s: %v %s", name, err, out)
		}
	})
	return User{Name: name, UID: uid, GID: gid}
}
