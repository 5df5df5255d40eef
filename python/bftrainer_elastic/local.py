"""A runner for one machine: the store process, workers as local processes (each one a
"node"), memberships published through the control port, reclaims by SIGKILL. It plays
bftrainer's part in the tests and the bench, and follows the runner rules of docs/elastic.md
the Go launcher implements.

    with LocalRunner(workdir) as r:
        r.grow({"a": ["/usr/bin/python3", "train.py", ...]})     # epoch 1, world 1
        r.grow({"b": argv, "c": argv})                           # world 3
        r.shrink(["c"])                                          # world 2, c exits 0
        r.reclaim(["b"])                                         # SIGKILL b, world 1
"""

import os
import select
import signal
import subprocess
import sys
import time

from .control import Control

_PKG_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class RunnerError(Exception):
    """A worker or the store process did not do what the protocol says, in time."""


class Worker:
    """One worker process, the leader of its own process group."""

    def __init__(self, wid, proc, out, err):
        self.id, self.proc, self.out, self.err = wid, proc, out, err
        self.started = time.time()

    def tail(self, n=2000):
        try:
            with open(self.err, "rb") as f:
                return f.read()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""


class LocalRunner:
    """See the module docstring. `python` runs the store process; `env` is added to every
    child's environment (PYTHONPATH always gets this package's directory). Like bftrainer, it
    draws a fresh run secret (`secret`) and hands it to the store process and the workers in
    their environment only."""

    def __init__(self, workdir, python=None, env=None, timeout=60.0):
        from .protocol import ENV_SECRET, new_secret
        self.dir = workdir
        self.python = python or sys.executable
        self.timeout = timeout
        self.env = dict(os.environ)
        self.env.update(env or {})
        pp = self.env.get("PYTHONPATH", "")
        self.env["PYTHONPATH"] = _PKG_PARENT + (os.pathsep + pp if pp else "")
        self.env.setdefault("OMP_NUM_THREADS", "1")
        self.secret = new_secret()
        self.env[ENV_SECRET] = self.secret
        self.workers = {}   # id -> Worker, every one started
        self.members = []   # the latest published membership
        self.epoch = 0
        self.store = None
        self.port = self.control_port = None
        self.server_kind = None
        self.ctl = None
        os.makedirs(workdir, exist_ok=True)

    def __enter__(self):
        self.start_store()
        return self

    def __exit__(self, *exc):
        self.close()

    # ----------------------------------------------------------------------- store

    def start_store(self, *extra):
        """Start the store process (extra: more arguments of bftrainer_elastic.server)."""
        with open(os.path.join(self.dir, "store.err"), "wb") as fe:
            self.store = subprocess.Popen(
                [self.python, "-m", "bftrainer_elastic.server", "--host", "127.0.0.1",
                 "--port", "0", "--control-port", "0", *extra],
                stdout=subprocess.PIPE, stderr=fe, stdin=subprocess.DEVNULL, env=self.env,
                start_new_session=True)
        deadline = time.monotonic() + self.timeout
        line = b""
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or self.store.poll() is not None:
                raise RunnerError("store process did not start (see store.err)")
            r, _, _ = select.select([self.store.stdout], [], [], left)
            if r:
                c = os.read(self.store.stdout.fileno(), 1)
                if not c:
                    raise RunnerError("store process closed its stdout")
                line += c
        fields = dict(f.split("=", 1) for f in line.decode().split() if "=" in f)
        self.port, self.control_port = int(fields["port"]), int(fields["control"])
        self.server_kind = fields.get("server", "blocking")  # libuv: torch 2.x's default
        self.ctl = Control("127.0.0.1", self.control_port, self.secret)
        self.ctl.ping()

    @property
    def store_addr(self):
        return f"127.0.0.1:{self.port}"

    # --------------------------------------------------------------------- workers

    def start(self, wid, argv, env=None):
        """Start a worker; it announces itself ready in the store once it can join."""
        if wid in self.workers:
            raise ValueError(f"worker id {wid} used twice (ids are unique per launch)")
        e = dict(self.env)
        e["NODE_TAG"] = wid  # each worker plays one node
        e.update(env or {})
        e.update(BFTRAINER_ELASTIC_STORE=self.store_addr, BFTRAINER_ELASTIC_ID=wid)
        out, err = (os.path.join(self.dir, f"{wid}.{x}") for x in ("out", "err"))
        with open(out, "wb") as fo, open(err, "wb") as fe:
            proc = subprocess.Popen(argv, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL,
                                    env=e, cwd=self.dir, start_new_session=True)
        w = Worker(wid, proc, out, err)
        self.workers[wid] = w
        return w

    def wait_ready(self, ids, timeout=None):
        """Wait until every id has announced itself ready."""
        self._poll(lambda: all(v["ready"] for v in self.ctl.workers(ids).values()),
                   ids, timeout, f"workers {ids} not ready")

    def publish(self, ids):
        """Publish the next membership; returns its epoch."""
        self.ctl.members(self.epoch + 1, ids)
        self.epoch += 1
        self.members = list(ids)
        return self.epoch

    def wait_formed(self, epoch, timeout=None):
        """Wait until the group of `epoch` has formed; returns the STATUS then."""
        got = {}

        def formed():
            st = self.ctl.status()
            got["st"] = st
            if st["fate"] == "abort" and st["epoch"] == epoch:
                raise RunnerError(f"epoch {epoch} was given up: {st}")
            return st["formed"] >= epoch

        self._poll(formed, self.members, timeout, f"epoch {epoch} not formed")
        return got["st"]

    def kill(self, wid):
        """SIGKILL the worker's process group (a reclaim) and reap it."""
        w = self.workers[wid]
        try:
            os.killpg(w.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        w.proc.wait()

    def signal(self, wid, sig):
        os.killpg(self.workers[wid].proc.pid, sig)

    def wait_exit(self, wid, timeout=None):
        """Wait for a worker to exit; returns its exit code."""
        w = self.workers[wid]
        try:
            return w.proc.wait(timeout=timeout or self.timeout)
        except subprocess.TimeoutExpired:
            raise RunnerError(f"worker {wid} still running after {timeout or self.timeout} s") from None

    # --------------------------------------------------------- the runner's moves

    def grow(self, argvs, env=None):
        """Start the new workers, wait until they are ready (the group keeps training
        meanwhile), then publish the membership with them appended. Returns the epoch."""
        for wid, argv in argvs.items():
            self.start(wid, argv, env)
        self.wait_ready(list(argvs))
        e = self.publish(self.members + list(argvs))
        self.wait_formed(e)
        return e

    def shrink(self, ids):
        """Publish the membership without ids; they leave at the next boundary and exit 0."""
        e = self.publish([m for m in self.members if m not in ids])
        self.wait_formed(e)
        for wid in ids:
            code = self.wait_exit(wid)
            if code != 0:
                raise RunnerError(f"removed worker {wid} exited {code}: {self.workers[wid].tail()}")
        return e

    def reclaim(self, ids, publish=True):
        """SIGKILL the workers (the node's prolog does this), then publish without them
        (unless publish is False: the test then publishes itself)."""
        for wid in ids:
            self.kill(wid)
        remaining = [m for m in self.members if m not in ids]
        if not publish or not remaining:  # nobody left to tell: the next grow starts afresh
            self.members = remaining
            return None
        e = self.publish(remaining)
        self.wait_formed(e)
        return e

    def close(self):
        for wid, w in self.workers.items():
            if w.proc.poll() is None:
                self.kill(wid)
        if self.ctl is not None:
            self.ctl.close()
        if self.store is not None:
            if self.store.poll() is None:
                self.store.terminate()
                try:
                    self.store.wait(10)
                except subprocess.TimeoutExpired:
                    os.killpg(self.store.pid, signal.SIGKILL)
                    self.store.wait()
            self.store.stdout.close()

    # ----------------------------------------------------------------------- waits

    def _poll(self, cond, watch, timeout, what):
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            if cond():
                return
            for wid in watch:
                w = self.workers.get(wid)
                if w is not None and w.proc.poll() is not None:
                    raise RunnerError(f"{what}: worker {wid} exited {w.proc.returncode}:\n{w.tail()}")
            if time.monotonic() > deadline:
                raise RunnerError(f"{what} within {timeout or self.timeout} s")
            time.sleep(0.005)
