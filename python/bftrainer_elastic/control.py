"""The runner's side of the control protocol (stdlib only): a client of the store process's
control port. The Go launcher implements the same few lines; this one serves the local runner
(tests, bench) and shows the exchange.

    c = Control("127.0.0.1", port, secret)
    c.members(2, ["n1-a1b2", "n2-c3d4"])   # publish epoch 2
    c.status()["formed"]                   # 2 once that group trains

Each connection starts with HELLO (the store process answers a fresh nonce); every request
then carries its proof, protocol.control_mac(secret, nonce, seq, request), seq counting the
requests sent on the connection (docs/elastic.md §2).
"""

import json
import socket

from . import protocol as p


class ControlError(Exception):
    """The store process answered ERR."""


class Control:
    """One connection to a store process's control port; requests are serialised."""

    def __init__(self, host, port, secret, timeout=30.0):
        self.addr = (host, port)
        self.secret = p.check_secret(secret)
        self.timeout = timeout
        self._sock = None
        self._file = None
        self._nonce = None
        self._seq = 0

    def request(self, line):
        """Send one request line with its proof, return the reply after "OK" (str), raise
        ControlError on ERR."""
        if self._sock is None:
            self._sock = socket.create_connection(self.addr, timeout=self.timeout)
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._file = self._sock.makefile("rb")
            self._nonce, self._seq = self._send("HELLO"), 0
        mac = p.control_mac(self.secret, self._nonce, self._seq, line)
        self._seq += 1  # the server counts the requests that passed
        try:
            return self._send(f"{mac} {line}")
        except ControlError as e:
            if str(e).startswith("authentication"):
                self.close()  # out of step: the next request starts a new connection
            raise

    def _send(self, line):
        self._sock.sendall(line.encode() + b"\n")
        reply = self._file.readline().decode().rstrip("\n")
        if not reply:
            self.close()
            raise ConnectionError("store process closed the control connection")
        if reply.startswith("ERR"):
            raise ControlError(reply[4:])
        return reply[3:]

    def ping(self):
        self.request("PING")

    def members(self, epoch, ids):
        self.request("MEMBERS %d %s" % (epoch, " ".join(ids)))

    def status(self):
        return json.loads(self.request("STATUS"))

    def workers(self, ids):
        return json.loads(self.request("WORKERS " + " ".join(ids)))

    def close(self):
        if self._sock is not None:
            self._file.close()
            self._sock.close()
            self._sock = self._file = self._nonce = None
