"""What a membership change costs a Trainer: seconds of training progress lost, measured on
real processes on this machine (each "node" one worker, or one torchrun agent).

    flock /tmp/bft-heavy.lock /usr/bin/python3 -m bftrainer_elastic.bench -n 3 --launcher both

runs contrib/trainer/train.py through the scenario 1 -> 3 (up), 3 -> 2 (down), a reclaim
(2 -> 1), 1 -> 4 (up), n times per launcher, and prints one line per change (stdout), then
the medians:

    rescale launcher=elastic direction=up from=1 to=3 seconds_lost=0.071 recovery=1.903 redone=0
    ...
    rescale launcher=elastic direction=up n=6 median_seconds_lost=0.066 median_recovery=1.870

seconds_lost is the training time the change cost: from the completion of the last step before
it (s) to the completion of step s+1 after it, minus one ordinary step at the new size. A step
redone from a checkpoint counts as lost; time the old group keeps training while a newcomer
starts does not. recovery is the wall time from the runner's action (starting the new nodes,
publishing the smaller membership, the SIGKILL) to the first step at the new size: what
`bftrainer-bench rescale` reports for torchrun. redone is the number of steps trained twice.

Launchers: `elastic` (this runtime, LocalRunner as the runner: a node is added once it is
ready, removed by a new membership, reclaimed by SIGKILL of its process group and a new
membership) and `torchrun` (stock torch.distributed.run agents on contrib/trainer/store.py,
the flags bftrainer uses; removing and reclaiming are both SIGKILL of the agent's group, as
bftrainer does). Timings on a shared machine are noisy: compare launchers measured in the
same run.
"""

import argparse
import os
import random
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from .local import LocalRunner

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_TRAINER = os.path.join(_ROOT, "contrib", "trainer", "train.py")

# (direction, nodes started, node removed, world after)
SCENARIO = [
    ("start", ["n1"], None, 1),
    ("up", ["n2", "n3"], None, 3),
    ("down", [], "n3", 2),
    ("reclaim", [], "n2", 1),
    ("up", ["n4", "n5", "n6"], None, 4),
]


def read_log(path):
    """[(time, node, world, step)] of train.py's progress log (complete step lines only)."""
    out = []
    try:
        with open(path) as f:
            for line in f:
                if not line.endswith("\n") or line.rstrip().endswith("done"):
                    continue
                fs = line.split()
                kv = dict(x.split("=", 1) for x in fs[1:] if "=" in x)
                try:
                    out.append((float(fs[0]), kv["node"], int(kv["world"]), int(kv["step"])))
                except (KeyError, ValueError, IndexError):
                    continue
    except FileNotFoundError:
        pass
    return out


def completions(lines):
    """step -> completion time (the last rank to log it)."""
    done = {}
    for t, _, _, step in lines:
        done[step] = max(done.get(step, 0.0), t)
    return done


def measure(lines, since, t0, old_world, new_world, hold):
    """The cost of one change, or None until `hold` steps at the new size are logged.
    since: the first step time of the previous size (older lines belong to earlier sizes)."""
    new = [x for x in lines if x[0] >= t0 and x[2] == new_world]
    if not new:
        return None
    first_new = min(x[0] for x in new)
    old = [x for x in lines if since <= x[0] < first_new and x[2] == old_world]
    if not old:
        return None
    s_old = max(x[3] for x in old)
    t_old = completions(old)[s_old]
    done = completions(new)
    target = s_old + 1
    steps = sorted(s for s in done if s > target)
    if target not in done or len(steps) < hold:
        return None
    seq = [target] + steps[:hold]
    periods = [done[b] - done[a] for a, b in zip(seq, seq[1:]) if b == a + 1]
    period = statistics.median(periods) if periods else 0.0
    return {"seconds_lost": max(0.0, done[target] - t_old - period),
            "recovery": first_new - t0,
            "redone": max(0, s_old - min(x[3] for x in new) + 1),
            "first_new": first_new}


class ElasticNodes:
    """Nodes under the elastic runtime, LocalRunner playing bftrainer."""

    name = "elastic"

    def __init__(self, d, trainer, python, sleep):
        self.log = os.path.join(d, "progress.log")
        self.argv = [python, trainer, "--elastic", "--steps", "100000000", "--ckpt-dir",
                     os.path.join(d, "ckpt"), "--log", self.log, "--sleep", str(sleep),
                     "--pg-timeout", "10", "--print-every", "0"]
        self.r = LocalRunner(d, python=python, timeout=120)
        self.r.start_store()

    def add(self, nodes):
        self.r.grow({n: self.argv for n in nodes})  # start, wait until ready, publish

    def down(self, node):
        self.r.shrink([node])

    def reclaim(self, node):
        self.r.reclaim([node])

    def alive(self):
        for w in self.r.workers.values():
            if w.proc.poll() not in (None, 0, -signal.SIGKILL):
                raise RuntimeError(f"worker {w.id} exited {w.proc.returncode}: {w.tail()}")

    def close(self):
        self.r.close()


