#!/usr/bin/python3
"""Example elastic Trainer for bftrainer: a tiny DDP regression job, CPU + gloo, run by torchrun
or by bftrainer's elastic runtime.

With the elastic runtime (chosen by --elastic, or when bftrainer sets $BFTRAINER_ELASTIC_STORE)
the workers stay alive across membership changes: see main_elastic(), which is the whole port.

With torchrun, every node runs the same torchrun agent; each (re)start of the workers
(scale-up, scale-down, failure) restarts this script from the top, so it
  * restores step, sample count, model and optimizer from a checkpoint on a filesystem that all
    nodes share (--ckpt-dir), written atomically by rank 0 every --ckpt-every steps;
  * uses a short gloo timeout (--pg-timeout) so a hung peer costs seconds, not 30 minutes;
  * reports cumulative samples to bftrainer (rank 0, throttled, see bftrainer_progress.py);
  * exits promptly on SIGTERM/SIGINT/SIGHUP, even while blocked inside a collective;
  * fences itself: if a newer worker group of the same job wrote the checkpoint (a torchrun
    split brain), it exits 1 so that its agent re-rendezvouses into the current group.
One line per step goes to --log (optional):
  <unix time> node=<NODE_TAG|hostname> pid= rank= world= restart=<TORCHELASTIC_RESTART_COUNT>
  step=<steps done> samples=<samples done, all ranks> loss=
and a final `... step=N samples=M done` line; stdout ends with `done step=N samples=M`.
Run without torchrun (`/usr/bin/python3 train.py --steps 50`) it trains as a world of one.

  /usr/bin/python3 -m torch.distributed.run <flags, see README.md> train.py \
      --steps 500 --ckpt-dir /shared/ckpt/job1 --log /shared/job1.progress
"""

import os
import signal
import sys
import threading

# Signals first, before torch creates any thread: block them in every thread and take them in
# one dedicated thread. A Python-level handler would only run when the main thread gets back to
# the interpreter, which can take up to --pg-timeout while it is blocked in a gloo collective;
# torchrun waits for its workers to exit before it re-rendezvouses, so that delay would be added
# to every rescale.
_SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
_ckpt_lock = threading.Lock()  # held while a checkpoint is written; the exit path waits for it


def _signal_waiter():
    sig = signal.sigwait(_SIGNALS)
    _ckpt_lock.acquire(timeout=5)  # let a checkpoint being written finish (milliseconds)
    try:
        os.write(2, f"train.py pid={os.getpid()}: {signal.Signals(sig).name}, exiting\n".encode())
    except OSError:
        pass
    os._exit(128 + sig)  # no interpreter teardown: no gloo destructors, no hangs


threading.Thread(target=_signal_waiter, name="sigwait", daemon=True).start()

import argparse  # noqa: E402
import glob  # noqa: E402
import socket  # noqa: E402
import time  # noqa: E402
from datetime import timedelta  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bftrainer_progress  # noqa: E402

IN_DIM, HIDDEN = 32, 64


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: no limit)")
    p.add_argument("--samples", type=int, default=0,
                   help="stop once this many samples (all ranks) are done (0: no limit)")
    p.add_argument("--batch", type=int, default=32, help="samples per rank per step")
    p.add_argument("--ckpt-dir", default=os.environ.get("CKPT_DIR", "ckpt"),
                   help="checkpoint directory on a filesystem shared by all nodes")
    p.add_argument("--ckpt-every", type=int, default=5, help="rank 0 checkpoints every K steps")
    p.add_argument("--sleep", type=float, default=0.2, help="seconds of emulated compute per step")
    p.add_argument("--pg-timeout", type=float, default=None,
                   help="gloo process-group timeout, seconds (default 10; under the elastic runtime "
                        "$BFTRAINER_ELASTIC_TIMEOUT, which the launcher sets, else 10)")
    p.add_argument("--log", default=os.environ.get("TRAIN_PROGRESS_LOG", ""),
                   help="append one line per step to this file (optional)")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-fence", action="store_true",
                   help="keep training even if a newer worker group wrote the checkpoint")
    p.add_argument("--print-every", type=int, default=10, help="print to stdout every N steps")
    p.add_argument("--no-report", action="store_true",
                   help="never run `bftrainer progress`: bftrainer learns the progress from --log "
                        "instead (trainer submit --progress-log)")
    p.add_argument("--report-interval", type=float, default=None,
                   help="seconds between progress reports (default: $BFTRAINER_PROGRESS_INTERVAL or 5)")
    p.add_argument("--elastic", action="store_true",
                   help="use bftrainer's elastic runtime (default when $BFTRAINER_ELASTIC_STORE is "
                        "set); alone, without it, a world of one")
    a = p.parse_args(argv)
    a.elastic = a.elastic or bool(os.environ.get("BFTRAINER_ELASTIC_STORE"))
    if a.steps <= 0 and a.samples <= 0:
        p.error("give --steps and/or --samples")
    if a.ckpt_every < 1:
        p.error("--ckpt-every must be >= 1")
    return a


