"""The replicated pool state and the pure function that applies one command to it.

Every controller replica applies the same commands in the same (Raft log) order, so `apply` must be a pure,
deterministic function of (state, command): it never mutates its input, never reads a clock or a random
source, and breaks every tie by name in natural order (node/natural.py: PS2 before PS10).

The state is one JSON-able dict:
  term         Raft term of the leader that proposed the last applied command (a new leader's first command,
               `office`, changes nothing else)
  version      map version, +1 for every applied command that changes apps, consumers or connections
  apps         Application Map: app -> {algorithm, move_share, default_load, types, instances: {instance ->
               {node, state: active | leaving}}}
  consumers    Consumer Map: consumer -> {node, types}
  connections  Pooled Connection Map: consumer -> {app -> instance}; a consumer with no connection has no entry
  load         consumer -> {app -> events/s}, the EWMA each consumer reports (a `load` command)
A consumer is interested in an app when their event types intersect. A "leaving" instance gets no new
connection and drains; the connections it holds move away at once, unless no instance of the app is active
(then they stay, so that events keep a place to go).

Algorithms, chosen per app:
  round_robin  (Algorithm 1) full reallocation on every change of the app's pool: the interested consumers in
               natural order are dealt to the active instances in natural order (consumer i -> instance i mod M).
  load_aware   (Algorithm 2) moves only what a change calls for. The load of a connection is its consumer's
               reported rate for the app; a connection with no report yet counts as the app's `default_load`
               (1.0 unless the app says otherwise), so that before any report arrives the spreading is even,
               as with round robin. The load of an instance is the sum over its connections.
               - a consumer without a connection (new, or its instance gone, crashed or leaving) goes to the
                 least loaded active instance, heaviest connection first;
               - an instance joins: it pulls k connections, where k = move_share * (its shortfall against an
                 even split of the app's connections, n/M - what it holds), rounded half up; each pull takes
                 the heaviest connection of the most loaded other instance. The paper moves "a configurable
                 percentage" of the heaviest connections; reading it against the whole app would hand the
                 newcomer half of everything at move_share 0.5 and starve the others, so the share applies to
                 what the newcomer lacks;
               - a consumer leaves: the instance that lost its connection pulls the same way (its shortfall
                 is often below one connection, and then nothing moves).
A Move is one changed (consumer, app) pair: old None is a new connection, new None a dropped one.
"""
from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass
from typing import Any, Callable

from node.names import is_node_name
from node.natural import natural_key

ROUND_ROBIN = "round_robin"
LOAD_AWARE = "load_aware"
ALGORITHMS = (ROUND_ROBIN, LOAD_AWARE)
ACTIVE = "active"
LEAVING = "leaving"
DEFAULT_LOAD = 1.0
NUMBER_MAX = 2 ** 53            # numbers in commands stay exact as floats and in any JSON reader
NAME_MAX = 64
# apps, instances, consumers and event types become topic tokens (pool.<app>.<instance>.<consumer>.<type>)
_NAME = re.compile(rf"[A-Za-z0-9_-]{{1,{NAME_MAX}}}")


class BadCommand(ValueError):
    """A malformed or inapplicable command; the state is left as it was."""


@dataclass(frozen=True)
class Move:
    consumer: str
    app: str
    old: str | None
    new: str | None

    @property
    def moved(self) -> bool:
        """True for a connection taken from one instance to another (the disruption the metrics count)."""
        return self.old is not None and self.new is not None


def is_pool_name(name: object) -> bool:
    return isinstance(name, str) and _NAME.fullmatch(name) is not None


def empty_state() -> dict:
    return {"term": 0, "version": 0, "apps": {}, "consumers": {}, "connections": {}, "load": {}}


def apply(state: dict, command: dict) -> tuple[dict, list[Move]]:
    """The state after `command`, and the moves it made. Raises BadCommand, changing nothing."""
    if not isinstance(command, dict):
        raise BadCommand("a command is a JSON object")
    op = command.get("op")
    handler = _OPS.get(op) if isinstance(op, str) else None
    if handler is None:
        raise BadCommand(f"unknown op {op!r}")
    term = command.get("term")
    if term is not None:
        if not _is_int(term) or term < 0:
            raise BadCommand(f"term must be a whole number >= 0, not {term!r}")
        if term < state["term"]:
            # log order never lowers the term: a lower one comes from a deposed leader
            raise BadCommand(f"stale term {term} < {state['term']}")
    new = copy.deepcopy(state)
    handler(new, command)
    if term is not None:
        new["term"] = term
    if any(new[key] != state[key] for key in ("apps", "consumers", "connections")):
        new["version"] = state["version"] + 1
    return new, _moves(state["connections"], new["connections"])


