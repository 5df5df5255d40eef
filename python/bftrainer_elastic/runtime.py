"""The worker side: keep a data-parallel PyTorch job training across membership changes.

    state = State(model, optimizer, samples=0)        # model, optimizer, step, extras
    rt = Runtime(state, checkpoint="ckpt/elastic.pt", checkpoint_every=50)
    while rt.active and state.step < steps:
        rt.step(train_step)                            # train_step(rt): one optimizer step
    rt.finish()

The runner (bftrainer) publishes memberships in the Trainer's store (docs/elastic.md). At
every step boundary the runtime reads the latest epoch (one store round trip). When it changes,
the current group agrees on the boundary at which to leave it (the first worker to see it
proposes the next boundary; compare-and-set makes every worker take that one), destroys its
process group there and forms the new one. A newcomer gets the state by broadcast from a
survivor. When a peer dies inside a step, the collective fails (at once for a killed process,
after `timeout` for a hung one); the survivors put back the state of the last completed step
(a copy kept after every step), report the failure, and form the next membership the runner
publishes. Rank 0 writes a checkpoint every `checkpoint_every` steps, in a thread, for the
case where no worker with the state survives.

Requirement on the training step: every step runs at least one collective over the whole group
(DDP's gradient allreduce is one). That is what bounds how far apart workers can be at a
boundary, which the agreement relies on.
"""

import copy
import io
import os
import socket
import sys
import threading
import time
from datetime import timedelta

from . import protocol as p
from .server import PEER_TIMEOUT

ENV_STORE = "BFTRAINER_ELASTIC_STORE"
ENV_ID = "BFTRAINER_ELASTIC_ID"
ENV_TIMEOUT = "BFTRAINER_ELASTIC_TIMEOUT"
ENV_JOIN_TIMEOUT = "BFTRAINER_ELASTIC_JOIN_TIMEOUT"
# Set by the mpi-elastic launcher on the first generation of workers, the ranks mpirun or mpiexec
# started: the generation's nonce. Such a worker's id comes from its MPI rank (mpi_rank_world).
ENV_MPI = "BFTRAINER_ELASTIC_MPI"

# Where an MPI launcher puts a rank's rank and world size: Open MPI, then MPICH's Hydra (and Cray
# MPICH, Intel MPI), then PMIx.
_MPI_ENV = (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE"),
            ("PMIX_RANK", "PMIX_SIZE"))


def mpi_rank_world(environ=None):
    """(rank, world size) from the MPI launcher's environment, None outside one."""
    env = os.environ if environ is None else environ
    for r, w in _MPI_ENV:
        if env.get(r, "").isdigit() and env.get(w, "").isdigit():
            return int(env[r]), int(env[w])
    return None


def mpi_worker_id(nonce, rank):
    """The worker id of MPI rank `rank` of the generation `nonce` (the mpi-elastic launcher
    lists the same ids, in rank order)."""
    return f"mpi{rank}@{nonce}"

#: The least a store request waits, s. torch 1.13's store serves one request at a time, and a
#: peer stopped between the sends of one (SIGSTOP, a partition) holds every other worker's
#: request until the store cuts it off (server.PEER_TIMEOUT). A step survives its collective
#: timing out; a worker's store requests (at step boundaries, at formations) do not. So a store
#: client waits at least this long, three such stalls in a row, even where the collective
#: timeout is shorter.
STORE_TIMEOUT_MIN = 3 * PEER_TIMEOUT

_FORMED, _ABORTED, _REMOVED = "formed", "aborted", "removed"


class _Finished(Exception):
    """The job completed while this worker waited for a membership."""

# Substrings of the errors gloo, NCCL and c10d raise when a peer is gone or hangs. Any other
# exception from the training step is the script's own and is raised again.
_COMM_ERRORS = ("gloo", "nccl", "connection closed", "connection reset", "broken pipe",
                "timed out", "timeout", "socket", "peer", "processgroup", "distbackenderror",
                "distnetworkerror")


