"""The link monitor: UDP probes to every neighbour, turned into one quantised cost per link.

Probes are small UDP datagrams between the two ends' link addresses (the same
host and port as the TCP data listener: UDP and TCP port spaces are separate),
answered at once by the neighbour. They stay off the TCP session on purpose:
a probe queued behind bulk data would measure the queue, not the link.

Datagram: struct "!2sBBQd" (magic b"WB", version 1, type 1 = request or
2 = response, sequence number, the sender's time.monotonic()) followed by the
UTF-8 name of the node the request is addressed TO. A node answers a request
only when that name is its own, with the same bytes and type 2; the originator
knows the peer by the name in the response, so neither side cares about the
source address (NAT, several interfaces).

Per neighbour a `LinkEstimator` (pure logic, no sockets) keeps latency
(z-test outlier removal over a window, then an EMA of window means), jitter
(RFC 3550), and loss over a sliding window of settled probes. `LinkMonitor`
turns an estimate into a cost (`link_cost`) and calls `on_cost(peer, cost)`
only when the cost moved past the publishing threshold (`changed_enough`).
"""
from __future__ import annotations

import asyncio
import logging
import math
import random
import socket
import statistics
import struct
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from node.routing.config import CostConfig, MonitorConfig, RoutingConfig
from node.names import NODE_NAME_MAX

log = logging.getLogger("node.routing.monitor")

MAGIC = b"WB"
VERSION = 1
REQUEST = 1
RESPONSE = 2
HEADER = struct.Struct("!2sBBQd")
MAX_PROBE = HEADER.size + NODE_NAME_MAX
LOG_EVERY = 60.0        # seconds: at most one log line per kind of trouble (and per neighbour) per minute


# --- the datagram ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Probe:
    kind: int          # REQUEST or RESPONSE
    seq: int
    stamp: float       # the originator's time.monotonic() when it sent the request
    name: str          # the node the request is addressed to

    def encode(self) -> bytes:
        return HEADER.pack(MAGIC, VERSION, self.kind, self.seq, self.stamp) + self.name.encode()


def decode_probe(data: bytes) -> Probe | None:
    """The probe in a datagram, or None when it is not a well-formed wanbed probe."""
    if not HEADER.size < len(data) <= MAX_PROBE:
        return None
    magic, version, kind, seq, stamp = HEADER.unpack_from(data)
    if magic != MAGIC or version != VERSION or kind not in (REQUEST, RESPONSE) or not math.isfinite(stamp):
        return None
    try:
        name = data[HEADER.size:].decode()
    except UnicodeDecodeError:
        return None
    return Probe(kind, seq, stamp, name)


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
    _samples: deque = field(init=False, repr=False)       # last `window` latency samples, ms
    _last_sample: float | None = field(default=None, init=False, repr=False)
    _pending: dict[int, float] = field(default_factory=dict, init=False, repr=False)  # seq -> send time
    _settled: deque = field(init=False, repr=False)       # True = lost, over the last `loss_window` settled
    _next_seq: int = field(default=1, init=False, repr=False)

    def __post_init__(self) -> None:
        self._samples = deque(maxlen=self.cfg.window)
        self._settled = deque(maxlen=self.cfg.loss_window)

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

    def probe(self, now: float) -> int:
        """Account a probe sent (or that failed to send) at `now`; returns its sequence number."""
        seq = self._next_seq
        self._next_seq += 1
        self.sent += 1
        self._pending[seq] = now
        return seq

    def on_answer(self, seq: int, echoed: float, now: float) -> bool:
        """Take the answer to probe `seq`; False (and nothing changes) for late, duplicate or unknown answers."""
        if self._pending.pop(seq, None) is None:
            return False          # already settled (lost by timeout or gap, or a duplicate) or never sent
        # Every older probe still pending was overtaken by this answer: lost, one per missing number.
        for old in [s for s in self._pending if s < seq]:
            del self._pending[old]
            self._settled.append(True)
        self._settled.append(False)
        self.answered += 1
        self.add_sample(max(0.0, now - echoed) / 2 * 1000.0)
        return True

    def expire(self, now: float) -> int:
        """Settle as lost the probes unanswered for longer than the timeout; returns how many."""
        cut = now - self.timeout
        old = [s for s, t in self._pending.items() if t < cut]
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


class _Protocol(asyncio.DatagramProtocol):
    def __init__(self, monitor: LinkMonitor) -> None:
        self.monitor = monitor

    def datagram_received(self, data: bytes, addr: tuple) -> None:
        self.monitor._received(data, addr)

    def error_received(self, exc: Exception) -> None:
        self.monitor._quiet_warning("recv", "probe socket error: %s", exc)


@dataclass
class _Link:
    peer: str
    host: str
    port: int
    interval: float
    est: LinkEstimator


