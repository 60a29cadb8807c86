"""The tunnel between wire-emulator halves: its header, its delay estimate, and the delay a split link must have."""
from __future__ import annotations

import pytest

from testbed.shaping import tunnel


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
