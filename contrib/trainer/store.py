#!/usr/bin/python3
"""Standalone c10d TCPStore server for torchrun's c10d rendezvous.

bftrainer runs one per torchrun Trainer on the controller (a host that is never reclaimed) and
starts every agent with `--rdzv_backend=c10d --rdzv_endpoint=CONTROLLER:PORT
--rdzv_conf=is_host=false,...`, so the agents are pure clients. Without it the first agent hosts
the store and killing that node kills the whole job (all agents fail with
RendezvousConnectionError within ~1 s).

    /usr/bin/python3 store.py --port 29400

Prints `store ready` (one line, flushed) once it is listening; with --port 0 it first prints
`store port=N` with the port the kernel chose. Exits 0 on SIGTERM/SIGINT/SIGHUP. The rendezvous
state of every run id lives in this process: keep it up until the job's last agent has exited,
and use a fresh --rdzv_id (or a fresh store) per job incarnation, because a run id that finished
normally stays closed.

Note: the 1.13 TCPStore listens on all addresses (IPv4 and IPv6) whatever --host says; --host
only names the address clients are expected to use. It has no authentication.
"""

import argparse
import signal
import sys
from datetime import timedelta


def main(argv=None):
    p = argparse.ArgumentParser(description="standalone c10d TCPStore server")
    p.add_argument("--host", default="0.0.0.0", help="address clients use (default 0.0.0.0)")
    p.add_argument("--port", type=int, default=29400, help="TCP port (0: let the kernel choose)")
    p.add_argument("--timeout", type=float, default=300.0,
                   help="server-side store operation timeout, seconds")
    a = p.parse_args(argv)

    stop = {"sig": None}

    def on_signal(sig, _frame):
        stop["sig"] = sig

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, on_signal)

    from torch.distributed import TCPStore  # ~1 s import

    # is_master=True: this process owns the listening socket; wait_for_workers=False: agents come
    # and go, there is no fixed world. Rendezvous keys live in this object, so it must stay alive.
    store = TCPStore(a.host, a.port, None, True, timedelta(seconds=a.timeout),
                     wait_for_workers=False)
    if a.port == 0:
        print(f"store port={store.port}", flush=True)
    print("store ready", flush=True)
    while stop["sig"] is None:
        signal.pause()  # the server runs in a C++ thread; the handler wakes us
    del store
    return 0


if __name__ == "__main__":
    sys.exit(main())
