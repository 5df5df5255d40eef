package hooks

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The files of testdata/pbs were recorded on a real OpenPBS cell
// (23.06.06, commit cd7ab5e; server, scheduler, comm and MoMs pbs1-pbs3,
// each in its own network and UTS namespace; see contrib/pbs/README.md):
// what mom_priv/prologue and epilogue got (argv, environment, the node file
// $PBS_HOME/aux/JOBID of the 2-node job 0.pbssrv), what a site hook got at
// each execjob_* event of the 3-node job 1.pbssrv on every MoM, the job's
// own PBS_NODEFILE, and pbsnodes -a -F json idle and running.

// pbsFixture reads a file of testdata/pbs.
func pbsFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "pbs", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// nulFields splits a NUL-separated recording (argv, env -0).
func nulFields(b []byte) []string {
	var out []string
	for _, f := range bytes.Split(bytes.TrimSuffix(b, []byte{0}), []byte{0}) {
		out = append(out, string(f))
	}
	return out
}

func envMap(kvs []string) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

// TestPBSRealPrologue decodes the real mom_priv/prologue and epilogue
// calls as contrib/pbs/prologue makes them (it adds PBS_HOME, which the
// MoM does not pass): they run on the mother superior alone, so they are
// the job's only hook (OnlyHook) and kill on every node of the job.
func TestPBSRealPrologue(t *testing.T) {
	aux := string(pbsFixture(t, "prologue.aux"))
	read := files(map[string]string{"/var/spool/pbs/aux/0.pbssrv": aux})
	for _, tt := range []struct{ name, want string }{
		{"prologue", "pbs|prologue|reclaim|0.pbssrv|root|pbs1,pbs2|pbs1"},
		{"epilogue", "pbs|epilogue|release|0.pbssrv|root|pbs1,pbs2|pbs1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			argv := nulFields(pbsFixture(t, tt.name+".argv"))
			env := envMap(nulFields(pbsFixture(t, tt.name+".env")))
			// What the real MoM gives its scripts: no PBS_HOME, no
			// PBS_JOBID, no PBS_NODEFILE (the wrapper must add PBS_HOME).
			for _, k := range []string{"PBS_HOME", "PBS_JOBID", "PBS_NODEFILE"} {
				if _, ok := env[k]; ok {
					t.Fatalf("the recorded %s environment has %s", tt.name, k)
				}
			}
			if _, err := parsePBS(MapEnv(env), argv, read, "pbs1"); err == nil {
				t.Fatal("decoded without PBS_HOME: the node file's place is unknown")
			}
			env["PBS_HOME"] = "/var/spool/pbs" // contrib/pbs/prologue's default
			c, err := parsePBS(MapEnv(env), argv, read, "pbs1")
			if err != nil {
				t.Fatal(err)
			}
			if got := callString(c); got != tt.want {
				t.Fatalf("parsePBS = %q, want %q", got, tt.want)
			}
			if !c.OnlyHook {
				t.Fatal("not OnlyHook: OpenPBS runs no prologue on the sisters, nothing would kill there")
			}
		})
	}
}

// hookRecord is what the recording site hook wrote at each event.
type hookRecord struct {
	Event     string            `json:"event"`
	Host      string            `json:"host"`
	UID       int               `json:"uid"`
	Env       map[string]string `json:"env"`
	JobID     string            `json:"job_id"`
	Euser     string            `json:"euser"`
	Egroup    string            `json:"egroup"`
	ExecVnode string            `json:"exec_vnode"`
	VnodeList []string          `json:"vnode_list"`
	AuxExists bool              `json:"aux_exists"`
	Time      float64           `json:"time"`
}

// hookCall is the environment and arguments contrib/pbs/bftrainer_hook.py
// makes of a hook event: the job's vnodes in exec_vnode's order.
func hookCall(r hookRecord) (map[string]string, []string) {
	var nodes []string
	for _, m := range regexp.MustCompile(`\(([^:+)]+)`).FindAllStringSubmatch(r.ExecVnode, -1) {
		if !slices.Contains(nodes, m[1]) {
			nodes = append(nodes, m[1])
		}
	}
	env := map[string]string{"PBS_JOBID": r.JobID, "PBS_HOME": "/var/spool/pbs", "BFTRAINER_PBS_NODES": strings.Join(nodes, " ")}
	return env, []string{r.Event, r.JobID, r.Euser, r.Egroup}
}