# --- read-only helpers ------------------------------------------------------------------------------------

def interested(state: dict, consumer: str) -> list[str]:
    """The apps whose event types meet the consumer's, in natural order."""
    types = set(state["consumers"][consumer]["types"])
    return sorted((a for a, rec in state["apps"].items() if types.intersection(rec["types"])), key=natural_key)


def instance_loads(state: dict, app: str) -> dict[str, float]:
    """Load of every existing instance of `app` (sum of its connections' loads)."""
    loads = {i: 0.0 for i in state["apps"][app]["instances"]}
    for consumer, inst in _connected(state, app).items():
        if inst in loads:
            loads[inst] += _conn_load(state, consumer, app)
    return loads


def balance(state: dict, app: str) -> float:
    """max/mean of the active instances' loads (1.0: perfectly even, or nothing to balance)."""
    active = _active(state, app)
    loads = instance_loads(state, app)
    values = [loads[i] for i in active]
    mean = sum(values) / len(values) if values else 0.0
    return max(values) / mean if mean > 0 else 1.0


def check_invariants(state: dict) -> list[str]:
    """Every broken invariant, one line each (empty: all hold)."""
    problems: list[str] = []
    apps, consumers = state["apps"], state["consumers"]
    for consumer, conns in state["connections"].items():
        if consumer not in consumers:
            problems.append(f"unknown consumer {consumer} has connections")
            continue
        wanted = set(interested(state, consumer))
        for app, inst in conns.items():
            if app not in apps:
                problems.append(f"{consumer} is connected to unknown app {app}")
            elif inst not in apps[app]["instances"]:
                problems.append(f"{consumer} is connected to unknown instance {inst} of {app}")
            elif app not in wanted:
                problems.append(f"{consumer} is connected to {app}, which wants none of its events")
    for app in apps:
        if not _active(state, app):
            continue
        instances = apps[app]["instances"]
        for consumer in _interested_consumers(state, app):
            inst = state["connections"].get(consumer, {}).get(app)
            if inst is None:
                problems.append(f"{consumer} is not connected to {app}, which has an active instance")
            elif inst in instances and instances[inst]["state"] != ACTIVE:
                problems.append(f"{consumer} is still connected to {app}'s leaving instance {inst}")
    for consumer, rates in state["load"].items():
        for app in rates:
            if consumer not in consumers or app not in apps or app not in interested(state, consumer):
                problems.append(f"load is recorded for {consumer} and {app}, which are not a pair")
    return problems


# --- commands ---------------------------------------------------------------------------------------------

def _define_app(st: dict, cmd: dict) -> None:
    app = _name(cmd, "app")
    algorithm = cmd.get("algorithm")
    if algorithm not in ALGORITHMS:
        raise BadCommand(f"algorithm must be one of {', '.join(ALGORITHMS)}, not {algorithm!r}")
    share = cmd.get("move_share")
    if not _is_number(share) or not 0 < share <= 1:
        raise BadCommand(f"move_share must be in (0, 1], not {share!r}")
    default_load = cmd.get("default_load", DEFAULT_LOAD)
    if not _is_number(default_load) or default_load <= 0:
        raise BadCommand(f"default_load must be a number > 0, not {default_load!r}")
    types = _types(cmd)
    old = st["apps"].get(app)
    st["apps"][app] = {"algorithm": algorithm, "move_share": float(share), "default_load": float(default_load),
                       "types": types, "instances": old["instances"] if old else {}}
    _rebalance(st, app)


def _instance_join(st: dict, cmd: dict) -> None:
    app, inst = _app(st, cmd), _name(cmd, "instance")
    node = _node(cmd)
    if inst in st["apps"][app]["instances"]:
        raise BadCommand(f"instance {inst} of {app} exists already")
    st["apps"][app]["instances"][inst] = {"node": node, "state": ACTIVE}
    _rebalance(st, app)
    if _algorithm(st, app) == LOAD_AWARE:
        _pull(st, app, inst)


