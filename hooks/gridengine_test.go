package hooks

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/names"
)

// geFixture reads a file of testdata/gridengine: what the real cell of
// internal/lab/gridengine gave its hooks and printed (see its README).
func geFixture(tb testing.TB, name string) string {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "gridengine", name))
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

// geEnv reads a recorded hook environment (KEY=VALUE lines).
func geEnv(tb testing.TB, name string) map[string]string {
	tb.Helper()
	env := map[string]string{}
	for line := range strings.Lines(geFixture(tb, name)) {
		k, v, ok := strings.Cut(strings.TrimSuffix(line, "\n"), "=")
		if !ok {
			tb.Fatalf("%s: %q is not KEY=VALUE", name, line)
		}
		env[k] = v
	}
	return env
}

// geArgs is the hook line's arguments for a recorded call: the context,
// then what the cell expanded for $host $job_id $job_owner.
func geArgs(tb testing.TB, context, name string) []string {
	tb.Helper()
	rec := strings.Fields(geFixture(tb, name))
	if len(rec) < 3 {
		tb.Fatalf("%s: %q, want $host $job_id $job_owner first", name, rec)
	}
	return append([]string{context}, rec[:3]...)
}

// geFiles serves the recorded PE hostfile at the path the parallel job's
// environment names, and a few broken ones.
func geFiles(tb testing.TB) func(string) ([]byte, error) {
	return files(map[string]string{
		"/CELL/spool/gel1/active_jobs/2.1/pe_hostfile": geFixture(tb, "parallel.pe_hostfile"),
		"/pe/two-queues":  "a1 1 q1@a1 UNDEFINED\na2 2 q1@a2 UNDEFINED\na1 1 q2@a1 UNDEFINED\n",
		"/pe/bad-host":    "a1 1 q@a1 UNDEFINED\na;reboot 1 q@a2 UNDEFINED\n",
		"/pe/no-slots":    "a1 x q@a1 UNDEFINED\n",
		"/pe/short":       "a1\n",
		"/pe/empty":       "\n\n",
		"/pe/fqdn":        "a1.example.org 1 q@a1.example.org UNDEFINED\n",
		"/pe/no-trailing": "a1 1 q@a1 UNDEFINED\na2 1 q@a2 UNDEFINED",
	})
}

