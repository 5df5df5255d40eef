package hooks

import (
	"io/fs"
	"testing"

	"github.com/bftrainer/bftrainer/names"
)

// pbsFiles holds node files as PBS writes them: one line per slot.
func pbsFiles() func(string) ([]byte, error) {
	return files(map[string]string{
		"/var/spool/pbs/aux/77.pbs01":       "cn01\ncn01\ncn02\ncn02\ncn03\n",
		"/tmp/nodefile":                     "cn05.cluster.org\ncn04.cluster.org\ncn05.cluster.org\n",
		"/var/spool/torque/aux/88.torque01": "t1\nt2\n",
		"/bad":                              "cn01\ncn 02\n",
	})
}

// Argument vectors as the documentation describes them (not recorded from a
// real PBS): OpenPBS passes the prologue job id, user and group; Torque 6
// adds job name, resource limits, queue, account, script and the hosts.
func openpbsPrologue() []string {
	return []string{"/var/spool/pbs/mom_priv/prologue", "77.pbs01", "alice", "users"}
}

func openpbsEpilogue() []string {
	return []string{"/var/spool/pbs/mom_priv/epilogue", "77.pbs01", "alice", "users",
		"job", "1234", "ncpus=2", "cput=00:00:01", "workq", "null", "0"}
}

func torquePrologue() []string {
	return []string{"/var/spool/torque/mom_priv/prologue", "88.torque01", "bob", "staff",
		"job", "nodes=2", "batch", "acct", "/var/spool/torque/mom_priv/jobs/88.torque01.SC", "t1,t2,t1"}
}

func args(base []string, prog string) []string {
	return append([]string{prog}, base[1:]...)
}

func TestParsePBS(t *testing.T) {
	home := map[string]string{"PBS_HOME": "/var/spool/pbs"}
	tests := []struct {
		name     string
		env      map[string]string
		args     []string
		hostname string
		want     string
	}{
		{"prologue from PBS_HOME/aux", home, openpbsPrologue(), "cn01", "pbs|prologue|reclaim|77.pbs01|alice|cn01,cn02,cn03|cn01"},
		{"epilogue releases", home, openpbsEpilogue(), "cn01", "pbs|epilogue|release|77.pbs01|alice|cn01,cn02,cn03|cn01"},
		{"PBS_NODEFILE wins, names kept as written", map[string]string{"PBS_NODEFILE": "/tmp/nodefile", "PBS_HOME": "/var/spool/pbs"}, openpbsPrologue(), "cn05",
			"pbs|prologue|reclaim|77.pbs01|alice|cn05.cluster.org,cn04.cluster.org|cn05"},
		{"Torque 6 host argument", nil, torquePrologue(), "t1", "pbs|prologue|reclaim|88.torque01|bob|t1,t2|t1"},
		{"Torque node file via TORQUE_HOME", map[string]string{"TORQUE_HOME": "/var/spool/torque"}, torquePrologue()[:4], "t1", "pbs|prologue|reclaim|88.torque01|bob|t1,t2|t1"},
		{"sister prologue kills locally", nil, args(torquePrologue(), "prologue.parallel"), "t2", "pbs|prologue.parallel|kill-local|88.torque01|bob|t1,t2|t2"},
		{"sister epilogue without list falls back", nil, args(openpbsPrologue(), "/x/epilogue.parallel"), "cn02", "pbs|epilogue.parallel|cleanup-local|77.pbs01|alice|cn02|cn02"},
		{"epilogue ignores argv[9] (the account)", home, args(openpbsEpilogue(), "epilogue"), "cn01", "pbs|epilogue|release|77.pbs01|alice|cn01,cn02,cn03|cn01"},
		{"job id from PBS_JOBID", map[string]string{"PBS_JOBID": "77.pbs01", "PBS_HOME": "/var/spool/pbs"}, []string{"prologue"}, "cn01", "pbs|prologue|reclaim|77.pbs01||cn01,cn02,cn03|cn01"},
		{"execjob_prologue on the primary host reclaims", home, args(openpbsPrologue(), "execjob_prologue"), "cn01", "pbs|execjob_prologue|reclaim|77.pbs01|alice|cn01,cn02,cn03|cn01"},
		{"execjob_prologue on the primary, domain ignored", home, args(openpbsPrologue(), "execjob_prologue"), "cn01.cluster.org", "pbs|execjob_prologue|reclaim|77.pbs01|alice|cn01,cn02,cn03|cn01.cluster.org"},
		{"execjob_prologue elsewhere kills locally", home, args(openpbsPrologue(), "execjob_prologue"), "cn03", "pbs|execjob_prologue|kill-local|77.pbs01|alice|cn01,cn02,cn03|cn03"},
		{"execjob_epilogue on the primary releases", home, args(openpbsPrologue(), "execjob_epilogue"), "cn01", "pbs|execjob_epilogue|release|77.pbs01|alice|cn01,cn02,cn03|cn01"},
		{"execjob_epilogue elsewhere cleans up", home, args(openpbsPrologue(), "execjob_epilogue"), "cn02", "pbs|execjob_epilogue|cleanup-local|77.pbs01|alice|cn01,cn02,cn03|cn02"},
		{"execjob_prologue without node list stays local", nil, args(openpbsPrologue(), "execjob_prologue"), "cn01", "pbs|execjob_prologue|kill-local|77.pbs01|alice|cn01|cn01"},
		{"missing aux file is no node list", map[string]string{"PBS_HOME": "/elsewhere"}, args(openpbsPrologue(), "prologue.parallel"), "cn02", "pbs|prologue.parallel|kill-local|77.pbs01|alice|cn02|cn02"},
		{"user prologue ignored", nil, args(openpbsPrologue(), "prologue.user"), "", "pbs|prologue.user|ignore|77.pbs01|||"},
		{"execjob_launch ignored", nil, args(openpbsPrologue(), "execjob_launch"), "", "pbs|execjob_launch|ignore|77.pbs01|||"},
		{"array job id", map[string]string{"PBS_NODEFILE": "/tmp/nodefile"}, []string{"prologue", "12[3].pbs01", "alice"}, "",
			"pbs|prologue|reclaim|12[3].pbs01|alice|cn05.cluster.org,cn04.cluster.org|"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parsePBS(MapEnv(tt.env), tt.args, pbsFiles(), tt.hostname)
			if err != nil {
				t.Fatalf("ParsePBS: %v", err)
			}
			if got, want := callString(c), tt.want; got != want {
				t.Fatalf("ParsePBS = %q, want %q", got, want)
			}
		})
	}
}

