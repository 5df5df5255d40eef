package gridengine

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bftrainer/bftrainer/internal/lab"
)

var (
	installFlag = flag.Bool("install", false, "install Debian's Grid Engine packages first (root, apt-get)")
	updateFlag  = flag.Bool("update", false, "rewrite hooks/testdata/gridengine from this run's cell")
)

// shared is the one cell every test of the package uses: started by the
// first test that asks, stopped by TestMain.
var shared struct {
	once   sync.Once
	cell   *Cell
	rec    *Recorder
	recDir string
	skip   string
	err    error
}

func TestMain(m *testing.M) {
	flag.Parse()
	// A run killed by -timeout runs no cleanup: stop the cell a little
	// before that, so that nothing outlives the test binary.
	if f := flag.Lookup("test.timeout"); f != nil {
		if d, err := time.ParseDuration(f.Value.String()); err == nil && d > time.Minute {
			timer := time.AfterFunc(d-20*time.Second, func() {
				fmt.Fprintln(os.Stderr, "gridengine: the test deadline is near; stopping the cell")
				stopShared()
			})
			defer timer.Stop()
		}
	}
	code := m.Run()
	if err := stopShared(); err != nil {
		fmt.Fprintln(os.Stderr, "gridengine:", err)
		code = 1
	}
	os.Exit(code)
}

func stopShared() error {
	var err error
	if shared.cell != nil {
		err = shared.cell.Stop(context.Background(), false)
	}
	if shared.recDir != "" {
		os.RemoveAll(shared.recDir)
	}
	return err
}

// stderrf logs the cell's progress with -v (a test's t.Logf cannot be
// used: the cell outlives the test that started it).
func stderrf(format string, args ...any) {
	if testing.Verbose() {
		fmt.Fprintf(os.Stderr, format+"\n", args...)
	}
}

// cell returns the shared cell, starting it on first use: 2 hosts
// (gel1, gel2: names no other lab of this machine uses), the Recorder
// as prolog, epilog and the parallel environment's start and stop
// procedures.
func cell(t *testing.T) (*Cell, *Recorder) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a real Grid Engine cell")
	}
	shared.once.Do(func() {
		ctx := context.Background()
		if *installFlag {
			if shared.err = Install(ctx, stderrf); shared.err != nil {
				return
			}
		}
		if err := Need(); err != nil {
			shared.skip = err.Error()
			return
		}
		if shared.recDir, shared.err = os.MkdirTemp("", "bftge-hooks."); shared.err != nil {
			return
		}
		if shared.rec, shared.err = NewRecorder(shared.recDir); shared.err != nil {
			return
		}
		r := shared.rec
		shared.cell, shared.err = Start(ctx, Options{Prefix: "gel", Hosts: 2, Logf: stderrf,
			Prolog: r.Command("prolog"), Epilog: r.Command("epilog"), PEStart: r.Command("pestart"), PEStop: r.Command("pestop")})
		if shared.err == nil {
			stderrf("gridengine: cell ready in %v (%s)", shared.cell.Started.Round(time.Millisecond), shared.cell.Dir)
		}
	})
	if shared.skip != "" {
		t.Skip(shared.skip)
	}
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("cell logs:\n%s", shared.cell.Logs(20))
		}
	})
	return shared.cell, shared.rec
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// TestCell checks the cell itself: every exec host reports a load and
// is exactly idle, and each host's hooks and jobs see its own name.
func TestCell(t *testing.T) {
	c, _ := cell(t)
	ctx := context.Background()
	t.Logf("cell started in %v", c.Started.Round(time.Millisecond))
	qs := must[[]Instance](t)(c.Instances(ctx))
	var hosts []string
	for _, q := range qs {
		if !q.Idle() || q.Load == "" {
			t.Errorf("instance %s: used %d resv %d state %q load %q, want idle with a load", q.Name, q.Used, q.Resv, q.State, q.Load)
		}
		hosts = append(hosts, q.Host)
	}
	if !slices.Equal(hosts, c.Hosts) {
		t.Errorf("queue instances on %v, want %v", hosts, c.Hosts)
	}
	for _, h := range c.Hosts {
		cmd := must[*exec.Cmd](t)(c.OnHost(ctx, h, "hostname"))
		out := must[[]byte](t)(cmd.Output())
		if got := strings.TrimSpace(string(out)); got != h {
			t.Errorf("hostname on %s = %q", h, got)
		}
	}
}

