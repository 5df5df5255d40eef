package gridengine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// packages are Debian 12's Grid Engine packages the cell runs
// (Son of Grid Engine 8.1.9).
var packages = []string{"gridengine-master", "gridengine-exec", "gridengine-client"}

// debconfAnswers keep the packages from configuring a cell of their own
// in /var/lib/gridengine (the lab makes its own, privately); the other
// answers are only asked when the first is true.
const debconfAnswers = `gridengine-common shared/gridengineconfig boolean false
gridengine-common shared/gridenginecell string default
gridengine-common shared/gridenginemaster string localhost
`

// policyRC is a policy-rc.d that forbids every init script action: the
// packages' maintainer scripts must not start system daemons (an
// sge_execd, sge_qmaster or the MTA that mailx pulls in).
const policyRC = "/usr/sbin/policy-rc.d"

// Install installs packages with apt-get, as root, unless they are
// present: it answers debconf first, puts a policy-rc.d in place while
// it runs (unless one is already there, which it leaves alone), waits up
// to 15 minutes for another dpkg to finish, and runs apt-get update
// only when the package lists do not know the packages.
func Install(ctx context.Context, logf func(format string, args ...any)) error {
	if Need() == nil {
		return nil
	}
	if os.Geteuid() != 0 {
		return errors.New("install: needs root")
	}
	if logf == nil {
		logf = func(string, ...any) {}
	}
	sel := exec.CommandContext(ctx, "debconf-set-selections")
	sel.Stdin = strings.NewReader(debconfAnswers)
	if out, err := sel.CombinedOutput(); err != nil {
		return fmt.Errorf("install: debconf-set-selections: %w: %s", err, bytes.TrimSpace(out))
	}
	if _, err := os.Stat(policyRC); os.IsNotExist(err) {
		if err := os.WriteFile(policyRC, []byte("#!/bin/sh\nexit 101\n"), 0o755); err != nil {
			return fmt.Errorf("install: %w", err)
		}
		defer os.Remove(policyRC)
	}
	apt := func(args ...string) error {
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive", "PATH="+sbinPath)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("apt-get %s: %w: %s", strings.Join(args, " "), err, tailLines(out, 10))
		}
		return nil
	}
	install := append([]string{"install", "-y", "-q", "-o", "DPkg::Lock::Timeout=900", "--no-install-recommends"}, packages...)
	logf("gridengine: apt-get %s", strings.Join(install, " "))
	if err := apt(install...); err != nil {
		logf("gridengine: %v; updating the package lists", err)
		if err := apt("update", "-q", "-o", "DPkg::Lock::Timeout=900"); err != nil {
			return fmt.Errorf("install: %w", err)
		}
		if err := apt(install...); err != nil {
			return fmt.Errorf("install: %w", err)
		}
	}
	return Need()
}

func tailLines(b []byte, n int) string {
	ls := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n")
}