def is_comm_error(e):
    """True if e looks like a failed collective (a dead or hung peer), not a bug."""
    import torch.distributed as dist
    for name in ("DistBackendError", "DistNetworkError"):
        t = getattr(dist, name, None)
        if isinstance(t, type) and isinstance(e, t):
            return True
    if not isinstance(e, RuntimeError):
        return False
    msg = str(e).lower()
    return any(s in msg for s in _COMM_ERRORS)


class State:
    """What the runtime keeps identical on every worker: the model, the optimizer, the number
    of completed steps (`step`, the data position) and any picklable extras, read and written
    as attributes (`state.samples += n`). Whatever else the script keeps is its own."""

    _own = ("model", "optimizer", "step", "extra")

    def __init__(self, model, optimizer=None, step=0, **extra):
        object.__setattr__(self, "model", model)
        object.__setattr__(self, "optimizer", optimizer)
        object.__setattr__(self, "step", int(step))
        object.__setattr__(self, "extra", dict(extra))

    def __getattr__(self, name):
        try:
            return self.__dict__["extra"][name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name, value):
        if name in State._own:
            object.__setattr__(self, name, value)
        else:
            self.extra[name] = value

    def state_dict(self):
        """A deep copy: tensors cloned, so later steps do not change it. An extra with
        state_dict/load_state_dict methods (an LR scheduler, a data sampler) is saved through
        them; any other extra must be picklable."""
        extra = {k: ({"__stateful__": v.state_dict()} if _stateful(v) else v)
                 for k, v in self.extra.items()}
        return copy.deepcopy({
            "step": self.step,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict() if self.optimizer is not None else None,
            "extra": extra,
        })

    def load_state_dict(self, sd):
        self.model.load_state_dict(sd["model"])
        if self.optimizer is not None and sd.get("optimizer") is not None:
            self.optimizer.load_state_dict(sd["optimizer"])  # deep-copies
        object.__setattr__(self, "step", int(sd["step"]))
        for k, v in copy.deepcopy(sd.get("extra") or {}).items():
            if isinstance(v, dict) and set(v) == {"__stateful__"} and _stateful(self.extra.get(k)):
                self.extra[k].load_state_dict(v["__stateful__"])
            else:
                self.extra[k] = v


def _load(f):
    """torch.load of state this runtime wrote itself. weights_only=False: the extras may be any
    picklable object, and torch >= 2.6 would refuse them by default."""
    import torch
    return torch.load(f, map_location="cpu", weights_only=False)


def _bytes(t):
    """A uint8 CPU tensor's bytes (through numpy, as torch's own object collectives do; a slow
    path without it)."""
    try:
        return t.numpy().tobytes()
    except (ImportError, RuntimeError):
        return bytes(t.tolist())


def _on_cuda(model):
    """True if any of the model's parameters is on a CUDA device."""
    params = getattr(model, "parameters", None)
    if not callable(params):
        return False
    return any(getattr(t, "is_cuda", False) for t in params())


def _proof_words(secret, epoch, rank, wid):
    """A member's proof of the run's secret for (epoch, rank, id), as eight 32-bit words."""
    d = bytes.fromhex(p.prove(secret, "member", epoch, rank, wid))
    return [int.from_bytes(d[i:i + 4], "big") for i in range(0, 32, 4)]


def _stateful(v):
    return callable(getattr(v, "state_dict", None)) and callable(getattr(v, "load_state_dict", None))


