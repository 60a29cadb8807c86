"""The reconnect backoff shared by the link dialler, the subscriber clients and `testbed sub --durable`."""
from __future__ import annotations

import random

import pytest

from node.backoff import Backoff


def test_waits_double_up_to_the_ceiling_and_reset() -> None:
    b = Backoff(0.5, 3.0, jitter=0.0)
    assert [b.wait() for _ in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    b.reset()
    assert b.wait() == 0.5


def test_jitter_spreads_the_waits_below_the_unjittered_one() -> None:
    # many clients that lost the same node at once: their first retries must not coincide
    firsts = [Backoff(1.0, 8.0, rng=random.Random(seed)).wait() for seed in range(50)]
    assert all(0.5 <= w <= 1.0 for w in firsts)
    assert max(firsts) - min(firsts) > 0.25
    b = Backoff(1.0, 8.0, rng=random.Random(1))
    ceilings = [1.0, 2.0, 4.0, 8.0, 8.0]
    for ceiling in ceilings:
        assert ceiling / 2 <= b.wait() <= ceiling


@pytest.mark.parametrize("low, high, jitter", [(0.0, 1.0, 0.5), (2.0, 1.0, 0.5), (0.1, 1.0, 1.5)])
def test_bad_bounds_are_refused(low: float, high: float, jitter: float) -> None:
    with pytest.raises(ValueError):
        Backoff(low, high, jitter)
