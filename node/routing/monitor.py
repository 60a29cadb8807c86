"""The link monitor: UDP probes to every neighbour, turned into one quantised cost per link.

Probes are small UDP datagrams between the two ends' data addresses (the same
hosts and port as the TCP data listener: UDP and TCP port spaces are separate),
answered at once by the neighbour. They stay off the TCP session on purpose:
a probe queued behind bulk data would measure the queue, not the link.

Sockets: one per address the Link service listens on (never a wildcard the
Link service does not use). A probe goes out from the socket bound to the
address the kernel picks towards the neighbour (the one on the link they
share); a request is answered from the socket it came in on.

Keys: on every Link session that comes up, each end gives the other a fresh
random 32-byte key (an Extension frame of kind "probe_key", `KEY_KIND`) for
the probes that neighbour sends it. A session going up or down forgets both
keys of that link, so a key never outlives its session and a stale one is
refused. The end that answers makes the key, so it can answer the very first
probe under it (no probe is lost at the changeover); the prober sends nothing
until it holds a key. The key crosses the Link session: with mTLS it stays
between the two nodes, in plaintext it stops only forgers off the path.

Datagram (version 3): struct "!2sBBQdddBB" (magic b"WB", version 3, type 1 =
request or 2 = response, sequence number, t1: the prober's time.time() just
before it sent the request, t2: the addressee's kernel receive time of the
request, t3: the addressee's time.time() just before it sent the answer (t2
and t3 are 0 in a request), the byte lengths of the two names), then the
UTF-8 names of the prober and of the addressee, then a 16-byte tag:
HMAC-SHA256 of all the bytes before it, truncated, under the key the
addressee gave the prober. The addressee answers a request whose tag checks
with the same fields, its t2 and t3, type 2 and a tag under the same key. The
prober takes an answer only when its tag checks, it names this node as prober
and a probed neighbour as addressee, and its sequence number and t1 are those
of a probe still outstanding. Sequence numbers count up from a random 63-bit
start per link, so a sender off the path cannot guess an outstanding one.
Neither side cares about the source address (NAT, several interfaces). Every
datagram refused is counted by reason (`REFUSALS`) and logged at most once a
minute per reason. Other versions are malformed: all nodes of a run speak one.

Round trip (as TWAMP, RFC 5357, and NTP): (t4 - t1) - (t3 - t2), t4 the
kernel's receive time of the answer (`stamped`), t1 the prober's own record of
the send time (never the echoed one). Taking receive times from the kernel and
taking out the addressee's turnaround keeps both daemons' event-loop delays
out of the link's latency: on a loaded host those are milliseconds. Kernel
stamps are CLOCK_REALTIME, hence time.time() for t1 and t3. A sample whose
stamps cannot be right (`round_trip`: t3 < t2, a turnaround longer than the
round trip, a clock step) is dropped and counted (`samples_dropped`); the
probe still counts as answered.

Per neighbour a `LinkEstimator` (pure logic, no sockets) keeps latency
(z-test outlier removal over a window, then an EMA of window means), jitter
(RFC 3550), and loss over a sliding window of settled probes. Loss is not
lost / total since the start: that count never forgets, so a link that got
better would keep paying for its old losses. The z-test uses the population
sd, under which no sample of a window of n lies past sqrt(n - 1) sd from the
mean (Samuelson), hence the config's minimum window (config.min_window). `LinkMonitor`
turns an estimate into a cost (`link_cost`) and calls `on_cost(peer, cost)`
only when the cost moved past the publishing threshold (`changed_enough`).
"""
from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import math
import random
import secrets
import socket
import statistics
import struct
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from node.errors import ConfigError
from node.routing.config import CostConfig, MonitorConfig, RoutingConfig
from node.names import NODE_NAME_MAX
from node.routing.stamped import StampedReader, enable_stamps

log = logging.getLogger("node.routing.monitor")