class LinkMonitor:
    """Probes every neighbour over UDP, answers their probes, publishes link costs through `on_cost`."""

    def __init__(self, me: str, routing: RoutingConfig, neighbours: dict[str, str], listen: str,
                 on_cost: Callable[[str, float], None]) -> None:
        self.me = me
        self.routing = routing
        self.neighbours = dict(neighbours)
        self.listen = listen
        self.on_cost = on_cost
        self._me_bytes = me.encode()
        self._links: dict[str, _Link] = {}
        for peer, addr in self.neighbours.items():
            interval = routing.monitor.interval_for(peer)
            hostport = parse_addr(addr)
            if interval is None or hostport is None:
                continue       # not probed: the link keeps one quantum
            est = LinkEstimator(routing.monitor, interval)
            self._links[peer] = _Link(peer, hostport[0], hostport[1], interval, est)
        self._published: dict[str, float] = {}
        self._sock: socket.socket | None = None
        self._transport: asyncio.DatagramTransport | None = None
        self._tasks: list[asyncio.Task] = []
        self._quiet = _Quiet()

    @property
    def port(self) -> int | None:
        """The bound UDP port while started (useful when listening on port 0)."""
        return self._sock.getsockname()[1] if self._sock is not None else None

    @property
    def probed(self) -> list[str]:
        return list(self._links)

    def estimator(self, peer: str) -> LinkEstimator | None:
        link = self._links.get(peer)
        return link.est if link is not None else None

    async def start(self) -> None:
        if self._transport is not None:
            return
        hostport = parse_addr(self.listen)
        if hostport is None:
            log.warning("node %s: data listen %s cannot carry UDP probes; the link monitor is off",
                        self.me, self.listen)
            return
        loop = asyncio.get_running_loop()
        self._sock = await self._bind(*hostport)
        self._transport, _ = await loop.create_datagram_endpoint(lambda: _Protocol(self), sock=self._sock)
        for link in self._links.values():
            self._tasks.append(asyncio.create_task(self._probe_loop(link), name=f"probe {self.me}->{link.peer}"))
        log.info("node %s: link monitor on udp %s, probing %s", self.me, self.listen,
                 ", ".join(sorted(self._links)) or "no neighbour")

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._transport is not None:
            self._transport.close()      # closes the socket too
        self._transport = None
        self._sock = None

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

    def snapshot(self) -> dict[str, dict]:
        """Per neighbour (probed or not): the estimate, probe counts and last published cost, JSON-ready."""
        out: dict[str, dict] = {}
        for peer in self.neighbours:
            link = self._links.get(peer)
            if link is None:
                out[peer] = {"latency_ms": 0.0, "sd_ms": 0.0, "jitter_ms": 0.0, "loss": 0.0,
                             "probes_sent": 0, "probes_answered": 0, "cost": round(self.cost(peer), 3),
                             "probed": False}
                continue
            est = link.est
            out[peer] = {
                "latency_ms": round(est.latency_ms, 3), "sd_ms": round(est.sd_ms, 3),
                "jitter_ms": round(est.jitter_ms, 3), "loss": round(est.loss, 3),
                "probes_sent": est.sent, "probes_answered": est.answered,
                "cost": round(self.cost(peer), 3), "probed": True,
            }
        return out

    # --- internals ---

    async def _bind(self, host: str, port: int) -> socket.socket:
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(host or None, port, type=socket.SOCK_DGRAM, flags=socket.AI_PASSIVE)
        family, kind, proto, _, sockaddr = infos[0]
        sock = socket.socket(family, kind, proto)
        try:
            if family == socket.AF_INET6:
                # "[::]" should hear IPv4 neighbours too, as the TCP listener does
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            sock.setblocking(False)
            sock.bind(sockaddr)
        except BaseException:
            sock.close()
            raise
        return sock

    async def _resolve(self, link: _Link) -> tuple | None:
        """The neighbour's socket address in our socket's family (a name is resolved off the event loop)."""
        assert self._sock is not None
        family = self._sock.family
        flags = socket.AI_V4MAPPED if family == socket.AF_INET6 else 0
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                link.host, link.port, family=family, type=socket.SOCK_DGRAM, flags=flags)
        except OSError as exc:
            self._quiet_warning(f"send {link.peer}", "cannot resolve %s's address %s: %s", link.peer, link.host, exc)
            return None
        return infos[0][4] if infos else None

    async def _probe_loop(self, link: _Link) -> None:
        loop = asyncio.get_running_loop()
        dest: tuple | None = None
        # A random phase, so that neighbours started together do not probe in lockstep.
        await asyncio.sleep(random.uniform(0, link.interval))
        next_at = loop.time()
        while True:
            now = time.monotonic()
            if link.est.expire(now):
                self._publish(link)
            if dest is None:
                dest = await self._resolve(link)
                now = time.monotonic()
            seq = link.est.probe(now)     # a probe that fails to go out is sent-but-unanswered
            if dest is not None and self._sock is not None:
                try:
                    self._sock.sendto(Probe(REQUEST, seq, now, link.peer).encode(), dest)
                except OSError as exc:     # unreachable network, full buffer, ...: the probe is lost
                    self._quiet_warning(f"send {link.peer}", "probe to %s (%s) failed: %s", link.peer,
                                        self.neighbours[link.peer], exc)
                    dest = None            # resolve again: the address may have changed
            next_at += link.interval
            delay = next_at - loop.time()
            if delay < 0:                  # fell behind (a stalled loop): no burst of catch-up probes
                next_at, delay = loop.time(), 0.0
            await asyncio.sleep(delay)

    def _received(self, data: bytes, addr: tuple) -> None:
        probe = decode_probe(data)
        if probe is None:
            self._quiet_warning("bad", "ignoring a malformed probe datagram from %s", addr)
            return
        if probe.kind == REQUEST:
            if probe.name != self.me:
                self._quiet_warning("name", "ignoring a probe from %s addressed to %r", addr, probe.name)
                return
            if self._sock is None:
                return
            try:
                self._sock.sendto(data[:3] + bytes([RESPONSE]) + data[4:], addr)
            except OSError as exc:
                self._quiet_warning("answer", "cannot answer a probe from %s: %s", addr, exc)
            return
        link = self._links.get(probe.name)
        if link is None:
            self._quiet_warning("name", "ignoring a probe answer from %s for %r (not a probed neighbour)",
                                addr, probe.name)
            return
        if link.est.on_answer(probe.seq, probe.stamp, time.monotonic()):
            self._publish(link)

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
