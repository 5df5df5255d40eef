# OpenPBS / PBS Pro MoM hook for bftrainer (execjob_begin, execjob_epilogue).
#
#   qmgr -c "create hook bftrainer event='execjob_begin,execjob_epilogue'"
#   qmgr -c "set hook bftrainer alarm=10"
#   qmgr -c "set hook bftrainer fail_action=none"
#   qmgr -c "import hook bftrainer application/x-python default bftrainer_hook.py"
#
# Run on a real OpenPBS cell (23.06.06, contrib/pbs/README.md): execjob_begin
# runs as root on every MoM of the job, the sisters' while they join it, and
# the job's script starts only after every MoM's begin hook returned; the
# primary execution host's call reclaims the job's nodes, the others kill
# locally. At execjob_begin the primary's node file ($PBS_HOME/aux/JOBID)
# is not written yet and the hook's environment has no PBS_HOME, PBS_JOBID
# or PBS_NODEFILE (only PBS_CONF_FILE, PATH, LC_CTYPE): the job's vnodes
# are passed in exec_vnode's order (the primary's first) as
# BFTRAINER_PBS_NODES. Do not also wire execjob_prologue: OpenPBS then no
# longer runs mom_priv/prologue, and it runs the sisters' execjob_prologue
# without waiting for them.
import os
import re
import subprocess

import pbs

e = pbs.event()
name = {pbs.EXECJOB_BEGIN: "execjob_begin", pbs.EXECJOB_EPILOGUE: "execjob_epilogue"}.get(e.type)
if name:
    try:
        j = e.job
        nodes = re.findall(r"\(([^:+)]+)", str(j.exec_vnode or ""))
        if not nodes and e.vnode_list:
            nodes = sorted(e.vnode_list.keys())
        seen = []
        for n in nodes:
            if n not in seen:
                seen.append(n)
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "PBS_JOBID": j.id,
               "PBS_HOME": os.environ.get("PBS_HOME", "/var/spool/pbs"),
               "BFTRAINER_PBS_NODES": " ".join(seen)}
        subprocess.run(["/usr/local/bin/bftrainer", "hook", "pbs", name, j.id, str(j.euser), str(j.egroup)],
                       env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=5)
    except Exception:  # never fail the job because of bftrainer
        pass
e.accept()