class Fenced(Exception):
    """A newer worker group of the same job wrote the checkpoint: this group is stale."""


def file_id(path):
    """Identity of the file now at `path` (a new inode on every os.replace), None if absent."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class ProgressLog:
    """One line per step, appended with a single write(2) on an O_APPEND fd, so lines from
    processes on the same machine never interleave."""

    def __init__(self, path, fields):
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if path else None
        self.prefix = " ".join(f"{k}={v}" for k, v in fields.items())

    def write(self, rest):
        if self.fd is not None:
            os.write(self.fd, f"{time.time():.3f} {self.prefix} {rest}\n".encode())


def build(args):
    """The model, its optimizer and the true weights: the same on every worker."""
    import torch
    torch.manual_seed(args.seed)  # same initial weights everywhere (DDP broadcasts rank 0's anyway)
    model = torch.nn.Sequential(torch.nn.Linear(IN_DIM, HIDDEN), torch.nn.ReLU(),
                                torch.nn.Linear(HIDDEN, 1))
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    w_true = torch.randn(IN_DIM, 1, generator=torch.Generator().manual_seed(1234 + args.seed))
    return model, opt, w_true


def data(args, step, rank, w_true):
    """This rank's batch of a step: seeded by (step, rank), so a restart repeats it."""
    import torch
    g = torch.Generator().manual_seed(args.seed * 1_000_003 + step * 1000 + rank)
    x = torch.randn(args.batch, IN_DIM, generator=g)
    return x, x @ w_true + 0.01 * torch.randn(args.batch, 1, generator=g)


def import_elastic():
    """bftrainer_elastic from the path, else from this repository's python/ directory."""
    try:
        import bftrainer_elastic
    except ImportError:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                        "python"))
        import bftrainer_elastic
    return bftrainer_elastic


