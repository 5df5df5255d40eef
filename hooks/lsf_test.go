package hooks

import (
	"io/fs"
	"testing"

	"github.com/bftrainer/bftrainer/names"
)

// files is a readFile over an in-memory set of files.
func files(m map[string]string) func(string) ([]byte, error) {
	return func(path string) ([]byte, error) {
		data, ok := m[path]
		if !ok {
			return nil, &fs.PathError{Op: "open", Path: path, Err: fs.ErrNotExist}
		}
		return []byte(data), nil
	}
}

// lsfJob returns the environment LSF's documentation describes for a job on
// hostA (2 slots) and hostB (1 slot); not recorded from a real LSF.
func lsfJob() map[string]string {
	return map[string]string{
		"LSB_JOBID":         "4242",
		"LSB_MCPU_HOSTS":    "hostA 2 hostB 1",
		"LSB_HOSTS":         "hostA hostA hostB",
		"LSB_DJOB_HOSTFILE": "/tmp/lsf/4242.hostfile",
		"LSB_SUB_USER":      "alice",
		"USER":              "root",
	}
}

func TestParseLSF(t *testing.T) {
	fsys := files(map[string]string{"/tmp/lsf/4242.hostfile": "hostC\nhostC\n\n  hostD  \r\nhostC\n"})
	tests := []struct {
		name     string
		env      map[string]string
		context  string
		hostname string
		want     string
	}{
		{"pre_exec reclaims all hosts", lsfJob(), "pre_exec", "hostA", "lsf|pre_exec|reclaim|4242|alice|hostA,hostB|hostA"},
		{"post_exec releases", lsfJob(), "post_exec", "hostA", "lsf|post_exec|release|4242|alice|hostA,hostB|hostA"},
		{"host_pre_exec kills locally", lsfJob(), "host_pre_exec", "hostB", "lsf|host_pre_exec|kill-local|4242|alice|hostA,hostB|hostB"},
		{"host_post_exec cleans up", lsfJob(), "host_post_exec", "hostB", "lsf|host_post_exec|cleanup-local|4242|alice|hostA,hostB|hostB"},
		{"job-level hostname optional", lsfJob(), "pre_exec", "", "lsf|pre_exec|reclaim|4242|alice|hostA,hostB|"},
		{"LSB_HOSTS deduplicated", with(lsfJob(), "LSB_MCPU_HOSTS", "-"), "pre_exec", "hostA", "lsf|pre_exec|reclaim|4242|alice|hostA,hostB|hostA"},
		{"host file", with(lsfJob(), "LSB_MCPU_HOSTS", "-", "LSB_HOSTS", "-"), "pre_exec", "hostC", "lsf|pre_exec|reclaim|4242|alice|hostC,hostD|hostC"},
		{"array element", with(lsfJob(), "LSB_JOBINDEX", "7"), "pre_exec", "hostA", "lsf|pre_exec|reclaim|4242[7]|alice|hostA,hostB|hostA"},
		{"index 0 is not an array", with(lsfJob(), "LSB_JOBINDEX", "0"), "pre_exec", "hostA", "lsf|pre_exec|reclaim|4242|alice|hostA,hostB|hostA"},
		{"USER when no LSB_SUB_USER", with(lsfJob(), "LSB_SUB_USER", "-"), "post_exec", "hostA", "lsf|post_exec|release|4242|root|hostA,hostB|hostA"},
		{"no user", with(lsfJob(), "LSB_SUB_USER", "-", "USER", "-"), "post_exec", "hostA", "lsf|post_exec|release|4242||hostA,hostB|hostA"},
		{"host hook without hosts falls back to its host",
			with(lsfJob(), "LSB_MCPU_HOSTS", "-", "LSB_HOSTS", "-", "LSB_DJOB_HOSTFILE", "-"), "host_pre_exec", "hostB",
			"lsf|host_pre_exec|kill-local|4242|alice|hostB|hostB"},
		{"fully qualified names kept", with(lsfJob(), "LSB_MCPU_HOSTS", "a.example.org 4 b.example.org 4"), "pre_exec", "a.example.org",
			"lsf|pre_exec|reclaim|4242|alice|a.example.org,b.example.org|a.example.org"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseLSF(MapEnv(tt.env), fsys, tt.context, tt.hostname)
			if err != nil {
				t.Fatalf("ParseLSF: %v", err)
			}
			if got, want := callString(c), tt.want; got != want {
				t.Fatalf("ParseLSF = %q, want %q", got, want)
			}
		})
	}
}

