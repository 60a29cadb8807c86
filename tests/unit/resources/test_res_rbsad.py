"""RBSAD: fraction delayed ~ p, mean delay ~ RBSAD, truncated at 0."""
from __future__ import annotations

import math

import pytest

from node.resources.rbsad import RbsadConfig, RbsadDelay
from node.errors import UserError


def test_fraction_and_mean() -> None:
    n, p, mean = 20000, 0.1, 400.0
    rb = RbsadDelay(RbsadConfig(mean=mean, probability=p), seed=11)
    waits = [rb.sample() for _ in range(n)]
    delayed = [w for w in waits if w > 0]
    # Fraction within 4 binomial standard deviations (sd = sqrt(p(1-p)/n) = 0.0021).
    assert abs(len(delayed) / n - p) < 4 * math.sqrt(p * (1 - p) / n)
    # Mean within 4 standard errors (sd mean/4 -> se = 100/sqrt(2000) = 2.2).
    assert abs(sum(delayed) / len(delayed) - mean) < 4 * (mean / 4) / math.sqrt(len(delayed))
    assert rb.snapshot()["delayed"] == len(delayed)


def test_truncated_at_zero_and_off() -> None:
    rb = RbsadDelay(RbsadConfig(mean=1.0, probability=1.0, stddev=10.0), seed=1)
    assert min(rb.sample() for _ in range(1000)) >= 0.0
    off = RbsadDelay(RbsadConfig(mean=0.0), seed=1)
    assert all(off.sample() == 0.0 for _ in range(100))


def test_seeded() -> None:
    a = RbsadDelay(seed=5)
    b = RbsadDelay(seed=5)
    assert [a.sample() for _ in range(100)] == [b.sample() for _ in range(100)]


def test_bad_config() -> None:
    with pytest.raises(UserError):
        RbsadDelay(RbsadConfig(probability=1.5))
