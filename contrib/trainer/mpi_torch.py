#!/usr/bin/python3
"""Example PyTorch Trainer launched the MPI way (bftrainer launcher mpi): mpirun / mpiexec start the
ranks, torch.distributed (gloo, or NCCL on GPUs) does the communication — as ALCF documents DDP on
Polaris and Aurora (`mpiexec -n N --ppn 4 python train.py`). torch needs no MPI backend (Debian's
torch 1.13 has none) and the script needs no mpi4py.

Rank and world size come from the launcher's environment: OMPI_COMM_WORLD_RANK/SIZE (Open MPI),
PMI_RANK/PMI_SIZE (MPICH's Hydra, Cray MPICH), else RANK/WORLD_SIZE. The process group meets in a
torch FileStore on the shared checkpoint directory, one file per MPI job (bftrainer names each job
in $BFTRAINER_MPI_JOB, new at every restart), so no address or port has to be agreed on.

Porting a DDP script that runs under mpiexec to bftrainer:
  1. init_process_group from the MPI environment, as mpi_rank_world() and init() below;
  2. resume from a checkpoint on a shared filesystem (rank 0 reads, broadcast) and write one
     atomically every few steps;
  3. on SIGUSR1 (bftrainer's "the nodes change", forwarded by mpirun/mpiexec to every rank) set a
     flag, all-reduce it with the step's gradients, and at that step checkpoint and exit 0;
  4. never assume the world size (the global batch is split by rank and size here).
bftrainer restarts the job on the new nodes; a reclaim kills the ranks at once instead, and they
resume from the last checkpoint.

The fast path (bftrainer launcher mpi-elastic, chosen here by $BFTRAINER_ELASTIC_STORE): the same
training on bftrainer's elastic runtime (main_elastic). mpirun / mpiexec start the first workers,
which take their identity from the MPI rank; workers stay alive across every later change (new ones
started by bftrainer on the new nodes join at a step boundary, taken or reclaimed ones are dropped),
so no restart, no SIGUSR1, no checkpoint load. What changes against main(): no init_process_group,
the weights and counters go into one State, the loop body becomes a step function.

The training is mpi_sgd.py's (a linear regression, one global batch per step seeded by the step),
so the result does not depend on the world size or the restarts. --log lines: train.py's format.
"""

import argparse
import os
import signal
import socket
import sys
import time
from datetime import timedelta

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bftrainer_progress  # noqa: E402

DIM = 16
_stop = [0.0]
# bftrainer's "the nodes change": only a flag, read at the next step. Set before the heavy imports:
# the default action of SIGUSR1 would kill a rank that is still starting.
signal.signal(signal.SIGUSR1, lambda *_: _stop.__setitem__(0, 1.0))


def mpi_rank_world():
    """(rank, world) from the MPI launcher's environment."""
    for r, w in (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE"),
                 ("RANK", "WORLD_SIZE")):
        if r in os.environ and w in os.environ:
            return int(os.environ[r]), int(os.environ[w])
    return 0, 1


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
    p.add_argument("--pg-timeout", type=float, default=30.0)
    p.add_argument("--finish-file", default="",
                   help="finish at the first step at which this file exists (rank 0 looks, the "
                        "decision rides in the step's allreduce): the end of a test's scenario")
    p.add_argument("--elastic", action="store_true",
                   help="bftrainer's elastic runtime (default when $BFTRAINER_ELASTIC_STORE is set)")
    a = p.parse_args(argv)
    a.elastic = a.elastic or bool(os.environ.get("BFTRAINER_ELASTIC_STORE"))
    return a


def finish_asked(args):
    return 1.0 if args.finish_file and os.path.exists(args.finish_file) else 0.0


