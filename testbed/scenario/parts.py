"""The typed values of a scenario's sections: one dataclass (or a few) per section.

The loader's sections (testbed/scenario/sections/) fill them; the Scenario that holds them is built from the
sections registry in testbed/scenario/spec.py, which also re-exports these names for its callers. Units after
loading: seconds, bits per second, bytes, probabilities 0..1; durations are *model* seconds.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from node.routing.config import CostConfig, DampingConfig, MonitorConfig, RoutingConfig
from testbed.topology.model import Direction


# --- topology -----------------------------------------------------------------

@dataclass
class LinkOverride:
    """Per-link impairments; `a`/`b` name the ends, directions may differ."""

    a: str
    b: str
    a_to_b: Direction | None = None      # None: link_defaults
    b_to_a: Direction | None = None


@dataclass
class TopologySpec:
    # star | cluster | clusters | ring | linear | cdnnet15 | intercontinental6 | grid | tree | explicit
    generator: str = "linear"
    params: dict[str, Any] = field(default_factory=dict)     # generator parameters (n, k, rows, ...)
    nodes: list[str] = field(default_factory=list)           # explicit only
    links: list[LinkOverride] = field(default_factory=list)  # explicit only: the edge list
    data_pool: str = "10.200.0.0/16"     # point-to-point link subnets
    loopback_pool: str = "10.202.0.0/16" # one stable /32 per host
    mgmt_pool: str = "10.201.0.0/16"     # the unimpaired management network


@dataclass
class CaptureSpec:
    links: list[str] | str = "none"      # "all", "none", or link names ("a-b")
    snaplen: int = 128                   # bytes kept per frame (headers; 0 = whole frame)


# --- nodes ----------------------------------------------------------------------

@dataclass
class NodesSpec:
    """Node daemon settings: `all` applies to every node, then per-node overrides.
    The keys are the node daemon's config keys (node/config.py validates them)."""

    all: dict[str, Any] = field(default_factory=dict)
    per_node: dict[str, dict[str, Any]] = field(default_factory=dict)

    def settings_for(self, node: str) -> dict[str, Any]:
        merged = dict(self.all)
        merged.update(self.per_node.get(node, {}))
        return merged


# --- workload -------------------------------------------------------------------

@dataclass
class Interarrival:
    # normal (mean, sd) | exponential (mean) | constant (mean) | piecewise (schedule)
    dist: str = "normal"
    mean: float = 50.0                   # model seconds
    sd: float | None = None              # normal only; default mean / 4
    # piecewise: [{"from": s, "to": s, "dist": ..., "mean": ...}, ...]; outside the
    # listed periods the top-level dist/mean apply (MQ paper's bursty period).
    schedule: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class SizeDist:
    # thesis (Table 6.1 mix, in fragments) | fixed (bytes) | empirical (file of sizes in bytes)
    dist: str = "thesis"
    bytes: int = 1000                    # fixed
    file: str = ""                       # empirical: one size per line
    fragment_size: int = 1000            # thesis: bytes per fragment when turning fragment counts into bytes


@dataclass
class RecipientChoice:
    choice: str = "uniform"              # uniform (over other nodes) | fixed | weighted
    nodes: list[str] = field(default_factory=list)           # fixed: one or more
    weights: dict[str, float] = field(default_factory=dict)  # weighted
    user: str = ""                       # the recipient user at each node ("" = none: the node's mailbox)


@dataclass
class PublishSpec:
    """A generator that publishes (node/broker/) instead of sending mail: on which topics."""
    topics: list[str] = field(default_factory=list)   # one drawn uniformly per publication; "{node}" = the publisher
    sources: int = 0                     # "{source}": one of the publisher's own `sources` (<node>-<k>), ...
    skew: float = 1.0                    # ... drawn Zipf-skewed: source k with weight 1 / k**skew


@dataclass
class Generator:
    """One message source pattern, applied to each node in `nodes`."""

    nodes: list[str] | str = "all"
    interarrival: Interarrival = field(default_factory=Interarrival)
    size: SizeDist = field(default_factory=SizeDist)
    recipients: RecipientChoice = field(default_factory=RecipientChoice)
    priority: int = 1
    start: float = 0.0                   # model seconds after the workload begins
    stop: float | None = None            # None: until the scenario's duration
    publish: PublishSpec | None = None   # set: the generator publishes on topics (no recipients)
    originator: str = ""                 # the submitting user ("" = none; with security.auth: on its token)


@dataclass
class ConsumerSpec:
    """The application draining the root queue: `messages` removed every `every` seconds (the paper's 25 per s)."""
    user: str = "app"
    messages: int = 25
    every: float = 1.0                   # seconds