MAGIC = b"WB"
VERSION = 3
REQUEST = 1
RESPONSE = 2
HEADER = struct.Struct("!2sBBQdddBB")
TAG = 16                # bytes of the truncated HMAC-SHA256 that ends a datagram
KEY_BYTES = 32
KEY_KIND = "probe_key"  # the Extension frame kind that carries a key over the Link session
SEQ_START = 1 << 63     # a link's sequence numbers start below this (and never reach 2**64)
MAX_PROBE = HEADER.size + 2 * NODE_NAME_MAX + TAG
# why a datagram was refused: not a probe; not for this node or not from/about a neighbour; no key for that
# neighbour (no session up, or it has not sent one yet); the tag does not check; not an outstanding probe
# (late, duplicate, replayed or forged)
REFUSALS = ("malformed", "name", "key", "mac", "seq")
LOG_EVERY = 60.0        # seconds: at most one log line per kind of trouble (and per neighbour) per minute


# --- the datagram ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Probe:
    kind: int          # REQUEST or RESPONSE
    seq: int
    stamp: float       # t1: the prober's time.time() just before it sent the request
    prober: str        # the node that sent the request
    addressee: str     # the node the request is addressed to
    received: float = 0.0   # t2 (answers): the addressee's kernel receive time of the request
    replied: float = 0.0    # t3 (answers): the addressee's time.time() just before it sent the answer

    def encode(self, key: bytes) -> bytes:
        prober, addressee = self.prober.encode(), self.addressee.encode()
        body = HEADER.pack(MAGIC, VERSION, self.kind, self.seq, self.stamp, self.received, self.replied,
                           len(prober), len(addressee))
        body += prober + addressee
        return body + _tag(key, body)


def _tag(key: bytes, body: bytes) -> bytes:
    return hmac.new(key, body, hashlib.sha256).digest()[:TAG]


def authentic(data: bytes, key: bytes) -> bool:
    """Whether the tag that ends `data` is the one `key` gives the rest."""
    return len(data) > TAG and hmac.compare_digest(_tag(key, data[:-TAG]), data[-TAG:])


def decode_probe(data: bytes) -> Probe | None:
    """The probe in a datagram (its tag not checked yet: `authentic`), or None when it is not a well-formed
    wanbed probe."""
    if not HEADER.size + 2 + TAG <= len(data) <= MAX_PROBE:
        return None
    magic, version, kind, seq, stamp, received, replied, n_prober, n_addressee = HEADER.unpack_from(data)
    if magic != MAGIC or version != VERSION or kind not in (REQUEST, RESPONSE):
        return None
    if not (math.isfinite(stamp) and math.isfinite(received) and math.isfinite(replied)):
        return None
    if not n_prober or not n_addressee or HEADER.size + n_prober + n_addressee + TAG != len(data):
        return None
    names = data[HEADER.size:len(data) - TAG]
    try:
        prober, addressee = names[:n_prober].decode(), names[n_prober:].decode()
    except UnicodeDecodeError:
        return None
    return Probe(kind, seq, stamp, prober, addressee, received, replied)


def parse_addr(addr: str) -> tuple[str, int] | None:
    """("host", port) of "host:port" or "[v6]:port"; None for "unix:..." and anything unparsable."""
    if addr.startswith("unix:"):
        return None
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        return None
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


# --- estimates ------------------------------------------------------------------------------------------

def round_trip(t1: float, t2: float, t3: float, t4: float, bound: float | None = None) -> float | None:
    """Seconds on the wire there and back: (t4 - t1) - (t3 - t2), t1/t4 the prober's send and (kernel) receive
    times, t2/t3 the addressee's (kernel) receive and send times. `bound`: the round trip as the prober's
    monotonic clock saw it (send to handling the answer, never shorter than the wire's); t4 - t1 is clamped to
    it, so a forward step of the wall clock between t1 and t4 cannot lengthen a sample. None (drop the sample)
    when the stamps cannot be right: t3 < t2, a turnaround longer than the round trip (the addressee's clock
    stepped, or ours stepped back), or a negative result."""
    raw = t4 - t1
    if bound is not None:
        raw = min(raw, bound)
    turnaround = t3 - t2
    if turnaround < 0 or turnaround > raw:
        return None
    rtt = raw - turnaround
    return rtt if rtt >= 0 else None

