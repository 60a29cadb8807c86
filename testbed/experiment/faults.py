"""The fault timeline: applies a scenario's `faults:` at their times during the workload.

Link faults go through the Network (which writes events.jsonl itself); node
faults go through the daemons (kill -9, restart with the same spool, SIGSTOP,
SIGCONT) and are recorded here with network.record_event; a subsystem's own actions (`pool_join`,
`pool_leave`, `pool_kill`) go to its clients (testbed/subsystems/base.py Clients.fault). A symbolic node target
(`pools.leader`, `pools.followers` in a partition) is resolved by the subsystem's clients when the fault fires,
and events.jsonl says what it resolved to (`resolved_from` on the kill or pause line, a `resolved` line before
a partition). A fault that fails
is reported and recorded as `fault_failed`; the run goes on, because a drill
that stops at its first hiccup tells the operator nothing about the rest.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Sequence

from testbed.scenario.spec import Fault
from testbed.topology.model import Direction

log = logging.getLogger(__name__)


class Timeline:
    """Apply `faults` (times in wall seconds after the workload begins) in a background thread."""

    def __init__(self, network: Any, daemons: Any, events: list[Fault],
                 on_event: Callable[[str], None] | None = None, clients: Sequence[Any] = ()) -> None:
        """`clients`: the subsystems' clients of the repetition (testbed/subsystems/base.py Clients)."""
        self.network = network
        self.daemons = daemons
        self.clients = clients
        self.resolved: dict[str, str] = {}         # symbolic target -> the node its last kill or pause took
        self.events = sorted(events, key=lambda f: f.at)
        self.on_event = on_event or (lambda text: None)
        self.applied: list[tuple[float, str]] = []
        self.failed: list[tuple[str, str]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, t0: float | None = None) -> None:
        t0 = time.monotonic() if t0 is None else t0
        if not self.events:
            return
        self._thread = threading.Thread(target=self._run, args=(t0,), name="fault-timeline", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Faults not yet due are not applied; one being applied finishes first."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self, t0: float) -> None:
        for fault in self.events:
            if self._stop.wait(max(0.0, t0 + fault.at - time.monotonic())):
                return
            self.apply(fault)

    def apply(self, fault: Fault) -> None:
        what = describe(fault)
        try:
            self._apply(fault)
        except Exception as exc:  # noqa: BLE001 - a failed fault is data about the drill, not a crash
            log.warning("fault %s failed: %s", what, exc)
            self.failed.append((what, str(exc)))
            self.network.record_event("fault_failed", _target(fault), action=fault.action, error=str(exc))
            self.on_event(f"fault {what} FAILED: {exc}")
            return
        self.applied.append((fault.at, what))
        self.on_event(f"fault {what}")

    def _apply(self, fault: Fault) -> None:
        action, target = fault.action, fault.target
        if action in ("link_down", "link_up", "link_set"):
            a, b = self._ends(target)
            if action == "link_down":
                self.network.link_down(a, b)
            elif action == "link_up":
                self.network.link_up(a, b)
            else:
                params = dict(fault.params)
                direction = params.pop("direction", "both")
                # the scenario's spelling (loss_model) -> the link model's fields (gilbert)
                self.network.set_link(a, b, direction=direction, **Direction.fields_from_scenario(params))
        elif action == "partition":
            side_a, side_b = ([n for x in side for n in self._nodes(action, x)] for side in target)
            if [side_a, side_b] != [list(side) for side in target]:
                self.network.record_event("resolved", _target(fault), action=action, sides=[side_a, side_b])
            self.network.partition(side_a, side_b)
        elif action == "heal":
            self.network.heal()
        elif action in ("kill", "restart", "pause", "resume"):
            if "." in target and action in ("restart", "resume"):
                # the node the last kill or pause of that target took (the leader has moved on since)
                node = self.resolved.get(target, "")
                if not node:
                    raise ValueError(f"{action}: no kill or pause of {target} came before")
            else:
                nodes = self._nodes(action, target)
                if len(nodes) != 1:
                    raise ValueError(f"{action}: {target} stands for {len(nodes)} nodes now, not one")
                node = nodes[0]
                self.resolved[target] = node
            detail = {"kill": self.daemons.kill, "restart": self.daemons.restart,
                      "pause": self.daemons.pause, "resume": self.daemons.resume}[action](node)
            if node != target:
                detail = dict(detail or {}, resolved_from=target)
            self.network.record_event(action, node, **(detail or {}))
        else:
            for clients in self.clients:
                detail = clients.fault(action, target)
                if detail is not None:
                    self.network.record_event(action, target, **detail)
                    return
            raise ValueError(f"unknown fault action {action!r} (no client of this run takes it)")

    def _nodes(self, action: str, target: str) -> list[str]:
        """A node name as it is; a symbolic target (with a '.': node names have none) as its clients say now."""
        if "." not in target:
            return [target]
        for clients in self.clients:
            nodes = clients.resolve(target)
            if nodes:
                return list(nodes)
        raise ValueError(f"{action}: {target} stands for no node now")

    def _ends(self, link_name: str) -> tuple[str, str]:
        for link in self.network.topology.links:
            if link.name == link_name:
                return link.a, link.b
        raise ValueError(f"no link named {link_name!r}")


def _target(fault: Fault) -> Any:
    return fault.target if fault.target is not None else "all"


def describe(fault: Fault) -> str:
    target = fault.target
    if fault.action == "partition" and isinstance(target, (list, tuple)) and len(target) == 2:
        target = f"{','.join(target[0])} | {','.join(target[1])}"
    params = "".join(f" {k}={v}" for k, v in fault.params.items())
    return f"{fault.action} {target if target is not None else ''}{params}".strip()
