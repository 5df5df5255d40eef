package hooks

import (
	"errors"
	"strings"
	"testing"

	"github.com/bftrainer/bftrainer/names"
)

// The environments the lab's Slurm 22.05 gave its hooks for job 1
// (`sbatch -N2`), verbatim from the project's notes on Slurm, §2.1. Slurm
// gives hooks nothing else: no PATH, no arguments.
const (
	labPrologSlurmctld = `SLURM_CLUSTER_NAME=lab SLURM_JOBID=1 SLURM_JOB_ACCOUNT=(null) SLURM_JOB_CPUS_PER_NODE=1(x2)
  SLURM_JOB_GID=0 SLURM_JOB_GROUP=root SLURM_JOB_ID=1 SLURM_JOB_NAME=wrap SLURM_JOB_NODELIST=n[1-2]
  SLURM_JOB_NUM_NODES=2 SLURM_JOB_PARTITION=main SLURM_JOB_RESTART_COUNT=0 SLURM_JOB_STDIN=/dev/null
  SLURM_JOB_STDOUT=DIR/jobs/%j.out SLURM_JOB_UID=0 SLURM_JOB_USER=root
  SLURM_JOB_WORK_DIR=DIR/jobs SLURM_SCRIPT_CONTEXT=prolog_slurmctld`
	labPrologN1 = `SLURMD_NODENAME=n1 SLURM_CLUSTER_NAME=lab SLURM_CONF=DIR/etc/slurm.conf SLURM_JOBID=1
  SLURM_JOB_CPUS_PER_NODE=1(x2) SLURM_JOB_GID=0 SLURM_JOB_ID=1 SLURM_JOB_NUM_NODES=2 SLURM_JOB_PARTITION=main
  SLURM_JOB_RESTART_COUNT=0 SLURM_JOB_STDIN=/dev/null SLURM_JOB_STDOUT=DIR/jobs/%j.out SLURM_JOB_UID=0
  SLURM_JOB_USER=root SLURM_JOB_WORK_DIR=DIR/jobs SLURM_NODELIST=n[1-2]
  SLURM_SCRIPT_CONTEXT=prolog_slurmd SLURM_UID=0`
	// "Epilog (n1): as Prolog, plus SLURM_JOB_DERIVED_EC=0
	// SLURM_JOB_EXIT_CODE2=0:0 SLURM_JOB_EXIT_CODE=0"
	labEpilogExtra = ` SLURM_JOB_DERIVED_EC=0 SLURM_JOB_EXIT_CODE2=0:0 SLURM_JOB_EXIT_CODE=0`
)

// envOf parses "K=V K=V …" (values without blanks) into a map.
func envOf(tb testing.TB, s string) map[string]string {
	tb.Helper()
	m := map[string]string{}
	for _, kv := range strings.Fields(s) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			tb.Fatalf("envOf: %q is not K=V", kv)
		}
		m[k] = v
	}
	return m
}

// with returns a copy of m with the changes applied; a "-" value deletes.
func with(m map[string]string, kv ...string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "-" {
			delete(out, kv[i])
			continue
		}
		out[kv[i]] = kv[i+1]
	}
	return out
}

// callString renders the fields of a Call tests compare.
func callString(c Call) string {
	return strings.Join([]string{c.Scheduler, c.Context, c.Action.String(), c.JobID, c.User,
		strings.Join(c.Nodes, ","), c.Local}, "|")
}

// wantParseError checks a parser's failure: an error that says errText
// (and wraps is, when set), and the partial Call it still decoded.
func wantParseError(t *testing.T, c Call, err error, errText string, is error, partial string) {
	t.Helper()
	if err == nil {
		t.Fatalf("parse = %q, want an error", callString(c))
	}
	if !strings.Contains(err.Error(), errText) {
		t.Fatalf("error %q, want it to contain %q", err, errText)
	}
	if is != nil && !errors.Is(err, is) {
		t.Fatalf("error %q is not %v", err, is)
	}
	if got := callString(c); got != partial {
		t.Fatalf("partial Call = %q, want %q", got, partial)
	}
}

