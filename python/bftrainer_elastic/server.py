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

    HELLO                        -> OK <nonce>         a fresh nonce for this connection
    <mac> PING                   -> OK
    <mac> MEMBERS <epoch> <id>.. -> OK                 publish a membership
    <mac> STATUS                 -> OK <json>          epoch, formed, joined, failed, finished
    <mac> WORKERS <id> ...       -> OK <json>          per id: ready and left records
    anything wrong               -> ERR <message>

Who may talk to it: whoever holds the run's secret ($BFTRAINER_ELASTIC_SECRET, 64 hex digits,
in this process's environment: the runner generated it, and only the Trainer's owner and root
can read a process's environment). Every request but HELLO carries <mac> =
protocol.control_mac(secret, nonce, seq, request): bound to the connection's nonce and to the
request's sequence number on it (0, 1, ... counting the requests that passed), so a captured
request is useless on another connection and on its own. A request without valid proof gets
`ERR authentication failed` and changes nothing. The store's keys live under a namespace
derived from the secret (protocol.namespace), and WORKERS reports a worker ready only if its
ready record carries proof (protocol.ready_record). The control port listens on
--control-host (default 127.0.0.1: the runner runs on this host).

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
import secrets
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


def handle(store, lock, line, secret=None):
    """One request line (its proof already checked) to one reply line (without the newline).
    With a secret, WORKERS counts only ready records that carry proof."""
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
                return "OK " + p.dump(p.workers(store, args, secret))
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


class Session:
    """One control connection's authentication. HELLO draws a fresh nonce (and restarts the
    count); every other request is `<mac> <request>`, mac = protocol.control_mac(secret,
    nonce, seq, request) with seq the number of requests that passed on this connection so
    far. Anything else gets ERR and reaches no store key."""

    def __init__(self, secret):
        self.secret = secret
        self.nonce = None
        self.seq = 0

    def answer(self, store, lock, line):
        line = line.rstrip("\r\n")
        if line.strip().upper() == "HELLO":
            self.nonce, self.seq = secrets.token_hex(16), 0
            return "OK " + self.nonce
        if self.nonce is None:
            return "ERR authentication failed: HELLO first"
        mac, _, request = line.partition(" ")
        if not p.proven_mac(self.secret, mac, self.nonce, self.seq, request):
            return "ERR authentication failed"
        self.seq += 1
        return handle(store, lock, request, self.secret)


class _Handler(socketserver.StreamRequestHandler):
    def handle(self):
        session = Session(self.server.secret)
        for raw in self.rfile:
            reply = session.answer(self.server.store, self.server.lock,
                                   raw.decode("utf-8", "replace"))
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

    try:
        secret = p.check_secret(os.environ.get(p.ENV_SECRET, ""))
    except ValueError as e:
        print(f"bftrainer-elastic: {e}: the store refuses to run without one", file=sys.stderr,
              flush=True)
        return 2

    from torch.distributed import PrefixStore, TCPStore  # ~1 s

    # is_master: this process owns the listening socket; wait_for_workers=False: workers come
    # and go. The object is also a client of its own server, used by the control requests,
    # through the run's namespace (every key of the run lives there).
    raw = TCPStore(a.host, a.port, None, True, timedelta(seconds=a.timeout),
                   wait_for_workers=False)
    store = PrefixStore(p.namespace(secret), raw)
    kind = server_kind(raw)
    if kind == "blocking" and not bound_peers(raw.port, a.peer_timeout):
        print("bftrainer-elastic: warning: cannot find the store's listening socket: "
              "a worker stopped mid-request will stall the store", file=sys.stderr, flush=True)
    store.set(p.key("version"), str(p.VERSION))
    ctl = _Control((a.control_host, a.control_port), _Handler)
    ctl.store, ctl.lock, ctl.secret = store, threading.Lock(), secret
    threading.Thread(target=ctl.serve_forever, name="control", daemon=True).start()
    print(f"store ready port={raw.port} control={ctl.server_address[1]} server={kind}", flush=True)
    while not stop.wait(3600):
        pass
    ctl.shutdown()
    del store, raw
    return 0


if __name__ == "__main__":
    sys.exit(main())
