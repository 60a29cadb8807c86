"""The `gateway` section: gateway policies at one node (connectors, users, the γ loop).

    gateway:
      node: gw                      # the gateway: a host with a node daemon
      gamma: 1.0                    # [-1, 1]: >0 throttle towards delivery guarantee, <0 drop towards utilisation
      threshold: 200                # messages queued for one outgoing connector: the event
      lower: 150                    # actions are undone below it (default 3/4 of threshold); below threshold
      period: 1s                    # the policy manager's tick
      settle: 5s                    # how long a problem must persist after an action before the next one
      escalate: 0.1                 # the threshold rises by this fraction every escalate_after ...
      escalate_after: 60s           # ... while the problem persists ("10%" works too)
      actions: [deactivate_lb, throttle, drop]    # any subset ([] = no action); the order of use is fixed
      move_queued: false            # deactivate_lb also moves the copies already queued for the connector
      drop_order: [expired, priority, random, newest]   # or oldest
      outgoing:                     # outgoing connectors: MTA neighbours of the gateway node
        o1: {rate: 1}               # messages per second (0 or absent: unpaced)
      incoming:                     # incoming connectors, by name: a neighbour or a local submitting user
        s1: {neighbour: s1, throughput: 3}    # throughput: messages per second (absent: unlimited)
        in1: {user: in1, throughput: 5}
      users:                        # throughput: messages per second the user may submit (absent: unlimited)
        alice: {credits: 1000, locked_until: 600s, permit: [o1, o2], deny: [], priority: 1, throughput: 2}

`locked_until` is a model-time offset ("600s", or a bare number of seconds) counted from when the run's node
configs are written, just before the daemons start (so it includes the warm-up), or an ISO-8601 time
("2026-11-27T10:00:00Z"; without a zone it is UTC). The node's config gets UNIX epoch seconds
(testbed/subsystems/gateway.py). Durations are model seconds and rates messages per model second
(time_scale applies); counts (threshold, lower, credits) are not scaled.
"""
from __future__ import annotations

import datetime
import math
from dataclasses import dataclass, field
from typing import Any

from node.names import is_user_name
from testbed import units
from testbed.scenario.checks import MISSING, Check, KeyPath, names_text, show
from testbed.scenario.sections.base import Scenario, Section
from testbed.topology import overlay
from testbed.topology.model import Topology

PER_SECOND = "messages per second"          # what a connector rate or throughput is

ACTIONS = ("deactivate_lb", "throttle", "drop")
DROP_POLICIES = ("expired", "priority", "random", "newest", "oldest")
DROP_ORDER = ("expired", "priority", "random", "newest")     # the default order
KEYS = ("node", "gamma", "threshold", "lower", "period", "settle", "escalate", "escalate_after", "actions",
        "move_queued", "drop_order", "outgoing", "incoming", "users")
USER_KEYS = ("credits", "locked_until", "permit", "deny", "priority", "throughput")
LOWER_SHARE = 0.75          # the lower threshold when none is given: the contract's 150 for 200
USER_RULE = "letters, digits, '_.-'"


@dataclass
class OutgoingSpec:
    rate: float = 0.0                    # messages per (model) second; 0: unpaced


@dataclass
class IncomingSpec:
    neighbour: str = ""                  # exactly one of neighbour / user
    user: str = ""
    throughput: float | None = None      # messages per (model) second; None: unlimited


@dataclass
class UserSpec:
    credits: int | None = None           # None: unlimited
    locked_for: float | None = None      # locked for this long (model s) from the run's start; or:
    locked_at: str | None = None         # locked until this ISO-8601 time (as the file wrote it)
    permit: list[str] | None = None      # None: every connector
    deny: list[str] = field(default_factory=list)
    priority: int = 1                    # lower is dropped first
    throughput: float | None = None      # messages per (model) second it may submit; None: unlimited


@dataclass
class GatewaySpec:
    """Gateway policies (node/gateway/) at `node`; values in model units until time_scale converts them."""
    node: str = ""                       # "" = no gateway in this scenario
    gamma: float = 0.0
    threshold: int = 200                 # messages
    lower: int = 150                     # messages
    period: float = 1.0                  # seconds
    settle: float = 5.0                  # seconds
    escalate: float = 0.1                # a fraction
    escalate_after: float = 60.0         # seconds
    actions: list[str] = field(default_factory=lambda: list(ACTIONS))
    move_queued: bool = False
    drop_order: list[str] = field(default_factory=lambda: list(DROP_ORDER))
    outgoing: dict[str, OutgoingSpec] = field(default_factory=dict)
    incoming: dict[str, IncomingSpec] = field(default_factory=dict)
    users: dict[str, UserSpec] = field(default_factory=dict)

    @property
    def enabled(self) -> bool:
        return bool(self.node)


