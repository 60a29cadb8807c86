"""The `rate:` section of a node config (node/rate/): MQ rate control's role and parameters."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from node.errors import ConfigError


RATE_ROLES = ("", "client", "root")
RATE_POLICIES = ("decile", "decile_plus_one", "backlog", "fixed")


@dataclass
class RateConfig:
    """MQ rate control between client queues and a root queue (node/rate/); role "" = off."""
    role: str = ""                 # "client" or "root"
    root: str = ""                 # client: the root's node name (an MTA neighbour, not necessarily link-adjacent)
    clients: list[str] = field(default_factory=list)    # the root's clients (its MTA neighbours); N = len(clients)
    rate_bps: float = 1_000_000.0  # R: the root's drain rate in bits/s of payload; the clients' rates sum to it
    interval: float = 2.0          # T: seconds between the root's allocation rounds
    policy: str = "decile"         # root: decile (the paper's), decile_plus_one, backlog, fixed (control off: R/N)
    queue_limit: int = 1_000_000   # bytes: a client's queue (submissions refused above it), the root's "not now"
    consumer: str = ""             # root: the user whose mailbox is the root queue
    burst: int = 10_000            # client: token bucket depth in bytes (at least one message should fit)
    retry: float = 0.25            # root: seconds a client waits before offering a refused ("not now") piece again

    def validate(self, node: Any) -> None:
        """`node`: the core NodeConfig (its name and neighbours)."""
        name, neighbours = node.name, node.neighbours
        if self.role not in RATE_ROLES:
            raise ConfigError(f"rate.role {self.role!r} is not one of client, root.")
        if not self.role:
            return
        if self.policy not in RATE_POLICIES:
            raise ConfigError(f"rate.policy {self.policy!r} is not one of {', '.join(RATE_POLICIES)}.")
        if not (self.rate_bps > 0 and self.interval > 0 and self.retry > 0):
            raise ConfigError("rate.rate_bps, rate.interval and rate.retry must be positive.")
        if self.queue_limit < 1 or self.burst < 1:
            raise ConfigError("rate.queue_limit and rate.burst must be at least 1 byte.")
        if not self.clients or len(set(self.clients)) != len(self.clients):
            raise ConfigError("rate.clients: name every client of the root once (N = their number, R/N each "
                              "without control).")
        if self.role == "client":
            if self.root not in neighbours:
                raise ConfigError(f"rate.root {self.root!r} must be one of {name}'s neighbours.")
            if name not in self.clients:
                raise ConfigError(f"rate.clients must include this client ({name}).")
        if self.role == "root":
            for c in self.clients:
                if c not in neighbours:
                    raise ConfigError(f"rate.clients: {c!r} is not one of {name}'s neighbours.")
            if not self.consumer:
                raise ConfigError("rate.consumer: a root needs the user whose mailbox is its queue.")
