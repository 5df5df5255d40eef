"""The store keys and the control protocol, without torch: an in-memory store with the
semantics of torch's TCPStore server (checked against the real one in test_store_semantics)."""

import os
import sys
import threading
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bftrainer_elastic import protocol as p  # noqa: E402
from bftrainer_elastic import server  # noqa: E402
from bftrainer_elastic.control import Control, ControlError  # noqa: E402


class FakeStore:
    """TCPStore's server semantics (torch 1.13 TCPStore.cpp, 2.x TCPStoreLibUvBackend.cpp):
    add parses the stored decimal; compare_set on a missing key sets it only when the
    expected value is empty, and otherwise answers with the expected value."""

    def __init__(self):
        self.kv = {}

    def set(self, k, v):
        self.kv[k] = v.encode() if isinstance(v, str) else bytes(v)

    def get(self, k):
        if k not in self.kv:
            raise KeyError(f"{k} (a real store would block)")
        return self.kv[k]

    def add(self, k, d):
        v = int(self.kv.get(k, b"0")) + d
        self.kv[k] = str(v).encode()
        return v

    def compare_set(self, k, expected, desired):
        expected, desired = expected.encode(), desired.encode()
        if k not in self.kv:
            if expected == b"":
                self.kv[k] = desired
                return desired
            return expected
        if self.kv[k] == expected:
            self.kv[k] = desired
        return self.kv[k]


class ProtocolTest(unittest.TestCase):
    def test_publish_writes_members_before_epoch(self):
        s = FakeStore()
        self.assertEqual(p.latest_epoch(s), 0)
        p.publish(s, 1, ["a", "b"])
        self.assertEqual(p.latest_epoch(s), 1)
        self.assertEqual(p.members(s, 1), ["a", "b"])
        for name, epoch, ids in [
            ("same epoch", 1, ["a"]),
            ("older epoch", 0, ["a"]),
            ("no members", 2, []),
            ("duplicate", 2, ["a", "a"]),
            ("space in id", 2, ["a b"]),
            ("slash in id", 2, ["a/b"]),
        ]:
            with self.subTest(name):
                with self.assertRaises(ValueError):
                    p.publish(s, epoch, ids)
        self.assertEqual(p.latest_epoch(s), 1, "a refused membership changes nothing")
        p.publish(s, 5, ["b"])  # epochs need only increase
        self.assertEqual((p.latest_epoch(s), p.members(s, 5)), (5, ["b"]))

    def test_peek_never_creates(self):
        s = FakeStore()
        self.assertIsNone(p.peek(s, "bft/x"))
        self.assertNotIn("bft/x", s.kv)
        s.set("bft/x", "v")
        self.assertEqual(p.peek(s, "bft/x"), "v")

    def test_first_writer_wins(self):
        s = FakeStore()
        self.assertEqual(p.cas_first(s, p.k_fate(3), "go"), "go")
        self.assertEqual(p.cas_first(s, p.k_fate(3), "abort"), "go")
        self.assertEqual(p.cas_first(s, p.k_switch(2), "41 3"), "41 3")
        self.assertEqual(p.cas_first(s, p.k_switch(2), "42 4"), "41 3")

    def test_status_and_workers(self):
        s = FakeStore()
        st = p.status(s)
        self.assertEqual((st["epoch"], st["formed"], st["members"], st["finished"]), (0, 0, [], None))
        p.publish(s, 1, ["a", "b"])
        s.set(p.k_ready("a"), p.dump({"pid": 1}))
        s.add(p.k_join(1, "a"), 1)
        st = p.status(s)
        self.assertEqual((st["epoch"], st["formed"], st["joined"], st["fate"]), (1, 0, ["a"], None))
        s.add(p.k_join(1, "b"), 1)
        p.cas_first(s, p.k_fate(1), "go")
        s.set(p.k_formed(1), p.dump({"step": 0, "time": 1.0, "lost": 0.25}))
        p.publish(s, 2, ["a", "b", "c"])
        st = p.status(s)
        self.assertEqual((st["epoch"], st["formed"], st["formed_step"], st["joined"]), (2, 1, 0, []))
        self.assertEqual(st["formed_lost"], 0.25)
        s.set(p.k_failed(1, "b"), p.dump({"step": 7, "error": "Connection closed by peer"}))
        self.assertEqual(p.status(s)["failed"], ["b"])
        w = p.workers(s, ["a", "b"])
        self.assertEqual(w["a"]["ready"], {"pid": 1})
        self.assertIsNone(w["b"]["ready"])
        self.assertIsNone(w["a"]["left"])