func TestParseGridEngine(t *testing.T) {
	serialPro, serialEpi := geEnv(t, "serial.prolog.env"), geEnv(t, "serial.epilog.env")
	parPro, parEpi := geEnv(t, "parallel.prolog.env"), geEnv(t, "parallel.epilog.env")
	tests := []struct {
		name     string
		env      map[string]string
		args     []string
		hostname string
		want     string
	}{
		// The cell's own calls, with the hook line contrib/gridengine
		// prescribes (context, $host, $job_id, $job_owner).
		{"serial prolog", serialPro, geArgs(t, "prolog", "serial.prolog.args"), "x", "gridengine|prolog|reclaim|1|nobody|gel2|gel2"},
		{"serial epilog", serialEpi, geArgs(t, "epilog", "serial.epilog.args"), "x", "gridengine|epilog|release|1|nobody|gel2|gel2"},
		{"parallel prolog: the PE hostfile's hosts", parPro, geArgs(t, "prolog", "parallel.prolog.args"), "x", "gridengine|prolog|reclaim|2|root|gel1,gel2|gel1"},
		{"parallel epilog", parEpi, geArgs(t, "epilog", "parallel.epilog.args"), "x", "gridengine|epilog|release|2|root|gel1,gel2|gel1"},
		// Shorter hook lines.
		{"context only: HOSTNAME, USER", serialPro, []string{"prolog"}, "x", "gridengine|prolog|reclaim|1|nobody|gel2|gel2"},
		{"no context: a prolog", serialPro, nil, "x", "gridengine|prolog|reclaim|1|nobody|gel2|gel2"},
		{"no context: SGE_JOBEXIT_STAT makes an epilog", serialEpi, nil, "x", "gridengine|epilog|release|1|nobody|gel2|gel2"},
		{"os hostname last", with(serialPro, "HOSTNAME", "-"), []string{"prolog"}, "gel2", "gridengine|prolog|reclaim|1|nobody|gel2|gel2"},
		{"$host wins over HOSTNAME", with(serialPro, "HOSTNAME", "other"), []string{"prolog", "gel2"}, "x", "gridengine|prolog|reclaim|1|nobody|gel2|gel2"},
		{"$job_owner wins over USER", serialPro, []string{"prolog", "gel2", "1", "alice"}, "x", "gridengine|prolog|reclaim|1|alice|gel2|gel2"},
		{"LOGNAME without USER", with(serialPro, "USER", "-"), []string{"prolog"}, "x", "gridengine|prolog|reclaim|1|nobody|gel2|gel2"},
		{"no user at all", with(serialPro, "USER", "-", "LOGNAME", "-"), []string{"prolog"}, "x", "gridengine|prolog|reclaim|1||gel2|gel2"},
		{"JOB_ID wins over $job_id", serialPro, []string{"prolog", "gel2", "99"}, "x", "gridengine|prolog|reclaim|1|nobody|gel2|gel2"},
		{"$job_id without JOB_ID", with(serialPro, "JOB_ID", "-"), []string{"prolog", "gel2", "99"}, "x", "gridengine|prolog|reclaim|99|nobody|gel2|gel2"},
		{"array task", with(serialPro, "SGE_TASK_ID", "7"), []string{"prolog"}, "x", "gridengine|prolog|reclaim|1.7|nobody|gel2|gel2"},
		{"a host once per queue", with(parPro, "PE_HOSTFILE", "/pe/two-queues", "HOSTNAME", "a1"), []string{"prolog"}, "x", "gridengine|prolog|reclaim|2|root|a1,a2|a1"},
		{"a last line without newline", with(parPro, "PE_HOSTFILE", "/pe/no-trailing", "HOSTNAME", "a2"), []string{"prolog"}, "x", "gridengine|prolog|reclaim|2|root|a1,a2|a2"},
		{"local name not among the job's: no Local", with(parPro, "PE_HOSTFILE", "/pe/fqdn", "HOSTNAME", "a1"), []string{"prolog"}, "x", "gridengine|prolog|reclaim|2|root|a1.example.org|"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseGridEngine(MapEnv(tt.env), tt.args, geFiles(t), tt.hostname)
			if err != nil {
				t.Fatalf("parseGridEngine: %v", err)
			}
			if got, want := callString(c), tt.want; got != want {
				t.Fatalf("parseGridEngine = %q, want %q", got, want)
			}
			if !c.OnlyHook {
				t.Fatal("a Grid Engine call is not OnlyHook: nothing would kill on the job's other hosts")
			}
			checkCall(t, c)
		})
	}
}

