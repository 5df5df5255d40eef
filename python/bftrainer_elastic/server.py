"""The store process of an elastic Trainer: the workers' c10d TCPStore and the runner's control
port, in one process on the controller (a host that is never reclaimed).

    /usr/bin/python3 -m bftrainer_elastic.server --port P --control-port C

prints `store ready port=P control=C server=S` (one line, flushed) once both listen; a port
given as 0 is chosen by the kernel and shows in that line; S is the kind of torch's store server,
`blocking` (torch 1.13, and 2.x with use_libuv off) or `libuv` (the 2.x default). Exits 0 on
SIGTERM, SIGINT or SIGHUP.

Why a control port instead of the runner writing store keys itself: TCPStore's wire format
changed between torch releases (1.13 sends bare requests; 2.x prefixes a magic number and has
other request codes), so a runner speaking it would have to track torch. This process uses
torch's own client, whatever the version, and the runner speaks the line protocol below
(docs/elastic.md has the whole specification):

    PING                         -> OK
    MEMBERS <epoch> <id> ...     -> OK                 publish a membership
    STATUS                       -> OK <json>          epoch, formed, joined, failed, finished
    WORKERS <id> ...             -> OK <json>          per id: ready and left records
    anything wrong               -> ERR <message>

The control port listens on --control-host (default 127.0.0.1: the runner runs on this host);
neither port has authentication, as with torchrun's store.

A stopped or partitioned worker must not stall the store. torch 1.13's TCPStore server is one
thread that, once a connection is readable, reads the whole request with blocking receives; a
worker stopped between the sends of one request (SIGSTOP, a hung node, a partition) leaves it
waiting for the rest, and every worker and every control request waits with it. So the
listening socket gets a receive and send timeout (--peer-timeout), which every connection it
accepts inherits: a peer silent in the middle of a request is cut off after that long (torch
drops the connection and serves the others), while an idle peer, or one waiting on a key, is
never read from and keeps its connection. torch 2.x's libuv server reads every connection
without blocking and keeps a partial request until the rest comes, serving the others meanwhile:
it needs no such timeout, and gets none (a receive timeout does nothing on its non-blocking
sockets); its stalled peer keeps its connection.
"""

import argparse
import os
import signal
import socket
import socketserver
import struct
import sys
import threading
from datetime import timedelta

from . import protocol as p


#: Default --peer-timeout, s: far beyond the microseconds between the sends of one request,
#: even on a loaded host, and well within the runner's control timeout (10 s, trainer/
#: elastic_control.go), so a control request outlasts one stalled peer.
PEER_TIMEOUT = 3.0


def handle(store, lock, line):
    """One request line to one reply line (without the newline)."""
    words = line.split()
    if not words:
        return "ERR empty request"
    cmd, args = words[0].upper(), words[1:]
    try:
        with lock:
            if cmd == "PING":
                return "OK"
            if cmd == "MEMBERS":
                if len(args) < 2:
                    return "ERR usage: MEMBERS <epoch> <id> [<id>...]"
                p.publish(store, int(args[0]), args[1:])
                return "OK"
            if cmd == "STATUS":
                return "OK " + p.dump(p.status(store))
            if cmd == "WORKERS":
                p.check_ids(args)
                return "OK " + p.dump(p.workers(store, args))
    except ValueError as e:
        return f"ERR {e}"
    return f"ERR unknown request {cmd}"


def bound_peers(port, seconds):
    """Give the listening socket of this process on `port` (the TCPStore's) a receive and send
    timeout of `seconds`, inherited by every connection it accepts from then on. Returns
    whether it found that socket (Linux: /proc/self/fd)."""
    tv = struct.pack("ll", int(seconds), int((seconds % 1) * 1e6))
    found = False
    try:
        fds = [int(x) for x in os.listdir("/proc/self/fd")]
    except OSError:
        return False
    for fd in fds:
        try:
            s = socket.socket(fileno=os.dup(fd))
        except OSError:
            continue  # not a socket, or already closed
        try:
            if (s.family in (socket.AF_INET, socket.AF_INET6)
                    and s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
                    and s.getsockname()[1] == port):
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)
                found = True
        except OSError:
            pass
        finally:
            s.close()  # the duplicate; the option stays on the shared socket
    return found


def server_kind(store):
    """`libuv` if this process's TCPStore server is torch 2.x's libuv one, else `blocking` (torch
    1.13's, or 2.x's with use_libuv off): what a peer stalled mid-request does to it."""
    return "libuv" if getattr(store, "libuvBackend", False) else "blocking"


class _Handler(socketserver.StreamRequestHandler):
    def handle(self):
        for raw in self.rfile:
            reply = handle(self.server.store, self.server.lock, raw.decode("utf-8", "replace"))
            self.wfile.write(reply.encode() + b"\n")
            self.wfile.flush()


class _Control(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


def main(argv=None):
    ap = argparse.ArgumentParser(description="elastic Trainer store: c10d TCPStore + control port")
    ap.add_argument("--host", default="0.0.0.0", help="address workers use (default 0.0.0.0)")
    ap.add_argument("--port", type=int, default=29400, help="TCPStore port (0: kernel's choice)")
    ap.add_argument("--control-host", default="127.0.0.1", help="control address (default 127.0.0.1)")
    ap.add_argument("--control-port", type=int, default=0, help="control port (0: kernel's choice)")
    ap.add_argument("--timeout", type=float, default=300.0, help="store operation timeout, s")
    ap.add_argument("--peer-timeout", type=float, default=PEER_TIMEOUT,
                    help="cut off a worker silent this long in the middle of a request, s "
                         f"(default {PEER_TIMEOUT:g})")
    a = ap.parse_args(argv)

    stop = threading.Event()

    def on_signal(_sig, _frame):
        stop.set()

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, on_signal)

    from torch.distributed import TCPStore  # ~1 s

    # is_master: this process owns the listening socket; wait_for_workers=False: workers come
    # and go. The object is also a client of its own server, used by the control requests.
    store = TCPStore(a.host, a.port, None, True, timedelta(seconds=a.timeout),
                     wait_for_workers=False)
    kind = server_kind(store)
    if kind == "blocking" and not bound_peers(store.port, a.peer_timeout):
        print("bftrainer-elastic: warning: cannot find the store's listening socket: "
              "a worker stopped mid-request will stall the store", file=sys.stderr, flush=True)
    store.set(p.key("version"), str(p.VERSION))
    ctl = _Control((a.control_host, a.control_port), _Handler)
    ctl.store, ctl.lock = store, threading.Lock()
    threading.Thread(target=ctl.serve_forever, name="control", daemon=True).start()
    print(f"store ready port={store.port} control={ctl.server_address[1]} server={kind}", flush=True)
    while not stop.wait(3600):
        pass
    ctl.shutdown()
    del store
    return 0


if __name__ == "__main__":
    sys.exit(main())