def _instance_leave(st: dict, cmd: dict) -> None:
    app, inst = _app(st, cmd), _instance(st, cmd)
    st["apps"][app]["instances"][inst]["state"] = LEAVING    # a second announcement changes nothing
    _rebalance(st, app)


def _instance_gone(st: dict, cmd: dict) -> None:
    app, inst = _app(st, cmd), _instance(st, cmd)
    if st["apps"][app]["instances"][inst]["state"] != LEAVING:
        raise BadCommand(f"instance {inst} of {app} is active: its leave is announced first")
    del st["apps"][app]["instances"][inst]
    _rebalance(st, app)


def _instance_crash(st: dict, cmd: dict) -> None:
    app, inst = _app(st, cmd), _instance(st, cmd)
    del st["apps"][app]["instances"][inst]
    _rebalance(st, app)


def _consumer_join(st: dict, cmd: dict) -> None:
    consumer, node, types = _name(cmd, "consumer"), _node(cmd), _types(cmd)
    before = set(interested(st, consumer)) if consumer in st["consumers"] else set()
    # a consumer registering again (say after a restart) with the same record changes nothing
    st["consumers"][consumer] = {"node": node, "types": types}
    for app in sorted(before | set(interested(st, consumer)), key=natural_key):
        _rebalance(st, app)


def _consumer_leave(st: dict, cmd: dict) -> None:
    consumer = _name(cmd, "consumer")
    if consumer not in st["consumers"]:
        raise BadCommand(f"unknown consumer {consumer}")
    lost = st["connections"].pop(consumer, {})
    st["load"].pop(consumer, None)
    del st["consumers"][consumer]
    for app in sorted(lost, key=natural_key):
        _rebalance(st, app)
        inst = lost[app]
        if _algorithm(st, app) == LOAD_AWARE and st["apps"][app]["instances"].get(inst, {}).get("state") == ACTIVE:
            _pull(st, app, inst)


def _load(st: dict, cmd: dict) -> None:
    consumer, app = _name(cmd, "consumer"), _app(st, cmd)
    if consumer not in st["consumers"]:
        raise BadCommand(f"unknown consumer {consumer}")
    if app not in interested(st, consumer):
        raise BadCommand(f"{app} wants none of {consumer}'s events")
    rate = cmd.get("rate")
    if not _is_number(rate) or rate < 0:
        raise BadCommand(f"rate must be a number >= 0, not {rate!r}")
    st["load"].setdefault(consumer, {})[app] = float(rate)


def _office(st: dict, cmd: dict) -> None:
    """A new leader's first command: it changes nothing but the term (apply sets it), so that once it is applied
    every command committed before the leader's term is applied too."""


_OPS: dict[str, Callable[[dict, dict], None]] = {
    "office": _office, "define_app": _define_app, "instance_join": _instance_join, "instance_leave": _instance_leave,
    "instance_gone": _instance_gone, "instance_crash": _instance_crash, "consumer_join": _consumer_join,
    "consumer_leave": _consumer_leave, "load": _load,
}


# --- allocation -------------------------------------------------------------------------------------------

def _rebalance(st: dict, app: str) -> None:
    """Bring `app`'s connections in line with its pool after a change (the algorithm's common part)."""
    _drop_stale(st, app)
    active = _active(st, app)
    if not active:
        return                      # nowhere to go: connections to leaving instances stay
    if _algorithm(st, app) == ROUND_ROBIN:
        for i, consumer in enumerate(_interested_consumers(st, app)):
            _connect(st, consumer, app, active[i % len(active)])
        return
    instances = st["apps"][app]["instances"]
    connected = _connected(st, app)
    homeless = [c for c in _interested_consumers(st, app)
                if c not in connected or instances[connected[c]]["state"] != ACTIVE]
    loads = instance_loads(st, app)
    for consumer in sorted(homeless, key=lambda c: (-_conn_load(st, c, app), natural_key(c))):
        dest = min(active, key=lambda i: (loads[i], natural_key(i)))
        old = connected.get(consumer)
        if old is not None:
            loads[old] -= _conn_load(st, consumer, app)
        loads[dest] += _conn_load(st, consumer, app)
        _connect(st, consumer, app, dest)