def batch_of(args, step, w_true):
    """The global batch of a step, the same whatever the world size."""
    import torch
    g = torch.Generator().manual_seed(args.seed * 1_000_003 + step)
    x = torch.randn(args.batch, DIM, generator=g)
    return x, x @ w_true + 0.01 * torch.randn(args.batch, generator=g)


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
    """The fast path: the same steps on bftrainer's elastic runtime. The first workers are MPI
    ranks (the runtime reads OMPI_COMM_WORLD_RANK/SIZE or PMI_RANK/SIZE), later ones started by
    bftrainer; the runtime gives every step its rank and world."""
    import torch
    import torch.distributed as dist
    elastic = import_elastic()
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)

    class Linear(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(DIM))

    model = Linear()
    state = elastic.State(model, samples=0)
    rt = elastic.Runtime(state, checkpoint=os.path.join(args.ckpt_dir, "mpi_torch_elastic.pt"),
                         checkpoint_every=args.ckpt_every, ddp=False)
    w_true = torch.randn(DIM, generator=torch.Generator().manual_seed(1234 + args.seed))
    node = os.environ.get("NODE_TAG") or os.environ.get("BFTRAINER_NODE") or socket.gethostname()
    logfd = os.open(args.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if args.log else None
    last = {}

    def log(rest):
        if logfd is not None:
            os.write(logfd, f"{time.time():.3f} node={node} pid={os.getpid()} rank={rt.rank} "
                            f"world={rt.world} restart={rt.epoch} {rest}\n".encode())

    def train_step(rt):
        x, y = batch_of(args, state.step, w_true)
        mine = torch.tensor_split(torch.arange(args.batch), rt.world)[rt.rank]
        xs, ys = x[mine], y[mine]
        if args.sleep > 0:
            time.sleep(args.sleep)
        w = model.w.detach()
        err = xs @ w - ys
        fin = finish_asked(args) if rt.rank == 0 else 0.0
        buf = torch.cat([2.0 * xs.T @ err, (err @ err).reshape(1), torch.tensor([fin])])
        dist.all_reduce(buf)  # the gradients' sum, the loss, and "finish here"
        with torch.no_grad():
            model.w -= args.lr * buf[:DIM] / args.batch
        state.samples += args.batch
        last["loss"], last["finish"] = buf[DIM].item() / args.batch, buf[DIM + 1].item() > 0

    rt.start()
    print(f"start node={node} id={rt.id} rank={rt.rank} world={rt.world} step={state.step}",
          flush=True)
    while rt.active and state.step < args.steps:
        if not rt.step(train_step):
            continue  # a change or a failure was handled instead
        log(f"step={state.step} samples={state.samples} loss={last['loss']:.6f}")
        if rt.rank == 0:
            bftrainer_progress.report(state.samples, nodes=rt.world)
        if last["finish"]:
            break
    if not rt.active:  # bftrainer took this node away; the others go on
        print(f"left step={state.step}", flush=True)
        return 0
    rank = rt.rank
    rt.finish()
    if rank == 0 and args.out:
        with open(args.out, "w") as f:
            f.write("".join(f"{v:.17g}\n" for v in model.w.detach().tolist()))
    log(f"step={state.step} samples={state.samples} done")
    print(f"done step={state.step} samples={state.samples}", flush=True)
    if rank == 0:
        bftrainer_progress.report(state.samples, force=True)
        bftrainer_progress.flush()
    return 0


def main(argv=None):
    args = parse_args(argv)
    if args.elastic:
        return main_elastic(args)
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    rank, world = mpi_rank_world()
    job = os.environ.get("BFTRAINER_MPI_JOB", "local")
    os.makedirs(args.ckpt_dir, exist_ok=True)
    store = dist.FileStore(os.path.join(args.ckpt_dir, f"store.{job}"), world)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world,
                            timeout=timedelta(seconds=args.pg_timeout))
    node = os.environ.get("BFTRAINER_NODE") or socket.gethostname()
    gen = job.rsplit("-", 1)[-1]
    logfd = os.open(args.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if args.log else None

    def log(rest):
        if logfd is not None:
            os.write(logfd, f"{time.time():.3f} node={node} pid={os.getpid()} rank={rank} "
                            f"world={world} restart={gen} {rest}\n".encode())

    path = os.path.join(args.ckpt_dir, "mpi_torch.pt")
    w_true = torch.randn(DIM, generator=torch.Generator().manual_seed(1234 + args.seed))
    box = [torch.load(path) if rank == 0 and os.path.exists(path) else None]
    dist.broadcast_object_list(box, src=0)
    state = box[0]
    w = torch.zeros(DIM) if state is None else state["w"]
    step = 0 if state is None else state["step"]
    samples = 0 if state is None else state["samples"]

    def save():
        tmp = f"{path}.tmp.{os.getpid()}"
        torch.save({"w": w, "step": step, "samples": samples}, tmp)
        os.replace(tmp, path)

    print(f"start node={node} rank={rank} world={world} generation={gen} step={step} "
          f"({'restored' if state is not None else 'fresh'})", flush=True)
    while step < args.steps:
        x, y = batch_of(args, step, w_true)
        mine = torch.tensor_split(torch.arange(args.batch), world)[rank]
        xs, ys = x[mine], y[mine]
        if args.sleep > 0:
            time.sleep(args.sleep)
        err = xs @ w - ys
        fin = finish_asked(args) if rank == 0 else 0.0
        buf = torch.cat([2.0 * xs.T @ err, (err @ err).reshape(1), torch.tensor([_stop[0], fin])])
        dist.all_reduce(buf)  # sum of the gradients, the loss, "bftrainer asked to stop", "finish"
        w = w - args.lr * buf[:DIM] / args.batch
        step += 1
        samples += args.batch
        stop = buf[DIM + 1].item() > 0
        if buf[DIM + 2].item() > 0:
            log(f"step={step} samples={samples} loss={buf[DIM].item() / args.batch:.6f}")
            break  # finish here (--finish-file)
        if rank == 0 and (step % args.ckpt_every == 0 or stop):
            save()
        log(f"step={step} samples={samples} loss={buf[DIM].item() / args.batch:.6f}")
        if rank == 0:
            bftrainer_progress.report(samples)
        if stop and step < args.steps:
            dist.barrier()  # the checkpoint is on disk before anyone exits
            print(f"stop node={node} rank={rank} step={step}: nodes change, checkpointed", flush=True)
            return 0
    if rank == 0:
        save()
        if args.out:
            with open(args.out, "w") as f:
                f.write("".join(f"{v:.17g}\n" for v in w.tolist()))
    dist.barrier()
    log(f"step={step} samples={samples} done")
    print(f"done step={step} samples={samples}", flush=True)
    if rank == 0:
        bftrainer_progress.report(samples, force=True)
        bftrainer_progress.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
