"""The control-plane publications of pools, parsed and checked: whatever the bytes, a parser returns a frozen
dataclass or raises BadMessage with a one-line reason.

  _pools.assign.<consumer>   Assignment  {"term", "version", "connections": {app: instance}, "fences": {app: seq}}
  _pools.hb.<name>           Heartbeat   {"role": "consumer", "name", "node", "types": [...], "state",
                                          "load": {app: events/s}}
                                      or {"role": "instance", "name", "app", "node", "state", "backlog"}
                             The first heartbeat registers its sender; state "leaving" announces a leave;
                             a consumer's load rides in its heartbeats.
  fences                     Fence {"consumer", "app", "seq", "old" (null: a first connection), "new", "version",
                             "term"}, Acked {"consumer", "app", "seq", "instance", "version", "term"},
                             Drained {"app", "instance"} (node/pools/fence.py)
  _pools.done.<consumer>     FenceDone {"consumer", "app", "seq", "instance" (the new one), "version", "term"}:
                             the new instance released the events it held for a fence (the pause ended)
  an event's publication key <event id>:<seq>:<map version>

AssignmentGuard keeps the highest (term, version) a consumer or instance has seen and says why an older
assignment is refused (the `refused` record line).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from node.names import is_message_id, is_node_name
from node.pools.assign import ACTIVE, LEAVING, NAME_MAX, NUMBER_MAX, is_pool_name
from node.pools.fence import Acked, Drained, Fence, FenceDone

BODY_MAX = 65536                # bytes: a control publication is small; anything bigger is refused unread
_DIGITS = re.compile(r"(0|[1-9][0-9]{0,14})")   # at most 15 digits: below NUMBER_MAX


class BadMessage(ValueError):
    """A control publication that cannot be used, with the reason in one line."""


@dataclass(frozen=True)
class Assignment:
    term: int
    version: int
    connections: dict[str, str]     # app -> instance
    fences: dict[str, int]          # app -> the last sequence that goes to the previous instance


@dataclass(frozen=True)
class ConsumerBeat:
    name: str
    node: str
    types: tuple[str, ...]
    state: str                      # active | leaving
    load: dict[str, float]          # app -> events/s (EWMA)


@dataclass(frozen=True)
class InstanceBeat:
    name: str
    app: str
    node: str
    state: str                      # active | leaving
    backlog: int                    # publications waiting on its durable subscription


@dataclass(frozen=True)
class EventKey:
    event_id: str
    seq: int
    version: int

    def __str__(self) -> str:
        return f"{self.event_id}:{self.seq}:{self.version}"


def parse_assignment(body: bytes | str) -> Assignment:
    obj = _object(body, "assignment")
    _only(obj, {"term", "version", "connections", "fences"}, {"fences"}, "assignment")
    connections = _mapping(obj["connections"], "connections")
    for app, inst in connections.items():
        if not is_pool_name(inst):
            raise BadMessage(f"assignment: connections.{app} is not an instance name")
    fences = _mapping(obj.get("fences", {}), "fences")
    for app, seq in fences.items():
        _count(seq, f"assignment: fences.{app}")
    return Assignment(_count(obj["term"], "assignment: term"), _count(obj["version"], "assignment: version"),
                      dict(connections), dict(fences))


def parse_heartbeat(body: bytes | str) -> ConsumerBeat | InstanceBeat:
    obj = _object(body, "heartbeat")
    role = obj.get("role")
    state = obj.get("state", ACTIVE)
    if state not in (ACTIVE, LEAVING):
        raise BadMessage(f"heartbeat: state must be {ACTIVE} or {LEAVING}")
    if role == "consumer":
        _only(obj, {"role", "name", "node", "types", "state", "load"}, {"state", "load"}, "heartbeat")
        types = obj["types"]
        if not isinstance(types, list) or not types or not all(is_pool_name(t) for t in types):
            raise BadMessage("heartbeat: types must be a non-empty list of event type names")
        load = _mapping(obj.get("load", {}), "load")
        for app, rate in load.items():
            if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 <= rate <= NUMBER_MAX:
                raise BadMessage(f"heartbeat: load.{app} must be a number from 0 to {NUMBER_MAX}")
        return ConsumerBeat(_pool_name(obj, "name"), _node(obj), tuple(types), state,
                            {app: float(rate) for app, rate in load.items()})
    if role == "instance":
        # backlog is required: a leaving instance at backlog 0 is removed, so a missing one must not read as 0
        _only(obj, {"role", "name", "app", "node", "state", "backlog"}, {"state"}, "heartbeat")
        return InstanceBeat(_pool_name(obj, "name"), _pool_name(obj, "app"), _node(obj), state,
                            _count(obj["backlog"], "heartbeat: backlog"))
    raise BadMessage("heartbeat: role must be consumer or instance")


def parse_fence(body: bytes | str) -> Fence:
    obj = _object(body, "fence")
    _only(obj, {"consumer", "app", "seq", "old", "new", "version", "term"}, set(), "fence")
    old = obj["old"]
    if old is not None and not is_pool_name(old):
        raise BadMessage("fence: old must be an instance name or null")
    new = _pool_name(obj, "new")
    if old == new:
        raise BadMessage("fence: old and new are the same instance")
    return Fence(_pool_name(obj, "consumer"), _pool_name(obj, "app"), _count(obj["seq"], "fence: seq"), old, new,
                 _count(obj["version"], "fence: version"), _count(obj["term"], "fence: term"))


def parse_acked(body: bytes | str) -> Acked:
    obj = _object(body, "acked")
    _only(obj, {"consumer", "app", "seq", "instance", "version", "term"}, set(), "acked")
    return Acked(_pool_name(obj, "consumer"), _pool_name(obj, "app"), _count(obj["seq"], "acked: seq"),
                 _pool_name(obj, "instance"), _count(obj["version"], "acked: version"),
                 _count(obj["term"], "acked: term"))


def parse_done(body: bytes | str) -> FenceDone:
    obj = _object(body, "fence done")
    _only(obj, {"consumer", "app", "seq", "instance", "version", "term"}, set(), "fence done")
    return FenceDone(_pool_name(obj, "consumer"), _pool_name(obj, "app"), _count(obj["seq"], "fence done: seq"),
                     _pool_name(obj, "instance"), _count(obj["version"], "fence done: version"),
                     _count(obj["term"], "fence done: term"))


def parse_drained(body: bytes | str) -> Drained:
    obj = _object(body, "drained")
    _only(obj, {"app", "instance"}, set(), "drained")
    return Drained(_pool_name(obj, "app"), _pool_name(obj, "instance"))


def parse_event_key(key: object) -> EventKey:
    """`<event id>:<seq>:<map version>`; the event id may itself hold ':'."""
    if not isinstance(key, str):
        raise BadMessage("event key must be text")
    parts = key.rsplit(":", 2)
    if len(parts) != 3:
        raise BadMessage("event key must be <event id>:<seq>:<map version>")
    event_id, seq, version = parts
    if not is_message_id(event_id):
        raise BadMessage("event key: the event id is empty or has characters an id may not hold")
    if not _DIGITS.fullmatch(seq) or int(seq) < 1:
        raise BadMessage("event key: seq must be a whole number >= 1")
    if not _DIGITS.fullmatch(version):
        raise BadMessage("event key: map version must be a whole number >= 0")
    return EventKey(event_id, int(seq), int(version))


class AssignmentGuard:
    """The highest (term, version) accepted so far; older assignments are refused."""

    def __init__(self) -> None:
        self.term = -1
        self.version = -1

    def accept(self, assignment: Assignment) -> str | None:
        """None, and the assignment becomes the newest; or why it is refused (nothing changes)."""
        if assignment.term < self.term:
            return f"stale term {assignment.term} < {self.term}"
        if assignment.term == self.term and assignment.version <= self.version:
            return f"version {assignment.version} is not above {self.version} in term {self.term}"
        self.term, self.version = assignment.term, assignment.version
        return None


# --- fields -----------------------------------------------------------------------------------------------

def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number")


def _object(body: bytes | str, what: str) -> dict:
    if isinstance(body, (bytes, bytearray, memoryview)):
        if len(body) > BODY_MAX:
            raise BadMessage(f"{what}: body is over {BODY_MAX} bytes")
        try:
            body = bytes(body).decode("utf-8")
        except UnicodeDecodeError:
            raise BadMessage(f"{what}: body is not UTF-8") from None
    if not isinstance(body, str):
        raise BadMessage(f"{what}: body must be bytes or text")
    if len(body) > BODY_MAX:
        raise BadMessage(f"{what}: body is over {BODY_MAX} characters")
    try:
        obj = json.loads(body, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        # ValueError covers bad JSON, NaN/Infinity and integers too long to read
        raise BadMessage(f"{what}: body is not valid JSON") from None
    if not isinstance(obj, dict):
        raise BadMessage(f"{what}: body must be a JSON object")
    return obj


def _only(obj: dict, allowed: set[str], optional: set[str], what: str) -> None:
    missing = sorted(allowed - optional - obj.keys())
    if missing:
        raise BadMessage(f"{what}: {missing[0]} is missing")
    extra = sorted(k for k in obj if k not in allowed)
    if extra:
        raise BadMessage(f"{what}: unknown field {extra[0][:40]!r}")


def _mapping(value: Any, what: str) -> dict:
    if not isinstance(value, dict) or not all(is_pool_name(k) for k in value):
        raise BadMessage(f"{what} must be an object keyed by app names (1-{NAME_MAX} letters, digits, '_', '-')")
    return value


def _count(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= NUMBER_MAX:
        raise BadMessage(f"{what} must be a whole number from 0 to {NUMBER_MAX}")
    return value


def _pool_name(obj: dict, key: str) -> str:
    value = obj.get(key)
    if not is_pool_name(value):
        raise BadMessage(f"{key} must be 1-{NAME_MAX} letters, digits, '_' or '-'")
    return value


def _node(obj: dict) -> str:
    if not is_node_name(obj.get("node")):
        raise BadMessage("node must be a node name")
    return obj["node"]
