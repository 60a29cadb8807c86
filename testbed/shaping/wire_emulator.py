"""The `wire` userspace link emulator: relays Ethernet frames between TAP devices.

Run as `python -m testbed.shaping.wire_emulator --socket PATH --prefix PFX`; it
outlives the CLI that started it and is controlled over a unix socket with JSON
lines ({"op": "add_link" | "set_params" | "set_carrier" | "counters" |
"counters_all" (every link at once) |
"shutdown", ...} -> {"ok": true, ...} or {"ok": false, "error": "..."}); a link
across machines adds "tunnel_open" | "tunnel_connect" | "tunnel_measure" |
"tunnel_status" (one tunnel per other machine) and "add_remote" (its local end).

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
- Links across machines (a "split" link, add_remote): this process holds only
  the TAP of the link's local end and is the sending half for the direction
  leaving it. That direction is impaired here as above, with the tunnel's
  measured one-way delay subtracted from the delay, and each frame is then sent
  to the peer machine's emulator over the UDP tunnel of that machine pair
  (testbed/shaping/tunnel.py: the header, the probes); the other direction
  arrives from the tunnel and is written to the TAP at once, with no second
  impairment. The sending half counts the impairment drops, the receiving half
  what it wrote (packets, bytes) and the pcap. A carrier change at either half
  is also sent to the other, so it applies to the link as a whole. The TAP of
  a split link is opened without TSO: the kernel hands over MTU-sized frames,
  each of which fits in one datagram. Half duplex needs both ends in one
  process (one transmitter) and is refused for a split link.
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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from testbed.shaping import tunnel

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
class Peer:
    """The other machine's emulator, reached over one UDP socket shared by every split link to it."""
    name: str
    sock: socket.socket
    connected: bool = False
    links: dict[int, "Link"] = field(default_factory=dict)     # by the link number of the tunnel header
    estimate: tunnel.TunnelEstimate | None = None
    subtract: float = 0.0                   # the last estimate's delay: taken off every frame sent to this peer
    rtts: list[float] = field(default_factory=list)
    probes_left: int = 0
    probes_sent: int = 0
    probe_interval: float = 0.002
    next_probe: float = 0.0
    last_probe: float = 0.0
    unknown: int = 0                        # datagrams for no known link (or malformed)


@dataclass
class Direction:
    params: DirParams
    out_fd: int                             # -1 when the direction leaves over a tunnel
    label: int                              # 0 = a->b, 1 = b->a (pcap and counters)
    tunnel: Peer | None = None              # split link, sending half: frames go to this peer
    number: int = 0                         # split link: the link number in the tunnel header
    tx_seq: int = 0                         # split link, sending half: datagrams sent
    rx_next: int = 0                        # split link, receiving half: next expected sequence number
    tunnel_lost: int = 0                    # split link, receiving half: sequence gaps (lost between the halves)
    busy_until: float = 0.0                 # rate limiter: when the last queued frame finishes serialising
    in_limiter: deque = field(default_factory=deque)   # finish times of frames still serialising/queued
    last_departure: float = 0.0
    ge_bad: bool = False
    counters: dict[str, int] = field(default_factory=lambda: dict(
        packets=0, bytes=0, dropped_loss=0, dropped_queue=0, dropped_down=0, duplicated=0))


@dataclass
class Link:
    link_id: str
    fds: tuple[int, ...]                    # both TAPs, or the local one of a split link
    dirs: tuple[Direction, Direction]
    peer: Peer | None = None                # split link: the emulator holding the other end
    up: bool = True
    half: bool = False                      # duplex half: both directions share one transmitter
    medium_free: float = 0.0                # half duplex: when the shared transmitter is next free
    epoch: int = 0                          # bumped on carrier down: in-flight frames of an older epoch are dropped
    carrier_gen: int = 0                    # split link: the last carrier change applied (see set_carrier)
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