// TestPBSRealHookEvents decodes every recorded execjob_begin and
// execjob_epilogue call of the 3-node job: on the primary execution host
// (pbs1) the job's reclaim or release, for all its nodes and OnlyHook; on
// the sisters a local kill or clean-up. It also pins what the cell showed:
// every MoM runs execjob_begin as root, the sisters after the primary; the
// primary's node file does not exist yet then; the hook's environment
// holds no PBS_JOBID, PBS_HOME or PBS_NODEFILE.
func TestPBSRealHookEvents(t *testing.T) {
	var begins []hookRecord
	for _, ev := range []string{"execjob_begin", "execjob_epilogue"} {
		for _, h := range []string{"pbs1", "pbs2", "pbs3"} {
			t.Run(ev+"/"+h, func(t *testing.T) {
				var r hookRecord
				if err := json.Unmarshal(pbsFixture(t, ev+"."+h+".json"), &r); err != nil {
					t.Fatal(err)
				}
				if r.Event != ev || r.Host != h || r.UID != 0 {
					t.Fatalf("recorded %s on %s as uid %d", r.Event, r.Host, r.UID)
				}
				for _, k := range []string{"PBS_HOME", "PBS_JOBID", "PBS_NODEFILE"} {
					if _, ok := r.Env[k]; ok {
						t.Fatalf("the hook's environment has %s", k)
					}
				}
				if ev == "execjob_begin" {
					begins = append(begins, r)
					if h == "pbs1" && r.AuxExists {
						t.Fatal("the primary's node file existed at execjob_begin")
					}
				}
				env, args := hookCall(r)
				c, err := parsePBS(MapEnv(env), args, files(nil), r.Host)
				if err != nil {
					t.Fatal(err)
				}
				want := map[string]string{
					"execjob_begin/pbs1":    "pbs|execjob_begin|reclaim|1.pbssrv|root|pbs1,pbs2,pbs3|pbs1",
					"execjob_begin/pbs2":    "pbs|execjob_begin|kill-local|1.pbssrv|root|pbs1,pbs2,pbs3|pbs2",
					"execjob_begin/pbs3":    "pbs|execjob_begin|kill-local|1.pbssrv|root|pbs1,pbs2,pbs3|pbs3",
					"execjob_epilogue/pbs1": "pbs|execjob_epilogue|release|1.pbssrv|root|pbs1,pbs2,pbs3|pbs1",
					"execjob_epilogue/pbs2": "pbs|execjob_epilogue|cleanup-local|1.pbssrv|root|pbs1,pbs2,pbs3|pbs2",
					"execjob_epilogue/pbs3": "pbs|execjob_epilogue|cleanup-local|1.pbssrv|root|pbs1,pbs2,pbs3|pbs3",
				}[ev+"/"+h]
				if got := callString(c); got != want {
					t.Fatalf("parsePBS = %q, want %q", got, want)
				}
				if c.OnlyHook != (h == "pbs1") {
					t.Fatalf("OnlyHook = %v on %s", c.OnlyHook, h)
				}
			})
		}
	}
	for _, r := range begins[1:] {
		if r.Time < begins[0].Time {
			t.Fatalf("%s's execjob_begin ran before the primary's", r.Host)
		}
	}
}

// TestPBSRealPrologueHookRace pins why execjob_prologue is not wired: the
// sisters' execjob_prologue of the recorded job ran after the primary's,
// which is all the job's start waits for.
func TestPBSRealPrologueHookRace(t *testing.T) {
	var times []float64
	for _, h := range []string{"pbs1", "pbs2", "pbs3"} {
		var r hookRecord
		if err := json.Unmarshal(pbsFixture(t, "execjob_prologue."+h+".json"), &r); err != nil {
			t.Fatal(err)
		}
		times = append(times, r.Time)
	}
	if times[1] <= times[0] || times[2] <= times[0] {
		t.Fatalf("execjob_prologue times %v: the sisters' should follow the primary's", times)
	}
}

// TestPBSRealNodefile reads the job's own PBS_NODEFILE: one line per chunk.
func TestPBSRealNodefile(t *testing.T) {
	read := files(map[string]string{"/nodefile": string(pbsFixture(t, "job.PBS_NODEFILE"))})
	c, err := parsePBS(MapEnv(map[string]string{"PBS_NODEFILE": "/nodefile"}), []string{"prologue", "1.pbssrv", "root"}, read, "pbs1")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.Nodes, ","); got != "pbs1,pbs2,pbs3" {
		t.Fatalf("nodes %q", got)
	}
}

// TestPBSRealPbsnodes reads pbsnodes -a -F json and the plain listing as
// the cell printed them. A node running a job that uses one of its two
// CPUs stays "free" and lists the job: not idle.
func TestPBSRealPbsnodes(t *testing.T) {
	for _, tt := range []struct{ file, want string }{
		{"idle.pbsnodes.json", "pbs1=idle pbs2=idle pbs3=idle"},
		{"running.pbsnodes.json", "pbs1=free pbs2=free pbs3=idle"},
		{"idle.pbsnodes.txt", "pbs1=idle pbs2=idle pbs3=idle"},
		// Taken while two jobs were exiting: "job-busy" with both CPUs
		// used, "free" with one, and the jobs listed as JOBID/CPU.
		{"busy.pbsnodes.txt", "pbs1=job-busy pbs2=job-busy pbs3=free"},
	} {
		t.Run(tt.file, func(t *testing.T) {
			states, err := parsePbsnodes(pbsFixture(t, tt.file))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for n, s := range states {
				got = append(got, n+"="+s)
			}
			slices.Sort(got)
			if g := strings.Join(got, " "); g != tt.want {
				t.Fatalf("states %q, want %q", g, tt.want)
			}
		})
	}
	if args := pbs.Listing.Args(nil); !slices.Equal(args, []string{"-a", "-F", "json"}) {
		t.Fatalf("pbsnodes arguments %q", args)
	}
}