func TestParseSlurm(t *testing.T) {
	ctld := envOf(t, labPrologSlurmctld)
	prolog := envOf(t, labPrologN1)
	epilog := envOf(t, labPrologN1+labEpilogExtra)
	epilog["SLURM_SCRIPT_CONTEXT"] = "epilog_slurmd"
	epilogCtld := envOf(t, labPrologSlurmctld+labEpilogExtra)
	epilogCtld["SLURM_SCRIPT_CONTEXT"] = "epilog_slurmctld"
	tests := []struct {
		name string
		env  map[string]string
		want string // callString
	}{
		{"lab PrologSlurmctld", ctld, "slurm|prolog_slurmctld|reclaim|1|root|n1,n2|"},
		{"lab EpilogSlurmctld", epilogCtld, "slurm|epilog_slurmctld|release|1|root|n1,n2|"},
		{"lab Prolog on n1", prolog, "slurm|prolog_slurmd|kill-local|1|root|n1,n2|n1"},
		{"lab Epilog on n1", epilog, "slurm|epilog_slurmd|cleanup-local|1|root|n1,n2|n1"},
		{"Prolog on n2", with(prolog, "SLURMD_NODENAME", "n2"), "slurm|prolog_slurmd|kill-local|1|root|n1,n2|n2"},
		{"job list preferred over node list", with(prolog, "SLURM_JOB_NODELIST", "n[3-4]"), "slurm|prolog_slurmd|kill-local|1|root|n3,n4|n1"},
		{"ctld falls back to SLURM_NODELIST", with(ctld, "SLURM_JOB_NODELIST", "-", "SLURM_NODELIST", "n7"), "slurm|prolog_slurmctld|reclaim|1|root|n7|"},
		{"old SLURM_JOBID only", with(ctld, "SLURM_JOB_ID", "-"), "slurm|prolog_slurmctld|reclaim|1|root|n1,n2|"},
		{"no user", with(ctld, "SLURM_JOB_USER", "-"), "slurm|prolog_slurmctld|reclaim|1||n1,n2|"},
		{"duplicates removed, order kept", with(ctld, "SLURM_JOB_NODELIST", "n[3,1,3],n1,n2"), "slurm|prolog_slurmctld|reclaim|1|root|n3,n1,n2|"},
		{"big job", with(ctld, "SLURM_JOB_NODELIST", "a[0001-0003],b[1-2]c[1-2]"), "slurm|prolog_slurmctld|reclaim|1|root|a0001,a0002,a0003,b1c1,b1c2,b2c1,b2c2|"},
		{"slurmd hook without node list falls back to its node", with(prolog, "SLURM_NODELIST", "-"), "slurm|prolog_slurmd|kill-local|1|root|n1|n1"},
		{"empty node list counts as unset", with(epilog, "SLURM_NODELIST", ""), "slurm|epilog_slurmd|cleanup-local|1|root|n1|n1"},
		{"task prolog ignored", with(prolog, "SLURM_SCRIPT_CONTEXT", "prolog_task"), "slurm|prolog_task|ignore|1|||"},
		{"srun epilog ignored", with(prolog, "SLURM_SCRIPT_CONTEXT", "epilog_srun"), "slurm|epilog_srun|ignore|1|||"},
		{"ignored context needs nothing valid", map[string]string{"SLURM_SCRIPT_CONTEXT": "epilog_task", "SLURM_JOB_ID": "1;x", "SLURM_NODELIST": "n[5-3]"}, "slurm|epilog_task|ignore||||"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseSlurm(MapEnv(tt.env))
			if err != nil {
				t.Fatalf("parseSlurm: %v", err)
			}
			if got, want := callString(c), tt.want; got != want {
				t.Fatalf("parseSlurm = %q, want %q", got, want)
			}
		})
	}
}

func TestParseSlurmErrors(t *testing.T) {
	ctld := envOf(t, labPrologSlurmctld)
	prolog := envOf(t, labPrologN1)
	tests := []struct {
		name    string
		env     map[string]string
		errText string
		is      error  // if set, errors.Is must hold
		partial string // callString of the Call returned with the error
	}{
		{"no context", with(ctld, "SLURM_SCRIPT_CONTEXT", "-"), "SLURM_SCRIPT_CONTEXT is not set", nil, "slurm||ignore||||"},
		{"unknown context", with(ctld, "SLURM_SCRIPT_CONTEXT", "prolog_bogus"), `unknown SLURM_SCRIPT_CONTEXT "prolog_bogus"`, nil, "slurm||ignore||||"},
		{"ctld without node list", with(ctld, "SLURM_JOB_NODELIST", "-"), "neither SLURM_JOB_NODELIST nor SLURM_NODELIST", nil, "slurm|prolog_slurmctld|reclaim|1|root||"},
		{"bad hostlist", with(ctld, "SLURM_JOB_NODELIST", "n[5-3]"), `SLURM_JOB_NODELIST: hostlist "n[5-3]": descending range`, nil, "slurm|prolog_slurmctld|reclaim|1|root||"},
		{"no job id", with(ctld, "SLURM_JOB_ID", "-", "SLURM_JOBID", "-"), "SLURM_JOB_ID is not set", nil, "slurm|prolog_slurmctld|reclaim||||"},
		{"bad job id", with(ctld, "SLURM_JOB_ID", "1;rm"), `job id "1;rm": character ';' at offset 1`, names.ErrJob, "slurm|prolog_slurmctld|reclaim||||"},
		{"bad user", with(ctld, "SLURM_JOB_USER", "x y"), `SLURM_JOB_USER: user "x y"`, names.ErrUser, "slurm|prolog_slurmctld|reclaim|1|||"},
		{"slurmd without node name", with(prolog, "SLURMD_NODENAME", "-"), "SLURMD_NODENAME is not set", nil, "slurm|prolog_slurmd|kill-local||||"},
		{"bad node name", with(prolog, "SLURMD_NODENAME", "-n1"), `SLURMD_NODENAME: node name "-n1": starts with '-'`, names.ErrNode, "slurm|prolog_slurmd|kill-local||||"},
		{"bad job id keeps local", with(prolog, "SLURM_JOB_ID", "$(x)"), `job id "$(x)"`, names.ErrJob, "slurm|prolog_slurmd|kill-local||||n1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseSlurm(MapEnv(tt.env))
			wantParseError(t, c, err, tt.errText, tt.is, tt.partial)
		})
	}
}
