#!/usr/bin/python3
"""OPTIONAL, FOR TESTS: torchrun with a shorter c10d-rendezvous keep-alive.

    /usr/bin/python3 fast_torchrun.py <exactly the torchrun arguments>

Why: when a node disappears (SIGKILL of its agent's process group, or SIGTERM of the agent;
neither runs the rendezvous "exit" step), the survivors cannot form the next, smaller round
until the dead node's rendezvous entry is dropped, and that happens only when its last
heartbeat is older than keep_alive_interval x keep_alive_max_attempt. torch 1.13 hard-codes
5 s x 3 in DynamicRendezvousHandler.from_backend (no flag, no rdzv_conf key), which makes
every scale-down cost 12-19 s. This wrapper swaps in RDZV_KEEP_ALIVE_S x RDZV_KEEP_ALIVE_MAX
(default 1 s x 5) and then runs the stock torch.distributed.run main(); a scale-down then costs
~7-8 s. Nothing else changes.

Rules:
  * EVERY agent of a job must use the same launcher and settings: an agent with the 5 s stock
    heartbeat would be declared dead by 5 s shim agents, and vice versa be slow to notice them.
  * Keep the expiry window (interval x max) well above 2 x interval: the heartbeat can slip to
    nearly 2 intervals (the timer sometimes skips a beat), and an agent busy importing torch on a
    loaded machine can stall for another second or two. 1 s x 2 produced a split brain here
    (a live agent expired, the other two formed a second group under the same rdzv id, both
    groups trained and "finished"). 1 s x 5 was clean. Refused below 3 windows of 1 interval.
  * Production (bftrainer on real nodes) uses stock torchrun; this is for fast tests.
"""

import os
import sys
from datetime import timedelta

from torch.distributed.elastic.rendezvous import dynamic_rendezvous as _dr


def _install():
    ka = float(os.environ.get("RDZV_KEEP_ALIVE_S", "1"))
    n = int(os.environ.get("RDZV_KEEP_ALIVE_MAX", "5"))
    if ka <= 0 or n < 3:
        sys.exit(f"fast_torchrun: refusing RDZV_KEEP_ALIVE_S={ka} RDZV_KEEP_ALIVE_MAX={n} "
                 "(need > 0 and >= 3; 5 recommended)")
    orig = _dr.RendezvousSettings

    # from_backend() looks the name up in the module at call time, so replacing it there is
    # enough; the object it returns is still a genuine RendezvousSettings.
    def settings(*args, **kwargs):
        s = orig(*args, **kwargs)
        return orig(s.run_id, s.min_nodes, s.max_nodes, s.timeout,
                    timedelta(seconds=ka), n)

    _dr.RendezvousSettings = settings
    print(f"fast_torchrun: rendezvous keep-alive {ka:g} s x {n}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    _install()
    from torch.distributed.run import main

    sys.argv[0] = "torchrun"
    main()
