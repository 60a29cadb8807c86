"""Link probes between two real daemons (one event loop, real gRPC and UDP on loopback): the probe sockets are
bound to the data addresses only, and forged probe answers sent from a real UDP socket change no link cost.

The forger knows every outstanding sequence number and send time (as an observer on the path would) and sends
answers in the older layouts and in the current one with a wrong tag or none; the node's neighbour stops
answering first, so only the forgeries could settle those probes.
"""
from __future__ import annotations

import asyncio
import os
import socket
import struct
from pathlib import Path
from typing import Callable

from node.daemon import NodeDaemon
from node.registry import config_from_dict
from testbed.localnet import free_port

INTERVAL = 0.05                    # seconds between probes
QUANTUM = 1.0                      # loopback latency rounds up to one quantum (or a few, under load)
ROUTING = {"mode": "dynamic", "nodes": ["n1", "n2"], "damping": {"enabled": False}, "cost": {"quantum": QUANTUM},
           # probes left unanswered stay outstanding for the whole test: no loss moves the cost either
           "monitor": {"interval": INTERVAL, "timeout": 60.0}}
SESSION = {"keepalive": 0.2, "hold_time": 1.0, "backoff_min": 0.01, "backoff_max": 0.1}
OLD = struct.Struct("!2sBBQd")     # version 1: magic, version, type, seq, stamp; then the addressee's name
V2 = struct.Struct("!2sBBQdBB")    # version 2: ... then both names' lengths, both names and a 16-byte tag
NEW = struct.Struct("!2sBBQdddBB")  # version 3: the stamp, the addressee's receive and send times, the lengths
RESPONSE = 2


def _cfgs(tmp: Path) -> dict:
    taken: set[int] = set()
    ports = {n: (free_port(taken), free_port(taken)) for n in ("n1", "n2")}
    also = {"n1": [f"127.0.0.2:{ports['n1'][0]}"], "n2": []}      # n1's Link service has two addresses
    return {n: config_from_dict({"name": n, "data_listen": f"127.0.0.1:{d}", "data_listen_also": also[n],
                                 "mgmt_listen": f"127.0.0.1:{m}",
                                 "neighbours": {o: f"127.0.0.1:{ports[o][0]}" for o in ports if o != n},
                                 "records_dir": str(tmp / n), "session": SESSION, "routing": ROUTING})
            for n, (d, m) in ports.items()}


async def _until(cond: Callable[[], bool], timeout: float) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(INTERVAL / 5)


def _forgeries(seq: int, sent: float) -> list[bytes]:
    """Answers n2 never gave to n1's probe `seq` (sent at `sent`), claiming a 500 ms round trip."""
    old = OLD.pack(b"WB", 1, RESPONSE, seq, sent - 0.5) + b"n2"
    v2 = V2.pack(b"WB", 2, RESPONSE, seq, sent, 2, 2) + b"n1n2" + os.urandom(16)
    body = NEW.pack(b"WB", 3, RESPONSE, seq, sent, sent + 0.5, sent + 0.5, 2, 2) + b"n1n2"
    return [old, v2, body + os.urandom(16), body]      # older layouts, a wrong tag, no tag


def test_forged_probe_answers_change_no_cost_and_are_counted(tmp_path: Path) -> None:
    cfgs = _cfgs(tmp_path)
    port = int(cfgs["n1"].data_listen.rsplit(":", 1)[1])

    async def go() -> None:
        nodes = {n: NodeDaemon(c) for n, c in cfgs.items()}
        for d in nodes.values():
            await d.start()
        forger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            monitor = nodes["n1"].subsystem("routing").node_router.dynamic.monitor
            est = monitor.estimator("n2")
            await _until(lambda: est.answered >= 3, 40 * INTERVAL)
            # no wildcard socket on the data port: a third loopback address's port is free
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as other:
                other.bind(("127.0.0.3", port))
            # n2 answers no more; n1 goes on probing it
            await nodes["n2"].subsystem("routing").node_router.dynamic.monitor.stop()
            await asyncio.sleep(2 * INTERVAL)
            answered, latency, cost = est.answered, est.latency_ms, monitor.cost("n2")
            forged = 0
            for _ in range(10):
                for seq, (_, sent) in list(est._pending.items()):     # what an observer on the path saw
                    for datagram in _forgeries(seq, sent):
                        forger.sendto(datagram, ("127.0.0.1", port))
                        forged += 1
                await asyncio.sleep(INTERVAL)
            await asyncio.sleep(2 * INTERVAL)
            assert forged >= 40
            # the cost the real answers gave (one quantum on a quiet loopback, more on a loaded machine) stays
            assert monitor.cost("n2") == cost >= QUANTUM
            assert est.answered == answered and est.latency_ms == latency
            refused = nodes["n1"].engine.snapshot()["routing"]["probes_refused"]
            assert refused["malformed"] >= 3 * forged // 4 and refused["mac"] >= forged // 4
        finally:
            forger.close()
            for d in nodes.values():
                await d.stop()

    asyncio.run(go())