func TestParsePBSErrors(t *testing.T) {
	home := map[string]string{"PBS_HOME": "/var/spool/pbs"}
	tests := []struct {
		name     string
		env      map[string]string
		args     []string
		hostname string
		errText  string
		is       error
		partial  string
	}{
		{"no arguments", home, nil, "cn01", "no arguments", nil, "pbs||ignore||||"},
		{"unknown script", home, args(openpbsPrologue(), "/x/pelog"), "cn01", `unknown hook "pelog"`, nil, "pbs||ignore||||"},
		{"no job id", nil, []string{"prologue"}, "cn01", "no job id", nil, "pbs|prologue|reclaim||||cn01"},
		{"bad job id", home, []string{"prologue", "7/../../x", "alice"}, "cn01", `job id "7/../../x"`, names.ErrJob, "pbs|prologue|reclaim||||cn01"},
		{"prologue without node list", nil, openpbsPrologue(), "cn01", "no node list", nil, "pbs|prologue|reclaim|77.pbs01|alice||cn01"},
		{"epilogue without node list", map[string]string{"PBS_HOME": "/elsewhere"}, openpbsEpilogue(), "cn01", "no node list", nil, "pbs|epilogue|release|77.pbs01|alice||cn01"},
		{"missing PBS_NODEFILE", map[string]string{"PBS_NODEFILE": "/nope"}, openpbsPrologue(), "cn01", "PBS_NODEFILE: read host file", fs.ErrNotExist, "pbs|prologue|reclaim|77.pbs01|alice||cn01"},
		{"bad name in node file", map[string]string{"PBS_NODEFILE": "/bad"}, openpbsPrologue(), "cn01", `PBS_NODEFILE: node name "cn 02"`, names.ErrNode, "pbs|prologue|reclaim|77.pbs01|alice||cn01"},
		{"empty host in argument", nil, append(torquePrologue()[:9], "t1,,t2"), "t1", `argument 9: node name is empty`, names.ErrNode, "pbs|prologue|reclaim|88.torque01|bob||t1"},
		{"sister without hostname", nil, args(torquePrologue(), "prologue.parallel"), "", "local host name is unknown", nil, "pbs|prologue.parallel|kill-local||||"},
		{"bad user", home, []string{"prologue", "77.pbs01", "al ice"}, "cn01", `argument 2: user "al ice"`, names.ErrUser, "pbs|prologue|reclaim|77.pbs01|||cn01"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parsePBS(MapEnv(tt.env), tt.args, pbsFiles(), tt.hostname)
			wantParseError(t, c, err, tt.errText, tt.is, tt.partial)
		})
	}
}