@dataclass
class RateControlSpec:
    """MQ rate control (node/rate/): clients forwarding to one root at rates the root assigns."""
    root: str = ""                       # "" = no rate control in this scenario
    clients: list[str] = field(default_factory=list)
    rate: float = 1_000_000.0            # R, bit/s of payload
    interval: float = 2.0                # T, seconds between allocation rounds
    policy: str = "decile"               # decile | decile_plus_one | backlog | fixed
    control: bool = True                 # false: fixed R/N (the paper's comparison), whatever `policy` says
    client_queue: int = 1_000_000        # bytes
    root_queue: int = 4_000_000          # bytes: above it the root answers "not now"
    burst: int = 10_000                  # bytes: a client's token bucket depth
    consumer: ConsumerSpec = field(default_factory=ConsumerSpec)

    @property
    def enabled(self) -> bool:
        return bool(self.root)

    @property
    def rule(self) -> str:
        return self.policy if self.control else "fixed"


@dataclass
class SubscriptionSpec:
    """A subscriber client the testbed runs for the whole repetition (its receipts go to the run directory)."""
    node: str
    pattern: str
    name: str = ""                       # required for durable; default s<index> otherwise
    durable: bool = False


@dataclass
class WorkloadSpec:
    warmup: float = 0.0                  # model seconds before generators start
    drain: float = 60.0                  # max model seconds to wait for in-flight messages
    # model seconds without a delivery while copies are held = stalled (summary.json `stalled`; the drain stops)
    stall_after: float = 3600.0
    # model seconds after the generators start before the throughput window opens: a loaded warm-up, so the
    # window measures a network that is already carrying traffic, not one filling up from empty
    measure_from: float = 0.0
    generators: list[Generator] = field(default_factory=list)


# --- faults ---------------------------------------------------------------------

@dataclass
class Fault:
    """One timeline entry. `at` is model seconds after the workload begins.

    action: link_down | link_up | link_set | partition | heal | kill | restart | pause | resume
    target: link "a-b" (link_*; the loader stores the topology's own link name, swapping
            params["direction"] when the file named it "b-a"), node name (kill/restart/pause/resume), or [[side A], [side B]] (partition)
    params: for link_set, the new Direction fields (delay, jitter, loss, rate, ...) and optional
            "direction": "both" | "a_to_b" | "b_to_a" (values parsed: seconds, bit/s, fractions;
            loss_model as "random" or {type: gilbert, p, r, loss_good, loss_bad})
    """

    at: float
    action: str
    target: Any = None
    params: dict[str, Any] = field(default_factory=dict)


# --- routing --------------------------------------------------------------------

@dataclass(eq=False)
class RoutingSpec:
    """How the nodes route (the `routing:` section): the policy of their tables, and for `dynamic` the
    settings of the node's routing stack.

    A scenario may write just the policy: `routing: delay` means `routing: {policy: delay}`. So a
    RoutingSpec equals the policy name that would load as it (all other settings at their defaults),
    and `scenario.routing == "delay"` reads as in the file. Code that needs the policy itself reads
    `.policy`.

    The settings of the dynamic stack are the node config's own dataclasses (node/routing/config.py), so the
    defaults live in one place; only `monitor.links` differs: here it is keyed by topology link name
    ("n1-n2"), and the testbed turns each entry into per-neighbour settings at both ends. Times are
    model seconds like every scenario duration.
    """

    # auto | shortest | unidirectional | delay | dynamic (auto: shortest paths with a seeded random
    # tie-break, or delay for intercontinental6; unidirectional: one way round a ring; dynamic: link
    # state routing on measured costs, starting from the shortest-path tables)
    policy: str = "auto"
    monitor: MonitorConfig = field(default_factory=MonitorConfig)
    cost: CostConfig = field(default_factory=CostConfig)
    damping: DampingConfig = field(default_factory=DampingConfig)
    hysteresis: float = RoutingConfig.hysteresis     # a fraction
    refresh: float = RoutingConfig.refresh           # seconds
    max_age: float = RoutingConfig.max_age           # seconds

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            other = RoutingSpec(policy=other)
        if not isinstance(other, RoutingSpec):
            return NotImplemented
        return all(getattr(self, f.name) == getattr(other, f.name) for f in fields(self))

    __hash__ = None  # type: ignore[assignment]   # mutable, like the other specs

    @property
    def is_plain(self) -> bool:
        """True when every setting but the policy is at its default (the file could say just the name)."""
        return self == self.policy


# --- sweeps ---------------------------------------------------------------------

@dataclass
class SweepSpec:
    grid: dict[str, list[Any]] = field(default_factory=dict)  # dotted scenario key -> values
    reps: int = 1
    # grid points left out: a point matching every key: value of one entry is not run (e.g. the
    # non-fragmenting mode under several stream allocations it ignores)
    exclude: list[dict[str, Any]] = field(default_factory=list)
    # per_cell: each cell's repetitions get seeds of their own; per_rep: every cell of repetition k gets the
    # same seed, so the same workload (common random numbers: modes compared on the same messages)
    seeds: str = "per_cell"


# --- security --------------------------------------------------------------------

@dataclass
class SecuritySpec:
    tls: bool = False      # mTLS between the nodes, TLS on their management ports: a CA per run, a certificate per node
    auth: bool = False     # tokens per (node, user) and an admin token per node for Submit, Control and PubSub
    # the keys the scenario gave (`testbed up` turns on what it did not say; a run keeps the defaults above)
    given: tuple[str, ...] = field(default=(), compare=False)