def _pull(st: dict, app: str, dest: str) -> None:
    """Load-aware: `dest` takes move_share of its shortfall against an even split, heaviest first."""
    active = _active(st, app)
    connected = _connected(st, app)
    have = sum(1 for inst in connected.values() if inst == dest)
    k = _round_half_up(st["apps"][app]["move_share"] * max(0.0, len(connected) / len(active) - have))
    for _ in range(k):
        connected = _connected(st, app)
        loads = instance_loads(st, app)
        sources = [i for i in active if i != dest and any(inst == i for inst in connected.values())]
        if not sources:
            return
        src = min(sources, key=lambda i: (-loads[i], natural_key(i)))
        consumer = min((c for c, inst in connected.items() if inst == src),
                       key=lambda c: (-_conn_load(st, c, app), natural_key(c)))
        _connect(st, consumer, app, dest)


def _drop_stale(st: dict, app: str) -> None:
    """Drop connections to instances that no longer exist and of consumers no longer interested."""
    instances = st["apps"][app]["instances"]
    wanted = set(_interested_consumers(st, app))
    for consumer in list(st["connections"]):
        conns = st["connections"][consumer]
        if app in conns and (consumer not in wanted or conns[app] not in instances):
            del conns[app]
            if not conns:
                del st["connections"][consumer]
    for consumer in list(st["load"]):
        if consumer not in wanted and app in st["load"][consumer]:
            del st["load"][consumer][app]
            if not st["load"][consumer]:
                del st["load"][consumer]


def _connect(st: dict, consumer: str, app: str, inst: str) -> None:
    st["connections"].setdefault(consumer, {})[app] = inst


def _moves(before: dict, after: dict) -> list[Move]:
    pairs = {(c, a) for side in (before, after) for c, conns in side.items() for a in conns}
    out = []
    for consumer, app in sorted(pairs, key=lambda p: (natural_key(p[1]), natural_key(p[0]))):
        old, new = before.get(consumer, {}).get(app), after.get(consumer, {}).get(app)
        if old != new:
            out.append(Move(consumer, app, old, new))
    return out


def _round_half_up(x: float) -> int:
    # half up, not Python's half-to-even: 1.5 -> 2 and 2.5 -> 3; the epsilon absorbs float noise (0.5 * 3 / 1)
    return int(math.floor(x + 0.5 + 1e-9))


def _active(st: dict, app: str) -> list[str]:
    return sorted((i for i, rec in st["apps"][app]["instances"].items() if rec["state"] == ACTIVE), key=natural_key)


def _interested_consumers(st: dict, app: str) -> list[str]:
    types = set(st["apps"][app]["types"])
    return sorted((c for c, rec in st["consumers"].items() if types.intersection(rec["types"])), key=natural_key)


def _connected(st: dict, app: str) -> dict[str, str]:
    return {c: conns[app] for c, conns in st["connections"].items() if app in conns}


def _conn_load(st: dict, consumer: str, app: str) -> float:
    return st["load"].get(consumer, {}).get(app, st["apps"][app].get("default_load", DEFAULT_LOAD))


def _algorithm(st: dict, app: str) -> str:
    return st["apps"][app]["algorithm"]


# --- command fields ---------------------------------------------------------------------------------------

def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x: Any) -> bool:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return False
    # an int too big for a float would overflow in isfinite and in float()
    return abs(x) <= NUMBER_MAX if isinstance(x, int) else math.isfinite(x)


def _name(cmd: dict, key: str) -> str:
    value = cmd.get(key)
    if not is_pool_name(value):
        raise BadCommand(f"{key} must be 1-{NAME_MAX} letters, digits, '_' or '-', not {value!r}")
    return value


def _node(cmd: dict) -> str:
    node = cmd.get("node")
    if not is_node_name(node):
        raise BadCommand(f"node must be a node name, not {node!r}")
    return node


def _types(cmd: dict) -> list[str]:
    types = cmd.get("types")
    if not isinstance(types, list) or not types or not all(is_pool_name(t) for t in types):
        raise BadCommand(f"types must be a non-empty list of event type names, not {types!r}")
    return sorted(set(types), key=natural_key)


def _app(st: dict, cmd: dict) -> str:
    app = _name(cmd, "app")
    if app not in st["apps"]:
        raise BadCommand(f"unknown app {app}")
    return app


def _instance(st: dict, cmd: dict) -> str:
    inst = _name(cmd, "instance")
    if inst not in st["apps"][cmd["app"]]["instances"]:
        raise BadCommand(f"unknown instance {inst} of {cmd['app']}")
    return inst
