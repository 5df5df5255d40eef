package slurm

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os/exec"
	"os/user"
	"strconv"
	"syscall"
	"time"

	"github.com/bftrainer/bftrainer/trainer"
)

// User is a throwaway Unix account: Trainers run as their owner, never
// as root, and the owner submits through the spool like any user.
type User struct {
	Name     string
	UID, GID int
}

// NewUser creates a system user (no home, no login shell) named prefix
// and a few random hex digits.
func NewUser(prefix string) (*User, error) {
	b := make([]byte, 2)
	rand.Read(b)
	name := prefix + hex.EncodeToString(b)
	useradd, err := lookPath("useradd")
	if err != nil {
		return nil, fmt.Errorf("new user: %w", err)
	}
	if out, err := exec.Command(useradd, "--system", "--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin", name).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("useradd %s: %w: %s", name, err, out)
	}
	u, err := user.Lookup(name)
	if err != nil {
		return nil, err
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("user %s: non-numeric ids", name)
	}
	return &User{Name: name, UID: uid, GID: gid}, nil
}

// Remove kills the user's processes, by PID, and deletes the account.
func (u *User) Remove() error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		ps, err := trainer.Procs()
		if err != nil {
			return err
		}
		left := 0
		for _, p := range ps {
			if !p.Dead() && procUID(p.PID) == u.UID {
				syscall.Kill(p.PID, syscall.SIGKILL)
				left++
			}
		}
		if left == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	userdel, err := lookPath("userdel")
	if err != nil {
		return err
	}
	if out, err := exec.Command(userdel, u.Name).CombinedOutput(); err != nil {
		return fmt.Errorf("userdel %s: %w: %s", u.Name, err, out)
	}
	return nil
}
