package hooks

import (
	"slices"
	"strings"
	"testing"
)

// FuzzExpandHostlist: no input panics, every name expanded is a valid node
// name, and what expands round-trips through CompressHostlist to the sorted
// set of its names.
func FuzzExpandHostlist(f *testing.F) {
	for _, s := range []string{
		"", "n1", "n[1-3]", "a[01-10,15]b[2-3]", "n[001-010]", "rack-1,rack-2", "n[5-3]", "n[1-3:2]",
		"n[]", "n[1-]", "x,,y", "n[1-2]x", "n[[1]]", "n[09-100]", "n[8-011]", "[1-3]",
		"n[1-2]x[3-4]y[5-6]", "a[1-2]b[1-2]c[1-2]d[1-2]", "n[0-999999999999999999]", "n9,n09,n10",
		"n[1-1000]x[1-1001]", "gpu_[1,3]-ib.[2]", "-n1", "n1]", "n[",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		hosts, err := ExpandHostlist(expr)
		if err != nil {
			if hosts != nil {
				t.Fatalf("ExpandHostlist(%q) returned names with error %v", expr, err)
			}
			if !strings.HasPrefix(err.Error(), "hostlist ") {
				t.Fatalf("ExpandHostlist(%q): error %q lacks the hostlist prefix", expr, err)
			}
			return
		}
		if len(hosts) > MaxHostlistHosts {
			t.Fatalf("ExpandHostlist(%q): %d hosts, cap %d", expr, len(hosts), MaxHostlistHosts)
		}
		for _, h := range hosts {
			if err := ValidateNodeName(h); err != nil {
				t.Fatalf("ExpandHostlist(%q) gave an invalid name: %v", expr, err)
			}
		}
		if len(hosts) > 20000 {
			return // valid, but too slow to round-trip on every fuzz run
		}
		compressed := CompressHostlist(hosts)
		back, err := ExpandHostlist(compressed)
		if err != nil {
			t.Fatalf("ExpandHostlist(CompressHostlist(ExpandHostlist(%q)) = %q): %v", expr, compressed, err)
		}
		want := SortHostnames(hosts)
		if !slices.Equal(back, want) {
			t.Fatalf("round trip of %q via %q = %q, want %q", expr, compressed, back, want)
		}
		// SortHostnames really is a sorted set: no repeats, and each name
		// of the input is in it.
		seen := map[string]bool{}
		for _, h := range want {
			if seen[h] {
				t.Fatalf("SortHostnames(%q) repeats %q", hosts, h)
			}
			seen[h] = true
		}
		for _, h := range hosts {
			if !seen[h] {
				t.Fatalf("SortHostnames(%q) lost %q", hosts, h)
			}
		}
	})
}

// checkCall is what any successful parse must satisfy, whatever its input.
func checkCall(t *testing.T, c Call) {
	t.Helper()
	if c.Action == Ignore {
		return
	}
	if err := ValidateJobID(c.JobID); err != nil {
		t.Fatalf("Call %+v: %v", c, err)
	}
	if c.User != "" {
		if err := validateUser(c.User); err != nil {
			t.Fatalf("Call %+v: %v", c, err)
		}
	}
	if c.Local != "" {
		if err := ValidateNodeName(c.Local); err != nil {
			t.Fatalf("Call %+v: %v", c, err)
		}
	}
	if c.Action == KillLocal || c.Action == CleanupLocal {
		if c.Local == "" {
			t.Fatalf("node-local Call %+v without Local", c)
		}
	}
	if len(c.Nodes) == 0 {
		t.Fatalf("Call %+v without nodes", c)
	}
	seen := map[string]bool{}
	for _, n := range c.Nodes {
		if err := ValidateNodeName(n); err != nil {
			t.Fatalf("Call %+v: %v", c, err)
		}
		if seen[n] {
			t.Fatalf("Call %+v repeats node %q", c, n)
		}
		seen[n] = true
	}
}

