"""The `wire` userspace link emulator: relays Ethernet frames between TAP devices.

Run as `python -m testbed.shaping.wire_emulator --socket PATH --prefix PFX`; it
outlives the CLI that started it and is controlled over a unix socket with JSON
lines ({"op": "add_link" | "set_params" | "set_carrier" | "counters" |
"counters_all" (every link at once) |
"shutdown", ...} -> {"ok": true, ...} or {"ok": false, "error": "..."}).

Design choices:
- ONE process for all links, one single-threaded select() loop and ONE timer
  heap. Frames are few and large: the TAPs are opened with IFF_VNET_HDR and
  TUNSETOFFLOAD(CSUM|TSO4|TSO6), so the kernel hands over up to 64 KB GSO
  super-frames and TCP at >1 Gbit/s costs a few thousand Python iterations per
  second. With 20 loaded links the process is CPU-bound on one core; the
  aggregate is measured in bench/bench_wire.py (bench/RESULTS.md) and is the
  stated limit. Sharding over processes would buy at most the second core,
  which the iperf3 endpoints and the kernel already use on a 2-core machine.
- The process runs at real-time priority SCHED_RR 1 (else nice -10) so that
  wake-ups for due frames are not delayed by CFS when the cores are loaded.
- select() instead of epoll because its timeout has microsecond resolution
  (Python rounds epoll timeouts up to whole milliseconds, which would add up to
  1 ms of delay error).
- Per direction: loss (Bernoulli or Gilbert-Elliott) and duplication at
  arrival, then the rate limiter (serialisation delay of the real wire bytes:
  GSO frame length + one header copy per extra segment; bounded queue in
  packets, tail drop), then delay + jitter (uniform in [-jitter, +jitter],
  clipped at 0). Without `reorder`, departure = max(own time, previous
  departure of that direction), so jitter never reorders.
- Half duplex (`duplex: half`, fixed at add_link): the link has ONE
  transmitter shared by both directions. A frame starts transmitting only
  when the medium is free; frames of both directions take their turns in one
  FIFO, in the order the emulator reads them from the TAPs (arrival), each
  holding the medium for its own direction's serialisation time. The medium
  is busy only while transmitting: delay and jitter are applied after it, as
  on a full-duplex link, so a frame in flight does not block the other
  direction. A turnaround time (radio switching from send to receive) is not
  modelled. Each direction keeps its own queue limit; a direction without a
  rate takes no time on the medium but still waits for it to be free.
- Carrier down drops everything arriving and everything still in flight
  (counted as dropped_down) and sets the TAP carrier off (TUNSETCARRIER).
- Capture: per link a pcap file (linktype Ethernet, NANOSECOND timestamps,
  magic 0xa1b23c4d) with both directions; the timestamp is the wall-clock time
  the frame is written to the receiving TAP (delivery). GSO super-frames are
  written as they are (one record, orig_len may exceed the MTU); snaplen
  defaults to 128 bytes. The file is flushed on shutdown and every second.
"""
from __future__ import annotations

import argparse
import errno
import fcntl
import heapq
import json
import logging
import os
import random
import select
import signal
import socket
import struct
import subprocess
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, BinaryIO

log = logging.getLogger("wire")

TUNSETIFF = 0x400454CA
TUNSETOFFLOAD = 0x400454D0
TUNSETVNETHDRSZ = 0x400454D8
TUNSETCARRIER = 0x400454E2
IFF_TAP = 0x0002
IFF_NO_PI = 0x1000
IFF_VNET_HDR = 0x4000
TUN_F_CSUM, TUN_F_TSO4, TUN_F_TSO6 = 0x01, 0x02, 0x08
VNET_HDR_LEN = 10           # struct virtio_net_hdr (no num_buffers)
READ_BATCH = 64             # frames read from one TAP before looking at the others
ETH_OVERHEAD = 0            # rate counts Ethernet frame bytes (as tbf/netem do), no preamble/IFG


@dataclass
class DirParams:
    delay: float = 0.0
    jitter: float = 0.0
    loss: float = 0.0
    ge_p: float | None = None   # Gilbert-Elliott: P(good->bad); None = not used
    ge_r: float = 0.0
    ge_loss_good: float = 0.0
    ge_loss_bad: float = 1.0
    duplicate: float = 0.0
    reorder: bool = False
    rate: float | None = None
    queue: int = 1000

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "DirParams":
        p = DirParams()
        for k, v in d.items():
            if not hasattr(p, k):
                raise ValueError(f"unknown direction parameter {k!r}")
            setattr(p, k, v)
        return p