def window_stats(samples: list[float], z: float) -> tuple[float, float]:
    """(mean, population sd) of `samples` after dropping |x - mean| / sd > z; nothing is dropped when sd == 0."""
    mean = statistics.fmean(samples)
    sd = statistics.pstdev(samples, mean)
    kept = [x for x in samples if abs(x - mean) <= z * sd] if sd > 0 else samples
    if not kept:          # cannot happen (some sample is within one sd), but never divide by nothing
        kept = samples
    mean = statistics.fmean(kept)
    return mean, statistics.pstdev(kept, mean)


@dataclass
class LinkEstimator:
    """Latency, jitter and loss of one link from probes sent and answers received (times in seconds)."""
    cfg: MonitorConfig
    interval: float                   # seconds between probes on this link
    latency_ms: float = 0.0           # EMA of window means (outliers removed)
    sd_ms: float = 0.0                # sd of the last window's samples that were kept
    jitter_ms: float = 0.0            # RFC 3550 running estimate
    sent: int = 0
    answered: int = 0
    dropped: int = 0                  # answers whose stamps could not be right: no latency sample
    _samples: deque = field(init=False, repr=False)       # last `window` latency samples, ms
    _last_sample: float | None = field(default=None, init=False, repr=False)
    # seq -> (send time on the monotonic clock, for timeouts; t1, the stamp it carried)
    _pending: dict[int, tuple[float, float]] = field(default_factory=dict, init=False, repr=False)
    _settled: deque = field(init=False, repr=False)       # True = lost, over the last `loss_window` settled
    _next_seq: int = field(default=0, init=False, repr=False)

    def __post_init__(self) -> None:
        self._samples = deque(maxlen=self.cfg.window)
        self._settled = deque(maxlen=self.cfg.loss_window)
        self._next_seq = secrets.randbelow(SEQ_START) + 1   # unguessable from off the path, and still ordered

    @property
    def timeout(self) -> float:
        """Seconds an unanswered probe waits before it counts as lost."""
        return self.cfg.timeout or max(3 * self.interval, 1.0)

    @property
    def measured(self) -> bool:
        return self._last_sample is not None

    @property
    def settled(self) -> int:
        """Probes in the loss window (answered or counted lost)."""
        return len(self._settled)

    @property
    def loss(self) -> float:
        return sum(self._settled) / len(self._settled) if self._settled else 0.0

    def probe(self, now: float, stamp: float | None = None) -> int:
        """Account a probe sent (or that failed to send) at `now` (monotonic) carrying t1 = `stamp` (wall clock;
        `now` when None); returns its sequence number."""
        seq = self._next_seq
        self._next_seq += 1
        self.sent += 1
        self._pending[seq] = (now, now if stamp is None else stamp)
        return seq

    def on_answer(self, seq: int, echoed: float, t4: float, t2: float = 0.0, t3: float = 0.0,
                  now: float | None = None) -> bool:
        """Take the answer to probe `seq` that echoes t1 = `echoed`, received at `t4`, with the addressee's t2 and
        t3 (`round_trip`); `now`: the monotonic time it is handled, bounding the round trip. False (and nothing
        changes) for late, duplicate or unknown answers and for one whose stamp is not that probe's t1. An answer
        taken whose stamps cannot be right settles the probe but gives no sample (`dropped`)."""
        record = self._pending.get(seq)
        if record is None or record[1] != echoed:
            return False          # already settled (lost by timeout or gap, or a duplicate), never sent, or forged
        sent, t1 = record
        del self._pending[seq]
        # Every older probe still pending was overtaken by this answer: lost, one per missing number.
        for old in [s for s in self._pending if s < seq]:
            del self._pending[old]
            self._settled.append(True)
        self._settled.append(False)
        self.answered += 1
        rtt = round_trip(t1, t2, t3, t4, None if now is None else now - sent)
        if rtt is None:
            self.dropped += 1
        else:
            self.add_sample(rtt / 2 * 1000.0)
        return True

    def expire(self, now: float) -> int:
        """Settle as lost the probes unanswered for longer than the timeout; returns how many."""
        cut = now - self.timeout
        old = [s for s, (t, _) in self._pending.items() if t < cut]
        for s in old:
            del self._pending[s]
            self._settled.append(True)
        return len(old)

    def forget_losses(self) -> None:
        """Start the loss count afresh (keeps latency and jitter): probes that went unanswered while the
        neighbour was down or not started yet say nothing about the link now that its session is up."""
        self._pending.clear()
        self._settled.clear()

    def add_sample(self, latency_ms: float) -> None:
        """One latency sample (RTT / 2, ms): updates jitter, then the window mean and the EMA."""
        if self._last_sample is not None:
            self.jitter_ms += (abs(latency_ms - self._last_sample) - self.jitter_ms) / 16
        first = self._last_sample is None
        self._last_sample = latency_ms
        self._samples.append(latency_ms)
        mean, self.sd_ms = window_stats(list(self._samples), self.cfg.z)
        a = self.cfg.alpha
        self.latency_ms = mean if first else a * mean + (1 - a) * self.latency_ms


