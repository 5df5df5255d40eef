package agent

import "testing"

func TestParseStat(t *testing.T) {
	long := "123 (sleep) S 1 120 120 0 -1 4194304 101 0 1 0 0 0 0 0 20 0 1 0 135353 3133440"
	tests := []struct {
		name string
		in   string
		want Proc
		ok   bool
	}{
		{"plain", "123 (sleep) S 1 120 120 0 -1", Proc{PID: 123, PPID: 1, PGID: 120, SID: 120, State: 'S', Comm: "sleep"}, true},
		{"start time", long, Proc{PID: 123, PPID: 1, PGID: 120, SID: 120, State: 'S', Comm: "sleep", Ticks: 135353}, true},
		{"comm with parens and spaces", "7 (a) b (c)) Z 2 3 4 0", Proc{PID: 7, PPID: 2, PGID: 3, SID: 4, State: 'Z', Comm: "a) b (c)"}, true},
		{"truncated", "7 (a) S 2", Proc{}, false},
		{"garbage", "nothing here", Proc{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got Proc
			ok := parseStat([]byte(tt.in), &got)
			if ok != tt.ok || (ok && got != tt.want) {
				t.Fatalf("parseStat(%q) = %+v, %v; want %+v, %v", tt.in, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestMarks(t *testing.T) {
	tests := []struct {
		name      string
		env       string
		run, host string
		job       bool
	}{
		{"ours", "BFTRAINER_RUN=t/n/ab\x00A=1\x00HOROVOD_HOSTNAME=n2", "t/n/ab", "n2", false},
		{"a longer name is not ours", "BFTRAINER_RUNX=no\x00A=1", "", "", false},
		{"a scheduler's job", "BFTRAINER_RUN=t/n/ab\x00SLURM_JOB_ID=42", "t/n/ab", "", true},
		{"a variable no scheduler registered", "BFTRAINER_RUN=t/n/ab\x00PBS_JOBID=42", "t/n/ab", "", false},
		{"zeroed", "\x00\x00\x00\x00", "", "", false},
		{"empty", "", "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run, host, job := marks([]byte(tt.env), newScanner([]string{"LSB_JOBID", "SLURM_JOB_ID"}).jobs)
			if run != tt.run || host != tt.host || job != tt.job {
				t.Fatalf("marks = %q %q %v, want %q %q %v", run, host, job, tt.run, tt.host, tt.job)
			}
		})
	}
}
