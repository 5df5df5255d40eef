# OpenPBS / PBS Pro hook for bftrainer (execjob_prologue, execjob_epilogue).
#
#   qmgr -c "create hook bftrainer event='execjob_prologue,execjob_epilogue'"
#   qmgr -c "set hook bftrainer alarm=10, fail_action=none"
#   qmgr -c "import hook bftrainer application/x-python default bftrainer_hook.py"
#
# execjob_prologue runs on every node of the job (since OpenPBS PR #413);
# bftrainer treats the call on the primary execution host as the job's
# reclaim and the others as local kills. UNTESTED here: no PBS was
# available; written from the OpenPBS hook documentation.
import os
import subprocess

import pbs

e = pbs.event()
name = {pbs.EXECJOB_PROLOGUE: "execjob_prologue", pbs.EXECJOB_EPILOGUE: "execjob_epilogue"}.get(e.type)
if name:
    env = {"PBS_JOBID": e.job.id, "PBS_HOME": os.environ.get("PBS_HOME", "/var/spool/pbs")}
    nodefile = os.path.join(env["PBS_HOME"], "aux", e.job.id)
    if os.path.exists(nodefile):
        env["PBS_NODEFILE"] = nodefile
    try:
        subprocess.run(["/usr/local/bin/bftrainer", "hook", "pbs", name, e.job.id, str(e.job.euser), str(e.job.egroup)],
                       env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=5)
    except Exception:  # never fail the job because of bftrainer
        pass
e.accept()
