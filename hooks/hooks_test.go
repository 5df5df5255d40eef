package hooks

import (
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
		{"lsf", map[string]string{"LSB_JOBID": "42"}, nil, nameLSF},
		{"pbs job environment", map[string]string{"PBS_JOBID": "7.s"}, nil, namePBS},
		{"pbs prologue by name", nil, []string{"/var/spool/pbs/mom_priv/prologue", "7.s", "u", "g"}, namePBS},
		{"torque sister epilogue by name", nil, []string{"epilogue.parallel"}, namePBS},
		{"slurm wins over stray variables", map[string]string{"SLURM_SCRIPT_CONTEXT": "prolog_slurmd", "LSB_JOBID": "1", "PBS_JOBID": "2"}, nil, Slurm},
		{"empty values do not count", map[string]string{"SLURM_JOB_ID": "", "LSB_JOBID": "3"}, nil, nameLSF},
		{"nothing", map[string]string{"PATH": "/bin"}, []string{"pre_exec"}, ""},
		{"no args", nil, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := Builtin().Detect(Input{Env: MapEnv(tt.env), Args: tt.args})
			if ok != (tt.want != "") {
				t.Fatalf("Detect ok = %v, want %v", ok, tt.want != "")
			}
			if got.Name != tt.want {
				t.Fatalf("Detect = %q, want %q", got.Name, tt.want)
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
