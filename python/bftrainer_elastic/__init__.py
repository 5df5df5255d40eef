"""bftrainer's elastic runtime for PyTorch Trainers: workers stay alive across membership
changes, so a rescale costs a fraction of a second instead of a restart of every worker.

    import bftrainer_elastic as elastic

    state = elastic.State(model, optimizer, samples=0)
    rt = elastic.Runtime(state, checkpoint="/shared/ckpt/job.pt", checkpoint_every=100)
    while rt.active and state.step < steps:
        rt.step(train_step)          # train_step(rt): one optimizer step on rt.model
    rt.finish()

bftrainer (the runner) tells the workers each new membership through the Trainer's store
(server.py); docs/elastic.md specifies the protocol. runtime.py is the worker side, local.py a
runner for one machine (tests, bench), bench.py measures what a change costs.
Only the worker side imports torch, and only when a Runtime starts.
"""

from .protocol import VERSION
from .runtime import Runtime, State, is_comm_error, mpi_rank_world

__all__ = ["Runtime", "State", "VERSION", "is_comm_error", "mpi_rank_world"]
