#!/usr/bin/python3
"""Example MPI Trainer for bftrainer (launcher mpi): data-parallel SGD with mpi4py and numpy only.

A linear regression trained by minibatch SGD. Every step has one global batch of --batch samples,
drawn from a generator seeded by the step alone and split among the ranks by rank (np.array_split):
the data order is the same whatever the world size, so the model after N steps is the same (up to
the order of floating-point sums) on 1 node, on 3, or across any sequence of restarts. The
gradients are summed with one MPI allreduce per step.

How bftrainer runs it: `bftrainer trainer submit --launcher mpi ... -- /usr/bin/python3
mpi_sgd.py ...`; bftrainer starts `mpirun` (Open MPI) or `mpiexec` (MPICH) over the nodes the
Trainer holds, and on every change of those nodes restarts it on the new ones (the restart path).

Porting an MPI training script to bftrainer takes four things, all below:
  1. Resume: read the last checkpoint at start (rank 0 reads, bcast), and write one atomically
     (tmp + os.replace, rank 0) every --ckpt-every steps, on a filesystem every node shares.
  2. Stop when told: bftrainer sends SIGUSR1 (through mpirun/mpiexec, which forward it to every
     rank) when the Trainer's nodes change. The handler only sets a flag; the flag rides in the
     step's allreduce, so every rank sees it at the same step; then rank 0 checkpoints and all
     exit 0. bftrainer starts the job again on the new nodes, with the new ranks and world size.
  3. Never assume the world size: it changes at every restart (split the global batch by
     rank and size, as here, and the result does not depend on it).
  4. Report progress (optional): rank 0 calls bftrainer_progress.report(samples).
A reclaim does not wait for (2): the ranks are killed at once and resume from the checkpoint.

One line per step goes to --log, the format contrib/trainer/train.py writes:
  <unix time> node=<BFTRAINER_NODE> pid= rank= world= restart=<job generation> step= samples= loss=
and `... done` at the end; --out gets the final weights (rank 0, one number a line).
"""

import argparse
import os
import signal
import socket
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bftrainer_progress  # noqa: E402

DIM = 16
_stop = [0.0]
# bftrainer's "the nodes change": only a flag, read at the next step. Set before the heavy imports:
# the default action of SIGUSR1 would kill a rank that is still starting.
signal.signal(signal.SIGUSR1, lambda *_: _stop.__setitem__(0, 1.0))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch", type=int, default=96, help="global batch (all ranks together)")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ckpt-dir", required=True, help="shared by every node")
    p.add_argument("--ckpt-every", type=int, default=5)
    p.add_argument("--log", default="")
    p.add_argument("--out", default="", help="final weights, one a line, written by rank 0")
    p.add_argument("--sleep", type=float, default=0.0, help="emulated compute per step (s)")
    p.add_argument("--finish-file", default="",
                   help="finish at the first step at which this file exists (rank 0 looks, the "
                        "decision rides in the step's allreduce): the end of a test's scenario")
    return p.parse_args(argv)


def batch(seed, step, w_true, size):
    """The global batch of a step: seeded by the step alone."""
    g = np.random.default_rng(seed * 1_000_003 + step)
    x = g.standard_normal((size, DIM))
    return x, x @ w_true + 0.01 * g.standard_normal(size)


def main(argv=None):
    args = parse_args(argv)
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    rank, world = comm.Get_rank(), comm.Get_size()
    launched = int(os.environ.get("OMPI_COMM_WORLD_SIZE") or os.environ.get("PMI_SIZE") or world)
    if launched != world:
        # mpi4py built against another MPI than the launcher's: every rank would be a world of 1.
        sys.stderr.write(f"mpi_sgd.py: the launcher started {launched} ranks but MPI sees {world}: "
                         "mpi4py is built for another MPI implementation than this mpiexec\n")
        return 2
    node = os.environ.get("BFTRAINER_NODE") or socket.gethostname()
    gen = os.environ.get("BFTRAINER_MPI_JOB", "0").rsplit("-", 1)[-1]
    logfd = os.open(args.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if args.log else None

    def log(rest):
        if logfd is not None:
            os.write(logfd, f"{time.time():.3f} node={node} pid={os.getpid()} rank={rank} "
                            f"world={world} restart={gen} {rest}\n".encode())

    os.makedirs(args.ckpt_dir, exist_ok=True)
    path = os.path.join(args.ckpt_dir, "mpi_sgd.npz")
    w_true = np.random.default_rng(1234 + args.seed).standard_normal(DIM)
    state = None
    if rank == 0 and os.path.exists(path):
        with np.load(path) as z:
            state = {"w": z["w"].copy(), "step": int(z["step"]), "samples": int(z["samples"])}
    state = comm.bcast(state, root=0)
    w = np.zeros(DIM) if state is None else state["w"]
    step = 0 if state is None else state["step"]
    samples = 0 if state is None else state["samples"]

    def save():
        tmp = f"{path}.tmp.{os.getpid()}.npz"
        np.savez(tmp, w=w, step=step, samples=samples)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)

    print(f"start node={node} rank={rank} world={world} generation={gen} step={step} "
          f"({'restored' if state is not None else 'fresh'})", flush=True)
    while step < args.steps:
        x, y = batch(args.seed, step, w_true, args.batch)
        mine = np.array_split(np.arange(args.batch), world)[rank]
        xs, ys = x[mine], y[mine]
        if args.sleep > 0:
            time.sleep(args.sleep)
        err = xs @ w - ys
        local = np.empty(DIM + 3)
        local[:DIM] = 2.0 * xs.T @ err  # sum of this rank's per-sample gradients
        local[DIM] = float(err @ err)
        local[DIM + 1] = _stop[0]  # bftrainer asked to stop: every rank learns it at this step
        local[DIM + 2] = 1.0 if rank == 0 and args.finish_file and os.path.exists(args.finish_file) else 0.0
        total = np.empty_like(local)
        comm.Allreduce(local, total, op=MPI.SUM)
        w = w - args.lr * total[:DIM] / args.batch
        step += 1
        samples += args.batch
        stop = total[DIM + 1] > 0
        if total[DIM + 2] > 0:
            log(f"step={step} samples={samples} loss={total[DIM] / args.batch:.6f}")
            break  # finish here (--finish-file)
        if rank == 0 and (step % args.ckpt_every == 0 or stop):
            save()
        log(f"step={step} samples={samples} loss={total[DIM] / args.batch:.6f}")
        if rank == 0:
            bftrainer_progress.report(samples)
        if stop and step < args.steps:
            comm.Barrier()  # the checkpoint is on disk before anyone exits
            print(f"stop node={node} rank={rank} step={step}: nodes change, checkpointed", flush=True)
            return 0
    if rank == 0:
        save()
        if args.out:
            with open(args.out, "w") as f:
                f.write("".join(f"{v:.17g}\n" for v in w))
    comm.Barrier()
    log(f"step={step} samples={samples} done")
    print(f"done step={step} samples={samples}", flush=True)
    if rank == 0:
        bftrainer_progress.report(samples, force=True)
        bftrainer_progress.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
