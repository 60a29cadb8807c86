"""The contract every link-shaping backend implements.

A backend creates the two interfaces of a point-to-point link directly inside
the hosts' network namespaces (named netns; the Docker runtime registers its
containers' namespaces under a name too), applies per-direction impairments,
and removes everything it made on close(). Addresses and routes are not its
business: the network layer assigns them after add_link().
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

from node.errors import UserError
from testbed.topology.model import Direction


@dataclass(frozen=True)
class LinkEnd:
    netns: str        # named network namespace (ip netns) of the host
    ifname: str       # interface name to create inside it, e.g. "eth1"


@dataclass
class DirectionCounters:
    packets: int = 0
    bytes: int = 0
    dropped_loss: int = 0
    dropped_queue: int = 0
    dropped_down: int = 0
    duplicated: int = 0


def link_duplex(link_id: str, a_to_b: Direction, b_to_a: Direction) -> str:
    """The link's duplex ("full" or "half"); one transmitter cannot be half-duplex for one direction only."""
    if a_to_b.duplex != b_to_a.duplex:
        raise UserError(f"link {link_id}: duplex is {a_to_b.duplex} a->b but {b_to_a.duplex} b->a; "
                        f"it belongs to the whole link and must be the same both ways.")
    if a_to_b.duplex not in ("full", "half"):
        raise UserError(f"link {link_id}: duplex must be full or half, got {a_to_b.duplex!r}.")
    return a_to_b.duplex


class Shaper(ABC):
    """One instance per running network; holds every link it created."""

    name: str = ""

    @abstractmethod
    def add_link(self, link_id: str, a: LinkEnd, b: LinkEnd, a_to_b: Direction, b_to_a: Direction,
                 pcap: Path | None = None) -> None:
        """Create the link's two interfaces (up, unaddressed) and start shaping.

        Both directions carry the link's duplex (link_duplex()); it is fixed for the link's lifetime:
        set_params() does not change it."""

    @abstractmethod
    def set_params(self, link_id: str, a_to_b: Direction | None, b_to_a: Direction | None) -> None:
        """Change impairments at run time; None leaves that direction unchanged."""

    @abstractmethod
    def set_carrier(self, link_id: str, up: bool) -> None:
        """Link down drops everything in both directions; up restores it."""

    @abstractmethod
    def counters(self, link_id: str) -> tuple[DirectionCounters, DirectionCounters]:
        """(a_to_b, b_to_a) counters since the link was created."""

    def counters_all(self) -> dict[str, tuple[DirectionCounters, DirectionCounters]]:
        """Every link's (a_to_b, b_to_a) counters in one batched read (the links.jsonl sampler calls this every
        second). Backends override it with a single request; this fallback asks link by link."""
        return {link_id: self.counters(link_id) for link_id in list(getattr(self, "links", {}))}

    def state(self) -> dict:
        """JSON-serialisable state from which testbed.shaping.attach() rebuilds this shaper in another process."""
        return {}

    @abstractmethod
    def close(self) -> None:
        """Remove every interface and process this shaper created. Idempotent."""
