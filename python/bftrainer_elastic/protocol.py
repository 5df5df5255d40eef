"""The keys the elastic runtime's workers and its store process share (stdlib only).

Everything here is a function of a store object with the four c10d Store methods `set`, `get`,
`add` and `compare_set` (torch's TCPStore, or anything shaped like it), so the worker side
(runtime.py) and the store process (server.py) read and write the same keys through one
definition. docs/elastic.md is the specification; this file is its implementation.

Rules that come from torch 1.13's TCPStore, measured here:
  * A value is never empty. An empty value costs 200-400 ms per operation (the client waits on
    a zero-length receive), so every key holds at least one byte.
  * A key is read without blocking by `peek`: compare_set with a sentinel that is never stored.
    For a missing key the server answers with the expected value and creates nothing; for a
    present key it answers with the value. `get` would block until the key exists, and `wait`
    with a timeout leaves the connection out of step (the late reply arrives on the next
    request), so neither is used on a missing key.
  * Counters use `add`: `add(key, 0)` reads one in a single round trip (creating it as "0").
"""

import json
import re
import time

#: Prefix of every key of the protocol, so it cannot collide with torch's own keys.
PREFIX = "bft/"

#: Protocol version, stored under `bft/version` by the store process.
VERSION = 1

_ABSENT = "\x00bft-absent"  # compare_set sentinel; no key ever holds it

#: A worker id: what the runner passes as BFTRAINER_ELASTIC_ID. Unique per launch.
ID_PATTERN = re.compile(r"^[A-Za-z0-9_.:@+-]{1,128}$")


def key(*parts):
    """The store key bft/<part>/<part>/..."""
    return PREFIX + "/".join(str(p) for p in parts)


K_EPOCH = key("epoch")
K_FINISHED = key("finished")


def k_members(epoch):
    return key("members", epoch)


def k_ready(wid):
    return key("ready", wid)


def k_left(wid):
    return key("left", wid)


def k_switch(epoch):
    return key("switch", epoch)


def k_joined(epoch):
    return key("joined", epoch)


def k_join(epoch, wid):
    return key("join", epoch, wid)


def k_fate(epoch):
    return key("fate", epoch)


def k_formed(epoch):
    return key("formed", epoch)


def k_failed(epoch, wid):
    return key("failed", epoch, wid)


def k_pg(epoch):
    """Prefix of the process group's own rendezvous keys for an epoch (torch writes them)."""
    return key("pg", epoch)


def text(v):
    """A store value (bytes from torch, or str) as str."""
    return v.decode("utf-8", "replace") if isinstance(v, (bytes, bytearray)) else str(v)


def dump(obj):
    """A JSON value for the store: compact, never empty."""
    return json.dumps(obj, separators=(",", ":"), sort_keys=True)


def peek(store, k):
    """The value of k as str, or None if it is absent. Never blocks, never creates k."""
    v = text(store.compare_set(k, _ABSENT, _ABSENT))
    return None if v == _ABSENT or v == "" else v


def peek_json(store, k):
    v = peek(store, k)
    return None if v is None else json.loads(v)


def latest_epoch(store):
    """The latest published epoch, 0 before the first."""
    return int(store.add(K_EPOCH, 0))


def check_ids(ids):
    """Raise ValueError unless ids is a non-empty list of distinct valid worker ids."""
    if not ids:
        raise ValueError("a membership needs at least one member")
    for w in ids:
        if not isinstance(w, str) or not ID_PATTERN.match(w):
            raise ValueError(f"bad worker id {w!r} (want {ID_PATTERN.pattern})")
    if len(set(ids)) != len(ids):
        raise ValueError("duplicate worker id in membership")


def publish(store, epoch, members):
    """Runner side: write membership `epoch`, then make it the latest. The members key is
    written first, so a worker that sees the new epoch can always read its members."""
    check_ids(members)
    cur = latest_epoch(store)
    if epoch <= cur:
        raise ValueError(f"epoch {epoch} is not after the latest, {cur}")
    store.set(k_members(epoch), dump({"epoch": epoch, "members": list(members)}))
    store.set(K_EPOCH, str(epoch))


def members(store, epoch):
    """The ordered member ids of a published epoch (blocks only if it is not published)."""
    return json.loads(text(store.get(k_members(epoch))))["members"]


def cas_first(store, k, value):
    """Set k to value unless it already holds one; return the value it holds afterwards
    (the first writer's). Used for every decision several workers race to make."""
    return text(store.compare_set(k, "", value))


def status(store, scan=64):
    """What the runner needs to know, in one dict (see docs/elastic.md, STATUS)."""
    epoch = latest_epoch(store)
    mem = members(store, epoch) if epoch > 0 else []
    formed, info = 0, None
    for e in range(epoch, max(0, epoch - scan), -1):
        info = peek_json(store, k_formed(e))
        if info is not None:
            formed = e
            break
    joined = [w for w in mem if int(store.add(k_join(epoch, w), 0)) > 0] if epoch > 0 else []
    failed = []
    if formed:
        for w in members(store, formed):
            reason = peek(store, k_failed(formed, w))
            if reason is not None:
                failed.append(w)
    return {
        "epoch": epoch,
        "members": mem,
        "formed": formed,
        "formed_step": info["step"] if info else None,
        "formed_time": info["time"] if info else None,
        "formed_lost": info.get("lost") if info else None,
        "fate": peek(store, k_fate(epoch)) if epoch > 0 else None,
        "joined": joined,
        "failed": failed,
        "finished": peek_json(store, K_FINISHED),
    }


def workers(store, ids):
    """Per worker id: its ready record and its left record (None when absent)."""
    return {w: {"ready": peek_json(store, k_ready(w)), "left": peek_json(store, k_left(w))}
            for w in ids}


def now():
    return round(time.time(), 3)