func TestParseGridEngineErrors(t *testing.T) {
	pro := geEnv(t, "parallel.prolog.env")
	tests := []struct {
		name     string
		env      map[string]string
		args     []string
		hostname string
		errText  string
		is       error
		partial  string
	}{
		{"unknown context", pro, []string{"pe_start"}, "x", `unknown hook "pe_start"`, nil, "gridengine||ignore||||"},
		{"no host at all", with(pro, "HOSTNAME", "-"), []string{"prolog"}, "", "local host name is unknown", nil, "gridengine|prolog|reclaim||||"},
		{"bad host", pro, []string{"prolog", "gel1;reboot"}, "x", `node name "gel1;reboot"`, names.ErrNode, "gridengine|prolog|reclaim||||"},
		{"no job id", with(pro, "JOB_ID", "-"), []string{"prolog"}, "x", "no job id", nil, "gridengine|prolog|reclaim|||gel1|gel1"},
		{"job id not a number", with(pro, "JOB_ID", "2/../x"), []string{"prolog"}, "x", `JOB_ID "2/../x" is not a job number`, names.ErrJob, "gridengine|prolog|reclaim|||gel1|gel1"},
		{"task not a number", with(pro, "SGE_TASK_ID", "1-3"), []string{"prolog"}, "x", `SGE_TASK_ID "1-3"`, nil, "gridengine|prolog|reclaim|||gel1|gel1"},
		{"bad user", pro, []string{"prolog", "gel1", "2", "al ice"}, "x", `argument 3: user "al ice"`, names.ErrUser, "gridengine|prolog|reclaim|2||gel1|gel1"},
		// The PE hostfile's problems: the master host stays the job's.
		{"missing PE hostfile", with(pro, "PE_HOSTFILE", "/nope"), []string{"prolog"}, "x", "PE_HOSTFILE: read host file", fs.ErrNotExist, "gridengine|prolog|reclaim|2|root|gel1|gel1"},
		{"bad host in PE hostfile", with(pro, "PE_HOSTFILE", "/pe/bad-host"), []string{"epilog"}, "x", `node name "a;reboot"`, names.ErrNode, "gridengine|epilog|release|2|root|gel1|gel1"},
		{"slots not a number", with(pro, "PE_HOSTFILE", "/pe/no-slots"), []string{"prolog"}, "x", "line 1", nil, "gridengine|prolog|reclaim|2|root|gel1|gel1"},
		{"short line", with(pro, "PE_HOSTFILE", "/pe/short"), []string{"prolog"}, "x", "line 1", nil, "gridengine|prolog|reclaim|2|root|gel1|gel1"},
		{"empty PE hostfile", with(pro, "PE_HOSTFILE", "/pe/empty"), []string{"prolog"}, "x", "no hosts", nil, "gridengine|prolog|reclaim|2|root|gel1|gel1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseGridEngine(MapEnv(tt.env), tt.args, geFiles(t), tt.hostname)
			wantParseError(t, c, err, tt.errText, tt.is, tt.partial)
		})
	}
}

// TestGridEngineDetect: a Grid Engine hook is recognised by its job
// environment, with or without the scheduler's name on the hook line.
func TestGridEngineDetect(t *testing.T) {
	pro := geEnv(t, "serial.prolog.env")
	s, err := Builtin().Choose("", Input{Env: MapEnv(pro), Args: []string{"prolog"}})
	if err != nil || s.Name != nameGridEngine {
		t.Fatalf("Choose detected %q, %v; want gridengine", s.Name, err)
	}
	if s, _ := Builtin().Detect(Input{Env: MapEnv(with(pro, "SLURM_JOB_ID", "3"))}); s.Name != Slurm {
		t.Fatalf("a Slurm variable among Grid Engine's detected %q, want Slurm first", s.Name)
	}
	if gridEngine.Detect(Input{Env: MapEnv(map[string]string{"JOB_ID": "1"})}) {
		t.Fatal("a bare JOB_ID was taken for Grid Engine")
	}
}

