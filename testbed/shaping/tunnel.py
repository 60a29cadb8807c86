"""The UDP tunnel that joins two halves of the wire emulator on different machines.

A link whose two ends live on different machines is split: each machine's
emulator holds the TAP of its own end. Frames read from that TAP are impaired
there (the sending half: loss, duplication, rate and queue, delay and jitter)
and then sent to the other machine's emulator in one UDP datagram each; the
receiving half writes them to its TAP as they arrive. Two emulators share ONE
UDP socket per machine pair; every datagram starts with a small header:

    version (1 byte), kind (1), direction (1: 0 = a->b, 1 = b->a), flags (1),
    link number (4, agreed by the controller for each split link),
    sequence (4, per link and direction: the receiver counts the gaps)

Kinds: DATA (a frame: its virtio-net header and Ethernet frame follow), PROBE
and REPLY (the payload is echoed: the prober's send time), CARRIER (flags bit 0
= up; the other half applies a carrier change of the link as a whole).

The tunnel's own one-way delay is measured by probes over the same socket and
subtracted from the configured delay at the sending half, so the link's delay
stays the configured one. The estimate is the median of round trip / 2; its
jitter the spread between the 10th and 90th percentile of those halves.
"""
from __future__ import annotations

import statistics
import struct
from dataclasses import dataclass

HEADER = struct.Struct("!BBBBII")
VERSION = 1
DATA, PROBE, REPLY, CARRIER = 0, 1, 2, 3
PROBE_BODY = struct.Struct("!Id")        # probe number, prober's monotonic send time
SOCKET_BUFFER = 4 << 20                 # bursts at the link rate must not overflow the kernel's default
DIRECTIONS = ("a->b", "b->a")


@dataclass(frozen=True)
class TunnelEstimate:
    delay: float        # one-way delay subtracted at the sending half (median of rtt / 2), seconds
    minimum: float      # smallest rtt / 2
    jitter: float       # p90 - p10 of rtt / 2
    samples: int


def estimate(rtts: list[float]) -> TunnelEstimate:
    """The one-way delay of a tunnel from its probes' round trips (seconds; at least one)."""
    if not rtts:
        raise ValueError("no probe came back")
    halves = sorted(r / 2 for r in rtts)
    n = len(halves)
    p10, p90 = halves[round(0.1 * (n - 1))], halves[round(0.9 * (n - 1))]
    return TunnelEstimate(statistics.median(halves), halves[0], p90 - p10, n)


def delay_error(link_id: str, direction: int, delay: float, peer: str, tunnel_delay: float) -> str | None:
    """Why a configured delay cannot be kept across the tunnel to `peer`, or None when it can."""
    if delay >= tunnel_delay:
        return None
    return (f"link {link_id}: the {DIRECTIONS[direction]} delay of {delay * 1e3:.3f} ms is below the measured "
            f"one-way delay of the tunnel to machine {peer} ({tunnel_delay * 1e3:.3f} ms); a link across machines "
            f"needs at least that delay")


def pack(kind: int, direction: int, number: int, seq: int, flags: int = 0) -> bytes:
    return HEADER.pack(VERSION, kind, direction, flags, number, seq & 0xFFFFFFFF)
