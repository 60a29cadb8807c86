"""Sessions replaced while the old one is still closing never strand a stored piece outside every queue.

Two daemons in one event loop (real gRPC on loopback, real SQLite): n1 dials n2, n2 sends 3,000 messages of
10 kB to n1. n1 drops its session again and again while n2's writer is blocked on a full stream; n1 redials
at once, so n2 accepts a new OPEN while the old session is still in its cleanup and cancels it there. Before
the fix that cleanup was cancelled before it put the unacknowledged pieces back in a queue: they stayed
queued in the spool, in no queue in memory, and were sent again only after a restart.
"""
from __future__ import annotations

import asyncio
import random
import sqlite3
from pathlib import Path

from node.registry import config_from_dict as from_dict
from node.daemon import NodeDaemon
from testbed.localnet import free_port

MESSAGES = 3000
SIZE = 10_000
REPLACEMENTS = 40
SESSION = {"keepalive": 0.3, "hold_time": 1.5, "backoff_min": 0.01, "backoff_max": 0.05}


def _queued_rows(spool: Path) -> int:
    with sqlite3.connect(f"file:{spool}?mode=ro", uri=True) as c:
        return c.execute("SELECT COUNT(*) FROM frag WHERE state='queued'").fetchone()[0]


def test_replaced_sessions_leave_no_piece_outside_the_queues(tmp_path: Path) -> None:
    taken: set[int] = set()
    ports = {n: (free_port(taken), free_port(taken)) for n in ("n1", "n2")}
    cfgs = {n: from_dict({"name": n, "data_listen": f"127.0.0.1:{d}", "mgmt_listen": f"127.0.0.1:{m}",
                          "neighbours": {o: f"127.0.0.1:{ports[o][0]}" for o in ports if o != n},
                          "records_dir": str(tmp_path / n), "session": SESSION, "mode": "non-fragmenting",
                          "metrics_interval": 5.0})
            for n, (d, m) in ports.items()}

    async def go() -> tuple[int, int, int, int]:
        nodes = {n: NodeDaemon(c) for n, c in cfgs.items()}
        for d in nodes.values():
            await d.start()
        n1, n2 = nodes["n1"], nodes["n2"]
        try:
            submitted = 0

            async def produce() -> None:        # keeps n2's queue and window full while sessions come and go
                nonlocal submitted
                while submitted < MESSAGES:
                    if n2.engine.outstanding() > 200:
                        await asyncio.sleep(0.005)
                        continue
                    ok, _mid, why = await n2.engine.submit("alice", [("n1", "bob")], None, SIZE)
                    assert ok, why
                    submitted += 1
            producer = asyncio.ensure_future(produce())
            rng = random.Random(7)
            replaced = 0
            last = None
            while replaced < REPLACEMENTS and not producer.done():
                s = n1.links.sessions.get("n2")
                if s is not None and s is not last and n2.engine.outstanding():
                    await asyncio.sleep(rng.uniform(0.0, 0.03))
                    s.hang_up()         # n1 hangs up; its dialer comes straight back with a new OPEN
                    last = s
                    replaced += 1
                await asyncio.sleep(0.002)
            await producer
            # every piece must reach n1 without a restart: bounded by hold time + backoff per replacement
            deadline = asyncio.get_running_loop().time() + 30.0
            while n1.engine.delivered < MESSAGES and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.1)
            await n2.engine.settle()
            in_memory = n2.engine.outstanding()
            return replaced, n1.engine.delivered, in_memory, _queued_rows(cfgs["n2"].spool_path)
        finally:
            for d in nodes.values():
                await d.stop()

    replaced, delivered, in_memory, stored = asyncio.run(go())
    assert replaced >= REPLACEMENTS // 2
    assert stored == in_memory, f"{stored} queued rows in n2's spool, {in_memory} pieces in its queues"
    assert delivered == MESSAGES, f"{delivered} of {MESSAGES} delivered without a restart"
