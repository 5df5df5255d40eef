"""Report training progress to bftrainer (stdlib only, importable by any training script).

    import bftrainer_progress
    ...
    if rank == 0:
        bftrainer_progress.report(total_samples)          # cheap; call it every step
    ...
    if rank == 0:
        bftrainer_progress.report(total_samples, force=True)
        bftrainer_progress.flush()                        # at the very end

`report(samples)` runs `$BFTRAINER_BIN progress $BFTRAINER_TRAINER --samples N` in the
background, at most once every `interval` seconds (default 5, env BFTRAINER_PROGRESS_INTERVAL).
N is the cumulative number of samples the whole job has processed so far (all ranks, all
restarts, as restored from the checkpoint), so it may go down a little after a restart from an
older checkpoint. The sidecar sets BFTRAINER_BIN and BFTRAINER_TRAINER in the Trainer's
environment; if either is unset, every call is a silent no-op, so the same script runs
unchanged outside bftrainer.

It never blocks the training loop and never raises: while a previous report is still running
the new one is skipped (the next call after it finishes reports the latest value), and any
failure (missing binary, non-zero exit, controller unreachable) is ignored. The child stays in
the caller's process group on purpose: reclaiming a node kills the whole group, reporter too.
Call it from rank 0 only.
"""

import os
import signal
import subprocess
import threading
import time

__all__ = ["report", "flush", "enabled"]

_lock = threading.Lock()
_proc = None  # the running reporter, if any
_last_start = float("-inf")  # monotonic time the last reporter was started
_pending = None  # latest (samples, nodes) not yet reported (skipped by the throttle)


def _interval():
    try:
        return max(0.0, float(os.environ.get("BFTRAINER_PROGRESS_INTERVAL", "5")))
    except ValueError:
        return 5.0


def enabled():
    """True when the environment tells us where to report."""
    return bool(os.environ.get("BFTRAINER_BIN")) and bool(os.environ.get("BFTRAINER_TRAINER"))


class _Spawned:
    """Minimal Popen look-alike for a child started with os.posix_spawnp."""

    def __init__(self, pid):
        self.pid = pid
        self.returncode = None

    def poll(self):
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout):
        deadline = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired([str(self.pid)], timeout)
            time.sleep(0.02)
        return self.returncode


def _spawn(cmd):
    # A script that blocks signals (train.py blocks SIGTERM/SIGINT/SIGHUP in every thread and
    # takes them with sigwait) would pass that mask on: fork/exec keeps the signal mask, and
    # Popen has no way to reset it. posix_spawn can, without running Python code in the child.
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    if blocked and hasattr(os, "posix_spawnp"):
        devnull = [(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_RDWR, 0) for fd in (0, 1, 2)]
        return _Spawned(os.posix_spawnp(cmd[0], cmd, os.environ, file_actions=devnull,
                                        setsigmask=(), setsigdef=tuple(blocked)))
    return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, close_fds=True)


def _busy():
    """Reap a finished reporter; True while one is still running."""
    global _proc
    if _proc is None:
        return False
    try:
        if _proc.poll() is None:
            return True
    except OSError:
        pass
    _proc = None
    return False


def report(samples, force=False, interval=None, nodes=None):
    """Report `samples` (cumulative, int) unless throttled. Returns True if a report was started.

    `nodes`, if given, is how many nodes the job trains on now (torchrun: $GROUP_WORLD_SIZE):
    bftrainer's curve learner then takes no rate from a job still at its old size after a
    rescale, or restarting."""
    global _proc, _last_start, _pending
    if not enabled():
        return False
    with _lock:
        _pending = (int(samples), int(nodes) if nodes else 0)
        if _busy():
            return False
        now = time.monotonic()
        if not force and now - _last_start < (_interval() if interval is None else interval):
            return False
        cmd = [os.environ["BFTRAINER_BIN"], "progress", os.environ["BFTRAINER_TRAINER"],
               "--samples", str(_pending[0])]
        if _pending[1] > 0:
            cmd += ["--nodes", str(_pending[1])]
        try:
            _proc = _spawn(cmd)
        except Exception:  # noqa: BLE001 - reporting must never break training
            _proc = None
            return False
        _last_start = now
        _pending = None
        return True


def flush(timeout=3.0):
    """At exit: wait up to `timeout` s for the running report, then send the last pending value
    (if the throttle or a busy reporter held it back) and wait for that one too."""
    global _proc
    if not enabled():
        return
    deadline = time.monotonic() + timeout
    for _ in range(2):
        with _lock:
            proc = _proc
        if proc is not None:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except Exception:  # noqa: BLE001 - includes TimeoutExpired
                return
            with _lock:
                _busy()
        with _lock:
            pending = _pending
        if pending is None:
            return
        report(pending[0], force=True, nodes=pending[1])