class Runtime:
    """One worker of an elastic Trainer. See the module docstring.

    state            the State to keep consistent
    checkpoint       file rank 0 writes every `checkpoint_every` steps and at finish(), and
                     reads when a group forms with no member holding the state (on a
                     filesystem every node shares); None: no disk checkpoint
    backend          "gloo" or "nccl"; default nccl when the model's parameters are on a CUDA
                     device and NCCL is there, else gloo (a CPU model on a GPU node, or
                     several workers sharing one GPU, need gloo: NCCL takes CUDA tensors
                     only, one rank per device)
    timeout          collective timeout, seconds (default $BFTRAINER_ELASTIC_TIMEOUT or 10):
                     how long a hung peer can stall the group. A store request waits this
                     long too, but never less than STORE_TIMEOUT_MIN (9 s).
    join_timeout     how long to wait for the members of a new epoch to arrive before giving
                     it up (default $BFTRAINER_ELASTIC_JOIN_TIMEOUT or 60)
    wait_timeout     how long to wait for the runner's next membership after a failure before
                     raising (default 600)
    ddp              wrap state.model in DistributedDataParallel after every change (rt.model)
    ddp_kwargs       extra DistributedDataParallel arguments
    snapshot         copy the state after every step, to roll back a step that failed half
                     way. False saves the copy when the step changes nothing before its last
                     collective has succeeded (plain DDP backward + optimizer.step do not).
    store, wid       "host:port" of the Trainer's store and this worker's id; default
                     $BFTRAINER_ELASTIC_STORE and $BFTRAINER_ELASTIC_ID. Without a store the
                     runtime runs alone: a private store, a world of one. A worker started
                     by mpirun / mpiexec (the mpi-elastic launcher's first generation: no
                     $BFTRAINER_ELASTIC_ID, $BFTRAINER_ELASTIC_MPI set) takes its id from its
                     MPI rank (OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/SIZE): the runner lists
                     the generation in MPI rank order, so its first group's ranks are MPI's.
    secret           the run's secret (default $BFTRAINER_ELASTIC_SECRET): required with a
                     store. Every key lives under the namespace it derives, the ready record
                     carries proof of it, and each new group checks that every member proves
                     it before any state is sent (docs/elastic.md, "Who may talk to a Trainer").
    log              a file for one line per membership change (default stderr; None: quiet)
    """

    def __init__(self, state, *, checkpoint=None, checkpoint_every=0, backend=None,
                 timeout=None, join_timeout=None, wait_timeout=600.0, ddp=True, ddp_kwargs=None,
                 snapshot=True, store=None, wid=None, secret=None, log=sys.stderr):
        self.state = state
        self.checkpoint = checkpoint
        self.checkpoint_every = int(checkpoint_every or 0)
        self.backend = backend
        self.timeout = float(timeout if timeout is not None else os.environ.get(ENV_TIMEOUT, 10))
        self.join_timeout = float(join_timeout if join_timeout is not None
                                  else os.environ.get(ENV_JOIN_TIMEOUT, 60))
        self.wait_timeout = float(wait_timeout)
        self.use_ddp = ddp
        self.ddp_kwargs = dict(ddp_kwargs or {})
        self.use_snapshot = snapshot
        self.store_addr = store if store is not None else os.environ.get(ENV_STORE, "")
        self.id = wid if wid is not None else os.environ.get(ENV_ID, "")
        self.mpi = None  # (rank, world) for a worker bootstrapped from MPI's environment
        if not self.id and os.environ.get(ENV_MPI):
            self.mpi = mpi_rank_world()
            if self.mpi is None:
                raise ValueError(f"bftrainer-elastic: ${ENV_MPI} is set but no MPI rank is "
                                 "(OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/SIZE): not started by "
                                 "mpirun or mpiexec?")
            self.id = mpi_worker_id(os.environ[ENV_MPI], self.mpi[0])
        self.secret = secret if secret is not None else os.environ.get(p.ENV_SECRET, "")
        self.log = log

        self.rank, self.world, self.epoch = 0, 0, 0
        self.model = state.model  # the DDP wrapper once a group is formed
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.active = True  # False once this worker is no longer a member: stop training
        self.changes = 0    # groups formed by this worker
        self._store = None
        self._master = None  # the private store of a solitary run
        self._pg_store = None
        self._started = False
        self._have_state = False  # state holds the job's progress (not just initial weights)
        self._snap = None
        self._switch = None  # (boundary step, epoch) the current group agreed to switch at
        self._failures = 0   # consecutive failed steps
        self._step_time = 0.0  # wall time the last completed step completed (0: none here)
        self._resumed_from = 0.0  # the same, for the state the latest group formed with
        self._writer = None  # the checkpoint thread
        self._dist = None

    # ----------------------------------------------------------------------- public

    def start(self):
        """Connect, announce readiness, wait to be listed, join. Called by the first step()."""
        if self._started:
            return self
        self._started = True
        import torch.distributed as dist
        self._dist = dist
        if self.backend is None:
            self.backend = "nccl" if (_on_cuda(self.state.model) and dist.is_nccl_available()) else "gloo"
        self._connect()
        self.store.set(p.k_ready(self.id), p.dump(p.ready_record(self.secret, self.id, os.getpid(),
                                                                 socket.gethostname())))
        self._say("ready, waiting to be listed")
        seen = 0
        try:
            while True:  # epochs published before the runner listed us are not ours to judge
                seen = self._wait_epoch(after=seen)
                if self.id in p.members(self.store, seen):
                    break
        except _Finished:
            self._say("the job finished before this worker was listed: leaving")
            self.active = False
            return self
        if self._form_loop(seen) == _REMOVED:
            self.active = False
        elif self.mpi is not None:
            self._say(f"MPI rank {self.mpi[0]} of {self.mpi[1]}: rank {self.rank} of "
                      f"{self.world} in the first group")
        return self

    def step(self, fn):
        """Run one training step, fn(self), unless a membership change comes first. Returns
        True if a step completed (state.step went up by one), False if this call handled a
        change or a failure instead. Check `active` before calling again."""
        if not self._started:
            self.start()
        if not self.active:
            return False
        if self._boundary() == _REMOVED:
            self.active = False
            return False
        try:
            fn(self)
        except Exception as e:  # noqa: BLE001 - only communication failures are handled
            if not is_comm_error(e) or self._failures >= 5:
                raise
            self._failures += 1
            self._recover(e)
            return False
        self.state.step += 1
        self._step_time = time.time()
        self._failures = 0
        self._after_step()
        return True

    def shard(self, n):
        """This worker's contiguous part of a global batch of n items, as a slice. With a loss
        summed over the shard and multiplied by `world / n`, DDP's average is the mean over the
        whole global batch whatever the world size."""
        q, r = divmod(n, self.world)
        lo = self.rank * q + min(self.rank, r)
        return slice(lo, lo + q + (1 if self.rank < r else 0))

    def finish(self):
        """End of training: the final checkpoint (rank 0), `finished` in the store, leave."""
        if not self.active or self.world == 0:
            self.close()
            return
        if self.rank == 0:
            self._join_writer()
            if self.checkpoint:
                self._write_checkpoint(self.state.state_dict())
        self._dist.barrier()
        if self.rank == 0:
            self.store.set(p.K_FINISHED, p.dump({"step": self.state.step, "epoch": self.epoch,
                                                 "time": p.now()}))
        self._say(f"finished at step {self.state.step}")
        self.close()

    def close(self):
        """Leave without ceremony (the process group is destroyed)."""
        self._join_writer()
        self._destroy()
        self.active = False

    @property
    def store(self):
        return self._store

    # ------------------------------------------------------------------ boundaries

    def _boundary(self):
        """At a step boundary: agree on a switch, or carry it out."""
        if self._switch is None:
            latest = p.latest_epoch(self.store)
            if latest <= self.epoch:
                return None
            # The first worker of the group to see it picks the next boundary; everyone takes
            # that one. No worker can be past it: finishing a step needs every worker's part
            # in its collective, so when one worker is at boundary b, none is beyond b+1, and
            # any worker reaching b+1 reads the switch after it was written.
            got = p.cas_first(self.store, p.k_switch(self.epoch), f"{self.state.step + 1} {latest}")
            at, target = (int(x) for x in got.split())
            if at < self.state.step:
                raise RuntimeError(f"bftrainer-elastic: group {self.epoch} switched at step {at}, "
                                   f"this worker is at {self.state.step}: a step without a "
                                   "collective over the whole group?")
            self._switch = (at, target)
        at, target = self._switch
        if self.state.step < at:
            return None
        self._switch = None
        self._destroy()
        return self._form_loop(target)

    def _form_loop(self, target):
        try:
            while True:
                r = self._try_form(target)
                if r != _ABORTED:
                    return r
                target = self._wait_epoch(after=target)
        except _Finished:
            self._say("the job finished meanwhile: leaving")
            return _REMOVED

    def _wait_epoch(self, after):
        """The latest epoch once it is after `after` (the runner's next membership). Raises
        _Finished if the job completes meanwhile (a newcomer listed too late)."""
        t0 = time.monotonic()
        said = checked = t0
        while True:
            e = p.latest_epoch(self.store)
            if e > after:
                return e
            now = time.monotonic()
            if now - checked > 0.1:
                checked = now
                if p.peek(self.store, p.K_FINISHED) is not None:
                    raise _Finished()
            if now - t0 > self.wait_timeout:
                raise RuntimeError(f"bftrainer-elastic: no membership after epoch {after} "
                                   f"within {self.wait_timeout:g} s")
            if now - said > 10:
                self._say(f"waiting for a membership after epoch {after}")
                said = now
            time.sleep(0.002)

    def _try_form(self, e):
        """Form epoch e's group: register, agree with the other members that everyone is there
        (or give e up for a newer epoch or on the join deadline), then build the process group
        and make the state identical everywhere."""
        t0 = time.monotonic()
        mem = p.members(self.store, e)
        if self.id not in mem:
            self.store.set(p.k_left(self.id), p.dump({"epoch": e, "step": self.state.step,
                                                      "time": p.now()}))
            self._say(f"not a member of epoch {e}: leaving at step {self.state.step}")
            return _REMOVED
        self.store.add(p.k_join(e, self.id), 1)
        fate = None
        if int(self.store.add(p.k_joined(e), 1)) >= len(mem):
            fate = p.cas_first(self.store, p.k_fate(e), "go")
        deadline = t0 + self.join_timeout
        while fate is None:
            fate = p.peek(self.store, p.k_fate(e))
            if fate is not None:
                break
            if p.latest_epoch(self.store) > e:
                fate = p.cas_first(self.store, p.k_fate(e), "abort")
            elif time.monotonic() > deadline:
                fate = p.cas_first(self.store, p.k_fate(e), "abort")
            else:
                time.sleep(0.001)
        if fate != "go":
            self._say(f"epoch {e} given up (a newer membership, or a member never came)")
            return _ABORTED
        try:
            moved, source, from_disk = self._build(e, mem)
        except Exception as err:  # noqa: BLE001
            if not is_comm_error(err):
                raise
            self._report_failure(e, err)
            self._destroy()
            self._restore()
            return _ABORTED
        self.changes += 1
        took = time.monotonic() - t0
        if self.rank == 0:
            now = p.now()
            last = self._resumed_from
            # lost: seconds of training the change cost, from the completion of the last step
            # the group continues from to the moment the new group can train. It holds the
            # step in flight at a failure (redone), the wait for the runner's membership, the
            # formation and the state transfer; None when no member held the state.
            self.store.set(p.k_formed(e), p.dump({
                "epoch": e, "step": self.state.step, "world": self.world, "source": source,
                "from_disk": from_disk, "bytes": moved, "seconds": round(took, 4),
                "time": now, "last_step_time": round(last, 3) if last > 0 else None,
                "lost": round(max(0.0, now - last), 4) if last > 0 and not from_disk else None}))
        self._say(f"epoch {e}: rank {self.rank} of {self.world} at step {self.state.step} "
                  f"in {took:.3f} s (state from rank {source}"
                  f"{', from disk' if from_disk else ''}, {moved} bytes sent)")
        return _FORMED

    def _build(self, e, mem):
        import torch
        dist = self._dist
        self._destroy()
        self.rank, self.world = mem.index(self.id), len(mem)
        # A fresh client per group for the process group's own rendezvous: if it times out,
        # torch 1.13 leaves that connection out of step, and ours must stay usable.
        host, port = self._host_port()
        self._pg_store = dist.TCPStore(host, port, None, False, self._store_timeout())
        ns = dist.PrefixStore(p.namespace(self.secret), self._pg_store)
        dist.init_process_group(self.backend, store=dist.PrefixStore(p.k_pg(e), ns),
                                rank=self.rank, world_size=self.world,
                                timeout=timedelta(seconds=self.timeout))
        self.epoch = e
        dev = self._device()
        # Each member's step count (-1 for a newcomer), when it completed that step, and its
        # proof of the run's secret for this epoch and rank, in one collective (float64 holds
        # step counts exactly up to 2**53, and the proof as eight 32-bit words).
        mine = torch.tensor([self.state.step if self._have_state else -1,
                             self._step_time if self._have_state else 0.0,
                             *_proof_words(self.secret, e, self.rank, self.id)],
                            dtype=torch.float64, device=dev)
        got = [torch.zeros_like(mine) for _ in range(self.world)]
        dist.all_gather(got, mine)
        # No state leaves this worker for a group with a member that cannot prove the secret
        # (the namespace already keeps strangers out of the rendezvous; this is the check
        # that does not depend on it).
        for r, (t, w) in enumerate(zip(got, mem)):
            if [int(x) for x in t[2:].tolist()] != _proof_words(self.secret, e, r, w):
                raise RuntimeError(f"bftrainer-elastic: member {w} (rank {r}) of epoch {e} "
                                   "did not prove the run's secret: no state is sent")
        steps = [int(t[0].item()) for t in got]
        best = max(steps)
        # When the state the group continues from was completed: the last of its holders to
        # complete that step (a step is done once every rank's part of it is).
        self._resumed_from = max((float(t[1].item()) for t, s in zip(got, steps)
                                  if s == best and best >= 0), default=0.0)
        from_disk = False
        if best < 0:  # nobody holds the job's progress: the disk checkpoint, if any
            source = 0
            if self.rank == 0:
                from_disk = self._load_checkpoint()
            need = self.world > 1
        else:
            source = steps.index(best)
            need = any(s != best for s in steps)  # survivors at one step hold one state
        moved = 0
        if need:
            moved = self._broadcast_state(source, dev)
        self._have_state = True
        self._step_time = self._resumed_from or self._step_time
        self._switch = None
        self._snapshot()
        if self.use_ddp:
            from torch.nn.parallel import DistributedDataParallel as DDP
            self.model = DDP(self.state.model, **self.ddp_kwargs)
        else:
            self.model = self.state.model
        return moved, source, from_disk

    def _broadcast_state(self, src, dev):
        import torch
        dist = self._dist
        if self.rank == src:
            buf = io.BytesIO()
            torch.save(self._snap if self._snap is not None else self.state.state_dict(), buf)
            data = torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8).to(dev)
            size = torch.tensor([data.numel()], dtype=torch.int64, device=dev)
        else:
            size = torch.zeros(1, dtype=torch.int64, device=dev)
        dist.broadcast(size, src)
        if self.rank != src:
            data = torch.empty(int(size.item()), dtype=torch.uint8, device=dev)
        dist.broadcast(data, src)
        if self.rank != src:
            sd = _load(io.BytesIO(_bytes(data.cpu())))
            self.state.load_state_dict(sd)
        return int(size.item()) * (self.world - 1)

    # --------------------------------------------------------------------- failures

    def _recover(self, err):
        g = self.epoch
        self._report_failure(g, err)
        self._restore()
        self._destroy()
        self._switch = None
        target = p.latest_epoch(self.store)
        if target <= g:
            try:
                target = self._wait_epoch(after=g)
            except _Finished:  # the others completed the job without us
                self.active = False
                return
        if self._form_loop(target) == _REMOVED:
            self.active = False

    def _report_failure(self, e, err):
        msg = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        self.store.set(p.k_failed(e, self.id), p.dump({"step": self.state.step, "error": msg[:300],
                                                       "time": p.now()}))
        self._say(f"group {e} failed at step {self.state.step}: {msg[:200]}")

    def _restore(self):
        if self.use_snapshot and self._snap is not None:
            self.state.load_state_dict(self._snap)

    # ------------------------------------------------------------------- per step

    def _snapshot(self):
        if self.use_snapshot:
            self._snap = self.state.state_dict()

    def _after_step(self):
        self._snapshot()
        if (self.rank == 0 and self.checkpoint and self.checkpoint_every > 0
                and self.state.step % self.checkpoint_every == 0):
            if self._writer is None or not self._writer.is_alive():
                sd = self._snap if self._snap is not None else self.state.state_dict()
                self._writer = threading.Thread(target=self._write_checkpoint, args=(sd,),
                                                name="bft-checkpoint", daemon=True)
                self._writer.start()

    def _write_checkpoint(self, sd):
        import torch
        path = self.checkpoint
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        tmp = f"{path}.tmp.{os.getpid()}"
        torch.save({"format": "bftrainer-elastic/1", "epoch": self.epoch, "time": time.time(),
                    **sd}, tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)  # readers see the old file or the new one, never half

    def _join_writer(self):
        if self._writer is not None:
            self._writer.join()
            self._writer = None

    def _load_checkpoint(self):
        if not self.checkpoint or not os.path.exists(self.checkpoint):
            return False
        self.state.load_state_dict(_load(self.checkpoint))
        return True

    # ----------------------------------------------------------------------- plumbing

    def _connect(self):
        dist = self._dist
        if not self.store_addr:  # alone: our own store, and we publish our own membership
            self._master = dist.TCPStore("127.0.0.1", 0, None, True, timedelta(seconds=60),
                                         wait_for_workers=False)
            self.store_addr = f"127.0.0.1:{self._master.port}"
            self.id = self.id or "solo"
            self.secret = self.secret or p.new_secret()
        if not p.ID_PATTERN.match(self.id or ""):
            raise ValueError(f"bftrainer-elastic: bad or missing worker id {self.id!r} "
                             f"(${ENV_ID})")
        try:
            p.check_secret(self.secret)
        except ValueError as e:
            raise ValueError(f"bftrainer-elastic: {e}: the runner hands it to every worker") from None
        host, port = self._host_port()
        deadline = time.monotonic() + 60
        while True:
            try:
                raw = dist.TCPStore(host, port, None, False, self._store_timeout())
                break
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        self._store = dist.PrefixStore(p.namespace(self.secret), raw)
        if self._master is not None:
            p.publish(self._store, 1, [self.id])

    def _store_timeout(self):
        return timedelta(seconds=max(self.timeout, STORE_TIMEOUT_MIN))

    def _host_port(self):
        host, _, port = self.store_addr.rpartition(":")
        return host.strip("[]"), int(port)

    def _device(self):
        import torch
        if self.backend == "nccl":
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")

    def _destroy(self):
        dist = self._dist
        if dist is not None and dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:  # noqa: BLE001 - a broken group may complain while going
                pass
        self.model = self.state.model
        self._pg_store = None

    def _say(self, msg):
        if self.log is not None:
            try:
                self.log.write(f"bftrainer-elastic: {time.time():.3f} id={self.id} {msg}\n")
                self.log.flush()
            except (OSError, ValueError):
                pass