func FuzzParseSlurm(f *testing.F) {
	f.Add("prolog_slurmctld", "1", "", "n[1-2]", "", "", "root")
	f.Add("prolog_slurmd", "", "1", "", "n[1-2]", "n1", "root")
	f.Add("epilog_slurmd", "1", "1", "", "", "n1", "")
	f.Add("epilog_slurmctld", "7", "", "a[001-100]b[1-2]", "", "", "x@y")
	f.Add("prolog_task", "1;x", "", "n[5-3]", "", "", "")
	f.Add("bogus", "", "", "", "", "", "")
	f.Fuzz(func(t *testing.T, ctx, jobID, jobid, jobNodelist, nodelist, nodename, user string) {
		env := map[string]string{}
		set := func(k, v string) {
			if v != "" {
				env[k] = v
			}
		}
		set("SLURM_SCRIPT_CONTEXT", ctx)
		set("SLURM_JOB_ID", jobID)
		set("SLURM_JOBID", jobid)
		set("SLURM_JOB_NODELIST", jobNodelist)
		set("SLURM_NODELIST", nodelist)
		set("SLURMD_NODENAME", nodename)
		set("SLURM_JOB_USER", user)
		c, err := ParseSlurm(MapEnv(env))
		if got, want := c.Scheduler, Slurm; got != want {
			t.Fatalf("Scheduler = %q, want %q", got, want)
		}
		if err == nil {
			checkCall(t, c)
		}
	})
}

func FuzzParseLSF(f *testing.F) {
	f.Add("pre_exec", "4242", "", "hostA 2 hostB 1", "", "", "", "alice", "hostA")
	f.Add("host_pre_exec", "4242", "3", "", "hostA hostA hostB", "", "", "", "hostB")
	f.Add("post_exec", "1", "0", "", "", "/f", "hostC\nhostC\nhostD\n", "", "")
	f.Add("host_post_exec", "1", "", "a 1 b", "", "", "", "", "a")
	f.Add("eexec", "", "", "", "", "", "", "", "")
	f.Fuzz(func(t *testing.T, ctx, jobID, index, mcpu, hosts, hostfile, content, user, hostname string) {
		env := map[string]string{
			"LSB_JOBID": jobID, "LSB_JOBINDEX": index, "LSB_MCPU_HOSTS": mcpu,
			"LSB_HOSTS": hosts, "LSB_DJOB_HOSTFILE": hostfile, "LSB_SUB_USER": user,
		}
		c, err := ParseLSF(MapEnv(env), files(map[string]string{hostfile: content}), ctx, hostname)
		if got, want := c.Scheduler, LSF; got != want {
			t.Fatalf("Scheduler = %q, want %q", got, want)
		}
		if err == nil {
			checkCall(t, c)
		}
	})
}

func FuzzParsePBS(f *testing.F) {
	f.Add("prologue", "77.pbs01", "alice", "", "", "/var/spool/pbs", "cn01\ncn02\n", "cn01")
	f.Add("prologue.parallel", "88.t", "bob", "t1,t2", "", "", "", "t2")
	f.Add("execjob_prologue", "77.pbs01", "alice", "", "/nf", "", "cn01\ncn01\n", "cn01.x")
	f.Add("epilogue", "", "", "", "", "", "", "")
	f.Add("/x/prologue.user", "1", "", "", "", "", "", "")
	f.Fuzz(func(t *testing.T, prog, jobID, user, hostArg, nodefile, home, content, hostname string) {
		env := map[string]string{"PBS_NODEFILE": nodefile, "PBS_HOME": home}
		args := []string{prog, jobID, user, "group", "name", "res", "queue", "acct", "script", hostArg}
		fsys := map[string]string{nodefile: content}
		if home != "" && jobID != "" {
			fsys[home+"/aux/"+jobID] = content
		}
		c, err := ParsePBS(MapEnv(env), args, files(fsys), hostname)
		if got, want := c.Scheduler, PBS; got != want {
			t.Fatalf("Scheduler = %q, want %q", got, want)
		}
		if err == nil {
			checkCall(t, c)
		}
	})
}
