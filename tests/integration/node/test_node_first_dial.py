"""A neighbour that starts a while after its dialler gets its session as soon as it listens.

Two daemons in one event loop (real gRPC on loopback, real SQLite): n1 dials n2, which is not started until
n1's dials to it have been refused five times. With the doubling backoff alone n1's next dial would come at
least 8 x backoff_min later (each wait is cut by at most half); before its first session n1 dials every
backoff_min, so the session is up within a few of those.
"""
from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from node.daemon import NodeDaemon
from node.registry import config_from_dict as from_dict
from testbed.localnet import free_port

SESSION = {"keepalive": 1.0, "hold_time": 5.0, "backoff_min": 0.1, "backoff_max": 5.0}
REFUSED = 5          # refused dials before n2 starts: the doubling backoff's next wait is then >= 8 x backoff_min


class _Refusals(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "session with n2: UNAVAILABLE" in record.getMessage():
            self.count += 1


def test_session_up_soon_after_a_late_neighbour_listens(tmp_path: Path) -> None:
    taken: set[int] = set()
    ports = {n: (free_port(taken), free_port(taken)) for n in ("n1", "n2")}
    cfgs = {n: from_dict({"name": n, "data_listen": f"127.0.0.1:{d}", "mgmt_listen": f"127.0.0.1:{m}",
                          "neighbours": {o: f"127.0.0.1:{ports[o][0]}" for o in ports if o != n},
                          "records_dir": str(tmp_path / n), "session": SESSION, "metrics_interval": 5.0})
            for n, (d, m) in ports.items()}
    refusals = _Refusals()
    link_log = logging.getLogger("node.link")
    link_log.addHandler(refusals)
    old_level = link_log.level
    link_log.setLevel(logging.INFO)

    async def go() -> float:
        n1, n2 = NodeDaemon(cfgs["n1"]), NodeDaemon(cfgs["n2"])
        await n1.start()
        started = []
        try:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + SESSION["hold_time"]
            while refusals.count < REFUSED:
                assert loop.time() < deadline, f"only {refusals.count} refused dials"
                await asyncio.sleep(0.005)
            await n2.start()
            started.append(n2)
            t0 = loop.time()
            while "n2" not in n1.links.sessions:
                assert loop.time() - t0 < 8 * SESSION["backoff_min"] + 5.0, "no session"
                await asyncio.sleep(0.005)
            return loop.time() - t0
        finally:
            for d in [n1, *started]:
                await d.stop()

    try:
        waited = asyncio.run(go())
    finally:
        link_log.removeHandler(refusals)
        link_log.setLevel(old_level)
    # the doubling backoff alone: at least 8 x backoff_min; every backoff_min: one wait plus a loopback dial
    assert waited < 4 * SESSION["backoff_min"], f"session up {waited:.2f} s after the neighbour listened"