def iso_epoch(text: str) -> float | None:
    """UNIX epoch seconds of an ISO-8601 time (UTC when it names no zone); None when it is not one."""
    try:
        when = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return when.timestamp()


def _read(c: Check, raw: Any, s: Scenario) -> None:
    if raw is MISSING or raw is None:
        s.gateway = GatewaySpec()
        return
    p: KeyPath = ("gateway",)
    m = c.mapping(p, raw, KEYS)
    out = GatewaySpec()
    if "node" not in m:
        c.fail(p, "missing: the gateway section needs 'node' (the host that runs the gateway)")
    out.node = c.text(p + ("node",), m["node"])
    out.gamma = c.number(p + ("gamma",), m.get("gamma", out.gamma))
    if not -1.0 <= out.gamma <= 1.0:
        c.fail(p + ("gamma",), f"expected a number from -1 to 1, got {show(m['gamma'])}")
    out.threshold = c.integer(p + ("threshold",), m.get("threshold", out.threshold), low=1)
    out.lower = c.integer(p + ("lower",), m.get("lower", int(out.threshold * LOWER_SHARE)), low=0)
    if out.lower >= out.threshold:
        key = "lower" if "lower" in m else "threshold"
        c.fail(p + (key,), f"the lower threshold ({out.lower}) must be below the threshold ({out.threshold}): "
                           f"actions are undone once the queue falls below it")
    for key in ("period", "settle", "escalate_after"):
        setattr(out, key, c.unit(p + (key,), m.get(key, getattr(out, key)), units.parse_duration, positive=True))
    out.escalate = c.share(p + ("escalate",), m.get("escalate", out.escalate))
    out.actions = _subset(c, p + ("actions",), m.get("actions", out.actions), ACTIONS, "action")
    out.move_queued = c.boolean(p + ("move_queued",), m.get("move_queued", out.move_queued))
    out.drop_order = _subset(c, p + ("drop_order",), m.get("drop_order", out.drop_order), DROP_POLICIES,
                             "drop policy")
    for name, entry in c.mapping(p + ("outgoing",), m.get("outgoing")).items():
        op = p + ("outgoing", name)
        e = c.mapping(op, entry, ("rate",))
        out.outgoing[str(name)] = OutgoingSpec(rate=c.not_negative(op + ("rate",), e.get("rate", 0.0), PER_SECOND))
    for name, entry in c.mapping(p + ("incoming",), m.get("incoming")).items():
        out.incoming[str(name)] = _incoming(c, p + ("incoming", name), name, entry)
    for name, entry in c.mapping(p + ("users",), m.get("users")).items():
        out.users[str(name)] = _user(c, p + ("users", name), name, entry)
    s.gateway = out


def _incoming(c: Check, ip: KeyPath, name: Any, raw: Any) -> IncomingSpec:
    if not is_user_name(name):
        c.fail(ip, f"{show(name)} is not a valid connector name ({USER_RULE})")
    e = c.mapping(ip, raw, ("neighbour", "user", "throughput"))
    given = [k for k in ("neighbour", "user") if e.get(k) not in (None, "")]
    if len(given) != 1:
        c.fail(ip, "expected exactly one of 'neighbour' (a node it receives from) or 'user' (a local "
                   f"submitting user), got {' and '.join(given) or 'neither'}")
    out = IncomingSpec()
    key = given[0]
    setattr(out, key, c.text(ip + (key,), e[key]))
    if key == "user" and not is_user_name(out.user):
        c.fail(ip + ("user",), f"{show(out.user)} is not a valid user name ({USER_RULE})")
    if e.get("throughput") is not None:
        out.throughput = c.not_negative(ip + ("throughput",), e["throughput"], PER_SECOND)
    return out


def _user(c: Check, up: KeyPath, name: Any, raw: Any) -> UserSpec:
    if not is_user_name(name):
        c.fail(up, f"{show(name)} is not a valid user name ({USER_RULE})")
    e = c.mapping(up, raw, USER_KEYS)
    out = UserSpec()
    if e.get("credits") is not None:
        out.credits = c.integer(up + ("credits",), e["credits"], low=0)
    if e.get("locked_until") not in (None, ""):
        _locked(c, up + ("locked_until",), e["locked_until"], out)
    if e.get("permit") is not None:
        out.permit = _names(c, up + ("permit",), e["permit"])
    out.deny = _names(c, up + ("deny",), e.get("deny"))
    out.priority = c.integer(up + ("priority",), e.get("priority", out.priority))
    if e.get("throughput") is not None:
        out.throughput = c.not_negative(up + ("throughput",), e["throughput"], PER_SECOND)
    return out