// TestQhostXML reads the cell's qhost -q -xml in each scenario of the
// fixtures: a host is idle only with no slot used, none reserved and no
// state letter.
func TestQhostXML(t *testing.T) {
	for _, tt := range []struct {
		scenario string
		want     map[string]string
	}{
		{"idle", map[string]string{"gel1": "idle", "gel2": "idle"}},
		{"running", map[string]string{"gel1": "used", "gel2": "used"}},
		// The scheduler's reservation for the waiting job does not show.
		{"reserved", map[string]string{"gel1": "used", "gel2": "idle"}},
		{"error", map[string]string{"gel1": "E", "gel2": "idle"}},
		{"disabled", map[string]string{"gel1": "d", "gel2": "idle"}},
		{"unknown", map[string]string{"gel1": "idle", "gel2": "u"}},
	} {
		t.Run(tt.scenario, func(t *testing.T) {
			got, err := gridEngine.Listing.Parse([]byte(geFixture(t, tt.scenario+".qhost-q.xml")))
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, tt.want) {
				t.Fatalf("states = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestQhostXMLHostile(t *testing.T) {
	host := func(name, queues string) string { return "<host name='" + name + "'>" + queues + "</host>" }
	queue := func(name, used, resv, state string) string {
		return "<queue name='" + name + "'><queuevalue qname='" + name + "' name='slots_used'>" + used +
			"</queuevalue><queuevalue qname='" + name + "' name='slots_resv'>" + resv +
			"</queuevalue><queuevalue qname='" + name + "' name='state_string'>" + state + "</queuevalue></queue>"
	}
	doc := func(hosts ...string) []byte { return []byte("<qhost>" + strings.Join(hosts, "") + "</qhost>") }
	for _, tt := range []struct {
		name string
		in   []byte
		want map[string]string // nil: an error
	}{
		{"two queues, one busy", doc(host("a", queue("q1", "0", "0", "")+queue("q2", "1", "0", ""))), map[string]string{"a": "used"}},
		{"several reasons", doc(host("a", queue("q1", "1", "2", "dE")+queue("q2", "0", "0", "d"))), map[string]string{"a": "used,resv,d,E"}},
		{"a host without a queue is not idle", doc(host("a", "")), map[string]string{"a": "no-queue"}},
		{"global is no host", doc(host("global", ""), host("b", queue("q", "0", "0", ""))), map[string]string{"b": "idle"}},
		{"listed twice, busy once", doc(host("a", queue("q", "1", "0", "")), host("a", queue("q", "0", "0", ""))), map[string]string{"a": "used"}},
		{"blanks around values", doc(host("a", queue("q", " 0\n", "0", " "))), map[string]string{"a": "idle"}},
		{"nothing", doc(), map[string]string{}},
		{"a name that could reach a shell", doc(host("a;reboot", queue("q", "0", "0", ""))), nil},
		{"a count that is no count", doc(host("a", queue("q", "x", "0", ""))), nil},
		{"a negative count", doc(host("a", queue("q", "-1", "0", ""))), nil},
		{"a state that is no letters", doc(host("a", queue("q", "0", "0", "a,b"))), nil},
		{"not XML", []byte("qhost: cannot reach qmaster\n"), nil},
		{"cut short", doc(host("a", queue("q", "0", "0", "")))[:40], nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseQhostXML(tt.in)
			if tt.want == nil {
				if err == nil {
					t.Fatalf("parse = %v, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, tt.want) {
				t.Fatalf("states = %v, want %v", got, tt.want)
			}
		})
	}
}

func FuzzParseGridEngine(f *testing.F) {
	f.Add("prolog", "gel1", "2", "root", "gel1", "2", "undefined", "/pe", "gel1 1 bft.q@gel1 UNDEFINED\ngel2 1 bft.q@gel2 UNDEFINED\n", "", "x")
	f.Add("epilog", "", "", "", "gel2", "1", "undefined", "", "", "0", "gel2")
	f.Add("", "", "", "", "a", "5", "3", "/pe", "a 1 q@a x\na 2 q2@a x\n", "1", "")
	f.Add("pe_start", "h", "x", "u", "", "", "", "", "", "", "")
	f.Add("prolog", "-h", "1", "-u", "h;x", "1;2", "1-2", "/pe", "a\n", "", "")
	f.Fuzz(func(t *testing.T, ctx, hostArg, jobArg, ownerArg, hostname, jobID, task, peFile, peContent, exit, osHost string) {
		env := map[string]string{"HOSTNAME": hostname, "JOB_ID": jobID, "SGE_TASK_ID": task, "PE_HOSTFILE": peFile,
			"SGE_JOBEXIT_STAT": exit, "USER": ownerArg}
		var args []string
		for _, a := range []string{ctx, hostArg, jobArg, ownerArg} {
			if a == "" {
				break
			}
			args = append(args, a)
		}
		c, err := parseGridEngine(MapEnv(env), args, files(map[string]string{peFile: peContent}), osHost)
		if got, want := c.Scheduler, nameGridEngine; got != want {
			t.Fatalf("Scheduler = %q, want %q", got, want)
		}
		if err == nil {
			checkCall(t, c)
			if c.Local != "" && !strings.Contains(","+strings.Join(c.Nodes, ",")+",", ","+c.Local+",") {
				t.Fatalf("Call %+v: Local is not one of the job's nodes", c)
			}
		}
	})
}

func FuzzParseQhostXML(f *testing.F) {
	for _, s := range []string{"idle", "running", "error", "unknown"} {
		f.Add([]byte(geFixture(f, s+".qhost-q.xml")))
	}
	f.Add([]byte("<qhost><host name='a'><queue name='q'><queuevalue name='slots_used'>1</queuevalue></queue></host></qhost>"))
	f.Fuzz(func(t *testing.T, b []byte) {
		states, err := parseQhostXML(b)
		if err != nil {
			return
		}
		for n, st := range states {
			if err := names.ValidateNode(n); err != nil {
				t.Fatalf("node %q: %v", n, err)
			}
			if st == "" || strings.ContainsAny(st, " \n") {
				t.Fatalf("node %s: state %q", n, st)
			}
		}
	})
}

// TestGridEnginePlan reads the cell's schedule file as it stood with a
// 2-host job waiting on a reservation behind a running serial job
// (testdata/gridengine/reserved.schedule.txt, real), and variations.
func TestGridEnginePlan(t *testing.T) {
	real := geFixture(t, "reserved.schedule.txt")
	older := "::::::::\n9:1:RESERVING:100:60:Q:bft.q@old:slots:1.000000\n"
	for _, tt := range []struct {
		name string
		in   string
		want string // "job@start+duration:nodes;…", "" for none, "error" for an error
	}{
		{"the cell's reservation", real, "3@1796129031+11m0s:gel2,gel1"},
		{"only the latest run counts", older + real, "3@1796129031+11m0s:gel2,gel1"},
		{"a run without reservations", real + "::::::::\n2:1:RUNNING:1796125371:3660:Q:bft.q@gel1:slots:1.000000\n", ""},
		{"a run still being written: its last line is left out", real + "4:1:RESERVING:1796129100:60:Q:bft.q@gel3:slots:1.0", "3@1796129031+11m0s:gel2,gel1"},
		{"host resources and several jobs", "::::::::\n" +
			"5:1:RESERVING:2000:600:H:n1:mem:1.0\n5:1:RESERVING:2000:600:Q:q@n1:slots:1.0\n5:1:RESERVING:2000:600:G:global:lic:1.0\n" +
			"6:2:RESERVING:3000:60:Q:q@n2:slots:1.0\n6:2:STARTING:3000:60:Q:q@n3:slots:1.0\n", "5@2000+10m0s:n1;6@3000+1m0s:n2"},
		{"a job reserving no host", "::::::::\n7:1:RESERVING:10:10:G:global:lic:1.0\n7:1:RESERVING:10:10:P:pe:slots:1.0\n", ""},
		{"nothing yet", "", ""},
		{"no separator at all", "7:1:RESERVING:10:10:Q:q@n1:slots:1.0\n", "7@10+10s:n1"},
		{"a line that is no record", "::::::::\nhello\n", "error"},
		{"a start that is no number", "::::::::\n7:1:RESERVING:soon:10:Q:q@n1:slots:1.0\n", "error"},
		{"a queue instance without host", "::::::::\n7:1:RESERVING:10:10:Q:q:slots:1.0\n", "error"},
		{"a host that could reach a shell", "::::::::\n7:1:RESERVING:10:10:H:n1;reboot:slots:1.0\n", "error"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			plan, err := GridEnginePlan([]byte(tt.in))
			if tt.want == "error" {
				if err == nil {
					t.Fatalf("plan %v, want an error", plan)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := planString(plan); got != tt.want {
				t.Fatalf("plan %q, want %q", got, tt.want)
			}
		})
	}
}

func planString(plan []PlannedStart) string {
	var s []string
	for _, p := range plan {
		s = append(s, fmt.Sprintf("%s@%d+%v:%s", p.Job, p.Start.Unix(), p.Duration, strings.Join(p.Nodes, ",")))
	}
	return strings.Join(s, ";")
}

// TestReadGridEnginePlan reads the end of a long schedule file: the
// latest run, even when it starts beyond the first read.
func TestReadGridEnginePlan(t *testing.T) {
	var b strings.Builder
	for b.Len() < 3*scheduleTail {
		b.WriteString("::::::::\n1:1:RUNNING:100:60:Q:bft.q@n1:slots:1.000000\n8:1:RESERVING:160:60:Q:bft.q@n1:slots:1.000000\n")
	}
	b.WriteString("::::::::\n")
	for b.Len() < 5*scheduleTail {
		b.WriteString("2:1:RUNNING:100:60:Q:bft.q@n2:slots:1.000000\n") // one long last run
	}
	b.WriteString("3:1:RESERVING:200:60:Q:bft.q@n2:slots:1.000000\n3:1:RESERVING:200:60:Q:bft.q@n3:slots:1.000000\n")
	path := filepath.Join(t.TempDir(), "schedule")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Minute)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	plan, err := ReadGridEnginePlan(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := planString(plan), "3@200+1m0s:n2,n3"; got != want {
		t.Fatalf("plan %q, want %q", got, want)
	}
	if _, err := ReadGridEnginePlan(filepath.Join(t.TempDir(), "none")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a missing file: %v", err)
	}
}

func FuzzGridEnginePlan(f *testing.F) {
	f.Add([]byte(geFixture(f, "reserved.schedule.txt")))
	f.Add([]byte("::::::::\n5:1:RESERVING:2000:600:H:n1:mem:1.0\n5:1:RESERVING:2000:600:Q:q@n2:slots:1.0\n"))
	f.Add([]byte("::::::::\n7:1:RESERVING:10:10:Q:q@n1:slots:1.0"))
	f.Fuzz(func(t *testing.T, b []byte) {
		plan, err := GridEnginePlan(b)
		if err != nil {
			return
		}
		for _, p := range plan {
			if !allDigits(p.Job) || p.Duration < 0 {
				t.Fatalf("planned start %+v", p)
			}
			if _, err := names.Unique(p.Nodes); err != nil {
				t.Fatalf("planned start %+v: %v", p, err)
			}
		}
	})
}

// TestReadGridEngineAccounting runs the audit's reader against scripts that
// print what Son of Grid Engine 8.1.9 printed (testdata): qacct's ended
// jobs, and the qstat beside it (taken from qacct's directory) for the
// running one; a cell that never ran a job (qacct says so and exits 1) has
// no job, not an error; any other failure is one.
func TestReadGridEngineAccounting(t *testing.T) {
	dir := t.TempDir()
	script := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	td, err := filepath.Abs("testdata/gridengine")
	if err != nil {
		t.Fatal(err)
	}
	script("qstat", `[ "$*" = "-u * -s r -g t -xml" ] && [ "$TZ" = UTC ] || exit 2; cat `+td+"/running.qstat-gt.xml\n")
	read := gridEngine.Accounting.Read
	for _, tc := range []struct {
		name, qacct string
		jobs        []string
		fails       bool
	}{
		{"ended and running", `[ "$*" = "-j" ] || exit 2; cat ` + td + "/serial.qacct-j.txt " + td + "/parallel.qacct-j.txt\n",
			[]string{"1 [gel2] ended", "2 [gel1 gel2] ended", "1 [gel1 gel2] running"}, false},
		{"a cell that never ran a job", "echo 'no jobs running since startup'; echo 'error: /x/common/accounting: No such file or directory' >&2; exit 1\n",
			[]string{"1 [gel1 gel2] running"}, false},
		{"qacct fails", "echo 'error: denied' >&2; exit 1\n", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			script("qacct", tc.qacct)
			l, err := read(context.Background(), filepath.Join(dir, "qacct"), time.Time{}, time.Now())
			if tc.fails {
				if err == nil || !strings.Contains(err.Error(), "error: denied") {
					t.Fatalf("err %v, want qacct's own", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, j := range l.Jobs {
				state := "ended"
				if j.Running {
					state = "running"
				}
				got = append(got, fmt.Sprintf("%s %v %s", j.ID, j.Nodes, state))
			}
			if !slices.Equal(got, tc.jobs) {
				t.Errorf("jobs %q, want %q", got, tc.jobs)
			}
		})
	}
}
