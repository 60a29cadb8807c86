"""The state of a running network, kept so later processes (the CLI) can find and change it.

The state lives in the run's registry record (`state`): runtime, shaper and its
own reattach state, network namespaces, the run directory; the big part
(topology, address plan, link state, partitions) is a compact file beside the
record. This module only stores and finds that state; `Network.attach` (in
testbed/network.py, which writes it) turns it back into a Network, so a
`testbed link` call in another shell applies its change through the shaper's
reattach state and writes the state back. Changes are serialised with a lock
file so two CLI calls cannot lose each other's update.

`testbed up` registers its run with kind "up"; that is "the running network"
the CLI commands act on (API users and tests use other kinds and never clash).
"""
from __future__ import annotations

import fcntl
import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from testbed import registry
from node.errors import UserError
from testbed.topology.model import AddressPlan, Direction, Interface, Lan, Link, Node, Route, Topology

UP_KIND = "up"
DEFAULT_MGMT_PORT = 7001        # the node daemon's mgmt_listen port unless the run records another


def state_path(run_id: str) -> Path:
    """The big part of the state (topology, plan): its own compact file beside the registry record."""
    return registry.REGISTRY_DIR / f"{registry.prefix(run_id)}.state.json"


def save(run_id: str, state: dict[str, Any], big: dict[str, Any], ready: bool | None = None) -> None:
    """Write `big` (topology, plan, link state, partitions) to the state file and merge `state` into the
    run's registry record. A None `shaper_state` keeps the recorded one: a process that cannot reach
    the shaper must not erase how others reattach to it."""
    rec = registry.load(run_id)
    if rec is None:
        return          # torn down meanwhile
    path = state_path(run_id)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(big, separators=(",", ":")))    # compact: the C encoder, fast at 100 hosts
    tmp.replace(path)
    merged = dict(rec.state)
    merged.update(state)
    if state.get("shaper_state") is None:
        merged["shaper_state"] = rec.state.get("shaper_state")
    merged["state_file"] = str(path)
    if ready is not None:
        merged["ready"] = ready
    rec.state = merged
    registry.save(rec)


def load_state(record: registry.RunRecord) -> dict[str, Any]:
    """The registry state merged with the big state file."""
    st = dict(record.state)
    try:
        st.update(json.loads(state_path(record.run_id).read_text()))
    except (FileNotFoundError, json.JSONDecodeError):
        raise UserError(f"the state of network {record.run_id} is missing; it may be shutting down.") from None
    return st


def running(kind: str = UP_KIND) -> list[registry.RunRecord]:
    """Live runs of this kind (normally zero or one `testbed up`)."""
    return [r for r in registry.all_runs() if r.kind == kind and registry.pid_alive(r.owner_pid)]


def current(kind: str = UP_KIND) -> registry.RunRecord:
    runs = running(kind)
    if not runs:
        raise UserError("no network is up (start one with `testbed up SCENARIO`).")
    if len(runs) > 1:
        raise UserError("more than one network is up: " + ", ".join(r.run_id for r in runs) + ".")
    if not runs[0].state.get("ready"):
        raise UserError(f"network {runs[0].run_id} is still being built; try again in a moment.")
    return runs[0]


@contextmanager
def locked(run_id: str) -> Iterator[None]:
    registry.REGISTRY_DIR.mkdir(parents=True, exist_ok=True)
    path = registry.REGISTRY_DIR / f"{registry.prefix(run_id)}.lock"
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def topology_from_dict(d: dict[str, Any]) -> Topology:
    return Topology(
        name=d["name"],
        nodes=[Node(**n) for n in d["nodes"]],
        links=[Link(a=l["a"], b=l["b"], a_to_b=Direction.from_dict(l["a_to_b"]),
                    b_to_a=Direction.from_dict(l["b_to_a"]), name=l["name"], up=l["up"]) for l in d["links"]],
        lans=[Lan(name=x["name"], members=x["members"], params=Direction.from_dict(x["params"]))
              for x in d.get("lans", [])],
    )


def topology_to_dict(t: Topology) -> dict[str, Any]:
    return {"name": t.name,
            "nodes": [{"name": n.name, "role": n.role, "attrs": dict(n.attrs)} for n in t.nodes],
            "links": [{"a": l.a, "b": l.b, "name": l.name, "up": l.up, "a_to_b": l.a_to_b.to_dict(),
                       "b_to_a": l.b_to_a.to_dict()} for l in t.links],
            "lans": [{"name": x.name, "members": list(x.members), "params": x.params.to_dict()} for x in t.lans]}


def plan_to_dict(plan: AddressPlan) -> dict[str, Any]:
    # Interfaces and routes are flat: vars() is much cheaper than asdict() for tens of thousands of routes.
    return {"interfaces": {n: [dict(vars(i)) for i in v] for n, v in plan.interfaces.items()},
            "routes": {n: [dict(vars(r)) for r in v] for n, v in plan.routes.items()},
            "mgmt_address": dict(plan.mgmt_address), "mgmt_subnet": plan.mgmt_subnet, "loopback": dict(plan.loopback)}


def plan_from_dict(d: dict[str, Any]) -> AddressPlan:
    return AddressPlan(
        interfaces={n: [Interface(**i) for i in v] for n, v in d["interfaces"].items()},
        routes={n: [Route(**r) for r in v] for n, v in d["routes"].items()},
        mgmt_address=dict(d["mgmt_address"]), mgmt_subnet=d.get("mgmt_subnet", ""),
        loopback=dict(d.get("loopback", {})),
    )


def mgmt_address(node: str) -> str:
    """HOST:PORT of a node's management service in the running `testbed up` network (for `testbed send`)."""
    rec = current()
    addr = load_state(rec).get("plan", {}).get("mgmt_address", {}).get(node)
    if not addr:
        raise UserError(f"no node named {node!r} in the running network {rec.run_id}.")
    port = int(rec.state.get("mgmt_port", os.environ.get("WANBED_MGMT_PORT", DEFAULT_MGMT_PORT)))
    return f"{addr.split('/')[0]}:{port}"
