"""The fixed waits of a repetition end when their condition holds, not at the next slow poll.

- start-up: a daemon whose management port opens late is found ready at once, not when a gRPC channel that
  was refused earlier ends its reconnect backoff (1 s, then 1.6 s, with 20% jitter: gRPC's defaults);
- drain: the drain ends a confirming round after every spool is empty, and its progress lines stay one a tick.

A real gRPC server (the Control service's Health) stands in for a daemon on a loopback address of its own;
the drain is driven by a stand-in for the daemons' Stats.
"""
from __future__ import annotations

import random
import threading
import time
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from node.rpc import control_pb2, control_pb2_grpc
from testbed.experiment import cell, daemons, nodeconfig
from testbed.experiment.daemons import NodeDaemons
from testbed.experiment.progress import NullProgress
from testbed.experiment.record_failures import RecordFailures

pytestmark = pytest.mark.timeout(30)

OPENS_AFTER = 1.5      # wall seconds before the stand-in daemon listens: after the refused channel's first retry


class _Health(control_pb2_grpc.ControlServicer):
    def Health(self, request: Any, context: Any) -> Any:
        return control_pb2.HealthReply(node="n1", ready=True)


class _Net:
    def __init__(self, address: str) -> None:
        self.address = address

    def mgmt_address(self, node: str) -> str:
        return self.address


def test_a_daemon_that_opens_its_port_late_is_found_ready_at_once(tmp_path: Path) -> None:
    address = f"127.{random.randint(1, 254)}.{random.randint(1, 254)}.{random.randint(2, 254)}"
    server = grpc.server(futures.ThreadPoolExecutor(2))
    control_pb2_grpc.add_ControlServicer_to_server(_Health(), server)
    opened: list[float] = []

    def open_late() -> None:
        time.sleep(OPENS_AFTER)
        # the port is bound only now: until then a connection is refused, as to a daemon still importing
        assert server.add_insecure_port(f"{address}:{nodeconfig.MGMT_PORT}")
        server.start()
        opened.append(time.monotonic())

    opener = threading.Thread(target=open_late)
    d = NodeDaemons(_Net(address), {"n1": tmp_path / "node.yaml"})  # type: ignore[arg-type]
    try:
        opener.start()
        d.wait_healthy(10.0)
        found = time.monotonic()
    finally:
        opener.join()
        server.stop(None)
    # a look every READY_POLL, then one Health call on loopback
    assert found - opened[0] < daemons.READY_POLL + 0.3, f"ready {found - opened[0]:.2f} s after the port opened"


class _Daemons:
    """Stats of six nodes whose spools hold a message until `empty_at` (monotonic)."""

    def __init__(self, empty_at: float) -> None:
        self.empty_at = empty_at
        self.config_paths = {f"n{i}": Path(f"n{i}.yaml") for i in range(1, 7)}
        self.state = {n: "running" for n in self.config_paths}
        self.procs: dict[str, Any] = {}

    def reachable(self, node: str) -> bool:
        return True

    def stats(self, node: str, timeout: float = 5.0) -> dict[str, Any]:
        held = 1 if time.monotonic() < self.empty_at else 0
        return {"delivered": 0 if held else 1, "spool_messages": held, "spool_fragments": 0, "neighbours": {}}

    def client(self, node: str, timeout: float = 10.0) -> Any:
        outer = self

        class _Client:
            def __enter__(self) -> "_Client":
                return self

            def __exit__(self, *exc: Any) -> None:
                pass

            def stats(self) -> dict[str, Any]:
                return outer.stats(node)
        return _Client()


class _Ticks(NullProgress):
    def __init__(self) -> None:
        self.ticks = 0

    def tick(self, elapsed: float, total: float, submitted: int, delivered: int) -> None:
        self.ticks += 1


def _drain_run(d: _Daemons, progress: _Ticks) -> Any:
    run = cell._CellRun.__new__(cell._CellRun)
    run.daemons, run.driver, run.clients, run.progress = d, None, [], progress
    run.stop, run.delivered, run._last_total = threading.Event(), 0, -1
    run.last_delivery = time.monotonic()
    run.record_failures = RecordFailures()
    return run


def test_the_drain_ends_a_confirming_round_after_the_spools_empty() -> None:
    empty_after = 1.1
    t0 = time.monotonic()
    d = _Daemons(t0 + empty_after)
    progress = _Ticks()
    result = _drain_run(d, progress)._drain(bound=30.0)
    ended = time.monotonic()
    assert result["empty"] and not result["stalled"]
    late = ended - d.empty_at
    assert late < cell.DRAIN_POLL + cell.CONFIRM + 0.2, f"the drain ended {late:.2f} s after the spools emptied"
    # rounds are faster than progress lines: still about one a tick (and the last one)
    assert progress.ticks <= (ended - t0) / cell.TICK + 2