// gridEngineEnv is what Grid Engine itself puts in a prolog's and an
// epilog's environment (observed on 8.1.9; the job's environment, see
// qsub(1)), for a serial job. SGE_O_HOME, SGE_O_LOGNAME, SGE_O_PATH,
// SGE_O_SHELL, SGE_O_MAIL and SGE_O_TZ copy the submitter's variables,
// when it has them.
var gridEngineEnv = []string{
	"ARC", "HOME", "HOSTNAME", "JOB_ID", "JOB_NAME", "JOB_SCRIPT", "LOGNAME", "NHOSTS", "NQUEUES", "NSLOTS",
	"QUEUE", "REQNAME", "REQUEST", "RESTARTED", "SGE_ACCOUNT", "SGE_ARCH", "SGE_BINARY_PATH", "SGE_CWD_PATH",
	"SGE_JOB_SPOOL_DIR", "SGE_O_HOST", "SGE_O_WORKDIR",
	"SGE_STDERR_PATH", "SGE_STDIN_PATH", "SGE_STDOUT_PATH", "SGE_TASK_FIRST", "SGE_TASK_ID", "SGE_TASK_LAST",
	"SGE_TASK_STEPSIZE", "SHELL", "TERM", "TMP", "USER", "PATH",
}

// ownEnv returns a call's variables that the execd's environment did not
// give it (those it did are the lab's, not Grid Engine's; PATH is Grid
// Engine's own), sorted.
func ownEnv(c *Cell, call HookCall) []string {
	daemon := map[string]string{}
	for _, kv := range c.daemonEnv() {
		k, v, _ := strings.Cut(kv, "=")
		daemon[k] = v
	}
	var keys []string
	for k, v := range call.Env {
		if dv, ok := daemon[k]; (!ok || dv != v) && !strings.HasPrefix(k, "BFT_") {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

// TestSerialJob: a 1-host job of an ordinary user runs on the host asked
// for; its prolog runs before it and its epilog after it, once each, on
// that host, as root, started by the shepherd, with the job's
// environment (USER is the job's owner), and the epilog also gets the
// job's exit status.
func TestSerialJob(t *testing.T) {
	c, rec := cell(t)
	ctx := context.Background()
	host := c.Hosts[1]
	j := must[*Job](t)(c.Submit(ctx, JobSpec{Name: "serial", Hosts: []string{host}, User: "nobody", Env: []string{"BFT_MARK=1"}}))
	recs := must[[]Record](t)(j.WaitEnded(ctx, time.Minute))
	r := must[lab.Report](t)(j.Report())
	if bad := Normal(recs, r, []string{host}); bad != "" {
		t.Fatalf("job %s: %s", j.ID, bad)
	}
	calls := must[[]HookCall](t)(rec.WaitJobCalls(ctx, j.ID, 2, 30*time.Second))
	if len(calls) != 2 || calls[0].Context != "prolog" || calls[1].Context != "epilog" {
		t.Fatalf("hook calls %v, want prolog then epilog", contexts(calls))
	}
	pro, epi := calls[0], calls[1]
	for _, call := range calls {
		if call.Host != host || call.UID != 0 || call.Parent != "sge_shepherd" {
			t.Errorf("%s ran on %s as uid %d under %s, want on %s as root under sge_shepherd", call.Context, call.Host, call.UID, call.Parent, host)
		}
		if want := []string{host, j.ID, "nobody", "serial", c.Queue}; !slices.Equal(call.Args, want) {
			t.Errorf("%s args %q, want $host $job_id $job_owner $job_name $queue = %q", call.Context, call.Args, want)
		}
		if call.Env["USER"] != "nobody" || call.Env["JOB_ID"] != j.ID || call.Env["QUEUE"] != c.Queue || call.Env["BFT_MARK"] != "1" {
			t.Errorf("%s env USER=%q JOB_ID=%q QUEUE=%q BFT_MARK=%q", call.Context, call.Env["USER"], call.Env["JOB_ID"], call.Env["QUEUE"], call.Env["BFT_MARK"])
		}
		if _, pe := call.Env["PE_HOSTFILE"]; pe {
			t.Errorf("%s of a serial job has PE_HOSTFILE", call.Context)
		}
	}
	if !(pro.Time.Before(r.First) && r.End.Before(epi.Time)) {
		t.Errorf("prolog %v, job %v..%v, epilog %v: want prolog, job, epilog in order", pro.Time, r.First, r.End, epi.Time)
	}
	if _, ok := pro.Env["SGE_JOBEXIT_STAT"]; ok {
		t.Error("the prolog has SGE_JOBEXIT_STAT")
	}
	if got := epi.Env["SGE_JOBEXIT_STAT"]; got != "0" {
		t.Errorf("epilog SGE_JOBEXIT_STAT = %q, want 0", got)
	}
	writeHookFixtures(t, c, "serial", calls)
	writeQacctFixture(t, c, "serial", j)
	own := ownEnv(c, pro)
	for _, k := range gridEngineEnv {
		if !slices.Contains(own, k) {
			t.Errorf("the prolog lacks %s", k)
		}
	}
	var table []string
	for _, k := range own {
		table = append(table, k+"="+pro.Env[k])
	}
	t.Logf("prolog environment (besides the execd's own):\n%s", strings.Join(table, "\n"))
}

func contexts(calls []HookCall) []string {
	var out []string
	for _, c := range calls {
		out = append(out, c.Context+"@"+c.Host)
	}
	return out
}

// TestParallelJob: a 2-host job (the parallel environment, one slot per
// host) runs its script on its master host and a task on both hosts
// (qrsh -inherit); the prolog, the PE start procedure, the PE stop
// procedure and the epilog run once each, on the master host only, in
// that order around the job, and the prolog already sees the PE hostfile
// naming both hosts.
func TestParallelJob(t *testing.T) {
	c, rec := cell(t)
	ctx := context.Background()
	hosts := []string{c.Hosts[0], c.Hosts[1]}
	j := must[*Job](t)(c.Submit(ctx, JobSpec{Name: "parallel", Hosts: hosts, Held: true}))
	st := must[JobStatus](t)(j.WaitStatus(ctx, time.Minute, "running", func(s JobStatus) bool { return s.State == "r" }))
	t.Logf("running on %v %v after qsub", st.Hosts, time.Since(j.Submitted).Round(time.Millisecond))
	if st.Master != hosts[0] || !slices.Equal(st.Hosts, hosts) {
		t.Errorf("running on %v (master %s), want %v (master %s)", st.Hosts, st.Master, hosts, hosts[0])
	}
	must[lab.Report](t)(j.WaitChecked(ctx, time.Minute))
	if err := j.Release(); err != nil {
		t.Fatal(err)
	}
	recs := must[[]Record](t)(j.WaitEnded(ctx, time.Minute))
	r := must[lab.Report](t)(j.Report())
	if bad := Normal(recs, r, hosts); bad != "" {
		t.Fatalf("job %s: %s", j.ID, bad)
	}
	if r.Host != hosts[0] {
		t.Errorf("job script ran on %s, want %s", r.Host, hosts[0])
	}
	calls := must[[]HookCall](t)(rec.WaitJobCalls(ctx, j.ID, 4, 30*time.Second))
	want := []string{"prolog@" + hosts[0], "pestart@" + hosts[0], "pestop@" + hosts[0], "epilog@" + hosts[0]}
	if got := contexts(calls); !slices.Equal(got, want) {
		t.Fatalf("hook calls %v, want %v (none on %s)", got, want, hosts[1])
	}
	if !(calls[1].Time.Before(r.First) && r.End.Before(calls[2].Time)) {
		t.Errorf("pestart %v, job %v..%v, pestop %v: want them around the job", calls[1].Time, r.First, r.End, calls[2].Time)
	}
	for _, call := range calls {
		if call.UID != 0 || call.Env["PE"] != c.PE || call.Env["NHOSTS"] != "2" || call.Env["NSLOTS"] != "2" || call.Env["PE_HOSTFILE"] == "" {
			t.Errorf("%s: uid %d PE=%q NHOSTS=%q NSLOTS=%q PE_HOSTFILE=%q", call.Context, call.UID,
				call.Env["PE"], call.Env["NHOSTS"], call.Env["NSLOTS"], call.Env["PE_HOSTFILE"])
		}
		got, err := ParsePEHostfile(call.PEHostfile)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Sort(got); !slices.Equal(got, hosts) {
			t.Errorf("%s: PE hostfile names %v, want %v:\n%s", call.Context, got, hosts, call.PEHostfile)
		}
	}
	writeHookFixtures(t, c, "parallel", []HookCall{calls[0], calls[3]})
	writeQacctFixture(t, c, "parallel", j)
	if pro := calls[0]; !slices.Equal(pro.Args, []string{hosts[0], j.ID, "root", "parallel", c.Queue}) {
		t.Errorf("prolog args %q", pro.Args)
	}
	if ps := calls[1]; !slices.Equal(ps.Args[:5], []string{hosts[0], j.ID, "root", c.PE, "2"}) {
		t.Errorf("pestart args %q, want $host $job_id $job_owner $pe $pe_slots $pe_hostfile", ps.Args)
	}
	t.Logf("PE hostfile:\n%s", calls[0].PEHostfile)
}

// TestPrologFailure: a prolog that exits 1 puts its queue instance in
// error (E) and sends the job back to wait; the job never runs there
// until an administrator clears the error. bftrainer's hook must
// therefore always exit 0.
func TestPrologFailure(t *testing.T) {
	c, rec := cell(t)
	ctx := context.Background()
	host := c.Hosts[0]
	j := must[*Job](t)(c.Submit(ctx, JobSpec{Name: "failing", Hosts: []string{host}, Env: []string{"BFT_PROLOG_EXIT=1"}}))
	defer func() {
		j.Delete(ctx)
		c.Output(ctx, "qmod", "-c", c.Queue+"@"+host)
		if err := c.WaitIdle(ctx, time.Minute); err != nil {
			t.Error(err)
		}
	}()
	must[[]HookCall](t)(rec.WaitJobCalls(ctx, j.ID, 1, time.Minute))
	err := lab.Poll(ctx, time.Minute, func() (bool, error) {
		qs, err := c.Instances(ctx)
		for _, q := range qs {
			if q.Host == host {
				return strings.Contains(q.State, "E"), err
			}
		}
		return false, err
	})
	if err != nil {
		t.Fatalf("%s never went to error: %v", host, err)
	}
	st := must[JobStatus](t)(j.Status(ctx))
	if !strings.Contains(st.State, "q") {
		t.Errorf("job state %q after its prolog failed, want it waiting again", st.State)
	}
	if _, err := os.Stat(j.Out); err == nil {
		if r, _ := j.Report(); !r.First.IsZero() {
			t.Error("the job ran although its prolog failed")
		}
	}
}

// writeQacctFixture, with -update, writes what qacct -j prints of an ended
// job into hooks/testdata/gridengine as NAME.qacct-j.txt, for the
// accounting's parser.
func writeQacctFixture(t *testing.T, c *Cell, name string, j *Job) {
	t.Helper()
	if !*updateFlag {
		return
	}
	out, err := c.Output(context.Background(), "qacct", "-j", j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(fixtureDir(t), name+".qacct-j.txt"), []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeHookFixtures, with -update, writes what a job's prolog and epilog
// were given into hooks/testdata/gridengine, for the scheduler's parser:
// NAME.CONTEXT.env (the environment Grid Engine gave, one KEY=VALUE per
// line, sorted, the cell's directory written /CELL, the lab's own
// variables left out), NAME.CONTEXT.args (the hook line's expanded
// arguments, one per line) and, for a parallel job, NAME.pe_hostfile.
func writeHookFixtures(t *testing.T, c *Cell, name string, calls []HookCall) {
	t.Helper()
	if !*updateFlag {
		return
	}
	dir := fixtureDir(t)
	write := func(file, body string) {
		t.Helper()
		body = strings.ReplaceAll(body, c.Dir, "/CELL")
		if err := os.WriteFile(filepath.Join(dir, file), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, call := range calls {
		var env []string
		for k, v := range call.Env {
			if k == tokenVar || strings.HasPrefix(k, "BFT_") {
				continue
			}
			env = append(env, k+"="+v)
		}
		sort.Strings(env)
		write(name+"."+call.Context+".env", strings.Join(env, "\n")+"\n")
		write(name+"."+call.Context+".args", strings.Join(call.Args, "\n")+"\n")
		if call.PEHostfile != "" {
			write(name+".pe_hostfile", call.PEHostfile)
		}
	}
}