def _locked(c: Check, lp: KeyPath, value: Any, out: UserSpec) -> None:
    """A model-time offset (a duration) or an ISO-8601 time."""
    expected = 'expected a time: an offset from the run start like "600s" or an ISO-8601 time like ' \
               '"2026-11-27T10:00:00Z"'
    if isinstance(value, datetime.datetime):       # YAML reads an unquoted timestamp as one
        value = value.isoformat()
    if isinstance(value, datetime.date):
        c.fail(lp, f"{expected}, got the date {value.isoformat()} (give a time of day)")
    if isinstance(value, str) and iso_epoch(value) is not None:
        out.locked_at = value.strip()
        return
    try:
        out.locked_for = float(units.parse_duration(value))
    except units.UnitError:
        c.fail(lp, f"{expected}, got {show(value)}")


def _names(c: Check, path: KeyPath, raw: Any) -> list[str]:
    items = [raw] if isinstance(raw, str) else c.sequence(path, raw)
    return [c.text(path + (i,), x) for i, x in enumerate(items)]


def _subset(c: Check, path: KeyPath, raw: Any, allowed: tuple[str, ...], what: str) -> list[str]:
    items = c.sequence(path, raw)
    for i, x in enumerate(items):
        if x not in allowed:
            c.fail(path + (i,), f"unknown {what} {show(x)} (expected one of: {', '.join(allowed)})")
        if x in items[:i]:
            c.fail(path + (i,), f"{show(x)} is listed twice")
    return list(items)


def _check(c: Check, raw: Any, s: Scenario, topo: Topology) -> None:
    """Every connector is an MTA neighbour of the gateway node, and that node runs a daemon."""
    gw = s.gateway
    if not gw.enabled:
        return
    p: KeyPath = ("gateway",)
    daemons = overlay.daemon_hosts(s.nodes, topo.node_names())
    if gw.node not in daemons:
        c.fail(p + ("node",), f"{show(gw.node)} is not a host with a node daemon (hosts: {names_text(daemons)})")
    near = sorted(overlay.mta_topology(topo, s.nodes).neighbours(gw.node))

    def connector(path: KeyPath, name: str) -> None:
        if name in near:
            return
        if name in topo.node_names() and name not in daemons:
            c.fail(path, f"{show(name)} runs no node daemon, so it is no connector of {gw.node} (its MTA "
                         f"neighbours: {names_text(near)})")
        c.fail(path, f"{show(name)} is not an MTA neighbour of the gateway {gw.node} (its MTA neighbours: "
                     f"{names_text(near)})")

    for name in gw.outgoing:
        connector(p + ("outgoing", name), name)
    for name, inc in gw.incoming.items():
        if inc.neighbour:
            connector(p + ("incoming", name, "neighbour"), inc.neighbour)
    for name, user in gw.users.items():
        for key in ("permit", "deny"):
            for i, target in enumerate(getattr(user, key) or ()):
                connector(p + ("users", name, key, i), target)


def _plain(s: Scenario) -> Any:
    gw = s.gateway
    if not gw.enabled:
        return None
    users: dict[str, Any] = {}
    for name, u in gw.users.items():
        entry: dict[str, Any] = {"credits": u.credits, "deny": list(u.deny), "priority": u.priority}
        if u.locked_for is not None or u.locked_at is not None:
            entry["locked_until"] = u.locked_at if u.locked_at is not None else u.locked_for
        if u.permit is not None:
            entry["permit"] = list(u.permit)
        if u.throughput is not None:
            entry["throughput"] = u.throughput
        users[name] = entry
    return {"node": gw.node, "gamma": gw.gamma, "threshold": gw.threshold, "lower": gw.lower,
            "period": gw.period, "settle": gw.settle, "escalate": gw.escalate, "escalate_after": gw.escalate_after,
            "actions": list(gw.actions), "move_queued": gw.move_queued, "drop_order": list(gw.drop_order),
            "outgoing": {n: {"rate": o.rate} for n, o in gw.outgoing.items()},
            "incoming": {n: ({"neighbour": i.neighbour} if i.neighbour else {"user": i.user})
                         | {"throughput": i.throughput} for n, i in gw.incoming.items()},
            "users": users}


def wall_epoch(user: UserSpec, start: float) -> float | None:
    """When the user's lock ends, in UNIX epoch seconds, for a run whose configs are written at `start` (epoch
    s); `locked_for` is already in wall seconds here (time_scale applied)."""
    if user.locked_at is not None:
        return iso_epoch(user.locked_at)
    if user.locked_for is not None and math.isfinite(user.locked_for):
        return start + user.locked_for
    return None


GATEWAY = Section("gateway", read=_read, check=_check, plain=_plain, needs=("nodes",), default=GatewaySpec)
