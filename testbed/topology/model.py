"""The network model: what the testbed builds, independent of how (runtime, shaper).

Generators produce a Topology; the address plan adds interfaces, subnets and
routes; runtimes and shapers realise it. All times are seconds, rates bits per
second, probabilities 0..1.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class GilbertElliott:
    """Two-state burst loss: p = P(good->bad), r = P(bad->good), loss in each state."""

    p: float
    r: float
    loss_good: float = 0.0
    loss_bad: float = 1.0


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
