"""The `broker:` section of a node config (node/broker/)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from node.errors import ConfigError


@dataclass
class BrokerConfig:
    """The publish/subscribe broker (node/broker/)."""
    enabled: bool = True
    max_hops: int = 32             # brokers a publication may pass before it is dropped (loops end here)
    refresh: float = 600.0         # seconds between re-sends of this node's unchanged interest record
    max_age: float = 3600.0        # seconds after which an interest record nobody refreshed is dropped
    window: int = 256              # durable deliveries a client may have unacknowledged (its default)
    live_buffer: int = 1024        # publications waiting for a non-durable client before they are dropped
    live_queue: int = 4096         # publication frames waiting for one neighbour before they are dropped
    live_memory: int = 200_000     # (publication, target) pairs remembered for the non-durable path
    # durable subscriptions one user token may own at this node (the admin's are not counted): each one keeps
    # what matches it in the spool until it is removed, so a user must not make them without end
    max_durable_per_user: int = 64

    def validate(self, node: Any) -> None:
        for key in ("max_hops", "window", "live_buffer", "live_queue", "live_memory"):
            if getattr(self, key) < 1:
                raise ConfigError(f"broker.{key} must be at least 1.")
        if self.max_durable_per_user < 0:
            raise ConfigError("broker.max_durable_per_user must be at least 0.")
        if self.refresh <= 0 or self.max_age <= self.refresh:
            raise ConfigError("broker.refresh must be positive and max_age longer than refresh.")
