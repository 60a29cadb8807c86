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
                                    # mTLS between nodes and client tokens; node/security/config.py (absent = off)
    local_users: []                 # users with a mailbox here; empty accepts any user
    batch: {max_frames: 512, max_bytes: 1048576, min_bytes: 16384, target_delay: 0.02, commit_window: 0.002, max_commit: 4096, window_frames: 8192}
    session: {keepalive: 1.0, hold_time: 5.0, backoff_min: 0.1, backoff_max: 5.0}
    limits: {max_message_size: 67108864, max_frame_bytes: 1048576, max_recipients: 64, max_hops: 64,
             max_link_queue: 268435456,   # without resources: bytes queued per neighbour before "not now"
             max_orphan_bytes: 268435456,       # bytes of copies without a next hop before "not now"/"congested"
             max_submission_bytes: 268435456}  # size x distinct recipient nodes of one submission
    resources: {buffer_classes: true, transit_buffers: 100, ...}   # Brachman's resource management; see ResourcesConfig (absent = off)
    routing: {mode: dynamic, nodes: [...], monitor: {...}, cost: {...}, damping: {...}, rules: [...]}
                                    # node/routing/config.py; absent = static routes only
    broker: {enabled: true, max_hops: 32, window: 256, live_buffer: 1024, ...}   # node/broker/config.py
    rate: {role: client, root: r1, queue_limit: 1000000}    # MQ rate control; node/rate/config.py (absent = off)

The core keys are read here; `security`, `routing`, `broker` and `rate` are the sections of the node's
subsystems (node/subsystem.py), each a dataclass in its own package, read with the core by
node/registry.py `load_config` / `config_from_dict`. A subsystem without a section in the file gets its
defaults; a section no subsystem owns is an unknown key.

Which end dials: the node whose name sorts first dials its neighbour; the other
only accepts. So every pair has exactly one session and no tie-break is needed.
"""
from __future__ import annotations

import dataclasses
import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from node.errors import ConfigError
from node.names import NODE_NAME_RULE, is_node_name

MODES = ("fragmenting", "non-fragmenting")
_ADDR = re.compile(r"^(\[[0-9A-Fa-f:]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")




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
    # and submissions "congested" (the queue, and the node's memory, must not grow with the spool)
    max_link_queue: int = 256 << 20
    max_priority: int = 15
    # bytes of copies kept without a next hop (orphans, node/orphans.py) above which a neighbour's piece that would
    # be one is refused "not now" and a submission that would leave one "congested"
    max_orphan_bytes: int = 256 << 20
    # bytes one submission may make this node store: its size times its distinct recipient nodes
    max_submission_bytes: int = 256 << 20


@dataclass
class ResourcesConfig:
    """Brachman's resource management settings; key names are a fixed contract with the experiment runner.

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
    resources: ResourcesConfig = field(default_factory=ResourcesConfig, metadata={"present_enables": True})
    # the subsystems' sections (node/subsystem.py `config`), by key: read as attributes (cfg.routing)
    sections: dict[str, Any] = field(default_factory=dict, metadata={"internal": True})

    def __getattr__(self, key: str) -> Any:
        # only reached for names that are not fields: a subsystem's section
        sections = self.__dict__.get("sections")
        if sections is not None and key in sections:
            return sections[key]
        raise AttributeError(f"node config has no section {key!r}")

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
        """Every node this node knows of: itself, neighbours, route destinations and any section's `nodes`
        (routing.nodes)."""
        listed = [n for sec in self.sections.values() for n in getattr(sec, "nodes", ())]
        return {self.name, *self.neighbours, *self.routes, *listed}

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
        if not 0 < self.session.backoff_min <= self.session.backoff_max:
            raise ConfigError("session needs 0 < backoff_min <= backoff_max.")
        for key in ("max_link_queue", "max_orphan_bytes", "max_submission_bytes"):
            if getattr(self.limits, key) < 1:
                raise ConfigError(f"limits.{key} must be at least 1 byte.")
        if self.batch.max_frames < 1 or self.batch.window_frames < 1 or self.batch.max_commit < 1:
            raise ConfigError("batch sizes must be at least 1.")
        if not (1 <= self.batch.min_bytes <= self.batch.max_bytes) or self.batch.target_delay <= 0:
            raise ConfigError("batch needs 1 <= min_bytes <= max_bytes and a positive target_delay.")
        self.resources.validate()
        for section in self.sections.values():
            check = getattr(section, "validate", None)     # a section's own rules, given the core config
            if check is not None:
                check(self)