def open_tap(name: str, gso: bool = True) -> int:
    """A TAP with virtio-net headers; gso=False makes the kernel segment to MTU-sized frames (split links)."""
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    try:
        fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TAP | IFF_NO_PI | IFF_VNET_HDR))
        fcntl.ioctl(fd, TUNSETVNETHDRSZ, struct.pack("i", VNET_HDR_LEN))
        fcntl.ioctl(fd, TUNSETOFFLOAD, TUN_F_CSUM | (TUN_F_TSO4 | TUN_F_TSO6 if gso else 0))
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
        self.peers: dict[str, Peer] = {}
        self.by_sock: dict[int, Peer] = {}
        self.last_flush = time.monotonic()

    # ---- control -------------------------------------------------------
    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        op = req.get("op")
        if op == "add_link":
            return self.add_link(req)
        if op == "add_remote":
            return self.add_remote(req)
        if op in ("tunnel_open", "tunnel_connect", "tunnel_measure", "tunnel_status"):
            return self.tunnel_op(op, req)
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
            new = [DirParams.from_dict(req[key]) if req.get(key) is not None else None
                   for key in ("a_to_b", "b_to_a")]
            for i, p in enumerate(new):
                d = link.dirs[i]
                if p is not None and d.tunnel is not None:
                    err = tunnel.delay_error(link.link_id, i, p.delay, d.tunnel.name, d.tunnel.subtract)
                    if err:
                        return {"ok": False, "error": err}
            for i, p in enumerate(new):
                if p is not None:
                    link.dirs[i].params = p
            return {"ok": True}
        if op == "set_carrier":
            up = bool(req["up"])
            self.apply_carrier(link, up)
            if link.peer is not None and link.peer.connected:
                # The other half drops too and turns its TAP's carrier off: the link goes down as a whole. Each
                # change is numbered past every change this half has seen, and a half ignores a forwarded change
                # older than its own: a forward that arrives late cannot undo a newer change.
                link.carrier_gen += 1
                self.tunnel_send(link.peer, tunnel.pack(tunnel.CARRIER, 0, self.link_number(link), link.carrier_gen,
                                                        int(up)))
            return {"ok": True}
        if op == "counters":
            self.flush()
            out: dict[str, Any] = {"ok": True, "a_to_b": link.dirs[0].counters, "b_to_a": link.dirs[1].counters}
            if link.peer is not None:
                out["tunnel"] = {"sent": sum(d.tx_seq for d in link.dirs),
                                 "lost": sum(d.tunnel_lost for d in link.dirs)}
            return out
        return {"ok": False, "error": f"unknown op {op!r}"}

    def make_tap(self, end: dict[str, str], fds: list[int], gso: bool = True) -> None:
        """Open a TAP, append its fd to fds (before anything can fail), move it into end's namespace as its name."""
        tmp = f"{self.prefix}w{self.next_index}"
        self.next_index += 1
        fds.append(open_tap(tmp, gso))
        ns, ifname = end["netns"], end["ifname"]
        run_ip(["link", "set", "dev", tmp, "netns", ns])
        run_ip(["-n", ns, "link", "set", "dev", tmp, "name", ifname])
        run_ip(["-n", ns, "link", "set", "dev", ifname, "up"])

    @staticmethod
    def open_pcap(link: Link, req: dict[str, Any]) -> None:
        if req.get("pcap"):
            link.snaplen = int(req.get("snaplen") or 128)
            link.pcap = open(req["pcap"], "wb")
            # nanosecond-resolution pcap header, linktype 1 (Ethernet)
            link.pcap.write(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, link.snaplen, 1))

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
                self.make_tap(req[end], fds)
        except Exception as e:
            for fd in fds:
                os.close(fd)        # the TAPs vanish with their fds
            return {"ok": False, "error": str(e)}
        dirs = (Direction(DirParams.from_dict(req.get("a_to_b") or {}), fds[1], 0),
                Direction(DirParams.from_dict(req.get("b_to_a") or {}), fds[0], 1))
        link = Link(link_id, (fds[0], fds[1]), dirs, half=duplex == "half")
        self.open_pcap(link, req)
        self.links[link_id] = link
        self.by_fd[fds[0]] = (link, dirs[0])
        self.by_fd[fds[1]] = (link, dirs[1])
        return {"ok": True}

    def add_remote(self, req: dict[str, Any]) -> dict[str, Any]:
        """One end of a split link: {"link_id", "number", "peer", "end": "a" | "b", "local": {netns, ifname},
        "a_to_b", "b_to_a", "duplex", "pcap", "snaplen"}; this half sends the direction leaving `end`."""
        link_id, number = req["link_id"], int(req["number"])
        peer = self.peers.get(req.get("peer", ""))
        if link_id in self.links:
            return {"ok": False, "error": f"link {link_id!r} exists"}
        if peer is None or not peer.connected or peer.estimate is None:
            return {"ok": False, "error": f"link {link_id}: the tunnel to machine {req.get('peer')} is not "
                                          f"connected and measured"}
        if number in peer.links:
            return {"ok": False, "error": f"link {link_id}: link number {number} is taken on the tunnel to "
                                          f"machine {peer.name}"}
        if (req.get("duplex") or "full") != "full":
            return {"ok": False, "error": f"link {link_id}: half duplex needs both ends on one machine (one "
                                          f"transmitter); its ends are on two"}
        if req.get("end") not in ("a", "b"):
            return {"ok": False, "error": f"link {link_id}: end must be a or b, got {req.get('end')!r}"}
        local = 0 if req["end"] == "a" else 1
        params = (DirParams.from_dict(req.get("a_to_b") or {}), DirParams.from_dict(req.get("b_to_a") or {}))
        err = tunnel.delay_error(link_id, local, params[local].delay, peer.name, peer.estimate.delay)
        if err:
            return {"ok": False, "error": err}
        fds: list[int] = []
        try:
            self.make_tap(req["local"], fds, gso=False)
        except Exception as e:
            for fd in fds:
                os.close(fd)
            return {"ok": False, "error": str(e)}
        sending = Direction(params[local], -1, local, tunnel=peer, number=number)
        receiving = Direction(params[1 - local], fds[0], 1 - local, number=number)
        dirs = (sending, receiving) if local == 0 else (receiving, sending)
        link = Link(link_id, (fds[0],), dirs, peer=peer)
        self.open_pcap(link, req)
        self.links[link_id] = link
        self.by_fd[fds[0]] = (link, sending)
        peer.links[number] = link
        return {"ok": True}

    @staticmethod
    def link_number(link: Link) -> int:
        return link.dirs[0].number

    def apply_carrier(self, link: Link, up: bool) -> None:
        if not up and link.up:
            link.epoch += 1
        link.up = up
        for fd in link.fds:
            set_tap_carrier(fd, up)

    # ---- tunnels to other machines' emulators ----------------------------
    def tunnel_op(self, op: str, req: dict[str, Any]) -> dict[str, Any]:
        name = str(req.get("peer") or "")
        peer = self.peers.get(name)
        if op == "tunnel_open":
            if peer is not None:
                return {"ok": False, "error": f"a tunnel to machine {name} exists"}
            host = str(req["bind"])
            s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_DGRAM)
            try:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, tunnel.SOCKET_BUFFER)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, tunnel.SOCKET_BUFFER)
                s.bind((host, int(req.get("port") or 0)))
            except OSError as e:
                s.close()
                return {"ok": False, "error": f"tunnel to machine {name}: cannot bind {host}: {e.strerror}"}
            s.setblocking(False)
            self.peers[name] = Peer(name, s)
            self.by_sock[s.fileno()] = self.peers[name]
            return {"ok": True, "port": s.getsockname()[1]}
        if peer is None:
            return {"ok": False, "error": f"no tunnel to machine {name}"}
        if op == "tunnel_connect":
            try:
                peer.sock.connect((str(req["host"]), int(req["port"])))
            except OSError as e:
                return {"ok": False, "error": f"tunnel to machine {name}: cannot reach {req['host']}: {e.strerror}"}
            peer.connected = True
            return {"ok": True}
        if op == "tunnel_measure":
            if not peer.connected:
                return {"ok": False, "error": f"the tunnel to machine {name} is not connected"}
            peer.rtts, peer.estimate = [], None
            peer.probes_left, peer.probes_sent = int(req.get("probes") or 50), 0
            peer.probe_interval = float(req.get("interval") or 0.002)
            peer.next_probe = time.monotonic()
            return {"ok": True}
        # tunnel_status: done once every probe is sent and back, or the stragglers had a second
        waiting = peer.probes_left > 0 or (len(peer.rtts) < peer.probes_sent
                                           and time.monotonic() - peer.last_probe < 1.0)
        out: dict[str, Any] = {"ok": True, "done": not waiting, "sent": peer.probes_sent, "back": len(peer.rtts)}
        if not waiting and peer.rtts:
            if peer.estimate is None:
                peer.estimate = tunnel.estimate(peer.rtts)
                peer.subtract = peer.estimate.delay
            out.update(delay=peer.estimate.delay, minimum=peer.estimate.minimum, jitter=peer.estimate.jitter)
        return out

    def tunnel_send(self, peer: Peer, *parts: bytes) -> bool:
        try:
            peer.sock.sendmsg(parts)
            return True
        except OSError:             # buffer full, or the peer's socket is gone (ICMP refused): a lost datagram
            return False

    def send_probes(self, now: float) -> None:
        for peer in self.peers.values():
            if peer.probes_left > 0 and peer.next_probe <= now:
                body = tunnel.PROBE_BODY.pack(peer.probes_sent, time.monotonic())
                self.tunnel_send(peer, tunnel.pack(tunnel.PROBE, 0, 0, peer.probes_sent), body)
                peer.probes_sent += 1
                peer.probes_left -= 1
                peer.last_probe = now
                peer.next_probe = now + peer.probe_interval

    def next_probe_due(self) -> float | None:
        due = [p.next_probe for p in self.peers.values() if p.probes_left > 0]
        return min(due) if due else None

    def read_tunnel(self, peer: Peer) -> None:
        for _ in range(READ_BATCH):
            try:
                data = peer.sock.recv(65536 + VNET_HDR_LEN + 64)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:         # an ICMP error of an earlier send (the peer not yet or no longer there)
                continue
            if len(data) < tunnel.HEADER.size:
                peer.unknown += 1
                continue
            version, kind, direction, flags, number, seq = tunnel.HEADER.unpack_from(data)
            if version != tunnel.VERSION or direction > 1:
                peer.unknown += 1
                continue
            if kind == tunnel.PROBE:
                self.tunnel_send(peer, tunnel.pack(tunnel.REPLY, 0, 0, seq), data[tunnel.HEADER.size:])
                continue
            if kind == tunnel.REPLY:
                if len(data) < tunnel.HEADER.size + tunnel.PROBE_BODY.size:
                    peer.unknown += 1
                    continue
                probe, sent = tunnel.PROBE_BODY.unpack_from(data, tunnel.HEADER.size)
                if probe < peer.probes_sent:
                    peer.rtts.append(time.monotonic() - sent)
                continue
            link = peer.links.get(number)
            if link is None:
                peer.unknown += 1
                continue
            if kind == tunnel.CARRIER:
                if seq > link.carrier_gen:
                    link.carrier_gen = seq
                    self.apply_carrier(link, bool(flags & 1))
                continue
            d = link.dirs[direction]
            if kind != tunnel.DATA or d.tunnel is not None:     # only the direction that arrives here
                peer.unknown += 1
                continue
            if seq >= d.rx_next:
                d.tunnel_lost += seq - d.rx_next
                d.rx_next = seq + 1
            if not link.up:
                d.counters["dropped_down"] += 1
                continue
            self.write_frame(link, d, data[tunnel.HEADER.size:])

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
        if d.tunnel is not None:
            delay -= d.tunnel.subtract      # the tunnel adds it on the way to the receiving half
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
            if d.tunnel is not None:
                # the receiving half counts and captures what it writes; a datagram lost on the way shows as
                # a gap in its sequence numbers
                if self.tunnel_send(d.tunnel, tunnel.pack(tunnel.DATA, d.label, d.number, d.tx_seq), frame):
                    d.tx_seq += 1
                else:
                    d.counters["dropped_queue"] += 1
                continue
            self.write_frame(link, d, frame)

    def write_frame(self, link: Link, d: Direction, frame: bytes) -> None:
        """Hand a frame to the receiving TAP; count and capture it."""
        try:
            os.write(d.out_fd, frame)
        except OSError:
            d.counters["dropped_queue"] += 1     # receiving side refused (queue full / gone)
            return
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
            if self.peers:
                self.send_probes(now)
            due = [self.heap[0][0]] if self.heap else []
            probe = self.next_probe_due()
            if probe is not None:
                due.append(probe)
            timeout = max(0.0, min(due) - time.monotonic()) if due else 1.0
            fds = [self.listener.fileno(), *self.clients, *self.by_fd, *self.by_sock]
            readable, _, _ = select.select(fds, [], [], min(timeout, 1.0))
            now = time.monotonic()
            self.deliver_due(now)       # due frames first: reading a batch must not make them late
            for fd in readable:
                if fd in self.by_fd:
                    self.read_tap(fd, now)
                elif fd in self.by_sock:
                    self.read_tunnel(self.by_sock[fd])
            if len(readable) > 0:
                self.serve_clients(readable)
            if now - self.last_flush > 1.0:
                self.flush()
                self.last_flush = now
        self.close()

    def close(self) -> None:
        self.flush()
        fds = []
        for link in self.links.values():
            if link.pcap is not None:
                link.pcap.close()
            fds += link.fds
        # closing a TAP's last fd removes its interface, and the kernel waits for an RCU grace period per
        # interface (17 ms here): one at a time, a ring of six links took 0.2 s; in parallel the waits overlap
        if fds:
            with ThreadPoolExecutor(max_workers=min(len(fds), 32)) as pool:
                list(pool.map(os.close, fds))
        self.links.clear()
        for peer in self.peers.values():
            peer.sock.close()
        self.peers.clear()
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
    # its links are closed and its files flushed: the interpreter's own teardown would only add to the wait of
    # the shaper's close()
    logging.shutdown()
    os._exit(0)


if __name__ == "__main__":
    main()