def main_elastic(args):
    """The same training under the elastic runtime. What changes against main(): no
    init_process_group, no checkpoint code, no DDP; the model, optimizer and counters go into
    one State, and the loop body becomes a step function the runtime calls."""
    import torch
    elastic = import_elastic()

    torch.set_num_threads(1)
    model, opt, w_true = build(args)
    state = elastic.State(model, opt, samples=0)  # model, optimizer, step, and our counter
    rt = elastic.Runtime(state, checkpoint=os.path.join(args.ckpt_dir, "elastic.pt"),
                         checkpoint_every=args.ckpt_every, timeout=args.pg_timeout)
    node = os.environ.get("NODE_TAG") or socket.gethostname()
    log = ProgressLog(args.log, {"node": node, "pid": os.getpid()})
    last = {}

    def train_step(rt):  # one optimizer step on rt.model (DDP over the current group)
        x, y = data(args, state.step, rt.rank, w_true)
        if args.sleep > 0:
            time.sleep(args.sleep)  # emulated compute
        loss = torch.nn.functional.mse_loss(rt.model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        state.samples += args.batch * rt.world  # every part of the state changes in here
        last["loss"] = loss.item()

    def finished():
        return ((args.steps > 0 and state.step >= args.steps)
                or (args.samples > 0 and state.samples >= args.samples))

    rt.start()
    print(f"start node={node} id={rt.id} rank={rt.rank} world={rt.world} step={state.step}",
          flush=True)
    while rt.active and not finished():
        if not rt.step(train_step):
            continue  # a change or a failure was handled instead; state.step says where we are
        log.write(f"rank={rt.rank} world={rt.world} restart=0 epoch={rt.epoch} step={state.step} "
                  f"samples={state.samples} loss={last['loss']:.6f}")
        if rt.rank == 0 and not args.no_report:  # one worker per node under the runtime
            bftrainer_progress.report(state.samples, interval=args.report_interval, nodes=rt.world)
        if args.print_every > 0 and state.step % args.print_every == 0:
            print(f"step={state.step} samples={state.samples} world={rt.world} "
                  f"loss={last['loss']:.6f}", flush=True)
    if not rt.active:  # bftrainer took this node away; the others go on
        print(f"left step={state.step} samples={state.samples}", flush=True)
        return 0
    rank = rt.rank
    rt.finish()  # final checkpoint, then every worker leaves
    log.write(f"rank={rank} world={rt.world} restart=0 epoch={rt.epoch} step={state.step} "
              f"samples={state.samples} done")
    print(f"done step={state.step} samples={state.samples}", flush=True)
    if rank == 0 and not args.no_report:
        bftrainer_progress.report(state.samples, force=True)
        bftrainer_progress.flush()
    return 0


def main(argv=None):
    args = parse_args(argv)
    if args.elastic:
        return main_elastic(args)

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)  # torchrun sets OMP_NUM_THREADS=1 only when nproc_per_node > 1
    if "RANK" not in os.environ:  # plain `python3 train.py`: a world of one, for quick tries
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.pg_timeout or 10.0))  # env:// from torchrun
    rank, world = dist.get_rank(), dist.get_world_size()
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    node = os.environ.get("NODE_TAG") or socket.gethostname()
    log = ProgressLog(args.log, {"node": node, "pid": os.getpid(), "rank": rank, "world": world,
                                 "restart": restart})

    model, opt, w_true = build(args)

    # Restore. Rank 0 reads the file and broadcasts it, so every rank resumes from the same
    # checkpoint even if the file is replaced meanwhile (e.g. by a straggler of the old group).
    os.makedirs(args.ckpt_dir, exist_ok=True)
    path = os.path.join(args.ckpt_dir, "ckpt.pt")
    state = None
    seen = None  # identity of the checkpoint file rank 0 last read or wrote (fencing, see save)
    if rank == 0:
        for stale in glob.glob(path + ".tmp.*"):  # left by a writer that was SIGKILLed
            try:
                if time.time() - os.path.getmtime(stale) > 60:
                    os.unlink(stale)
            except OSError:
                pass
        while True:  # stat, load, stat: retry if it was replaced while we read it
            seen = file_id(path)
            state = torch.load(path, map_location="cpu") if seen is not None else None
            if file_id(path) == seen:
                break
    box = [state]
    dist.broadcast_object_list(box, src=0)
    state = box[0]
    step, samples = 0, 0
    # Every (re)start of the worker group is one generation newer than the checkpoint it
    # restored; a group formed later by the rendezvous therefore always has the higher number.
    generation = (state or {}).get("generation", 0) + 1
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        step, samples = state["step"], state["samples"]
    ddp = DDP(model)

    def save():
        nonlocal seen
        with _ckpt_lock:
            # Fencing. If the file is no longer the one we restored or last wrote, another worker
            # group is training the same job: a torchrun split brain (an agent whose heartbeats
            # were late was dropped from the rendezvous while its worker kept training, and the
            # others formed a new group without it). The stale group is the one with the older
            # generation; it exits non-zero, so its agent re-rendezvouses and joins the current
            # group, instead of both groups training on and overwriting each other's checkpoint.
            if not args.no_fence and file_id(path) != seen:
                other = torch.load(path, map_location="cpu") if file_id(path) else {}
                if other.get("generation", 0) >= generation:
                    raise Fenced()  # a newer group wrote it: we are the stale one
                # else an older, stale group wrote it; it will find our newer generation
            tmp = f"{path}.tmp.{os.getpid()}"
            torch.save({"step": step, "samples": samples, "model": model.state_dict(),
                        "optimizer": opt.state_dict(), "generation": generation,
                        "world": world, "time": time.time()}, tmp)
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
            os.replace(tmp, path)  # atomic: readers see the old or the new file, never half
            seen = file_id(path)

    def finished():
        return (args.steps > 0 and step >= args.steps) or (args.samples > 0 and samples >= args.samples)

    nodes = int(os.environ.get("GROUP_WORLD_SIZE", "0"))  # torchrun's agents: one per node
    print(f"start node={node} rank={rank} world={world} restart={restart} step={step} "
          f"samples={samples} ({'restored' if state is not None else 'fresh'})", flush=True)
    try:
        while not finished():
            x, y = data(args, step, rank, w_true)
            if args.sleep > 0:
                time.sleep(args.sleep)  # emulated compute
            loss = torch.nn.functional.mse_loss(ddp(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()  # gloo allreduce of the gradients: fails at once if a peer died
            opt.step()
            step += 1
            samples += args.batch * world
            if rank == 0 and step % args.ckpt_every == 0:
                save()  # before the log line, so at most ckpt_every-1 logged steps are redone
            log.write(f"step={step} samples={samples} loss={loss.item():.6f}")
            if rank == 0 and not args.no_report:
                bftrainer_progress.report(samples, interval=args.report_interval, nodes=nodes)
            if args.print_every > 0 and step % args.print_every == 0:
                print(f"step={step} samples={samples} world={world} loss={loss.item():.6f}",
                      flush=True)
        if rank == 0:
            save()
        dist.barrier()  # nobody exits 0 before the final checkpoint is on disk
    except Fenced:
        sys.stderr.write(f"train.py rank={rank} world={world} step={step}: checkpoint {path} was "
                         "written by a newer worker group (split brain: this group was dropped "
                         "from the rendezvous); exiting for restart\n")
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(1)
    except RuntimeError as e:  # a peer died or hung: let torchrun restart us at the new size
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        sys.stderr.write(f"train.py rank={rank} world={world} step={step}: {msg}; "
                         "exiting for restart\n")
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(1)

    log.write(f"step={step} samples={samples} done")
    print(f"done step={step} samples={samples}", flush=True)
    if rank == 0 and not args.no_report:
        bftrainer_progress.report(samples, force=True)
        bftrainer_progress.flush()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
