"""The tunnel between wire-emulator halves: its header, its delay estimate, the delay a split link must have, and
what an emulator does with datagrams from the other half (real UDP sockets; no TAP, so no root)."""
from __future__ import annotations

import socket
import time

import pytest

from testbed.shaping import tunnel
from testbed.shaping.wire_emulator import DirParams, Direction, Emulator, Link


def test_header_round_trip_and_size() -> None:
    raw = tunnel.pack(tunnel.DATA, 1, 70000, 2**32 + 5, flags=1)
    assert len(raw) == tunnel.HEADER.size == 12
    assert tunnel.HEADER.unpack(raw) == (tunnel.VERSION, tunnel.DATA, 1, 1, 70000, 5)   # sequence wraps


def test_estimate_is_the_median_half_round_trip() -> None:
    rtts = [0.002] * 8 + [0.0002, 0.050]        # one fast and one very late probe do not move the median
    est = tunnel.estimate(rtts)
    assert est.delay == pytest.approx(0.001)
    assert est.minimum == pytest.approx(0.0001)
    assert est.samples == 10
    assert est.jitter == pytest.approx(0.0)      # p10..p90 excludes the two outliers
    spread = tunnel.estimate([i * 0.001 for i in range(1, 12)])
    assert spread.jitter == pytest.approx((0.010 - 0.002) / 2)
    with pytest.raises(ValueError):
        tunnel.estimate([])


def test_delay_below_the_tunnel_names_the_link_direction_and_machine() -> None:
    assert tunnel.delay_error("n1-n2", 0, 0.010, "m2", 0.0004) is None
    assert tunnel.delay_error("n1-n2", 0, 0.0004, "m2", 0.0004) is None
    msg = tunnel.delay_error("n1-n2", 1, 0.0001, "m1", 0.0004)
    assert msg == ("link n1-n2: the b->a delay of 0.100 ms is below the measured one-way delay of the tunnel to "
                   "machine m1 (0.400 ms); a link across machines needs at least that delay")


@pytest.fixture
def emulator(tmp_path):
    """An emulator (no TAPs) with a tunnel to "m2", and a plain UDP socket standing in for m2's emulator."""
    emu = Emulator(str(tmp_path / "wire.sock"), "tbtest")
    port = emu.handle({"op": "tunnel_open", "peer": "m2", "bind": "127.0.0.1"})["port"]
    other = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    other.bind(("127.0.0.1", 0))
    other.connect(("127.0.0.1", port))
    assert emu.handle({"op": "tunnel_connect", "peer": "m2", "host": "127.0.0.1",
                       "port": other.getsockname()[1]})["ok"]
    try:
        yield emu, other
    finally:
        other.close()
        emu.close()


def deliver(emu: Emulator, other: socket.socket, *datagrams: bytes) -> None:
    for d in datagrams:
        other.send(d)
    time.sleep(0.05)
    emu.read_tunnel(emu.peers["m2"])


def test_malformed_datagrams_are_counted_not_fatal(emulator) -> None:
    emu, other = emulator
    deliver(emu, other, b"\x01\x02", tunnel.pack(tunnel.REPLY, 0, 0, 0) + b"\x00",
            bytes([9]) + tunnel.pack(tunnel.DATA, 0, 1, 0)[1:], tunnel.pack(tunnel.DATA, 0, 77, 0) + b"frame")
    assert emu.peers["m2"].unknown == 4
    deliver(emu, other, tunnel.pack(tunnel.PROBE, 0, 0, 3) + tunnel.PROBE_BODY.pack(3, 1.5))
    echo = other.recv(100)                                   # probes are still answered
    assert tunnel.HEADER.unpack_from(echo)[1] == tunnel.REPLY and echo.endswith(tunnel.PROBE_BODY.pack(3, 1.5))


def test_a_late_forwarded_carrier_change_does_not_undo_a_newer_one(emulator) -> None:
    emu, other = emulator
    peer = emu.peers["m2"]
    dirs = (Direction(DirParams(), -1, 0, tunnel=peer, number=5), Direction(DirParams(), -1, 1, number=5))
    link = Link("ab", (), dirs, peer=peer)
    emu.links["ab"], peer.links[5] = link, link
    deliver(emu, other, tunnel.pack(tunnel.CARRIER, 0, 5, 1, flags=0))        # the other half: down
    assert not link.up
    assert emu.handle({"op": "set_carrier", "link_id": "ab", "up": True})["ok"]   # then up here: forwarded as 2
    fwd = tunnel.HEADER.unpack_from(other.recv(100))
    assert fwd[1] == tunnel.CARRIER and fwd[3] == 1 and fwd[5] == 2
    deliver(emu, other, tunnel.pack(tunnel.CARRIER, 0, 5, 1, flags=0))        # the old "down" again, late
    assert link.up
    deliver(emu, other, tunnel.pack(tunnel.CARRIER, 0, 5, 3, flags=0))        # a newer down applies
    assert not link.up
