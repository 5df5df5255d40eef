#!/usr/bin/python3
"""A second user's attacks on a victim's running torchrun Trainer (trainer's TestTorchrunNeighbour).

    torchrun_adversary.py attack XDIR             (as another user) reads XDIR/info.json (what a
                                                  neighbour learns without help: the Trainer's
                                                  name, the victim's uid, where to look), tries
                                                  every attack, writes XDIR/attack.json and
                                                  XDIR/read.bin (every byte of every file it could
                                                  read, for the test to search)
    torchrun_adversary.py inspect PORT RUNID      (as root, who knows the id) the victim's
                                                  rendezvous as its store holds it: round,
                                                  participants, closed; one JSON line

Nothing here knows the rendezvous id but `inspect`: the attacker works from what it can find.
"""

import datetime
import json
import os
import pickle
import secrets
import sys
import traceback


def attempt(fn):
    """What an attack got: ["ok", value] or ["refused", the exception]."""
    try:
        return ["ok", fn()]
    except Exception as e:  # noqa: BLE001 - every refusal is a result here
        return ["refused", f"{type(e).__name__}: {e}"[:300]]


def client(port, timeout=5):
    from torch.distributed import TCPStore
    return TCPStore("127.0.0.1", port, None, False, datetime.timedelta(seconds=timeout))


def victim_procs(uid):
    """Every process of the victim's: pid → cmdline (world-readable), environ (attempted)."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            if os.stat(f"/proc/{d}").st_uid != uid:
                continue
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        out[d] = {"cmdline": cmdline, "environ": attempt(lambda d=d: len(open(f"/proc/{d}/environ", "rb").read()))}
    return out


def victim_ports(uid):
    """Listening TCP ports whose socket the victim owns (/proc/net/tcp is everyone's to read)."""
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if f[3] == "0A" and int(f[7]) == uid:  # LISTEN
                ports.add(int(f[1].rsplit(":", 1)[1], 16))
    return sorted(ports)


def read_all(roots, blob):
    """Reads every regular file it can under roots into blob; the files read, the number it could
    not read, every directory it listed or could not."""
    got, refused, seen = [], 0, []
    with open(blob, "wb") as out:
        for root in roots:
            for dirpath, dirs, files in os.walk(root, onerror=lambda e: seen.append("refused " + e.filename)):
                seen.append(dirpath)
                for name in files:
                    path = os.path.join(dirpath, name)
                    try:
                        if not os.path.isfile(path) or os.path.islink(path):
                            continue
                        with open(path, "rb") as f:
                            out.write(f.read(1 << 20))
                        got.append(path)
                    except OSError:
                        refused += 1
    return got, refused, seen


def join(port, run_id):
    """A torchrun agent's rendezvous, as the attacker, under run_id: what membership it gets."""
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import (
        DynamicRendezvousHandler, RendezvousTimeout)
    store = client(port)
    backend = C10dRendezvousBackend(store, run_id)
    h = DynamicRendezvousHandler.from_backend(
        run_id, store, backend, min_nodes=1, max_nodes=2,
        timeout=RendezvousTimeout(join=datetime.timedelta(seconds=20),
                                  last_call=datetime.timedelta(seconds=1),
                                  close=datetime.timedelta(seconds=5)))
    try:
        _, rank, world = h.next_rendezvous()
        return {"rank": rank, "world": world}
    finally:
        h.shutdown()


def attack(xdir):
    info = json.load(open(os.path.join(xdir, "info.json")))
    trainer, uid = info["trainer"], info["uid"]
    res = {"procs": victim_procs(uid), "ports": victim_ports(uid)}
    res["files"], res["files_refused"], res["dirs"] = read_all(info["roots"], os.path.join(xdir, "read.bin"))
    # The store: the one listening port the victim owns on the controller that answers as a
    # TCPStore and holds keys. (Workers' own stores, MASTER_PORT, also answer: noted below.)
    stores = {}
    for port in res["ports"]:
        stores[port] = attempt(lambda port=port: client(port, 2).num_keys())
    res["stores"] = stores
    port = info["store_port"]  # what ss or /proc/net/tcp shows; the test checks it is among them
    guesses = [trainer, trainer + "-" + secrets.token_hex(16), "default", "none", "torchrun"]
    # torch 1.13's TCPStore has no check(): a get of a key that is not there waits out its
    # timeout (the control below reads back a key that is).
    res["guessed_keys"] = {g: attempt(lambda g=g: client(port, 1).get("torch.rendezvous." + g).decode())
                           for g in guesses}
    res["keys_before"] = attempt(lambda: client(port).num_keys())
    # Join as an agent with a guessed id: a rendezvous of the attacker's own, never the
    # victim's (whose max is 2 and which has room for one more).
    res["joins"] = {g: attempt(lambda g=g: join(port, g)) for g in guesses[:2]}
    # What stays open: any client may write keys of its own (memory, num_keys) and read
    # num_keys (how busy the store is).
    own = "mallory/" + secrets.token_hex(4)
    res["own_key"] = attempt(lambda: client(port).set(own, b"x" * 1024))
    res["own_key_read"] = attempt(lambda: len(client(port, 1).get(own)))
    res["keys_after"] = attempt(lambda: client(port).num_keys())
    with open(os.path.join(xdir, "attack.json.tmp"), "w") as f:
        json.dump(res, f)
    os.replace(os.path.join(xdir, "attack.json.tmp"), os.path.join(xdir, "attack.json"))


def inspect(port, run_id):
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
    state = C10dRendezvousBackend(client(int(port)), run_id).get_state()
    if state is None:
        print(json.dumps(None))
        return
    s = pickle.loads(state[0])
    print(json.dumps({"round": s.round, "complete": s.complete, "closed": s.closed,
                      "participants": sorted(str(n) for n in s.participants),
                      "wait_list": sorted(str(n) for n in s.wait_list)}))


if __name__ == "__main__":
    try:
        if sys.argv[1] == "attack":
            attack(sys.argv[2])
        elif sys.argv[1] == "inspect":
            inspect(sys.argv[2], sys.argv[3])
        else:
            sys.exit(f"usage: {sys.argv[0]} attack XDIR | inspect PORT RUNID")
    except Exception:
        traceback.print_exc()
        sys.exit(1)