# --- cost and publishing --------------------------------------------------------------------------------

def quantise(value: float, quantum: float) -> float:
    """`value` rounded to the nearest multiple of `quantum` (halves up), at least one quantum."""
    steps = max(1, math.floor(value / quantum + 0.5))
    return round(steps * quantum, 9)     # 3 * 0.1 is 0.30000000000000004: keep costs comparable


def link_cost(est: LinkEstimator, cost: CostConfig) -> float:
    """a + b*latency + c*loss + d*jitter, quantised. A link with nothing known yet costs one quantum.

    "Known" includes settled losses without any answer: a neighbour that never answers is expensive,
    not free.
    """
    if not est.measured and not est.settled:
        return cost.quantum
    raw = cost.a + cost.b * est.latency_ms + cost.c * est.loss + cost.d * est.jitter_ms
    return quantise(raw, cost.quantum)


def changed_enough(new: float, last_published: float | None, threshold: float) -> bool:
    """Whether `new` should be published over the last published cost."""
    if last_published is None:
        return True
    if last_published > 0:
        return abs(new - last_published) > threshold * last_published
    return new != last_published


# --- the monitor ----------------------------------------------------------------------------------------

class _Quiet:
    """Lets a log line through once per `every` seconds per key (bad datagrams must not flood the log)."""

    def __init__(self, every: float = LOG_EVERY) -> None:
        self.every = every
        self._last: dict[str, float] = {}

    def ok(self, key: str) -> bool:
        now = time.monotonic()
        last = self._last.get(key)
        if last is not None and now - last < self.every:
            return False
        self._last[key] = now
        return True


@dataclass
class _Link:
    peer: str
    host: str
    port: int
    interval: float
    est: LinkEstimator
    key: bytes | None = None     # the key this neighbour gave us on the current session; None: not probed now


