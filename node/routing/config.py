"""The `routing:` section of a node config (node/routing/): mode, rules, link monitor, costs, damping."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from node.errors import ConfigError
from node.names import NODE_NAME_RULE, is_node_name
from node.routing.rules import RuleError, parse_rules

ROUTING_MODES = ("static", "dynamic")


def min_window(z: float) -> int:
    """The smallest latency window in which the z-test can drop anything: floor(z^2) + 2.

    With the population sd no sample of n lies more than sqrt(n - 1) sd from the mean (Samuelson's bound),
    so |x - mean| / sd > z needs n - 1 > z^2; a smaller window would never drop an outlier. The sample sd
    would not help: it is larger, so it rejects even less.
    """
    return math.floor(z * z) + 2


@dataclass
class ProbeLinkConfig:
    """Per-neighbour probe settings (routing.monitor.links.<neighbour>)."""
    interval: float = 0.0          # seconds between probes on this link; 0 = the monitor's interval
    probe: bool = True             # false: never probe this link (it keeps one quantum of cost)


@dataclass
class MonitorConfig:
    """The link monitor (node/routing/monitor.py): UDP probes to every neighbour."""
    # None: on with routing.mode dynamic, off with static
    enabled: bool | None = field(default=None, metadata={"optional": bool})
    interval: float = 1.0          # seconds between probes per link
    window: int = 8                # latency samples the z-test looks at; at least min_window(z)
    z: float = 2.0                 # |x - mean| / population sd above this is an outlier (none when sd = 0)
    alpha: float = 0.5             # EMA weight of the newest window mean
    # Loss = lost / settled over the last loss_window probes, not lost / total since the start: a link
    # that got better must stop paying for losses it no longer has.
    loss_window: int = 32
    timeout: float = 0.0           # seconds before an unanswered probe counts as lost; 0 = max(3 intervals, 1 s)
    links: dict[str, ProbeLinkConfig] = field(default_factory=dict, metadata={
        "map_of": ProbeLinkConfig, "error": "must be a mapping of neighbour -> {interval, probe}."})

    def validate(self, neighbours: dict[str, str]) -> None:
        if self.interval <= 0 or self.timeout < 0:
            raise ConfigError("routing.monitor.interval must be positive and timeout not negative.")
        if self.loss_window < 1:
            raise ConfigError("routing.monitor.loss_window must be at least 1.")
        if self.z <= 0 or not 0.0 < self.alpha <= 1.0:
            raise ConfigError("routing.monitor.z must be positive and alpha in (0, 1].")
        if self.window < min_window(self.z):
            raise ConfigError(f"routing.monitor.window must be at least floor(z^2) + 2 = {min_window(self.z)} at "
                              f"z = {self.z:g} (got {self.window}): in a smaller window the z-test can never "
                              "drop a sample.")
        for peer, link in self.links.items():
            if peer not in neighbours:
                raise ConfigError(f"routing.monitor.links.{peer}: {peer!r} is not a neighbour.")
            if link.interval < 0:
                raise ConfigError(f"routing.monitor.links.{peer}.interval must not be negative.")

    def interval_for(self, peer: str) -> float | None:
        """Seconds between probes to `peer`, or None when that link is not probed."""
        link = self.links.get(peer)
        if link is not None and not link.probe:
            return None
        return link.interval if link is not None and link.interval > 0 else self.interval


@dataclass
class CostConfig:
    """cost = a + b*latency_ms + c*loss + d*jitter_ms, rounded to `quantum`, published past `threshold`."""
    a: float = 0.0
    b: float = 1.0
    c: float = 1000.0
    d: float = 1.0
    quantum: float = 1.0           # a cost is a multiple of this (measured costs are never exactly equal)
    threshold: float = 0.1         # publish when the cost moved more than this fraction of the last published

    def validate(self) -> None:
        if min(self.a, self.b, self.c, self.d) < 0 or self.quantum <= 0 or self.threshold < 0:
            raise ConfigError("routing.cost coefficients and threshold must not be negative, quantum positive.")


@dataclass
class DampingConfig:
    """Route flap damping per link (RFC 2439's shape, time constants in seconds)."""
    enabled: bool = True
    # Added per flap, as RFC 2439 charges per flap: a withdrawal, a return, or a cost change that reverses
    # the direction of the link's previous change. Not per cost change: the monitor smooths, so one move
    # of a link to a new level is several published steps in one direction, and charging each would
    # suppress a link that merely got slower once.
    penalty: float = 1000.0
    suppress: float = 2000.0       # above this the link is suppressed (held at its worst cost)
    reuse: float = 750.0           # below this a suppressed link is used at its current cost again
    half_life: float = 15.0        # seconds for the penalty to halve
    max_suppress: float = 60.0     # a link is never held longer than this

    def validate(self) -> None:
        if not 0 < self.reuse < self.suppress or self.penalty <= 0:
            raise ConfigError("routing.damping needs 0 < reuse < suppress and a positive penalty.")
        if self.half_life <= 0 or self.max_suppress <= 0:
            raise ConfigError("routing.damping.half_life and max_suppress must be positive.")


@dataclass
class RoutingConfig:
    """How this node picks next hops (node/routing/). Rules come first, then the table."""
    mode: str = "static"           # static: the `routes` table; dynamic: link state + shortest paths
    nodes: list[str] = field(default_factory=list)   # every node of the network (sizes buffer classes)
    # a route moves only to a path cheaper by this fraction; an exact tie keeps the current next hop
    hysteresis: float = 0.1
    refresh: float = 300.0         # seconds between re-adverts of an unchanged link state
    max_age: float = 900.0         # seconds after which a node's advert is dropped unless refreshed
    rules: list = field(default_factory=list,             # see node/routing/rules.py
                        metadata={"raw": True, "error": "must be a list of rules."})
    monitor: MonitorConfig = field(default_factory=MonitorConfig)
    cost: CostConfig = field(default_factory=CostConfig)
    damping: DampingConfig = field(default_factory=DampingConfig)

    @property
    def monitoring(self) -> bool:
        return self.monitor.enabled if self.monitor.enabled is not None else self.mode == "dynamic"

    @property
    def settle(self) -> float:
        """Seconds of the start-up settle window, in which exact cost ties still go to the natural-order first hop
        (node/routing/selector.py): two full latency windows on the slowest probed link, for the first
        measurements to replace the one-quantum placeholder costs and reach every node."""
        if not self.monitoring:
            return 0.0      # every link costs one quantum from the start: nothing to settle
        intervals = [self.monitor.interval_for(peer) for peer in self.monitor.links]
        slowest = max([self.monitor.interval, *(i for i in intervals if i is not None)])
        return 2 * self.monitor.window * slowest

    def validate(self, node: Any) -> None:
        """`node`: the core NodeConfig (its name and neighbours)."""
        neighbours = node.neighbours
        if self.mode not in ROUTING_MODES:
            raise ConfigError(f"routing.mode {self.mode!r} is not one of {', '.join(ROUTING_MODES)}.")
        bad = [n for n in self.nodes if not is_node_name(n)]
        if bad:
            raise ConfigError(f"routing.nodes: {bad[0]!r} is not a valid node name ({NODE_NAME_RULE}).")
        if not 0.0 <= self.hysteresis < 1.0:
            raise ConfigError("routing.hysteresis must be in [0, 1).")
        if self.refresh <= 0 or self.max_age <= self.refresh:
            raise ConfigError("routing.refresh must be positive and max_age longer than refresh.")
        self.monitor.validate(neighbours)
        self.cost.validate()
        self.damping.validate()
        try:
            parse_rules(self.rules, neighbours)
        except RuleError as exc:
            raise ConfigError(f"routing.rules: {exc}") from None
