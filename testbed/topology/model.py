"""The network model: what the testbed builds, independent of how (runtime, shaper).

Generators produce a Topology; the address plan adds interfaces, subnets and
routes; runtimes and shapers realise it. All times are seconds, rates bits per
second, probabilities 0..1.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

LOSS_MODEL = "loss_model"       # the scenario's key for Direction.gilbert


@dataclass
class GilbertElliott:
    """Two-state burst loss: p = P(good->bad), r = P(bad->good), loss in each state."""

    p: float
    r: float
    loss_good: float = 0.0
    loss_bad: float = 1.0

    def to_dict(self) -> dict[str, float]:
        return {"p": self.p, "r": self.r, "loss_good": self.loss_good, "loss_bad": self.loss_bad}


@dataclass
class Direction:
    """Impairments of one direction of a link."""

    delay: float = 0.0
    jitter: float = 0.0
    loss: float = 0.0                       # random (Bernoulli) loss probability
    gilbert: GilbertElliott | None = None   # burst loss; when set, replaces `loss`
    duplicate: float = 0.0
    reorder: bool = False                   # jitter may reorder packets only when True
    rate: float | None = None               # bits per second; None = unlimited
    queue: int = 1000                       # packets waiting for the rate limiter; tail drop beyond
    # "full" or "half": a property of the whole link (one transmitter shared by both directions), kept on
    # each direction so that it travels with link_defaults and overrides; the scenario parser keeps the
    # two directions of a link equal and the shapers refuse a link whose directions disagree.
    duplex: str = "full"

    # One plain form, two spellings of the burst-loss model: the field name `gilbert` (a dict or None)
    # in topology.json, `testbed status --json`, the saved network state and events; the scenario
    # file's `loss_model` ("random" or {type: gilbert, p, r, loss_good, loss_bad}) in scenarios.

    def to_dict(self) -> dict[str, Any]:
        """Field name -> value (seconds, bit/s, probabilities; gilbert as a dict or None)."""
        out = dict(vars(self))      # flat: much cheaper than asdict() at thousands of links
        out["gilbert"] = self.gilbert.to_dict() if self.gilbert is not None else None
        return out

    @classmethod
    def from_dict(cls, plain: dict[str, Any]) -> "Direction":
        """The inverse of to_dict; missing keys keep their defaults."""
        fields_ = dict(plain)
        if fields_.get("gilbert"):
            fields_["gilbert"] = GilbertElliott(**fields_["gilbert"])
        return cls(**fields_)

    def to_scenario(self) -> dict[str, Any]:
        """The scenario file's spelling of to_dict: `loss_model` in the place of `gilbert`."""
        return {(LOSS_MODEL if k == "gilbert" else k): (_loss_model_plain(self.gilbert) if k == "gilbert" else v)
                for k, v in vars(self).items()}

    @staticmethod
    def fields_from_scenario(plain: dict[str, Any]) -> dict[str, Any]:
        """Some keys in to_scenario's form (a fault's link_set params) as Direction field values."""
        out = {k: v for k, v in plain.items() if k != LOSS_MODEL}
        if LOSS_MODEL in plain:
            model = plain[LOSS_MODEL]
            out["gilbert"] = (GilbertElliott(**{k: v for k, v in model.items() if k != "type"})
                              if isinstance(model, dict) else None)       # "random": plain Bernoulli loss
        return out


def _loss_model_plain(g: GilbertElliott | None) -> str | dict[str, Any]:
    return "random" if g is None else {"type": "gilbert", **g.to_dict()}


@dataclass
class Link:
    """A point-to-point link between two nodes. `a_to_b` shapes frames sent by a."""

    a: str
    b: str
    a_to_b: Direction = field(default_factory=Direction)
    b_to_a: Direction = field(default_factory=Direction)
    name: str = ""                          # defaults to "a-b"
    up: bool = True

    def __post_init__(self) -> None:
        if not self.name:
            self.name = f"{self.a}-{self.b}"

    def ends(self) -> tuple[str, str]:
        return (self.a, self.b)


@dataclass
class Lan:
    """Hosts on one shared segment through a Linux bridge (star/cluster 'lan' form)."""

    name: str
    members: list[str]
    params: Direction = field(default_factory=Direction)


@dataclass
class Node:
    name: str
    role: str = "host"                      # host, hub, gateway, broker ... (informational)
    attrs: dict = field(default_factory=dict)


@dataclass
class Topology:
    name: str
    nodes: list[Node] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    lans: list[Lan] = field(default_factory=list)

    def node_names(self) -> list[str]:
        return [n.name for n in self.nodes]

    def link(self, a: str, b: str) -> Link:
        for link in self.links:
            if {link.a, link.b} == {a, b}:
                return link
        raise KeyError(f"no link between {a} and {b}")

    def delay_edges(self) -> dict[str, list[tuple[str, float]]]:
        """host -> [(next host, one-way delay from host to it)], links then LANs, in topology order."""
        out: dict[str, list[tuple[str, float]]] = {n: [] for n in self.node_names()}
        for link in self.links:
            out[link.a].append((link.b, link.a_to_b.delay))
            out[link.b].append((link.a, link.b_to_a.delay))
        for lan in self.lans:
            for u in lan.members:
                out[u] += [(v, lan.params.delay) for v in lan.members if v != u]
        return out

    def neighbours(self, name: str) -> list[str]:
        out = [l.b for l in self.links if l.a == name] + [l.a for l in self.links if l.b == name]
        for lan in self.lans:
            if name in lan.members:
                out += [m for m in lan.members if m != name]
        return out


@dataclass
class Interface:
    node: str
    ifname: str          # name inside the host, e.g. "eth1"
    address: str         # CIDR, e.g. "10.200.0.1/30"
    link: str            # link or LAN name; "mgmt" for the management interface


@dataclass
class Route:
    destination: str     # CIDR
    via: str             # next-hop address
    dev: str             # interface name inside the host


@dataclass
class AddressPlan:
    """Interfaces, addresses and kernel routes for every node (computed, not configured)."""

    interfaces: dict[str, list[Interface]] = field(default_factory=dict)
    routes: dict[str, list[Route]] = field(default_factory=dict)
    mgmt_address: dict[str, str] = field(default_factory=dict)   # node -> address (no prefix)
    mgmt_subnet: str = ""
    loopback: dict[str, str] = field(default_factory=dict)       # node -> stable data-plane address