class LinkMonitor:
    """Probes every neighbour over UDP, answers their probes, publishes link costs through `on_cost`.

    `listen`: the addresses of the Link service; one UDP socket is bound to each. The keys come and go with the
    Link sessions: `session` when one goes up or down, `take_key` for the key a neighbour sent over it."""

    def __init__(self, me: str, routing: RoutingConfig, neighbours: dict[str, str], listen: list[str],
                 on_cost: Callable[[str, float], None]) -> None:
        self.me = me
        self.routing = routing
        self.neighbours = dict(neighbours)
        self.listen = list(listen)
        self.on_cost = on_cost
        self._links: dict[str, _Link] = {}
        for peer, addr in self.neighbours.items():
            interval = routing.monitor.interval_for(peer)
            hostport = parse_addr(addr)
            if interval is None or hostport is None:
                continue       # not probed: the link keeps one quantum
            est = LinkEstimator(routing.monitor, interval)
            self._links[peer] = _Link(peer, hostport[0], hostport[1], interval, est)
        self._answer_keys: dict[str, bytes] = {}     # neighbour -> the key it probes this node with (ours)
        self._published: dict[str, float] = {}
        self._socks: list[socket.socket] = []
        self._readers: list[StampedReader] = []
        self._tasks: list[asyncio.Task] = []
        self._quiet = _Quiet()
        self.refused: dict[str, int] = dict.fromkeys(REFUSALS, 0)

    @property
    def port(self) -> int | None:
        """The first socket's UDP port while started (useful when listening on port 0)."""
        return self._socks[0].getsockname()[1] if self._socks else None

    @property
    def addresses(self) -> list[tuple[str, int]]:
        """(host, port) of every bound probe socket."""
        return [s.getsockname()[:2] for s in self._socks]

    @property
    def probed(self) -> list[str]:
        return list(self._links)

    def estimator(self, peer: str) -> LinkEstimator | None:
        link = self._links.get(peer)
        return link.est if link is not None else None

    async def start(self) -> None:
        if self._socks:
            return
        hostports: list[tuple[str, int]] = []
        for addr in self.listen:
            hostport = parse_addr(addr)
            if hostport is None:
                log.warning("node %s: data listen %s cannot carry UDP probes", self.me, addr)
            elif hostport not in hostports:
                hostports.append(hostport)
        if not hostports:
            log.warning("node %s: no data address can carry UDP probes; the link monitor is off", self.me)
            return
        try:
            for host, port in hostports:
                sock = await self._bind(host, port)
                self._socks.append(sock)
                # a request is answered from the socket it came in on
                reader = StampedReader(sock, MAX_PROBE + 1, lambda data, addr, t, s=sock: self._received(
                    data, addr, s, t), self._read_error)
                reader.start()
                self._readers.append(reader)
        except BaseException:
            await self.stop()
            raise
        for link in self._links.values():
            self._tasks.append(asyncio.create_task(self._probe_loop(link), name=f"probe {self.me}->{link.peer}"))
        log.info("node %s: link monitor on udp %s, probing %s", self.me,
                 ", ".join(f"{h}:{p}" for h, p in hostports), ", ".join(sorted(self._links)) or "no neighbour")

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for reader in self._readers:
            reader.close()         # closes its socket: the port is free when stop returns (a restart binds it)
        for sock in self._socks[len(self._readers):]:
            sock.close()           # bound, but start failed before its reader was made
        self._readers, self._socks = [], []

    def cost(self, peer: str) -> float:
        """The last published cost of the link to `peer` (one quantum before any)."""
        return self._published.get(peer, self.routing.cost.quantum)

    def republish(self, peer: str) -> None:
        """`peer`'s session came (back) up: publish its next estimate whatever it is, with the losses counted
        from now on (a daemon that was down or still starting did not answer: no fault of the link)."""
        self._published.pop(peer, None)
        est = self.estimator(peer)
        if est is not None:
            est.forget_losses()

    def session(self, peer: str, up: bool) -> bytes | None:
        """A Link session to `peer` came up or went down: both probe keys of that link are forgotten. On up, the
        fresh key `peer` is to probe this node with, for the caller to send over the new session (None while
        no socket could answer)."""
        link = self._links.get(peer)
        if link is not None:
            link.key = None        # no probes to it until it sends the key of this session
        self._answer_keys.pop(peer, None)
        if not up or not self._socks or peer not in self.neighbours:
            return None
        key = secrets.token_bytes(KEY_BYTES)
        self._answer_keys[peer] = key
        return key

    def take_key(self, peer: str, key: bytes) -> bool:
        """The key `peer` sent over its current session for this node's probes to it; False when malformed."""
        if len(key) != KEY_BYTES:
            self._quiet_warning(f"key {peer}", "ignoring a probe key of %d bytes from %s", len(key), peer)
            return False
        link = self._links.get(peer)
        if link is not None:
            link.key = key
        return True

    def refusals(self) -> dict[str, int]:
        """Datagrams refused so far, by reason (`REFUSALS`)."""
        return dict(self.refused)

    def snapshot(self) -> dict[str, dict]:
        """Per neighbour (probed or not): the estimate, probe counts and last published cost, JSON-ready."""
        out: dict[str, dict] = {}
        for peer in self.neighbours:
            link = self._links.get(peer)
            if link is None:
                out[peer] = {"latency_ms": 0.0, "sd_ms": 0.0, "jitter_ms": 0.0, "loss": 0.0,
                             "probes_sent": 0, "probes_answered": 0, "samples_dropped": 0,
                             "cost": round(self.cost(peer), 3), "probed": False}
                continue
            est = link.est
            out[peer] = {
                "latency_ms": round(est.latency_ms, 3), "sd_ms": round(est.sd_ms, 3),
                "jitter_ms": round(est.jitter_ms, 3), "loss": round(est.loss, 3),
                "probes_sent": est.sent, "probes_answered": est.answered, "samples_dropped": est.dropped,
                "cost": round(self.cost(peer), 3), "probed": True,
            }
        return out

    # --- internals ---

    async def _bind(self, host: str, port: int) -> socket.socket:
        loop = asyncio.get_running_loop()
        where = f"{host}:{port}" if ":" not in host else f"[{host}]:{port}"
        try:
            infos = await loop.getaddrinfo(host or None, port, type=socket.SOCK_DGRAM, flags=socket.AI_PASSIVE)
        except OSError as exc:
            raise ConfigError(f"cannot listen for link probes on udp {where}: {exc.strerror or exc}.") from None
        family, kind, proto, _, sockaddr = infos[0]
        sock = socket.socket(family, kind, proto)
        try:
            if family == socket.AF_INET6:
                # "[::]" should hear IPv4 neighbours too, as the TCP listener does
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            sock.setblocking(False)
            if not enable_stamps(sock):
                self._quiet_warning("stamps", "no kernel receive stamps on udp %s: probe times are taken when "
                                    "the event loop reads them", where)
            sock.bind(sockaddr)
        except OSError as exc:
            sock.close()
            raise ConfigError(f"cannot listen for link probes on udp {where}: {exc.strerror or exc}.") from None
        except BaseException:
            sock.close()
            raise
        return sock

    async def _route(self, link: _Link) -> tuple[socket.socket, tuple] | None:
        """The socket to probe `link`'s neighbour from and its socket address (a name is resolved off the event
        loop), trying the families of our sockets in order."""
        loop = asyncio.get_running_loop()
        problem: OSError | None = None
        for family in dict.fromkeys(s.family for s in self._socks):
            flags = socket.AI_V4MAPPED if family == socket.AF_INET6 else 0
            try:
                infos = await loop.getaddrinfo(link.host, link.port, family=family, type=socket.SOCK_DGRAM,
                                               flags=flags)
            except OSError as exc:
                problem = exc
                continue
            if infos:
                dest = infos[0][4]
                return self._socket_towards(family, dest), dest
        self._quiet_warning(f"send {link.peer}", "cannot resolve %s's address %s: %s", link.peer, link.host, problem)
        return None

    def _socket_towards(self, family: int, dest: tuple) -> socket.socket:
        """Of our sockets of `family`, the one bound to the address the kernel sends from towards `dest` (the
        neighbour's answer must come back to an address it can reach: the one on their shared link), else the
        first."""
        same = [s for s in self._socks if s.family == family]
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as s:
                s.connect(dest)        # UDP: only a route lookup, nothing is sent
                source = s.getsockname()[0]
        except OSError:
            return same[0]
        return next((s for s in same if s.getsockname()[0] == source), same[0])

    async def _probe_loop(self, link: _Link) -> None:
        loop = asyncio.get_running_loop()
        route: tuple[socket.socket, tuple] | None = None
        # A random phase, so that neighbours started together do not probe in lockstep.
        await asyncio.sleep(random.uniform(0, link.interval))
        next_at = loop.time()
        while True:
            now = time.monotonic()
            if link.est.expire(now):
                self._publish(link)
            if link.key is not None:       # no key: no session, or its key is still on the way
                if route is None:
                    route = await self._route(link)
                    now = time.monotonic()
                key = link.key             # read again: the session may have changed while resolving
                if key is not None:
                    # t1 on the clock of the kernel's receive stamps; the monotonic time for timeouts and to bound
                    # the round trip against a step of that clock
                    now, t1 = time.monotonic(), time.time()
                    seq = link.est.probe(now, t1)     # a probe that fails to go out is sent-but-unanswered
                    if route is not None:
                        sock, dest = route
                        try:
                            sock.sendto(Probe(REQUEST, seq, t1, self.me, link.peer).encode(key), dest)
                        except OSError as exc:     # unreachable network, full buffer, ...: the probe is lost
                            self._quiet_warning(f"send {link.peer}", "probe to %s (%s) failed: %s", link.peer,
                                                self.neighbours[link.peer], exc)
                            route = None           # resolve again: the address may have changed
            next_at += link.interval
            delay = next_at - loop.time()
            if delay < 0:                  # fell behind (a stalled loop): no burst of catch-up probes
                next_at, delay = loop.time(), 0.0
            await asyncio.sleep(delay)

    def _read_error(self, exc: OSError) -> None:
        self._quiet_warning("recv", "probe socket error: %s", exc)

    def _received(self, data: bytes, addr: tuple, sock: socket.socket, arrived: float) -> None:
        """One datagram, `arrived` its kernel receive time (time.time() scale)."""
        probe = decode_probe(data)
        if probe is None:
            self._refuse("malformed", "a malformed probe datagram from %s", addr)
            return
        if probe.kind == REQUEST:
            if probe.addressee != self.me:
                self._refuse("name", "a probe from %s addressed to %r", addr, probe.addressee)
                return
            key = self._answer_keys.get(probe.prober)
            if key is None:
                self._refuse("key", "a probe from %s claiming to be %r, which holds no key of this node",
                             addr, probe.prober)
                return
            if not authentic(data, key):
                self._refuse("mac", "a probe from %s claiming to be %r: its tag does not check", addr, probe.prober)
                return
            try:
                # t3 as late as it can be: it goes inside the tag, so the HMAC's microseconds count as the wire's
                answer = Probe(RESPONSE, probe.seq, probe.stamp, probe.prober, self.me, arrived, time.time())
                sock.sendto(answer.encode(key), addr)
            except OSError as exc:
                self._quiet_warning("answer", "cannot answer a probe from %s: %s", addr, exc)
            return
        link = self._links.get(probe.addressee)
        if probe.prober != self.me or link is None:
            self._refuse("name", "a probe answer from %s for %r to %r (not a probe of this node to a probed "
                         "neighbour)", addr, probe.prober, probe.addressee)
            return
        if link.key is None:
            self._refuse("key", "a probe answer from %s claiming to be %s, whose key this node does not hold",
                         addr, link.peer)
            return
        if not authentic(data, link.key):
            self._refuse("mac", "a probe answer from %s claiming to be %s: its tag does not check", addr, link.peer)
            return
        dropped = link.est.dropped
        if not link.est.on_answer(probe.seq, probe.stamp, arrived, probe.received, probe.replied, time.monotonic()):
            self._refuse("seq", "a probe answer from %s (%s) to no outstanding probe (late, duplicate or replayed)",
                         addr, link.peer)
            return
        if link.est.dropped != dropped:
            self._quiet_warning(f"stamps {link.peer}", "dropped a latency sample of %s: its stamps cannot be right "
                                "(a clock step?): turnaround %.3f ms (%d dropped so far)", link.peer,
                                (probe.replied - probe.received) * 1000.0, link.est.dropped)
        self._publish(link)

    def _refuse(self, reason: str, what: str, *args: object) -> None:
        """Count a refused datagram; log it at most once a minute per reason, with the count so far."""
        self.refused[reason] += 1
        self._quiet_warning(f"refused {reason}", "refused " + what + " (%d refused for this reason so far)",
                            *args, self.refused[reason])

    def _publish(self, link: _Link) -> None:
        cost = link_cost(link.est, self.routing.cost)
        if not changed_enough(cost, self._published.get(link.peer), self.routing.cost.threshold):
            return
        self._published[link.peer] = cost
        log.debug("node %s: link to %s costs %s (latency %.3f ms, jitter %.3f ms, loss %.3f)", self.me,
                  link.peer, cost, link.est.latency_ms, link.est.jitter_ms, link.est.loss)
        try:
            self.on_cost(link.peer, cost)
        except Exception:     # the consumer's bug must not stop probing
            log.exception("node %s: on_cost(%s, %s) failed", self.me, link.peer, cost)

    def _quiet_warning(self, key: str, msg: str, *args: object) -> None:
        if self._quiet.ok(key):
            log.warning("node %s: " + msg, self.me, *args)
