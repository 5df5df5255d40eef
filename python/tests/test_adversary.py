"""A second, unprivileged user against a running elastic Trainer of the first.

The victim (a throwaway user) runs a two-worker Trainer with LocalRunner, which hands the run's
secret to the store process and the workers in their environment. Another throwaway user, given
what a neighbour on the controller can learn (the ports, from ss; the pids, from ps; the worker
ids, as if stolen; one control request as it went over the wire, as if sniffed), tries the
control channel (each request bare, with a forged proof, the captured one replayed), the store
(reads, writes and waits on the protocol's keys by their documented names, a count of keys), a
worker of its own (no secret, its own secret, a stolen id), and the victim's files and process
environments (adversary.py). Every attempt must be refused or come to nothing, and the victim
must train on undisturbed: its membership history is its own, and its final parameters equal
those of one process that trained on the same batches (elastic_worker.reference).

Needs root (to create the two users) and torch; skipped otherwise.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

try:
    import torch
    SKIP = None
except ImportError as e:
    SKIP = f"needs torch ({e}); run with /usr/bin/python3 (Debian's python3-torch)"
if SKIP is None and os.geteuid() != 0:
    SKIP = "needs root to create throwaway users"
if SKIP is None and shutil.which("useradd") is None:
    SKIP = "needs useradd"

STEPS = 600  # at 0.05 s a step, far longer than the attacks take (checked below)


def make_user(test, prefix):
    name = f"{prefix}{uuid.uuid4().hex[:6]}"
    subprocess.run(["useradd", "--system", "--no-create-home", "--user-group", "--shell",
                    "/usr/sbin/nologin", name], check=True, capture_output=True)

    def remove():
        for pid in uid_procs(uid):  # the throwaway user's processes, by pid: the test's own
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        subprocess.run(["userdel", name], capture_output=True)
    import pwd
    pw = pwd.getpwnam(name)
    uid = pw.pw_uid
    test.addCleanup(remove)
    return name, pw.pw_uid, pw.pw_gid


def read_json(path):
    with open(path) as f:
        return json.load(f)


def uid_procs(uid):
    """The pids of the processes whose real uid is uid."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/status") as f:
                    for line in f:
                        if line.startswith("Uid:"):
                            if int(line.split()[1]) == uid:
                                out.append(int(d))
                            break
            except OSError:
                pass
    return out


@unittest.skipIf(SKIP, SKIP)
class AdversaryTest(unittest.TestCase):
    def test_neighbour_gets_nothing(self):
        victim, vuid, vgid = make_user(self, "bftv")
        attacker, _, _ = make_user(self, "bfta")
        top = tempfile.mkdtemp(prefix="bft-adversary-")
        self.addCleanup(shutil.rmtree, top, True)
        os.chmod(top, 0o755)
        xdir, vdir = os.path.join(top, "x"), os.path.join(top, "victim")
        os.mkdir(xdir)
        os.chmod(xdir, 0o1777)
        os.mkdir(vdir, 0o700)
        os.chown(vdir, vuid, vgid)
        env = {"PATH": "/usr/bin:/bin", "HOME": "/", "OMP_NUM_THREADS": "1",
               "PYTHONPATH": os.path.dirname(HERE), "PYTHONDONTWRITEBYTECODE": "1"}
        script = os.path.join(HERE, "adversary.py")
        v = subprocess.Popen([sys.executable, script, "victim", xdir, vdir, str(STEPS)],
                             user=victim, group=vgid, env=env, cwd="/", stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT)
        self.addCleanup(lambda: v.poll() is None and v.kill())
        info = os.path.join(xdir, "info.json")
        while not os.path.exists(info) and v.poll() is None:
            try:
                v.wait(0.1)
            except subprocess.TimeoutExpired:
                pass
        if not os.path.exists(info):
            self.fail(f"the victim did not start:\n{v.stdout.read().decode()}")
        a = subprocess.run([sys.executable, script, "attack", xdir], user=attacker, env=env,
                           cwd="/", capture_output=True, timeout=300)
        self.assertEqual(a.returncode, 0, a.stdout.decode() + a.stderr.decode())
        out, _ = v.communicate(timeout=600)
        self.assertEqual(v.returncode, 0, out.decode())
        res, vic, known = (read_json(os.path.join(xdir, f))
                           for f in ("attack.json", "victim.json", "info.json"))
        print(json.dumps(res, indent=1), file=sys.stderr)

        # The control channel: nothing answered but ERR.
        for k in ("control_bare", "control_forged", "control_replay"):
            for reply in res[k]:
                self.assertTrue(reply.startswith("ERR authentication failed"), (k, reply))
        # The store: no key of the run by its documented name; writes and waits land outside
        # the run's namespace.
        for k, v_ in res["store_read"].items():
            self.assertIsNone(v_, f"{k} read by a stranger")
        self.assertEqual(res["store_wait"][0], "refused", res["store_wait"])
        # Workers of its own: never listed, never given anything.
        self.assertRegex(res["worker_no_secret"][1], "BFTRAINER_ELASTIC_SECRET")
        for k in ("worker_own_secret", "worker_stolen_id"):
            self.assertEqual(res[k][0], "refused", res[k])
            self.assertIn("no membership", res[k][1], res[k])
        # Files and environments: the victim's alone.
        for k, got in res["files"].items():
            self.assertEqual(got[0], "refused", (k, got))
            self.assertIn("PermissionError", got[1], (k, got))

        # The victim: still training when the attacks ended; its history its own; done.
        self.assertIsNone(vic["during"]["finished"], "training ended before the attacks did: raise STEPS")
        self.assertEqual((vic["during"]["epoch"], vic["during"]["members"]), (2, ["a", "b"]))
        self.assertEqual((vic["after"]["epoch"], vic["after"]["formed"]), (2, 2))
        self.assertIsNone(vic["workers"]["mallory"]["ready"])
        self.assertEqual(vic["workers"]["a"]["ready"]["pid"], known["pids"]["a"])
        self.assertEqual(vic["codes"], {"a": 0, "b": 0})
        from elastic_worker import reference
        got = torch.load(vic["out"])
        want = reference(STEPS, 12)
        for k in want:
            self.assertTrue(torch.allclose(got[k], want[k], rtol=0, atol=1e-9), k)
        self.assertNotIn(vic["secret"], json.dumps(res), "the secret reached the attacker")


if __name__ == "__main__":
    unittest.main()