func TestParseLSFErrors(t *testing.T) {
	fsys := files(map[string]string{"/bad": "hostA\nhost;B\n"})
	noHosts := with(lsfJob(), "LSB_MCPU_HOSTS", "-", "LSB_HOSTS", "-", "LSB_DJOB_HOSTFILE", "-")
	tests := []struct {
		name     string
		env      map[string]string
		context  string
		hostname string
		errText  string
		is       error
		partial  string
	}{
		{"unknown context", lsfJob(), "eexec", "hostA", `unknown hook "eexec"`, nil, "lsf||ignore||||"},
		{"no job id", with(lsfJob(), "LSB_JOBID", "-"), "pre_exec", "hostA", "LSB_JOBID is not set", nil, "lsf|pre_exec|reclaim||||hostA"},
		{"bad job id", with(lsfJob(), "LSB_JOBID", "42 43"), "pre_exec", "hostA", `job id "42 43"`, names.ErrJob, "lsf|pre_exec|reclaim||||hostA"},
		{"bad array index", with(lsfJob(), "LSB_JOBINDEX", "1]"), "pre_exec", "hostA", `LSB_JOBINDEX "1]" is not a number`, nil, "lsf|pre_exec|reclaim||||hostA"},
		{"job-level without hosts", noHosts, "pre_exec", "hostA", "none of LSB_MCPU_HOSTS", nil, "lsf|pre_exec|reclaim|4242|alice||hostA"},
		{"odd LSB_MCPU_HOSTS", with(lsfJob(), "LSB_MCPU_HOSTS", "hostA 2 hostB"), "pre_exec", "hostA", "LSB_MCPU_HOSTS: \"hostA 2 hostB\" is not host/count pairs", nil, "lsf|pre_exec|reclaim|4242|alice||hostA"},
		{"count not a number", with(lsfJob(), "LSB_MCPU_HOSTS", "hostA two"), "pre_exec", "hostA", `slot count "two" of host "hostA"`, nil, "lsf|pre_exec|reclaim|4242|alice||hostA"},
		{"bad host name", with(lsfJob(), "LSB_MCPU_HOSTS", "host`id` 1"), "pre_exec", "hostA", "LSB_MCPU_HOSTS: node name \"host`id`\"", names.ErrNode, "lsf|pre_exec|reclaim|4242|alice||hostA"},
		{"missing host file", with(noHosts, "LSB_DJOB_HOSTFILE", "/nope"), "pre_exec", "hostA", "LSB_DJOB_HOSTFILE: read host file", fs.ErrNotExist, "lsf|pre_exec|reclaim|4242|alice||hostA"},
		{"bad name in host file", with(noHosts, "LSB_DJOB_HOSTFILE", "/bad"), "pre_exec", "hostA", `node name "host;B"`, names.ErrNode, "lsf|pre_exec|reclaim|4242|alice||hostA"},
		{"host hook without hostname", lsfJob(), "host_pre_exec", "", "local host name is unknown", nil, "lsf|host_pre_exec|kill-local||||"},
		{"bad hostname", lsfJob(), "host_pre_exec", "a b", `local host: node name "a b"`, names.ErrNode, "lsf|host_pre_exec|kill-local||||"},
		{"bad user", with(lsfJob(), "LSB_SUB_USER", "-bob"), "pre_exec", "hostA", `LSB_SUB_USER: user "-bob"`, names.ErrUser, "lsf|pre_exec|reclaim|4242|||hostA"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseLSF(MapEnv(tt.env), fsys, tt.context, tt.hostname)
			wantParseError(t, c, err, tt.errText, tt.is, tt.partial)
		})
	}
}
