"""Clock offset and drift from NTP-style exchanges (testbed/clockoffset.py), on synthetic exchanges whose true
offset is known, and the rule that flags an uncertain run."""
import random

import pytest

from testbed.clockoffset import ClockError, Exchange, clock_model, estimate, flag_limit, flagged

OFFSET = 0.050          # the machine's clock runs 50 ms ahead of the controller's


def exchanges(rng: random.Random, start: float, n: int, offset: float, drift: float = 0.0) -> list[Exchange]:
    """Probes every 0.1 s over a path of 0.3 ms each way plus asymmetric jitter: up to 20 ms out (exponential,
    mean 4 ms), 1 ms mean back; the machine answers after up to 0.2 ms."""
    out = []
    for i in range(n):
        t0 = start + 0.1 * i
        there = 0.0003 + min(rng.expovariate(1 / 0.004), 0.020)
        back = 0.0003 + rng.expovariate(1 / 0.001)
        hold = rng.uniform(0.0, 0.0002)
        skew = offset + drift * (t0 - start)
        t1 = t0 + there + skew
        t2 = t1 + hold
        out.append(Exchange(t0, t1, t2, t0 + there + hold + back))
    return out


def test_a_50ms_offset_is_found_within_2ms_under_asymmetric_jitter() -> None:
    rng = random.Random(7)
    for _ in range(20):                                  # twenty independent runs, each of 30 exchanges
        est = estimate(exchanges(rng, 1000.0, 30, OFFSET))
        assert abs(est.offset - OFFSET) <= 0.002, est
        assert abs(est.offset - OFFSET) <= est.uncertainty + 1e-12      # the truth lies within the bound
        assert est.samples == 30 and est.rtt == pytest.approx(2 * est.uncertainty)


def test_the_minimum_round_trip_sample_is_kept() -> None:
    slow = Exchange(0.0, 0.060, 0.060, 0.030)            # 30 ms round trip, all of it on the way back
    fast = Exchange(1.0, 1.0505, 1.0505, 1.001)          # 1 ms round trip
    est = estimate([slow, fast])
    assert (est.offset, est.rtt, est.at) == (pytest.approx(0.050), pytest.approx(0.001), pytest.approx(1.0005))
    assert estimate([slow]).offset == pytest.approx(0.045)   # the asymmetric one alone is 5 ms off


def test_drift_from_the_start_and_end_estimates() -> None:
    rng = random.Random(11)
    drift = 20e-6                                        # 20 ppm: 2 ms over the 100 s run
    start = estimate(exchanges(rng, 0.0, 30, OFFSET, drift))
    end = estimate(exchanges(rng, 100.0, 30, OFFSET + drift * 100.0, drift))
    model = clock_model(start, end)
    assert model.drift == pytest.approx(drift, abs=4e-6 * 4)
    assert abs(model.offset_at(50.0) - (OFFSET + drift * 50.0)) <= 0.002
    assert model.to_controller(50.0 + model.offset_at(50.0)) == pytest.approx(50.0, abs=1e-6)
    assert model.uncertainty == max(start.uncertainty, end.uncertainty)


def test_flagged_when_the_uncertainty_exceeds_a_tenth_of_the_smallest_delay() -> None:
    delays = [0.025, 0.005, 0.1]
    assert flag_limit(delays) == pytest.approx(0.0005)
    assert flagged(0.0006, delays) and not flagged(0.0004, delays)
    assert not flagged(0.0005, [0.005])                  # exactly 10% is not above it
    assert flagged(1e-6, [0.0, 0.01])                    # a 0 s delay leaves no room at all


@pytest.mark.parametrize("call, message", [
    (lambda: estimate([]), "no clock exchanges"),
    (lambda: estimate([Exchange(1.0, 2.0, 2.0, 0.5)]), "clock exchange 0 is not possible"),
    (lambda: estimate([Exchange(0.0, 2.0, 1.0, 1.0)]), "clock exchange 0 is not possible"),
    (lambda: estimate([Exchange(0.0, float("nan"), 1.0, 1.0)]), "clock exchange 0 is not possible"),
    (lambda: clock_model(estimate([Exchange(5.0, 5.1, 5.1, 5.2)]), estimate([Exchange(1.0, 1.1, 1.1, 1.2)])),
     "must come after the start estimate"),
    (lambda: flag_limit([]), "no configured one-way delay"),
    (lambda: flag_limit([-1.0]), "negative or not a number"),
])
def test_every_impossible_input_is_one_error(call, message: str) -> None:
    with pytest.raises(ClockError, match=message):
        call()
