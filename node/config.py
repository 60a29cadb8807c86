"""Node configuration: dataclasses and the YAML loader (unknown keys are errors).

A node's config file (the testbed writes one per host; it can also be written by hand):

    name: n2                        # this node's name (required)
    data_listen: "10.0.0.2:7000"    # Link service (neighbour sessions) (required)
    data_listen_also: ["10.0.1.1:7000"]   # more addresses the Link service listens on (one per link, loopback)
    mgmt_listen: "0.0.0.0:7001"     # Submit and Control services (required); "unix:/path" also works
    neighbours: {n1: "10.0.0.1:7000", n3: "10.0.0.3:7000"}
    routes: {n4: n3, n5: n3}        # static next-hop table; neighbours route to themselves
    mode: fragmenting               # or non-fragmenting
    fragment_size: 1000             # F, bytes per fragment (fragmenting mode)
    wire_chunk: 65536               # bytes per frame in non-fragmenting mode (whole message stored per hop)
    spool: /var/lib/wanbed/n2.db    # SQLite file (WAL); default <records_dir>/spool.db
    records_dir: runs/x/nodes/n2    # submissions.jsonl, deliveries.jsonl, metrics.jsonl, node.log
    metrics_interval: 1.0           # seconds between metrics.jsonl lines
    default_lifetime: 3600          # seconds, when a submission gives none
    reassembly_timeout: 60          # seconds without a new fragment before a partial message is aborted
    control_token: ""               # when set, Control calls need metadata authorization=<token> (legacy)
    security: {tls: {cert: node.crt, key: node.key, ca: ca.crt},
               auth: {admin: <sha256 hex>, users: {alice: <sha256 hex>}}}
                                    # mTLS between nodes and client tokens; see SecurityConfig (absent = off)
    local_users: []                 # users with a mailbox here; empty accepts any user
    batch: {max_frames: 512, max_bytes: 1048576, min_bytes: 16384, target_delay: 0.02, commit_window: 0.002, max_commit: 4096, window_frames: 8192}
    session: {keepalive: 1.0, hold_time: 5.0, backoff_min: 0.1, backoff_max: 5.0}
    limits: {max_message_size: 67108864, max_frame_bytes: 1048576, max_recipients: 64, max_hops: 64,
             max_link_queue: 268435456}   # without resources: bytes queued per neighbour before "not now"
    resources: {buffer_classes: true, transit_buffers: 100, ...}   # issue 6; see ResourcesConfig (absent = off)
    routing: {mode: dynamic, nodes: [...], monitor: {...}, cost: {...}, damping: {...}, rules: [...]}
                                    # see RoutingConfig; absent = static routes only
    broker: {enabled: true, max_hops: 32, window: 256, live_buffer: 1024, ...}   # see BrokerConfig
    rate: {role: client, root: r1, queue_limit: 1000000}    # MQ rate control; see RateConfig (absent = off)

Which end dials: the node whose name sorts first dials its neighbour; the other
only accepts. So every pair has exactly one session and no tie-break is needed.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from node.errors import UserError
from node.names import NODE_NAME_RULE, is_node_name, is_user_name

MODES = ("fragmenting", "non-fragmenting")
_ADDR = re.compile(r"^(\[[0-9A-Fa-f:]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")


class ConfigError(UserError):
    """The node configuration is invalid."""


@dataclass
class BatchConfig:
    max_frames: int = 512          # frames per gRPC message on a Link stream
    # Payload bytes per gRPC message adapt to the link: about target_delay seconds of the acked rate,
    # between min_bytes and max_bytes. A hop stores (then forwards) a whole gRPC message of frames, so a
    # batch is the pipelining unit on slow links, while fast links need big batches for throughput.
    max_bytes: int = 1 << 20
    min_bytes: int = 16384
    # 0.02 s: on a 50 Mbit/s link 125 kB per message; 0.01 s cost ~15% more CPU per fragment on 2 cores
    # (bench/RESULTS.md, node 10MB over wire), while slow links are clamped to min_bytes either way.
    target_delay: float = 0.02
    commit_window: float = 0.002   # seconds the spool writer waits to gather more work into one fsync
    max_commit: int = 4096         # operations per transaction at most
    window_frames: int = 8192      # unacknowledged frames in flight per neighbour


@dataclass
class SessionConfig:
    keepalive: float = 1.0         # seconds between keepalives on an idle session
    hold_time: float = 5.0         # seconds without any frame before the session is declared dead
    backoff_min: float = 0.1       # first reconnect delay, doubled per failure
    backoff_max: float = 5.0


@dataclass
class LimitsConfig:
    max_message_size: int = 64 << 20
    max_frame_bytes: int = 1 << 20
    max_recipients: int = 64
    max_hops: int = 64
    # without `resources:`, bytes queued for one neighbour above which arrivals for it are refused "not now"
    # and submissions "congested" (issue 21: the queue must not grow with the spool)
    max_link_queue: int = 256 << 20
    max_priority: int = 15


@dataclass
class ResourcesConfig:
    """Issue-6 resource settings; key names are a fixed contract with the experiment runner.

    `enabled` is true as soon as the config has a `resources:` section (even an empty one) and false
    without it, so a plain network keeps the unmanaged behaviour (and speed) it always had; writing
    `enabled: false` inside the section switches management off explicitly.
    """
    enabled: bool = False                # see above: set by the loader when the section is present
    buffer_classes: bool = True          # false = single shared pool (store-and-forward deadlock possible)
    transit_buffers: int = 100           # per MTA, fragment units (non-fragmenting: largest-message units)
    # buffers each transit class starts with, in fragment units for both modes (the thesis' 100, Table 6.1's
    # text: enough for the largest message); 0 = transit_buffers split over the classes as above
    class_buffers: int = 0
    input_pool: int = 50                 # class 0 (submissions), fragment units
    class_min: int = 2
    adjust_every: int = 50               # buffer releases between expression-5.1 recomputations
    stream_allocation: int = 1           # max buffers per message stream per hop
    # fragments a message stream is served per round-robin turn of its link (its share against a
    # single-fragment message); 0 = half its allocation, the thesis' link scheduler (6.2.2), which Figs 6.8
    # and 6.9 vary
    stream_quantum: int = 1
    recipient_pool: int = 200            # fragment units
    recipient_single_share: float = 0.25
    removal_interval: float = 1.0        # seconds (mean); 0 = only real mailbox reads
    reservation_timeout: float = 60.0    # seconds
    rbsad: float = 0.0                   # mean allocation delay in seconds; 0 = off
    rbsad_probability: float = 0.1
    hybrid_window: int = 20
    user_hard_quota: int = 0             # fragments per user for single-recipient messages; 0 = no quota
    user_soft_limit: int = 0             # fragments per user in the shared pool (multi-recipient); 0 = none

    def validate(self) -> None:
        for key in ("transit_buffers", "input_pool", "class_min", "adjust_every",
                    "stream_allocation", "recipient_pool", "hybrid_window"):
            if getattr(self, key) < 1:
                raise ConfigError(f"resources.{key} must be at least 1.")
        for key in ("removal_interval", "rbsad", "user_hard_quota", "user_soft_limit", "stream_quantum",
                    "class_buffers"):
            if getattr(self, key) < 0:
                raise ConfigError(f"resources.{key} must not be negative.")
        if self.reservation_timeout <= 0:
            raise ConfigError("resources.reservation_timeout must be positive.")
        for key in ("recipient_single_share", "rbsad_probability"):
            if not 0.0 <= getattr(self, key) <= 1.0:
                raise ConfigError(f"resources.{key} must be between 0 and 1.")


@dataclass
class ProbeLinkConfig:
    """Per-neighbour probe settings (routing.monitor.links.<neighbour>)."""
    interval: float = 0.0          # seconds between probes on this link; 0 = the monitor's interval
    probe: bool = True             # false: never probe this link (it keeps one quantum of cost)


@dataclass
class MonitorConfig:
    """The link monitor (node/routing/monitor.py): UDP probes to every neighbour."""
    enabled: bool | None = None    # None: on with routing.mode dynamic, off with static
    interval: float = 1.0          # seconds between probes per link
    window: int = 8                # latency samples the z-test looks at
    z: float = 2.0                 # |x - mean| / sd above this is an outlier (none when sd = 0)
    alpha: float = 0.5             # EMA weight of the newest window mean
    loss_window: int = 32          # settled probes the loss fraction is taken over
    timeout: float = 0.0           # seconds before an unanswered probe counts as lost; 0 = max(3 intervals, 1 s)
    links: dict[str, ProbeLinkConfig] = field(default_factory=dict)

    def validate(self, neighbours: dict[str, str]) -> None:
        if self.interval <= 0 or self.timeout < 0:
            raise ConfigError("routing.monitor.interval must be positive and timeout not negative.")
        if self.window < 2 or self.loss_window < 1:
            raise ConfigError("routing.monitor.window must be at least 2 and loss_window at least 1.")
        if self.z <= 0 or not 0.0 < self.alpha <= 1.0:
            raise ConfigError("routing.monitor.z must be positive and alpha in (0, 1].")
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
    penalty: float = 1000.0        # added per change of the link's cost
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
    hysteresis: float = 0.1        # a route moves only to a path cheaper by this fraction
    refresh: float = 300.0         # seconds between re-adverts of an unchanged link state
    max_age: float = 900.0         # seconds after which a node's advert is dropped unless refreshed
    rules: list = field(default_factory=list)        # see node/routing/rules.py
    monitor: MonitorConfig = field(default_factory=MonitorConfig)
    cost: CostConfig = field(default_factory=CostConfig)
    damping: DampingConfig = field(default_factory=DampingConfig)

    @property
    def monitoring(self) -> bool:
        return self.monitor.enabled if self.monitor.enabled is not None else self.mode == "dynamic"

    def validate(self, name: str, neighbours: dict[str, str]) -> None:
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
        from node.routing.rules import RuleError, parse_rules    # here: rules import the routing package
        try:
            parse_rules(self.rules, neighbours)
        except RuleError as exc:
            raise ConfigError(f"routing.rules: {exc}") from None


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

    def validate(self) -> None:
        for key in ("max_hops", "window", "live_buffer", "live_queue", "live_memory"):
            if getattr(self, key) < 1:
                raise ConfigError(f"broker.{key} must be at least 1.")
        if self.refresh <= 0 or self.max_age <= self.refresh:
            raise ConfigError("broker.refresh must be positive and max_age longer than refresh.")


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

    def validate(self, name: str, neighbours: dict[str, str]) -> None:
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


@dataclass
class TlsConfig:
    """mTLS on the Link service (node/security/tls.py): PEM files, relative paths from records_dir.

    With a certificate the data port takes only clients with a certificate of `ca`, the dialler checks that the
    neighbour's certificate names the neighbour, and the acceptor that it names the node its OPEN claims."""
    cert: str = ""                 # this node's certificate (its DNS name is the node's name)
    key: str = ""                  # its private key
    ca: str = ""                   # the certificate authority every neighbour's certificate must come from

    @property
    def enabled(self) -> bool:
        return bool(self.cert)

    def validate(self) -> None:
        given = [k for k in ("cert", "key", "ca") if getattr(self, k)]
        if given and len(given) != 3:
            raise ConfigError("security.tls needs all of cert, key and ca (or none of them).")


_SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")


@dataclass
class AuthConfig:
    """Client tokens on the management services (node/security/tokens.py): SHA-256 hex digests only, so a
    config file never holds a token. With any digest set every Submit, Control and PubSub call needs one."""
    admin: str = ""                # the admin token's digest: every call, every mailbox
    users: dict[str, str] = field(default_factory=dict)    # user -> its token's digest: that user's mail only

    @property
    def enabled(self) -> bool:
        return bool(self.admin or self.users)

    def validate(self) -> None:
        for who, digest in [("admin", self.admin), *((f"users.{u}", d) for u, d in self.users.items())]:
            if (digest or who != "admin") and not _SHA256_HEX.match(digest):
                raise ConfigError(f"security.auth.{who} must be a SHA-256 hex digest (64 lowercase hex digits).")
        bad = [u for u in self.users if not is_user_name(u)]
        if bad:
            raise ConfigError(f"security.auth.users: {bad[0]!r} is not a valid user name.")


@dataclass
class SecurityConfig:
    tls: TlsConfig = field(default_factory=TlsConfig)
    auth: AuthConfig = field(default_factory=AuthConfig)

    def validate(self) -> None:
        self.tls.validate()
        self.auth.validate()


ROUTING_MODES = ("static", "dynamic")
# Sub-sections: a key of these dataclasses whose value is itself a section.
SECTIONS: dict[type, dict[str, type]] = {}