def _check_addr(key: str, value: Any) -> None:
    if isinstance(value, str) and value.startswith("unix:/") and len(value) > 6:
        return       # a Unix socket (reaches a daemon inside a network namespace through the file system)
    m = _ADDR.match(value) if isinstance(value, str) else None
    if not m or not (0 < int(m.group(2)) < 65536):
        raise ConfigError(f"{key} must be \"host:port\" or \"unix:/path\", got {value!r}.")


def _section_type(f: dataclasses.Field) -> type | None:
    """The dataclass of a field that is itself a section (its default is an instance of one), else None."""
    factory = f.default_factory
    return factory if isinstance(factory, type) and dataclasses.is_dataclass(factory) else None


def build_section(cls: type, data: Any, where: str) -> Any:
    """Instantiate a config dataclass from a mapping, refusing unknown keys and wrong types. A field's metadata
    says how to read it when it is not a plain value or a sub-section: `raw` (kept as given, checked by the
    section's validate), `map_of` (name -> that dataclass), `optional` (that type or null)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where or 'the config'} must be a mapping.")
    fields = {f.name: f for f in dataclasses.fields(cls) if not f.metadata.get("internal")}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        near = difflib.get_close_matches(unknown[0], sorted(fields), n=1)
        hint = f"did you mean '{near[0]}'?" if near else f"known: {', '.join(sorted(fields))}"
        raise ConfigError(f"unknown key {where + '.' if where else ''}{unknown[0]} in node config ({hint}).")
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        f = fields[name]
        meta = f.metadata
        key = f"{where}.{name}" if where else name
        sub = _section_type(f)
        if "map_of" in meta:
            if not isinstance(value, dict):
                raise ConfigError(f"{key} {meta.get('error', 'must be a mapping of name -> section.')}")
            kwargs[name] = {str(k): build_section(meta["map_of"], v or {}, f"{key}.{k}") for k, v in value.items()}
        elif meta.get("raw"):
            if not isinstance(value, type(f.default_factory())):
                raise ConfigError(f"{key} {meta.get('error', 'has the wrong type.')}")
            kwargs[name] = value
        elif "optional" in meta:
            if value is not None and not isinstance(value, meta["optional"]):
                raise ConfigError(f"{key} has the wrong type ({type(value).__name__}: {value!r}).")
            kwargs[name] = value
        elif sub is not None:
            if meta.get("present_enables") and isinstance(value, dict | None) and "enabled" not in (value or {}):
                value = {**(value or {}), "enabled": True}     # such a section switches its part on
            kwargs[name] = build_section(sub, value or {}, key)
        else:
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


def from_dict(data: Any, sections: Mapping[str, type]) -> NodeConfig:
    """A validated NodeConfig: the core keys, and a section for each of `sections` (key -> dataclass; the
    daemon's subsystems: node/registry.py `config_from_dict`) whether the file has it or not."""
    if not isinstance(data, dict):
        raise ConfigError("the config must be a mapping.")
    core = {k: v for k, v in data.items() if k not in sections}
    cfg = build_section(NodeConfig, core, "")
    for key, cls in sections.items():
        value = data.get(key)
        cfg.sections[key] = build_section(cls, {} if value is None else value, key)
    cfg.validate()
    return cfg


def load(path: str | Path, sections: Mapping[str, type]) -> NodeConfig:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read node config {p}: {exc.strerror}.") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"node config {p} is not valid YAML ({str(exc).splitlines()[0]}).") from None
    return from_dict(data, sections)


def as_dict(cfg: NodeConfig) -> dict[str, Any]:
    """The plain form of a config, sections at the top level as in a file."""
    out = dataclasses.asdict(cfg)
    sections = out.pop("sections")
    return {**out, **sections}


def dump(cfg: NodeConfig) -> str:
    """The YAML text of a config (what the testbed writes for a host)."""
    return yaml.safe_dump(as_dict(cfg), sort_keys=False)