try:
    from torch.distributed import TCPStore
    NO_TORCH = None
except ImportError as e:
    NO_TORCH = f"needs torch ({e}); run with /usr/bin/python3 (Debian's python3-torch)"


@unittest.skipIf(NO_TORCH, NO_TORCH)
class StoreSemanticsTest(unittest.TestCase):
    """FakeStore answers as torch's TCPStore does, for every operation the protocol uses."""

    def test_same_answers(self):
        from datetime import timedelta
        master = TCPStore("127.0.0.1", 0, None, True, timedelta(seconds=10), wait_for_workers=False)
        real = TCPStore("127.0.0.1", master.port, None, False, timedelta(seconds=10))
        fake = FakeStore()
        ops = [("add", "c", 0), ("add", "c", 2), ("set", "k", "v"), ("get", "k"),
               ("compare_set", "m", "x", "y"), ("compare_set", "m", "", "go"),
               ("compare_set", "m", "", "abort"), ("compare_set", "m", "go", "stop"),
               ("compare_set", "k", "\x00s", "\x00s"), ("compare_set", "n", "\x00s", "\x00s"),
               ("set", "e", "7"), ("add", "e", 0)]
        for op, *args in ops:
            with self.subTest(op=op, args=args):
                got, want = getattr(real, op)(*args), getattr(fake, op)(*args)
                self.assertEqual(got, want)
        self.assertEqual(p.peek(real, "n"), None)
        self.assertEqual(p.peek(real, "m"), "stop")


class ShardTest(unittest.TestCase):
    def test_shards_cover_the_batch_once(self):
        from bftrainer_elastic.runtime import Runtime, State
        rt = Runtime(State(model=None), log=None)
        for n in (0, 1, 7, 12, 13):
            for world in (1, 2, 3, 4, 5):
                with self.subTest(n=n, world=world):
                    rt.world = world
                    got = []
                    for rank in range(world):
                        rt.rank = rank
                        got.extend(range(n)[rt.shard(n)])
                    self.assertEqual(got, list(range(n)))