@dataclass
class Direction:
    params: DirParams
    out_fd: int
    label: int                              # 0 = a->b, 1 = b->a (pcap and counters)
    busy_until: float = 0.0                 # rate limiter: when the last queued frame finishes serialising
    in_limiter: deque = field(default_factory=deque)   # finish times of frames still serialising/queued
    last_departure: float = 0.0
    ge_bad: bool = False
    counters: dict[str, int] = field(default_factory=lambda: dict(
        packets=0, bytes=0, dropped_loss=0, dropped_queue=0, dropped_down=0, duplicated=0))


@dataclass
class Link:
    link_id: str
    fds: tuple[int, int]
    dirs: tuple[Direction, Direction]
    up: bool = True
    half: bool = False                      # duplex half: both directions share one transmitter
    medium_free: float = 0.0                # half duplex: when the shared transmitter is next free
    epoch: int = 0                          # bumped on carrier down: in-flight frames of an older epoch are dropped
    pcap: BinaryIO | None = None
    snaplen: int = 128


def wire_bytes(frame: bytes) -> int:
    """Bytes this (possibly GSO) frame occupies on the wire once segmented."""
    flags, gso_type, hdr_len, gso_size = struct.unpack_from("<BBHH", frame, 0)
    length = len(frame) - VNET_HDR_LEN
    if gso_type == 0 or gso_size == 0:
        return length + ETH_OVERHEAD
    # hdr_len from the guest path is sometimes only a hint; at least Ethernet+IP+TCP.
    hdr = max(hdr_len, 54)
    payload = max(length - hdr, 0)
    segs = max(1, -(-payload // gso_size))
    return length + (segs - 1) * hdr + segs * ETH_OVERHEAD


def open_tap(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    try:
        fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TAP | IFF_NO_PI | IFF_VNET_HDR))
        fcntl.ioctl(fd, TUNSETVNETHDRSZ, struct.pack("i", VNET_HDR_LEN))
        fcntl.ioctl(fd, TUNSETOFFLOAD, TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6)
    except OSError:
        os.close(fd)
        raise
    return fd


def set_tap_carrier(fd: int, up: bool) -> None:
    try:
        fcntl.ioctl(fd, TUNSETCARRIER, struct.pack("i", 1 if up else 0))
    except OSError as e:                    # old kernels: carrier is emulated by dropping only
        log.debug("TUNSETCARRIER failed: %s", e)


def run_ip(args: list[str]) -> None:
    r = subprocess.run(["ip", *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip()}")


class Emulator:
    def __init__(self, sock_path: str, prefix: str) -> None:
        self.prefix = prefix
        self.links: dict[str, Link] = {}
        self.by_fd: dict[int, tuple[Link, Direction]] = {}
        self.heap: list[tuple[float, int, Link, Direction, int, bytes]] = []
        self.seq = 0
        self.next_index = 0
        self.rng = random.Random()
        self.running = True
        if os.path.exists(sock_path):
            os.unlink(sock_path)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(sock_path)
        self.listener.listen(16)
        self.listener.setblocking(False)
        self.sock_path = sock_path
        self.clients: dict[int, tuple[socket.socket, bytearray]] = {}
        self.last_flush = time.monotonic()

    # ---- control -------------------------------------------------------
    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        op = req.get("op")
        if op == "add_link":
            return self.add_link(req)
        link = self.links.get(req.get("link_id", ""))
        if op == "shutdown":
            self.running = False
            return {"ok": True}
        if op == "ping":
            return {"ok": True, "links": sorted(self.links)}
        if op == "counters_all":
            # every link in one answer: the once-a-second sampler must not cost one round trip per link
            self.flush()
            return {"ok": True, "links": {lid: {"a_to_b": l.dirs[0].counters, "b_to_a": l.dirs[1].counters}
                                          for lid, l in self.links.items()}}
        if link is None:
            return {"ok": False, "error": f"unknown link {req.get('link_id')!r}"}
        if op == "set_params":
            for i, key in enumerate(("a_to_b", "b_to_a")):
                if req.get(key) is not None:
                    link.dirs[i].params = DirParams.from_dict(req[key])
            return {"ok": True}
        if op == "set_carrier":
            up = bool(req["up"])
            if not up and link.up:
                link.epoch += 1
            link.up = up
            for fd in link.fds:
                set_tap_carrier(fd, up)
            return {"ok": True}
        if op == "counters":
            self.flush()
            return {"ok": True, "a_to_b": link.dirs[0].counters, "b_to_a": link.dirs[1].counters}
        return {"ok": False, "error": f"unknown op {op!r}"}

    def add_link(self, req: dict[str, Any]) -> dict[str, Any]:
        link_id = req["link_id"]
        if link_id in self.links:
            return {"ok": False, "error": f"link {link_id!r} exists"}
        duplex = req.get("duplex") or "full"
        if duplex not in ("full", "half"):
            return {"ok": False, "error": f"link {link_id!r}: duplex must be full or half, got {duplex!r}"}
        fds: list[int] = []
        try:
            for end in ("a", "b"):
                tmp = f"{self.prefix}w{self.next_index}"
                self.next_index += 1
                fd = open_tap(tmp)
                fds.append(fd)
                ns, ifname = req[end]["netns"], req[end]["ifname"]
                run_ip(["link", "set", "dev", tmp, "netns", ns])
                run_ip(["-n", ns, "link", "set", "dev", tmp, "name", ifname])
                run_ip(["-n", ns, "link", "set", "dev", ifname, "up"])
        except Exception as e:
            for fd in fds:
                os.close(fd)        # the TAPs vanish with their fds
            return {"ok": False, "error": str(e)}
        dirs = (Direction(DirParams.from_dict(req.get("a_to_b") or {}), fds[1], 0),
                Direction(DirParams.from_dict(req.get("b_to_a") or {}), fds[0], 1))
        link = Link(link_id, (fds[0], fds[1]), dirs, half=duplex == "half")
        if req.get("pcap"):
            link.snaplen = int(req.get("snaplen") or 128)
            link.pcap = open(req["pcap"], "wb")
            # nanosecond-resolution pcap header, linktype 1 (Ethernet)
            link.pcap.write(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, link.snaplen, 1))
        self.links[link_id] = link
        self.by_fd[fds[0]] = (link, dirs[0])
        self.by_fd[fds[1]] = (link, dirs[1])
        return {"ok": True}

    # ---- data path -----------------------------------------------------
    def lost(self, d: Direction) -> bool:
        p = d.params
        if p.ge_p is not None:
            # transition first, then loss decided by the new state
            if d.ge_bad:
                if self.rng.random() < p.ge_r:
                    d.ge_bad = False
            elif self.rng.random() < p.ge_p:
                d.ge_bad = True
            return self.rng.random() < (p.ge_loss_bad if d.ge_bad else p.ge_loss_good)
        return p.loss > 0 and self.rng.random() < p.loss

    def enqueue(self, link: Link, d: Direction, frame: bytes, now: float) -> None:
        p = d.params
        if p.rate:
            q = d.in_limiter
            while q and q[0] <= now:
                q.popleft()
            if len(q) >= p.queue:
                d.counters["dropped_queue"] += 1
                return
            # half duplex: the shared medium's turn (reserved at arrival, so FIFO across directions)
            start = max(now, link.medium_free if link.half else d.busy_until)
            d.busy_until = start + wire_bytes(frame) * 8.0 / p.rate
            if link.half:
                link.medium_free = d.busy_until
            q.append(d.busy_until)
            t = d.busy_until
        elif link.half:
            t = max(now, link.medium_free)
        else:
            t = now
        delay = p.delay
        if p.jitter:
            delay = max(0.0, delay + self.rng.uniform(-p.jitter, p.jitter))
        t += delay
        if not p.reorder:
            t = max(t, d.last_departure)
            d.last_departure = t
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, link, d, link.epoch, frame))

    def read_tap(self, fd: int, now: float) -> None:
        link, d = self.by_fd[fd]
        for _ in range(READ_BATCH):
            try:
                frame = os.read(fd, 65536 + VNET_HDR_LEN + 64)
            except BlockingIOError:
                return
            except OSError as e:
                if e.errno in (errno.EAGAIN, errno.EIO):
                    return
                raise
            if not link.up:
                d.counters["dropped_down"] += 1
                continue
            if self.lost(d):
                d.counters["dropped_loss"] += 1
                continue
            self.enqueue(link, d, frame, now)
            if d.params.duplicate and self.rng.random() < d.params.duplicate:
                d.counters["duplicated"] += 1
                self.enqueue(link, d, frame, now)

    def deliver_due(self, now: float) -> None:
        heap = self.heap
        while heap and heap[0][0] <= now:
            _, _, link, d, epoch, frame = heapq.heappop(heap)
            if epoch != link.epoch or not link.up:
                d.counters["dropped_down"] += 1
                continue
            try:
                os.write(d.out_fd, frame)
            except OSError:
                d.counters["dropped_queue"] += 1     # receiving side refused (queue full / gone)
                continue
            d.counters["packets"] += 1
            d.counters["bytes"] += len(frame) - VNET_HDR_LEN
            if link.pcap is not None:
                ns = time.time_ns()
                body = frame[VNET_HDR_LEN:VNET_HDR_LEN + link.snaplen]
                link.pcap.write(struct.pack("<IIII", ns // 1_000_000_000, ns % 1_000_000_000,
                                            len(body), len(frame) - VNET_HDR_LEN))
                link.pcap.write(body)

    def flush(self) -> None:
        for link in self.links.values():
            if link.pcap is not None:
                link.pcap.flush()

    def serve_clients(self, readable: list[int]) -> None:
        if self.listener.fileno() in readable:
            try:
                c, _ = self.listener.accept()
                c.setblocking(True)
                self.clients[c.fileno()] = (c, bytearray())
            except BlockingIOError:
                pass
        for cfd in [f for f in readable if f in self.clients]:
            c, buf = self.clients[cfd]
            data = c.recv(65536)
            if not data:
                del self.clients[cfd]
                c.close()
                continue
            buf.extend(data)
            while b"\n" in buf:
                line, _, rest = bytes(buf).partition(b"\n")
                buf[:] = rest
                try:
                    resp = self.handle(json.loads(line))
                except Exception as e:              # a bad request must not kill the links
                    resp = {"ok": False, "error": f"{type(e).__name__}: {e}"}
                c.sendall(json.dumps(resp).encode() + b"\n")

    def run(self) -> None:
        while self.running:
            now = time.monotonic()
            self.deliver_due(now)
            timeout = 1.0
            if self.heap:
                timeout = max(0.0, self.heap[0][0] - time.monotonic())
            fds = [self.listener.fileno(), *self.clients, *self.by_fd]
            readable, _, _ = select.select(fds, [], [], min(timeout, 1.0))
            now = time.monotonic()
            self.deliver_due(now)       # due frames first: reading a batch must not make them late
            for fd in readable:
                if fd in self.by_fd:
                    self.read_tap(fd, now)
            if len(readable) > 0:
                self.serve_clients(readable)
            if now - self.last_flush > 1.0:
                self.flush()
                self.last_flush = now
        self.close()

    def close(self) -> None:
        self.flush()
        for link in self.links.values():
            if link.pcap is not None:
                link.pcap.close()
            for fd in link.fds:
                os.close(fd)
        self.links.clear()
        self.listener.close()
        if os.path.exists(self.sock_path):
            os.unlink(self.sock_path)


def main() -> None:
    ap = argparse.ArgumentParser(description="wanbed wire link emulator")
    ap.add_argument("--socket", required=True)
    ap.add_argument("--prefix", required=True)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s wire %(message)s")
    emu = Emulator(args.socket, args.prefix)
    try:
        # Frames must leave on time even when iperf3 and friends keep both cores busy: a low real-time
        # priority removes CFS wake-up latency (ms) from the delay error; the kernel's RT throttling
        # still leaves 5% of each core to everyone else if the relay ever saturates a core.
        os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(1))
    except (OSError, AttributeError):
        try:
            os.nice(-10)
        except OSError:
            pass
    signal.signal(signal.SIGTERM, lambda *_: setattr(emu, "running", False))
    signal.signal(signal.SIGINT, signal.SIG_IGN)    # the CLI's Ctrl-C must not cut links of a running network
    emu.run()


if __name__ == "__main__":
    main()
