"""What a new leader publishes first (node/pools/host.py): never a map older than one its predecessor committed.

The controller here is a stand-in for the moment Raft makes possible: the new leader holds its predecessor's last
command (c1 moved to i2, version 2) in its log, but only learns that it committed with its first commit of its own
term. The broker is a stand-in that records what is published (the logic above the broker is what is tested).
"""
from __future__ import annotations

import asyncio
import copy
import json
from types import SimpleNamespace

from node.pools import assign
from node.pools.config import AppConfig, PoolsConfig
from node.pools.controller import NotLeader
from node.pools.host import ControllerHost

SEC = PoolsConfig(enabled=True, replicas={"r1": "127.0.0.1:1", "r2": "127.0.0.1:2", "r3": "127.0.0.1:3"},
                  password="p" * 16, apps={"A": AppConfig(types=["t1"], instances={"i1": "n1", "i2": "n1"})})


def states() -> tuple[dict, dict]:
    """Version 1 (term 1): c1 -> i1, i2 leaving soon; version 2 (term 1): i1 left, c1 -> i2."""
    st = assign.empty_state()
    for cmd in ({"op": "define_app", "app": "A", "algorithm": "round_robin", "move_share": 0.5, "types": ["t1"]},
                {"op": "instance_join", "app": "A", "instance": "i1", "node": "n1"},
                {"op": "consumer_join", "consumer": "c1", "node": "n1", "types": ["t1"]},
                {"op": "instance_join", "app": "A", "instance": "i2", "node": "n1"}):
        st, _moves = assign.apply(st, {**cmd, "term": 1})
    st = {**st, "version": 1}
    later, _moves = assign.apply(st, {"op": "instance_leave", "app": "A", "instance": "i1", "term": 1})
    assert st["connections"] == {"c1": {"A": "i1"}} and later["connections"] == {"c1": {"A": "i2"}}
    return st, later


class Controller:
    """The new leader of term 2: applied up to version 1; its first own commit applies version 2 before it."""

    def __init__(self, *args, on_applied, **kwargs) -> None:
        self.applied_state, self.pending = states()
        self.on_applied = on_applied
        self.leading = True

    def state(self) -> dict:
        return copy.deepcopy(self.applied_state)

    def status(self) -> dict:      # as far as it knows, everything committed is applied
        return {"last_applied": 7, "commit_index": 7}

    def is_leader(self) -> bool:
        return self.leading

    def term(self) -> int:
        return 2

    async def submit(self, command: dict) -> dict:
        if not self.leading:
            raise NotLeader(None)
        for cmd in ({"op": "instance_leave", "app": "A", "instance": "i1", "term": 1}, {**command, "term": 2}):
            if cmd["term"] == 1 and self.pending is None:
                continue
            self.applied_state, moves = assign.apply(self.applied_state, cmd)
            self.on_applied(self.state(), moves, cmd)
        self.pending = None
        return {"term": 2, "version": self.applied_state["version"], "moves": []}


class Broker:
    def __init__(self) -> None:
        self.published: list[tuple[str, dict]] = []
        durable = SimpleNamespace(durable=True)
        self.interest = SimpleNamespace(matching=lambda topic: {"n1": [durable]})

    async def publish(self, topic, body, size, priority, lifetime, key, publisher) -> SimpleNamespace:
        self.published.append((topic, json.loads(body)))
        return SimpleNamespace(accepted=True, reason="")


def test_a_new_leader_publishes_no_map_older_than_its_predecessor_committed() -> None:
    async def main() -> None:
        broker = Broker()
        records = SimpleNamespace(lines=[])
        records.write = lambda kind, **f: records.lines.append(f)
        host = ControllerHost("r2", SEC, "unused", broker, records, make=Controller)
        host.state = host.controller.state()         # as start() takes it
        host._elected(2)
        await asyncio.gather(*list(host._bg))
        await asyncio.gather(*list(host._bg))
        assignments = [b for t, b in broker.published if t == "_pools.assign.c1"]
        assert assignments, "the new leader told c1 nothing"
        # the consumer had version 2 from the old leader (term 1): under term 2, version 1 would move it back
        assert all(a["version"] == 2 and a["connections"] == {"A": "i2"} for a in assignments), assignments
        assert assignments[0]["term"] == 2
    asyncio.run(main())

