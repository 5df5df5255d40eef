#!/usr/bin/python3
"""The two sides of test_adversary: a victim's elastic Trainer and a second user's attacks on it.

    adversary.py victim XDIR VDIR STEPS   (as the victim) LocalRunner: store, workers a and b;
                                          writes XDIR/info.json (what a neighbour can learn: ports,
                                          pids, worker ids, and one control request as it went
                                          over the wire), waits for XDIR/done, lets training end,
                                          writes XDIR/victim.json
    adversary.py attack XDIR              (as another user) every attack, XDIR/attack.json, then
                                          XDIR/done

XDIR is a directory both may use (the test's); VDIR is the victim's own (0700).
"""

import json
import os
import secrets
import socket
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from bftrainer_elastic import protocol as p  # noqa: E402


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def wait_file(path, timeout):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {timeout} s")
        time.sleep(0.05)


def victim(xdir, vdir, steps):
    from bftrainer_elastic.local import LocalRunner
    os.umask(0o077)
    log, out = os.path.join(vdir, "progress.log"), os.path.join(vdir, "params.pt")
    argv = [sys.executable, os.path.join(HERE, "elastic_worker.py"), "--steps", str(steps),
            "--batch", "12", "--sleep", "0.05", "--log", log, "--out", out]
    with LocalRunner(vdir, python=sys.executable, timeout=120) as r:
        sent = []
        send = r.ctl._send

        def record(line):  # the bytes on the wire, as a sniffer would see them
            sent.append(line)
            return send(line)
        r.ctl._send = record
        r.grow({"a": argv})
        r.grow({"b": argv})
        captured = next(x for x in sent if x.split(" ", 1)[-1].startswith("MEMBERS 2"))
        write_json(os.path.join(xdir, "info.json"), {
            "store_port": r.port, "control_port": r.control_port, "ids": ["a", "b"],
            "pids": {"store": r.store.pid, "a": r.workers["a"].proc.pid,
                     "b": r.workers["b"].proc.pid},
            "captured": captured, "vdir": vdir})
        wait_file(os.path.join(xdir, "done"), 600)
        during = r.ctl.status()
        workers = r.ctl.workers(["a", "b", "mallory"])
        codes = {w: r.wait_exit(w, 600) for w in ("a", "b")}
        write_json(os.path.join(xdir, "victim.json"), {
            "during": during, "workers": workers, "codes": codes, "after": r.ctl.status(),
            "out": out, "secret": r.secret})


def attempt(fn):
    """What an attack got: ("ok", value) or ("refused", the exception)."""
    try:
        return ["ok", fn()]
    except Exception as e:  # noqa: BLE001 - every refusal is a result here
        return ["refused", f"{type(e).__name__}: {e}"[:300]]


def control_lines(port, lines):
    """Send lines on one new connection to the control port; the replies."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        f = s.makefile("rb")
        out = []
        for line in lines:
            s.sendall(line.encode() + b"\n")
            out.append(f.readline().decode().rstrip("\n"))
        return out


def attack(xdir):
    import torch
    import torch.distributed as dist
    from datetime import timedelta
    from bftrainer_elastic.runtime import Runtime, State

    info = json.load(open(os.path.join(xdir, "info.json")))
    port, cport = info["store_port"], info["control_port"]
    res = {}

    # 1. The control channel: each request bare, with a made-up proof, and the captured one
    # replayed on a new connection (with and without HELLO).
    ids = info["ids"]
    bare = ["PING", "STATUS", "WORKERS " + " ".join(ids), "MEMBERS 99 mallory",
            "MEMBERS 99 " + ids[0]]
    res["control_bare"] = control_lines(cport, bare)
    hello_then = ["HELLO"] + [secrets.token_hex(32) + " " + x for x in bare]
    res["control_forged"] = control_lines(cport, hello_then)[1:]
    res["control_replay"] = (control_lines(cport, [info["captured"]])
                             + control_lines(cport, ["HELLO", info["captured"]])[1:])

    # 2. The store: read, write and wait on the protocol's keys, guessed; enumerate.
    c = dist.TCPStore("127.0.0.1", port, None, False, timedelta(seconds=10))
    guessed = ["bft/version", "bft/epoch", "bft/members/1", "bft/members/2", f"bft/ready/{ids[0]}",
               "bft/formed/1", "bft/formed/2", "bft/switch/2", "bft/pg/2/0", "bft/finished"]
    res["store_read"] = {k: p.peek(c, k) for k in guessed}
    res["store_count"] = attempt(lambda: c.num_keys())
    c.set("bft/epoch", "99")
    c.set("bft/members/99", p.dump({"epoch": 99, "members": ["mallory"]}))
    c.set("bft/switch/2", "0 99")
    c.set("bft/finished", p.dump({"step": 1, "epoch": 2, "time": 0}))
    res["store_write"] = "wrote bft/epoch, bft/members/99, bft/switch/2, bft/finished"
    w = dist.TCPStore("127.0.0.1", port, None, False, timedelta(seconds=10))
    w.set_timeout(timedelta(seconds=2))
    res["store_wait"] = attempt(lambda: w.wait(["bft/formed/3"]))

    # 3. A worker of its own: without a secret, and with one of its own, under its own id
    # and under a stolen one. Listed never, it would wait forever: 3 s tell.
    torch.set_num_threads(1)

    def worker(wid, secret):
        model = torch.nn.Linear(2, 1)
        rt = Runtime(State(model, torch.optim.SGD(model.parameters(), lr=0.1)),
                     store=f"127.0.0.1:{port}", wid=wid, secret=secret, wait_timeout=3, log=None)
        rt.start()
        return {"world": rt.world, "rank": rt.rank, "epoch": rt.epoch}
    res["worker_no_secret"] = attempt(lambda: worker("mallory", ""))
    res["worker_own_secret"] = attempt(lambda: worker("mallory", p.new_secret()))
    res["worker_stolen_id"] = attempt(lambda: worker(info["ids"][0], p.new_secret()))

    # 4. What the victim's processes and files give away.
    def read(path):
        with open(path, "rb") as f:
            return f.read(200).decode("utf-8", "replace")
    res["files"] = {"vdir": attempt(lambda: os.listdir(info["vdir"]))}
    for path in info.get("files") or [os.path.join(info["vdir"], x) for x in ("store.err", "a.err")]:
        res["files"][path] = attempt(lambda: read(path))
    for name, pid in info["pids"].items():
        res["files"][f"environ:{name}"] = attempt(lambda: read(f"/proc/{pid}/environ"))
    write_json(os.path.join(xdir, "attack.json"), res)


def main(argv):
    try:
        if argv[0] == "victim":
            victim(argv[1], argv[2], int(argv[3]))
        elif argv[0] == "attack":
            try:
                attack(argv[1])
            finally:
                open(os.path.join(argv[1], "done"), "w").close()
        else:
            raise SystemExit(f"usage: {sys.argv[0]} victim|attack ...")
    except Exception:
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
