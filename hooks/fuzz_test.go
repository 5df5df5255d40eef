package hooks

import (
	"testing"

	"github.com/bftrainer/bftrainer/names"
)

func checkCall(t *testing.T, c Call) {
	t.Helper()
	if c.Action == Ignore {
		return
	}
	if err := names.ValidateJob(c.JobID); err != nil {
		t.Fatalf("Call %+v: %v", c, err)
	}
	if c.User != "" {
		if err := names.ValidateUser(c.User); err != nil {
			t.Fatalf("Call %+v: %v", c, err)
		}
	}
	if c.Local != "" {
		if err := names.ValidateNode(c.Local); err != nil {
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
		if err := names.ValidateNode(n); err != nil {
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
		c, err := parseSlurm(MapEnv(env))
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
		c, err := parseLSF(MapEnv(env), files(map[string]string{hostfile: content}), ctx, hostname)
		if got, want := c.Scheduler, nameLSF; got != want {
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
		c, err := parsePBS(MapEnv(env), args, files(fsys), hostname)
		if got, want := c.Scheduler, namePBS; got != want {
			t.Fatalf("Scheduler = %q, want %q", got, want)
		}
		if err == nil {
			checkCall(t, c)
		}
	})
}
