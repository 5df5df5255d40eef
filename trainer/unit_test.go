package trainer

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/names"
)

func TestParseToken(t *testing.T) {
	tests := []struct {
		name string
		in   string
		ok   bool
	}{
		{"good", "t1/n1/0a1b", true},
		{"controller", "t1/_controller/ff", true},
		{"two parts", "t1/n1", false},
		{"four parts", "t1/n1/ab/cd", false},
		{"bad trainer", "t;1/n1/ab", false},
		{"bad node", "t1/-n1/ab", false},
		{"upper nonce", "t1/n1/AB", false},
		{"empty nonce", "t1/n1/", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok, err := ParseToken(tt.in)
			if got := err == nil; got != tt.ok {
				t.Fatalf("ParseToken(%q) error %v, want ok=%v", tt.in, err, tt.ok)
			}
			if tt.ok && tok.String() != tt.in {
				t.Fatalf("round trip: %q → %q", tt.in, tok.String())
			}
		})
	}
	if a, b := NewToken("t", "n"), NewToken("t", "n"); a == b {
		t.Fatal("two tokens share a nonce")
	}
}

func TestLaunchValidate(t *testing.T) {
	good := Launch{Trainer: "t1", Node: "n1", Owner: "alice", Argv: []string{"/bin/true"}, Token: "t1/n1/ab"}
	tests := []struct {
		name string
		edit func(*Launch)
		ok   bool
	}{
		{"good", func(*Launch) {}, true},
		{"hostile argv is data", func(l *Launch) { l.Argv = append(l.Argv, hostile...) }, true},
		{"hostile env value is data", func(l *Launch) { l.Env = map[string]string{"X": "$(touch CANARY)"} }, true},
		{"node with semicolon", func(l *Launch) { l.Node = "n1;touch x"; l.Token = "t1/n1/ab" }, false},
		{"node with dash", func(l *Launch) { l.Node = "-oProxyCommand=x" }, false},
		{"node path", func(l *Launch) { l.Node = "../../etc" }, false},
		{"trainer with dollar", func(l *Launch) { l.Trainer = "$(x)" }, false},
		{"trainer with space", func(l *Launch) { l.Trainer = "a b" }, false},
		{"owner with dash", func(l *Launch) { l.Owner = "-root" }, false},
		{"owner with newline", func(l *Launch) { l.Owner = "a\nroot" }, false},
		{"token for another node", func(l *Launch) { l.Token = "t1/n2/ab" }, false},
		{"token for another trainer", func(l *Launch) { l.Token = "t2/n1/ab" }, false},
		{"no program", func(l *Launch) { l.Argv = nil }, false},
		{"NUL in argument", func(l *Launch) { l.Argv = []string{"/bin/echo", "a\x00b"} }, false},
		{"env name with semicolon", func(l *Launch) { l.Env = map[string]string{"A;B": "x"} }, false},
		{"env name with equals", func(l *Launch) { l.Env = map[string]string{"A=B": "x"} }, false},
		{"relative workdir", func(l *Launch) { l.Workdir = "tmp" }, false},
		{"bad node in list", func(l *Launch) { l.Nodes = []string{"n1", "n2 n3"} }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := good
			l.Argv = slices.Clone(good.Argv)
			tt.edit(&l)
			if err := l.Validate(); (err == nil) != tt.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

func TestTorchrunArgs(t *testing.T) {
	base := []string{"/usr/bin/python3", "-m", "torch.distributed.run"}
	flags := "/usr/bin/python3 -m torch.distributed.run --nnodes=1:3 --nproc_per_node=2 --rdzv_backend=c10d " +
		"--rdzv_endpoint=ctl:29400 --rdzv_id=t1-ab --max_restarts=100 " +
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
			got := strings.Join(TorchrunArgs(base, 1, 3, 2, "ctl:29400", "t1-ab", 100, 600*time.Second, "bftrainer-logs/t1/n1", tt.argv), " ")
			if got != tt.want {
				t.Fatalf("got  %s\nwant %s", got, tt.want)
			}
		})
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
			if last := cmd.Args[len(cmd.Args)-1]; last != ShellJoin(tt.remote) {
				t.Fatalf("the remote command is not one quoted string: %q", last)
			}
		})
	}
}

func TestParseStat(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want Proc
		ok   bool
	}{
		{"plain", "123 (sleep) S 1 120 120 0 -1", Proc{PID: 123, PPID: 1, PGID: 120, SID: 120, State: 'S', Comm: "sleep"}, true},
		{"comm with parens and spaces", "7 (a) b (c)) Z 2 3 4 0", Proc{PID: 7, PPID: 2, PGID: 3, SID: 4, State: 'Z', Comm: "a) b (c)"}, true},
		{"truncated", "7 (a) S 2", Proc{}, false},
		{"garbage", "nothing here", Proc{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := parseStat([]byte(tt.in))
			if ok != tt.ok || (ok && got != tt.want) {
				t.Fatalf("parseStat(%q) = %+v, %v; want %+v, %v", tt.in, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestEnvValue(t *testing.T) {
	env := []byte("A=1\x00BFTRAINER_RUN=t/n/ab\x00BFTRAINER_RUNX=no\x00HOROVOD_HOSTNAME=n2")
	if got := envValue(env, RunEnv); got != "t/n/ab" {
		t.Fatalf("RunEnv = %q", got)
	}
	if got := envValue(env, HostEnv); got != "n2" {
		t.Fatalf("HostEnv = %q", got)
	}
	if got := envValue(env, "B"); got != "" {
		t.Fatalf("B = %q", got)
	}
}
