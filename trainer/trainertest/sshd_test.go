package trainertest

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// sshTrue runs "true" on node over the sshd's client configuration and
// returns ssh's exit status (255: could not connect) and output.
func sshTrue(t *testing.T, config, node string) (int, string) {
	t.Helper()
	out, err := exec.Command("ssh", "-F", config, "-o", "ConnectTimeout=3", "root@"+node, "--", "true").CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &ee):
		return ee.ExitCode(), string(out)
	}
	t.Fatalf("ssh %s: %v", node, err)
	return 0, ""
}

// TestNodeSSHD: one sshd per node; stopping one node's leaves the
// others answering, and starting it again brings the node back with the
// same keys. Multiplexed, a stop takes the node's shared connection down
// too: the node answers nothing.
func TestNodeSSHD(t *testing.T) {
	NeedSSHD(t)
	for _, multiplex := range []bool{false, true} {
		t.Run(map[bool]string{false: "connection-each", true: "multiplexed"}[multiplex], func(t *testing.T) { testNodeSSHD(t, multiplex) })
	}
}

func testNodeSSHD(t *testing.T, multiplex bool) {
	nodes := Loopback(3)
	s, err := StartNodeSSHD(t.TempDir(), nodes, multiplex)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for n := range nodes {
		if rc, out := sshTrue(t, s.Config, n); rc != 0 {
			t.Fatalf("ssh %s: exit %d: %s", n, rc, out)
		}
	}
	// A command's shell is not a top-level one, so it reads no
	// ~/.bashrc of this machine's root (the daemon's SetEnv).
	if out, err := exec.Command("ssh", "-F", s.Config, "root@n1", "--", "echo $SHLVL").CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "2" {
		t.Errorf("SHLVL of a command's shell: %q (%v), want 2: bash would read root's ~/.bashrc", out, err)
	}
	if err := s.Stop("n2"); err != nil {
		t.Fatal(err)
	}
	if rc, out := sshTrue(t, s.Config, "n2"); rc != 255 || (!multiplex && !strings.Contains(out, "refused")) {
		t.Errorf("ssh n2 with its sshd stopped: exit %d (%s), want 255 and connection refused", rc, out)
	}
	for _, n := range []string{"n1", "n3"} {
		if rc, out := sshTrue(t, s.Config, n); rc != 0 {
			t.Errorf("ssh %s with n2's sshd stopped: exit %d: %s", n, rc, out)
		}
	}
	if err := s.Start("n2"); err != nil {
		t.Fatal(err)
	}
	if rc, out := sshTrue(t, s.Config, "n2"); rc != 0 {
		t.Errorf("ssh n2 after its sshd started again: exit %d: %s", rc, out)
	}
	if err := s.Stop("n9"); err == nil {
		t.Error("stopped the sshd of a node that has none")
	}
	s.Close()
	for n := range nodes {
		if rc, _ := sshTrue(t, s.Config, n); rc != 255 {
			t.Errorf("ssh %s after Close: exit %d, want 255", n, rc)
		}
	}
}