class TorchrunNodes:
    """Nodes under stock torchrun (one agent each), with bftrainer's flags."""

    name = "torchrun"

    def __init__(self, d, trainer, python, sleep):
        self.dir, self.python = d, python
        self.log = os.path.join(d, "progress.log")
        self.env = dict(os.environ, OMP_NUM_THREADS="1")
        self.agents = {}
        store_py = os.path.join(os.path.dirname(trainer), "store.py")
        with open(os.path.join(d, "store.err"), "wb") as fe:
            self.store = subprocess.Popen([python, store_py, "--port", "0"], stdout=subprocess.PIPE,
                                          stderr=fe, stdin=subprocess.DEVNULL,
                                          start_new_session=True)
        port = None
        deadline = time.monotonic() + 60
        buf = b""
        while b"store ready" not in buf:
            if time.monotonic() > deadline or self.store.poll() is not None:
                raise RuntimeError("store.py did not start")
            r, _, _ = select.select([self.store.stdout], [], [], 1)
            if r:
                buf += os.read(self.store.stdout.fileno(), 4096)
        for line in buf.decode().splitlines():
            if line.startswith("store port="):
                port = int(line.split("=", 1)[1])
        self.argv = [python, "-m", "torch.distributed.run", "--nnodes=1:8", "--nproc_per_node=1",
                     "--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.1:{port}",
                     f"--rdzv_id=bench-{os.getpid()}-{time.time_ns()}", "--max_restarts=100",
                     "--rdzv_conf=is_host=false,last_call_timeout=1,join_timeout=60",
                     "--monitor_interval=1", "-r", "1", "-t", "1"]
        self.train = [trainer, "--steps", "100000000", "--ckpt-dir", os.path.join(d, "ckpt"),
                      "--log", self.log, "--sleep", str(sleep), "--pg-timeout", "10",
                      "--print-every", "0"]

    def add(self, nodes):
        for n in nodes:
            out = os.path.join(self.dir, n)
            with open(out + ".out", "wb") as fo, open(out + ".err", "wb") as fe:
                self.agents[n] = subprocess.Popen(
                    self.argv + [f"--log_dir={out}.logs"] + self.train, stdout=fo, stderr=fe,
                    stdin=subprocess.DEVNULL, env=dict(self.env, NODE_TAG=n), cwd=self.dir,
                    start_new_session=True)

    def down(self, node):
        self.reclaim(node)  # torchrun cannot let a node go: bftrainer kills its agent's group

    def reclaim(self, node):
        p = self.agents.pop(node)
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()

    def alive(self):
        for n, p in self.agents.items():
            if p.poll() is not None:
                raise RuntimeError(f"torchrun agent {n} exited {p.returncode}")

    def close(self):
        for n in list(self.agents):
            self.reclaim(n)
        if self.store.poll() is None:
            self.store.terminate()
            self.store.wait(10)
        self.store.stdout.close()


LAUNCHERS = {"elastic": ElasticNodes, "torchrun": TorchrunNodes}


def run_once(launcher, trainer, python, sleep, rng, out, timeout=180.0):
    """One pass of SCENARIO; yields one result dict per change."""
    d = tempfile.mkdtemp(prefix=f"bft-bench-{launcher}-")
    nodes = LAUNCHERS[launcher](d, trainer, python, sleep)
    try:
        world, since = 0, 0.0
        for direction, start, remove, new_world in SCENARIO:
            t0 = time.time()
            if start:
                nodes.add(start)
            if remove:
                getattr(nodes, direction)(remove)
            hold = 10 + rng.randrange(5)  # so that kills do not line up with checkpoints
            deadline = time.monotonic() + timeout
            while True:
                nodes.alive()
                lines = read_log(nodes.log)
                if direction == "start":
                    got = [x for x in lines if x[2] == new_world]
                    if len(completions(got)) >= hold:
                        res = {"first_new": min(x[0] for x in got)}
                        break
                else:
                    res = measure(lines, since, t0, world, new_world, hold)
                    if res is not None:
                        break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{launcher}: no {hold} steps at world {new_world} "
                                       f"within {timeout:g} s (see {d})")
                time.sleep(0.05)
            if direction != "start":
                res.update(launcher=launcher, direction=direction, old=world, new=new_world)
                print(f"rescale launcher={launcher} direction={direction} from={world} "
                      f"to={new_world} seconds_lost={res['seconds_lost']:.3f} "
                      f"recovery={res['recovery']:.3f} redone={res['redone']}", file=out,
                      flush=True)
                yield res
            world, since = new_world, res["first_new"]
    finally:
        nodes.close()
        if not os.environ.get("BFT_KEEP_TMP"):
            shutil.rmtree(d, ignore_errors=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=3, help="scenario passes per launcher (default 3)")
    ap.add_argument("--launcher", choices=["elastic", "torchrun", "both"], default="elastic")
    ap.add_argument("--trainer", default=DEFAULT_TRAINER, help="train.py (contrib/trainer)")
    ap.add_argument("--python", default=sys.executable, help="interpreter with torch")
    ap.add_argument("--sleep", type=float, default=0.2, help="train.py's emulated compute per step")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    try:
        import torch  # noqa: F401
    except ImportError as e:
        print(f"bftrainer-elastic: bench: skipped: needs torch ({e}); use /usr/bin/python3",
              file=sys.stderr)
        return 0
    launchers = ["elastic", "torchrun"] if a.launcher == "both" else [a.launcher]
    rng = random.Random(a.seed)
    results = []
    for _ in range(a.n):
        for launcher in launchers:  # alternate, so both see the same load
            results.extend(run_once(launcher, os.path.abspath(a.trainer), a.python, a.sleep,
                                    rng, sys.stdout))
    for launcher in launchers:
        for direction in ("up", "down", "reclaim"):
            rs = [r for r in results if r["launcher"] == launcher and r["direction"] == direction]
            if rs:
                print(f"rescale launcher={launcher} direction={direction} n={len(rs)} "
                      f"median_seconds_lost={statistics.median(r['seconds_lost'] for r in rs):.3f} "
                      f"median_recovery={statistics.median(r['recovery'] for r in rs):.3f}",
                      flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
