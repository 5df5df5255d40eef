package hooks

import (
	"errors"
	"strings"
	"testing"
)

func TestDetect(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want string // "" for not detected
	}{
		{"slurm ctld hook", envOf(t, labPrologSlurmctld), []string{"/usr/sbin/bftrainer"}, Slurm},
		{"slurm node hook", envOf(t, labPrologN1), nil, Slurm},
		{"slurm job id only", map[string]string{"SLURM_JOB_ID": "5"}, nil, Slurm},
		{"lsf", map[string]string{"LSB_JOBID": "42"}, nil, LSF},
		{"pbs job environment", map[string]string{"PBS_JOBID": "7.s"}, nil, PBS},
		{"pbs prologue by name", nil, []string{"/var/spool/pbs/mom_priv/prologue", "7.s", "u", "g"}, PBS},
		{"torque sister epilogue by name", nil, []string{"epilogue.parallel"}, PBS},
		{"slurm wins over stray variables", map[string]string{"SLURM_SCRIPT_CONTEXT": "prolog_slurmd", "LSB_JOBID": "1", "PBS_JOBID": "2"}, nil, Slurm},
		{"empty values do not count", map[string]string{"SLURM_JOB_ID": "", "LSB_JOBID": "3"}, nil, LSF},
		{"nothing", map[string]string{"PATH": "/bin"}, []string{"bftrainer", "hook"}, ""},
		{"no args", nil, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := Detect(MapEnv(tt.env), tt.args)
			if ok != (tt.want != "") {
				t.Fatalf("Detect ok = %v, want %v", ok, tt.want != "")
			}
			if got != tt.want {
				t.Fatalf("Detect = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestActionString(t *testing.T) {
	tests := []struct {
		a    Action
		want string
	}{
		{Ignore, "ignore"}, {Reclaim, "reclaim"}, {Release, "release"},
		{KillLocal, "kill-local"}, {CleanupLocal, "cleanup-local"}, {Action(42), "Action(42)"},
	}
	for _, tt := range tests {
		if got, want := tt.a.String(), tt.want; got != want {
			t.Fatalf("Action(%d).String() = %q, want %q", int(tt.a), got, want)
		}
	}
	var zero Call
	if got, want := zero.Action, Ignore; got != want {
		t.Fatalf("zero Call's Action = %v, want %v", got, want)
	}
}

func TestValidateNodeName(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		errText string // "" for valid
	}{
		{"short", "n1", ""},
		{"fqdn", "cn01.cluster.example.org", ""},
		{"underscore and dash", "gpu_node-7", ""},
		{"digits first", "001", ""},
		{"longest", strings.Repeat("a", 253), ""},
		{"empty", "", "node name is empty"},
		{"too long", strings.Repeat("a", 254), "longer than 253"},
		{"option-like", "-oProxyCommand=x", "starts with '-'"},
		{"blank", "n 1", `character ' ' at offset 1`},
		{"quote", "n'1", `character '\'' at offset 1`},
		{"slash", "../etc", `character '/' at offset 2`},
		{"brackets", "n[1]", `character '[' at offset 1`},
		{"newline", "n1\nn2", `character '\n' at offset 2`},
		{"non-ASCII", "nœud", `character 'œ' at offset 1`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateNodeName(tt.in)
			if tt.errText == "" {
				if err != nil {
					t.Fatalf("ValidateNodeName(%q): %v", tt.in, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.errText) || !errors.Is(err, ErrNodeName) {
				t.Fatalf("ValidateNodeName(%q) = %v, want ErrNodeName containing %q", tt.in, err, tt.errText)
			}
		})
	}
}

func TestValidateJobID(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		valid bool
	}{
		{"slurm", "123", true},
		{"slurm array", "123_4", true},
		{"lsf array", "123[4]", true},
		{"pbs", "123.pbs01.example.org", true},
		{"pbs array", "123[].pbs01", true},
		{"empty", "", false},
		{"option-like", "-1", false},
		{"slash", "1/2", false},
		{"shell", "1$(id)", false},
		{"blank", "1 2", false},
		{"too long", strings.Repeat("1", 256), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateJobID(tt.in)
			if got, want := err == nil, tt.valid; got != want {
				t.Fatalf("ValidateJobID(%q) = %v, want valid %v", tt.in, err, want)
			}
			if err != nil && !errors.Is(err, ErrJobID) {
				t.Fatalf("ValidateJobID(%q) = %v, not ErrJobID", tt.in, err)
			}
		})
	}
}
