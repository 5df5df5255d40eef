package trainer

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/names"
	"github.com/bftrainer/bftrainer/trainer/wire"
)

func TestTorchrunArgs(t *testing.T) {
	base := []string{"/usr/bin/python3", "-m", "torch.distributed.run"}
	flags := "/usr/bin/python3 -m torch.distributed.run --nnodes=1:3 --nproc_per_node=2 --rdzv_backend=c10d " +
		"--rdzv_endpoint=ctl:29400 --max_restarts=100 " +
		"--rdzv_conf=is_host=false,last_call_timeout=1,join_timeout=600 --monitor_interval=1 -r 1 -t 1 " +
		"--log_dir=bftrainer-logs/t1/n1"
	tests := []struct {
		name string
		argv []string
		want string
	}{
		{"python script: torchrun's interpreter", []string{"/usr/bin/python3", "train.py", "--steps", "5"}, flags + " train.py --steps 5"},
		{"python module", []string{"python3", "-m", "pkg.train", "--x"}, flags + " -m pkg.train --x"},
		{"script alone", []string{"/w/train.py", "--x"}, flags + " /w/train.py --x"},
		{"any program", []string{"/w/run.sh", "a b"}, flags + " --no_python /w/run.sh a b"},
		{"python -c: not a script", []string{"python3", "-c", "print(1)"}, flags + " --no_python python3 -c print(1)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := strings.Join(TorchrunArgs(base, 1, 3, 2, "ctl:29400", 100, 600*time.Second, "bftrainer-logs/t1/n1", tt.argv), " ")
			if got != tt.want {
				t.Fatalf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

// TestRendezvousID: a torchrun Trainer's rendezvous id is fresh and
// unguessable (128 random bits after its name) and never on a command
// line.
func TestRendezvousID(t *testing.T) {
	a, b := newRendezvousID("t1"), newRendezvousID("t1")
	if a == b || !regexp.MustCompile(`^t1-[0-9a-f]{32}$`).MatchString(a) {
		t.Fatalf("rendezvous ids %q %q, want t1-<32 fresh hex digits>", a, b)
	}
	for _, arg := range TorchrunArgs([]string{"torchrun"}, 1, 2, 1, "ctl:1", 1, time.Minute, "l", []string{"/w/run.sh"}) {
		if strings.Contains(arg, "rdzv_id") {
			t.Fatalf("the rendezvous id is on the command line: %q", arg)
		}
	}
}

func TestHorovodArgs(t *testing.T) {
	got := HorovodArgs([]string{"horovodrun"}, []string{"/usr/sbin/bftrainer", "--config", "/etc/b f.toml", "hosts"}, "t1", 2, 4, 2, [2]int{10, 300},
		[]string{"python3", "train.py"})
	want := []string{"horovodrun", "-np", "4", "--min-np", "4", "--max-np", "8",
		"--host-discovery-script", "/usr/sbin/bftrainer --config '/etc/b f.toml' hosts t1",
		"--blacklist-cooldown-range", "10", "300", "python3", "train.py"}
	if !slices.Equal(got, want) {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	if got, want := string(HostLines([]string{"n1", "n2"}, 2)), "n1:2\nn2:2\n"; got != want {
		t.Fatalf("HostLines = %q, want %q", got, want)
	}
}

func TestSSHCommand(t *testing.T) {
	s := SSH{Program: "/usr/bin/ssh", Config: "/etc/bft/ssh_config", Identity: "/root/.ssh/id", ConnectTimeout: 5 * time.Second,
		Remote: []string{"/usr/sbin/bftrainer", "--config", "/etc/bftrainer/b.toml"}}
	tests := []struct {
		name   string
		node   string
		remote []string
		want   string
		err    error
	}{
		{"every remote word quoted", "n01", []string{"/usr/sbin/bftrainer", "node-agent", "stop", "n01", "t 1"},
			"/usr/bin/ssh -F /etc/bft/ssh_config -o BatchMode=yes -o ConnectTimeout=5 -T -i /root/.ssh/id root@n01 -- /usr/sbin/bftrainer node-agent stop n01 't 1'", nil},
		{"hostile words stay words", "n01", []string{"echo", "$(touch CANARY)", "a;b"},
			"/usr/bin/ssh -F /etc/bft/ssh_config -o BatchMode=yes -o ConnectTimeout=5 -T -i /root/.ssh/id root@n01 -- echo '$(touch CANARY)' 'a;b'", nil},
		{"node as an option", "-oProxyCommand=touch CANARY", []string{"true"}, "", names.ErrNode},
		{"node with semicolon", "n1;touch CANARY", []string{"true"}, "", names.ErrNode},
		{"node with user", "root@n1", []string{"true"}, "", names.ErrNode},
		{"node with space", "n1 n2", []string{"true"}, "", names.ErrNode},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd, err := s.Command(context.Background(), tt.node, tt.remote)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("err = %v, want %v", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(cmd.Args, " "); got != tt.want {
				t.Fatalf("got  %s\nwant %s", got, tt.want)
			}
			if last := cmd.Args[len(cmd.Args)-1]; last != wire.ShellJoin(tt.remote) {
				t.Fatalf("the remote command is not one quoted string: %q", last)
			}
		})
	}
}