class ControlTest(unittest.TestCase):
    """The runner's line protocol, end to end over TCP, against server.handle."""

    def setUp(self):
        self.store = FakeStore()
        srv = server._Control(("127.0.0.1", 0), server._Handler)
        self.secret = p.new_secret()
        srv.store, srv.lock, srv.secret = self.store, threading.Lock(), self.secret
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        self.srv = srv
        self.c = Control("127.0.0.1", srv.server_address[1], self.secret, timeout=10)

    def tearDown(self):
        self.c.close()
        self.srv.shutdown()
        self.srv.server_close()

    def test_requests(self):
        self.c.ping()
        self.c.members(1, ["n1-x", "n2-y", "gpu_node.3@a1"])  # node names may hold _ and .
        self.assertEqual(self.c.status()["members"], ["n1-x", "n2-y", "gpu_node.3@a1"])
        with self.assertRaisesRegex(ControlError, "not after the latest"):
            self.c.members(1, ["n1-x"])
        with self.assertRaisesRegex(ControlError, "unknown request"):
            self.c.request("FROB")
        with self.assertRaisesRegex(ControlError, "usage"):
            self.c.request("MEMBERS 2")
        with self.assertRaisesRegex(ControlError, "empty"):
            self.c.request("")
        self.store.set(p.k_left("n2-y"), p.dump({"epoch": 2, "step": 9}))
        self.assertEqual(self.c.workers(["n2-y"])["n2-y"]["left"]["step"], 9)
        # The connection survives errors: one reply per request line.
        self.assertEqual(self.c.status()["epoch"], 1)

    def raw(self):
        """A plain connection to the control port: (send line -> reply line)."""
        import socket
        sock = socket.create_connection(("127.0.0.1", self.srv.server_address[1]), timeout=10)
        self.addCleanup(sock.close)
        f = sock.makefile("rb")

        def send(line):
            sock.sendall(line.encode() + b"\n")
            return f.readline().decode().rstrip("\n")
        return send

    def test_requests_without_proof_change_nothing(self):
        """Without the secret: every request is refused and no key is touched; a captured
        request is refused on another connection and again on its own."""
        self.c.members(1, ["a"])
        before = dict(self.store.kv)
        send = self.raw()
        for line in ["PING", "STATUS", "MEMBERS 2 evil", "WORKERS a"]:
            self.assertEqual(send(line), "ERR authentication failed: HELLO first", line)
        nonce = send("HELLO").split()[1]
        wrong = p.new_secret()
        for line in ["PING", "STATUS", "MEMBERS 2 evil", "WORKERS a", "0" * 64 + " STATUS"]:
            self.assertEqual(send(line), "ERR authentication failed", line)
            self.assertEqual(send(p.control_mac(wrong, nonce, 0, line) + " " + line),
                             "ERR authentication failed", line)
        # Replay: the owner's MEMBERS, as it went over the wire, on another connection...
        own = self.raw()
        n1 = own("HELLO").split()[1]
        captured = p.control_mac(self.secret, n1, 0, "MEMBERS 2 a") + " MEMBERS 2 a"
        self.assertEqual(own(captured), "OK")
        self.assertEqual(send(captured), "ERR authentication failed")
        # ... and on its own connection, where it was accepted once.
        self.assertEqual(own(captured), "ERR authentication failed")
        after = dict(self.store.kv)
        self.assertEqual(self.store.get(p.K_EPOCH), b"2")
        del after[p.K_EPOCH], after[p.k_members(2)], before[p.K_EPOCH]
        self.assertEqual(after, before, "a refused request changed a key")

    def test_ready_needs_proof(self):
        """WORKERS reports a worker ready only if its ready record proves the secret."""
        good = p.ready_record(self.secret, "a@1", 7, "n1")
        self.store.set(p.k_ready("a@1"), p.dump(good))
        forged = p.ready_record(p.new_secret(), "b@1", 8, "n2")
        self.store.set(p.k_ready("b@1"), p.dump(forged))
        stolen = dict(good, id="c@1")  # a real worker's proof under another id
        self.store.set(p.k_ready("c@1"), p.dump(stolen))
        ws = self.c.workers(["a@1", "b@1", "c@1"])
        self.assertEqual(ws["a@1"]["ready"]["pid"], 7)
        for w in ("b@1", "c@1"):
            self.assertIsNone(ws[w]["ready"], w)
            self.assertIn("refused", ws[w])

    def test_handle_is_one_line(self):
        for line in ["PING\n", "status", "MEMBERS x a", "WORKERS", "WORKERS bad/id"]:
            with self.subTest(line):
                reply = server.handle(self.store, threading.Lock(), line)
                self.assertNotIn("\n", reply)
                self.assertRegex(reply, r"^(OK|ERR)( |$)")


if __name__ == "__main__":
    unittest.main()


class MPIBootstrapTest(unittest.TestCase):
    """A worker started by mpirun (the mpi-elastic launcher's first generation) takes its id from
    its MPI rank, as the Go runner computes it (trainer.MPIWorkerID); without torch."""

    def runtime(self, env):
        from unittest import mock

        from bftrainer_elastic import runtime

        class Holder:
            model = None

        clean = {k: v for k, v in os.environ.items()
                 if not k.startswith(("OMPI_", "PMI_", "PMIX_", "BFTRAINER_ELASTIC"))}
        with mock.patch.dict(os.environ, {**clean, **env}, clear=True):
            return runtime.Runtime(Holder(), log=None)

    def test_ids(self):
        for env, want, mpi in (
            ({"BFTRAINER_ELASTIC_MPI": "ab12", "OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "3"},
             "mpi2@ab12", (2, 3)),
            ({"BFTRAINER_ELASTIC_MPI": "ab12", "PMI_RANK": "0", "PMI_SIZE": "1"}, "mpi0@ab12", (0, 1)),
            ({"BFTRAINER_ELASTIC_MPI": "ab12", "PMIX_RANK": "5", "PMIX_SIZE": "8"}, "mpi5@ab12", (5, 8)),
            # An id given wins: a worker the node agent started (a later grow).
            ({"BFTRAINER_ELASTIC_MPI": "ab12", "BFTRAINER_ELASTIC_ID": "n3@x", "PMI_RANK": "1",
              "PMI_SIZE": "2"}, "n3@x", None),
        ):
            rt = self.runtime(env)
            self.assertEqual(rt.id, want, env)
            self.assertEqual(rt.mpi, mpi, env)
            self.assertTrue(p.ID_PATTERN.match(rt.id))

    def test_no_rank(self):
        with self.assertRaisesRegex(ValueError, "no MPI rank"):
            self.runtime({"BFTRAINER_ELASTIC_MPI": "ab12", "PMI_RANK": "x", "PMI_SIZE": "2"})
