"""The `gateway:` section of a node config (node/gateway/): connectors, users, the selector gamma and its policy.

Every value is in wall units (seconds, messages per wall second): the testbed converts a scenario's model units.
An absent section, or `enabled: false`, is no gateway.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from node.errors import ConfigError
from node.names import is_user_name

ACTIONS = ("deactivate_lb", "throttle", "drop")
DROP_POLICIES = ("expired", "priority", "random", "newest", "oldest")
USER_RULE = "up to 64 letters, digits, '_', '.' or '-', starting with a letter or digit"


@dataclass
class OutgoingConfig:
    """An outgoing connector: an MTA neighbour of the gateway."""
    rate: float = 0.0          # messages per second paced at the link scheduler; 0: unpaced


@dataclass
class IncomingConfig:
    """An incoming connector: a neighbour the gateway receives from, or a local user submitting."""
    neighbour: str = ""
    user: str = ""
    throughput: float | None = field(default=None, metadata={"optional": (int, float)})    # msg/s; null: unlimited


@dataclass
class UserConfig:
    """An EMG user (the token's caller under security.auth, else a submission's originator)."""
    credits: int | None = field(default=None, metadata={"optional": int})       # null: unlimited
    locked_until: Any = field(default=None, metadata={"optional": (int, float, str, datetime)})  # epoch s or ISO
    permit: list[str] | None = field(default=None, metadata={"optional": list})  # null: every connector
    deny: list[str] = field(default_factory=list)
    priority: int = 1                          # the drop policy `priority` drops lower ones first
    throughput: float | None = field(default=None, metadata={"optional": (int, float)})    # msg/s; null: unlimited

    @property
    def locked_ts(self) -> float:
        """locked_until as epoch seconds (0: not locked); validate() has checked it."""
        return locked_until("", self.locked_until)

    def allows(self, connector: str) -> bool:
        return connector not in self.deny and (self.permit is None or connector in self.permit)


@dataclass
class GatewayConfig:
    """EMG's gateway policies (node/gateway/): the selector gamma between utilisation (-1) and delivery
    guarantee (1), turned into actions when an outgoing connector's queue grows."""
    enabled: bool = False
    gamma: float = 0.0
    threshold: int = 200           # messages queued for one outgoing connector: the event
    lower: int = 150               # actions are undone below it (hysteresis)
    period: float = 1.0            # s: the policy manager's tick
    settle: float = 5.0            # s a problem must persist after the first action before the next one
    escalate: float = 0.1          # the threshold rises by this fraction every escalate_after while throttled
    escalate_after: float = 60.0   # s
    actions: list[str] = field(default_factory=lambda: list(ACTIONS))
    move_queued: bool = False      # deactivate_lb also moves the copies already queued for the connector
    drop_order: list[str] = field(default_factory=lambda: ["expired", "priority", "random", "newest"])
    outgoing: dict[str, OutgoingConfig] = field(default_factory=dict, metadata={
        "map_of": OutgoingConfig, "error": "must be a mapping of neighbour -> {rate}."})
    incoming: dict[str, IncomingConfig] = field(default_factory=dict, metadata={
        "map_of": IncomingConfig, "error": "must be a mapping of name -> {neighbour or user, throughput}."})
    users: dict[str, UserConfig] = field(default_factory=dict, metadata={
        "map_of": UserConfig, "error": "must be a mapping of user -> {credits, locked_until, permit, deny, "
                                       "priority, throughput}."})

    def validate(self, node: Any) -> None:
        """`node`: the core NodeConfig (its name and neighbours)."""
        if not self.enabled:
            return
        neighbours = node.neighbours
        if not (math.isfinite(self.gamma) and -1.0 <= self.gamma <= 1.0):
            raise ConfigError(f"gateway.gamma must be between -1 and 1, got {self.gamma!r}.")
        if self.threshold < 1 or self.lower < 0:
            raise ConfigError("gateway.threshold must be at least 1 and gateway.lower not negative.")
        if self.lower >= self.threshold:
            raise ConfigError(f"gateway.lower ({self.lower}) must be below gateway.threshold ({self.threshold}).")
        for key in ("period", "settle", "escalate_after"):
            v = getattr(self, key)
            if not (math.isfinite(v) and v > 0):
                raise ConfigError(f"gateway.{key} must be a positive number of seconds, got {v!r}.")
        if not (math.isfinite(self.escalate) and self.escalate >= 0):
            raise ConfigError(f"gateway.escalate must be a fraction of at least 0, got {self.escalate!r}.")
        for a in self.actions:
            if a not in ACTIONS:
                raise ConfigError(f"gateway.actions: unknown action {a!r} (known: {', '.join(ACTIONS)}).")
        for d in self.drop_order:
            if d not in DROP_POLICIES:
                raise ConfigError(f"gateway.drop_order: unknown drop policy {d!r} "
                                  f"(known: {', '.join(DROP_POLICIES)}).")
        for name, out in self.outgoing.items():
            if name not in neighbours:
                raise ConfigError(f"gateway.outgoing.{name}: {name!r} is not a neighbour of {node.name}.")
            _rate(f"gateway.outgoing.{name}.rate", out.rate)
        for name, inc in self.incoming.items():
            where = f"gateway.incoming.{name}"
            if bool(inc.neighbour) == bool(inc.user):
                raise ConfigError(f"{where}: give exactly one of neighbour or user.")
            if inc.neighbour and inc.neighbour not in neighbours:
                raise ConfigError(f"{where}.neighbour: {inc.neighbour!r} is not a neighbour of {node.name}.")
            if inc.user and not is_user_name(inc.user):
                raise ConfigError(f"{where}.user: {inc.user!r} is not a valid user name ({USER_RULE}).")
            _rate(f"{where}.throughput", inc.throughput)
        for name, user in self.users.items():
            where = f"gateway.users.{name}"
            if not is_user_name(name):
                raise ConfigError(f"gateway.users: {name!r} is not a valid user name ({USER_RULE}).")
            if user.credits is not None and (isinstance(user.credits, bool) or user.credits < 0):
                raise ConfigError(f"{where}.credits must be a whole number of at least 0 or null, "
                                  f"got {user.credits!r}.")
            if isinstance(user.priority, bool):
                raise ConfigError(f"{where}.priority must be an integer.")
            _rate(f"{where}.throughput", user.throughput)
            locked_until(where, user.locked_until)
            for key in ("permit", "deny"):
                listed = getattr(user, key) or []
                for c in listed:
                    if not isinstance(c, str) or c not in neighbours:
                        raise ConfigError(f"{where}.{key}: {c!r} is not a neighbour of {node.name}.")

    def incoming_for_neighbour(self, peer: str) -> str | None:
        return next((n for n, c in self.incoming.items() if c.neighbour == peer), None)

    def incoming_for_user(self, user: str) -> str | None:
        return next((n for n, c in self.incoming.items() if c.user and c.user == user), None)


def _rate(key: str, v: Any) -> None:
    if v is None:
        return
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise ConfigError(f"{key} must be a number of messages per second of at least 0, got {v!r}.")


def locked_until(where: str, v: Any) -> float:
    """LOCKEDUNTIL as epoch seconds (0: not locked): a number, or an ISO 8601 time (UTC when it names no zone)."""
    if v is None:
        return 0.0
    if isinstance(v, bool):
        raise ConfigError(f"{where}.locked_until must be a time (epoch seconds or ISO 8601), got {v!r}.")
    if isinstance(v, (int, float)):
        if not math.isfinite(v):
            raise ConfigError(f"{where}.locked_until must be a time (epoch seconds or ISO 8601), got {v!r}.")
        return float(v)
    if isinstance(v, datetime):         # YAML reads an unquoted ISO time as one
        return (v if v.tzinfo else v.replace(tzinfo=timezone.utc)).timestamp()
    try:
        t = datetime.fromisoformat(v)
    except ValueError:
        raise ConfigError(f"{where}.locked_until must be a time (epoch seconds or ISO 8601), got {v!r}.") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    return t.timestamp()