@dataclass
class NodeConfig:
    name: str
    data_listen: str
    mgmt_listen: str
    data_listen_also: list[str] = field(default_factory=list)
    neighbours: dict[str, str] = field(default_factory=dict)
    routes: dict[str, str] = field(default_factory=dict)
    mode: str = "fragmenting"
    fragment_size: int = 1000
    wire_chunk: int = 65536
    spool: str = ""
    records_dir: str = "."
    metrics_interval: float = 1.0
    default_lifetime: float = 3600.0
    reassembly_timeout: float = 60.0
    control_token: str = ""
    local_users: list[str] = field(default_factory=list)
    batch: BatchConfig = field(default_factory=BatchConfig)
    session: SessionConfig = field(default_factory=SessionConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    resources: ResourcesConfig = field(default_factory=ResourcesConfig)
    routing: RoutingConfig = field(default_factory=RoutingConfig)
    broker: BrokerConfig = field(default_factory=BrokerConfig)
    rate: RateConfig = field(default_factory=RateConfig)
    security: SecurityConfig = field(default_factory=SecurityConfig)

    @property
    def data_addresses(self) -> list[str]:
        """Every address the Link service listens on."""
        return [self.data_listen, *self.data_listen_also]

    def security_path(self, path: str) -> Path:
        """A security file's path: relative ones are in records_dir (the node's directory, also in a container)."""
        p = Path(path)
        return p if p.is_absolute() else Path(self.records_dir) / p

    @property
    def known_nodes(self) -> set[str]:
        """Every node this node knows of: itself, neighbours, route destinations and routing.nodes."""
        return {self.name, *self.neighbours, *self.routes, *self.routing.nodes}

    @property
    def spool_path(self) -> Path:
        return Path(self.spool) if self.spool else Path(self.records_dir) / "spool.db"

    @property
    def chunk_size(self) -> int:
        """Bytes per stored piece: F when fragmenting, the wire chunk otherwise."""
        return self.fragment_size if self.mode == "fragmenting" else self.wire_chunk

    def validate(self) -> None:
        if not is_node_name(self.name):
            raise ConfigError(f"node name {self.name!r} is not a valid name ({NODE_NAME_RULE}).")
        for key in ("data_listen", "mgmt_listen"):
            _check_addr(key, getattr(self, key))
        for i, addr in enumerate(self.data_listen_also):
            _check_addr(f"data_listen_also[{i}]", addr)
        for peer, addr in self.neighbours.items():
            if not is_node_name(peer) or peer == self.name:
                raise ConfigError(f"neighbour name {peer!r} is invalid (or is this node itself).")
            _check_addr(f"neighbours.{peer}", addr)
        for dst, hop in self.routes.items():
            if hop not in self.neighbours:
                raise ConfigError(f"route to {dst!r} goes via {hop!r}, which is not a neighbour.")
        if self.mode not in MODES:
            raise ConfigError(f"mode {self.mode!r} is not one of {', '.join(MODES)}.")
        if not (16 <= self.fragment_size <= self.limits.max_frame_bytes):
            raise ConfigError(f"fragment_size {self.fragment_size} must be between 16 and limits.max_frame_bytes.")
        if not (16 <= self.wire_chunk <= self.limits.max_frame_bytes):
            raise ConfigError(f"wire_chunk {self.wire_chunk} must be between 16 and limits.max_frame_bytes.")
        for key in ("metrics_interval", "default_lifetime", "reassembly_timeout"):
            if getattr(self, key) <= 0:
                raise ConfigError(f"{key} must be positive.")
        if self.session.hold_time <= self.session.keepalive:
            raise ConfigError("session.hold_time must be longer than session.keepalive.")
        if self.limits.max_link_queue < 1:
            raise ConfigError("limits.max_link_queue must be at least 1 byte.")
        if self.batch.max_frames < 1 or self.batch.window_frames < 1 or self.batch.max_commit < 1:
            raise ConfigError("batch sizes must be at least 1.")
        if not (1 <= self.batch.min_bytes <= self.batch.max_bytes) or self.batch.target_delay <= 0:
            raise ConfigError("batch needs 1 <= min_bytes <= max_bytes and a positive target_delay.")
        self.resources.validate()
        self.routing.validate(self.name, self.neighbours)
        self.broker.validate()
        self.rate.validate(self.name, self.neighbours)
        self.security.validate()


SECTIONS.update({
    NodeConfig: {"batch": BatchConfig, "session": SessionConfig, "limits": LimitsConfig,
                 "resources": ResourcesConfig, "routing": RoutingConfig, "broker": BrokerConfig,
                 "rate": RateConfig, "security": SecurityConfig},
    SecurityConfig: {"tls": TlsConfig, "auth": AuthConfig},
    RoutingConfig: {"monitor": MonitorConfig, "cost": CostConfig, "damping": DampingConfig},
})


def _check_addr(key: str, value: Any) -> None:
    if isinstance(value, str) and value.startswith("unix:/") and len(value) > 6:
        return       # a Unix socket (reaches a daemon inside a network namespace through the file system)
    m = _ADDR.match(value) if isinstance(value, str) else None
    if not m or not (0 < int(m.group(2)) < 65536):
        raise ConfigError(f"{key} must be \"host:port\" or \"unix:/path\", got {value!r}.")


def _build(cls: type, data: Any, where: str) -> Any:
    """Instantiate a config dataclass from a mapping, refusing unknown keys and wrong types."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where or 'the config'} must be a mapping.")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(f"unknown key {where + '.' if where else ''}{unknown[0]} in node config "
                          f"(known: {', '.join(sorted(fields))}).")
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        f = fields[name]
        sub = SECTIONS.get(cls, {}).get(name)
        key = f"{where}.{name}" if where else name
        if cls is MonitorConfig and name == "links":
            if not isinstance(value, dict):
                raise ConfigError(f"{key} must be a mapping of neighbour -> {{interval, probe}}.")
            kwargs[name] = {str(peer): _build(ProbeLinkConfig, v or {}, f"{key}.{peer}") for peer, v in value.items()}
            continue
        if cls is RoutingConfig and name == "rules":
            if not isinstance(value, list):
                raise ConfigError(f"{key} must be a list of rules.")
            kwargs[name] = value      # checked by RoutingConfig.validate (node/routing/rules.py)
            continue
        if cls is MonitorConfig and name == "enabled":
            if value is not None and not isinstance(value, bool):
                raise ConfigError(f"{key} has the wrong type ({type(value).__name__}: {value!r}).")
            kwargs[name] = value
            continue
        if sub is not None:
            if name == "resources" and isinstance(value, dict | None) and "enabled" not in (value or {}):
                value = {**(value or {}), "enabled": True}     # a resources: section switches management on
            kwargs[name] = _build(sub, value or {}, key)
            continue
        kwargs[name] = _coerce(key, f, value)
    missing = [n for n, f in fields.items() if n not in kwargs
               and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ConfigError(f"node config is missing required key {missing[0]!r}.")
    return cls(**kwargs)


def _coerce(key: str, f: dataclasses.Field, value: Any) -> Any:
    if f.default is not dataclasses.MISSING:
        default: Any = f.default
    elif f.default_factory is not dataclasses.MISSING:
        default = f.default_factory()
    else:
        default = ""   # required fields are all strings
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, dict):
        ok = isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
    elif isinstance(default, list):
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
    else:  # str (including required strings without default)
        ok = isinstance(value, str)
    if not ok:
        raise ConfigError(f"{key} has the wrong type ({type(value).__name__}: {value!r}).")
    return value


def from_dict(data: Any) -> NodeConfig:
    cfg = _build(NodeConfig, data, "")
    cfg.validate()
    return cfg


def load(path: str | Path) -> NodeConfig:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read node config {p}: {exc.strerror}.") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"node config {p} is not valid YAML ({str(exc).splitlines()[0]}).") from None
    return from_dict(data)


def dump(cfg: NodeConfig) -> str:
    """The YAML text of a config (what the testbed writes for a host)."""
    return yaml.safe_dump(dataclasses.asdict(cfg), sort_keys=False)
