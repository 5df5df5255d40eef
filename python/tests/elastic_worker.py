#!/usr/bin/python3
"""Worker of the elastic tests: a small regression with a fixed global batch per step.

Step s trains on the global batch drawn from a generator seeded by s, split across the current
workers by Runtime.shard; the loss is summed over the shard and scaled by world / batch, so
DDP's average of the gradients is the mean over the whole global batch, whatever the world
size. `reference()` computes the same steps in one process without torch.distributed: the
oracle the tests compare the elastic run's final parameters with.

One line per completed step to --log (a single write(2)):
    <unix time> id=<worker id> epoch=E rank=R world=W step=S
At the end rank 0 saves the parameters (on the CPU) to --out and prints `done step=N`.
With --device cuda the model, its optimizer state and the batches live on the GPU (the runtime
then broadcasts CUDA state; the process group stays gloo, which takes CUDA tensors and lets
several workers share one GPU).
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

IN_DIM, HIDDEN = 8, 16


def build(seed=0, device="cpu"):
    import torch
    torch.manual_seed(seed)
    # float64: summing the gradient over 1..4 shards rounds differently than over one batch;
    # in double that stays ~1e-13 after hundreds of steps, far below what one lost or doubled
    # step changes (~1e-3), so the comparison can be tight.
    model = torch.nn.Sequential(torch.nn.Linear(IN_DIM, HIDDEN), torch.nn.Tanh(),
                                torch.nn.Linear(HIDDEN, 1)).double().to(device)
    # Momentum: the optimizer has state, which a newcomer must receive too.
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    return model, opt


def batch(step, n, seed=0):
    import torch
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    x = torch.randn(n, IN_DIM, generator=g, dtype=torch.float64)
    y = torch.sin(x.sum(dim=1, keepdim=True))
    return x, y


def reference(steps, n, seed=0):
    """The same training at a fixed world size of one, no torch.distributed."""
    import torch
    torch.set_num_threads(1)
    model, opt = build(seed)
    for s in range(steps):
        x, y = batch(s, n, seed)
        loss = ((model(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--batch", type=int, default=12, help="global batch per step")
    ap.add_argument("--sleep", type=float, default=0.05, help="emulated compute per step, s")
    ap.add_argument("--log", required=True)
    ap.add_argument("--out", default="")
    ap.add_argument("--ckpt", default="")
    ap.add_argument("--ckpt-every", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=5.0)
    ap.add_argument("--no-snapshot", action="store_true")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    a = ap.parse_args(argv)

    import torch
    import bftrainer_elastic as elastic
    torch.set_num_threads(1)
    model, opt = build(device=a.device)
    state = elastic.State(model, opt)
    rt = elastic.Runtime(state, checkpoint=a.ckpt or None, checkpoint_every=a.ckpt_every,
                         timeout=a.timeout, snapshot=not a.no_snapshot,
                         backend="gloo" if a.device != "cpu" else None)
    fd = os.open(a.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def train_step(rt):
        x, y = (t.to(a.device) for t in batch(state.step, a.batch))
        sl = rt.shard(a.batch)
        if a.sleep > 0:
            time.sleep(a.sleep)
        loss = ((rt.model(x[sl]) - y[sl]) ** 2).sum() * (rt.world / a.batch)
        opt.zero_grad()
        loss.backward()
        opt.step()

    while rt.active and state.step < a.steps:
        if rt.step(train_step):
            os.write(fd, (f"{time.time():.4f} id={rt.id} epoch={rt.epoch} rank={rt.rank} "
                          f"world={rt.world} step={state.step}\n").encode())
    if not rt.active:
        print(f"left step={state.step}", flush=True)
        return 0
    if rt.rank == 0 and a.out:
        torch.save({k: v.cpu() for k, v in model.state_dict().items()}, a.out)
    rt.finish()
    print(f"done step={state.step}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
