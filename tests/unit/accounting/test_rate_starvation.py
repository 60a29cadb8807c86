"""The rate account's starvation measure: time with a queue and (almost) no rate."""
from __future__ import annotations

from testbed.accounting.rates import starved_seconds


def report(ts: float, queue: int, rate: float) -> dict:
    return {"ts": ts, "queue_bytes": queue, "rate_bps": rate}


def test_only_intervals_with_a_queue_and_a_rate_below_the_bound_count() -> None:
    reps = [report(100.0, 5000, 0.0),       # queued, rate 0: starved until the next report (0.25 wall s)
            report(100.25, 5000, 50.0),     # queued, below the bound of 100: starved
            report(100.5, 0, 0.0),          # nothing queued: not starved
            report(100.75, 5000, 500.0),    # a rate above the bound: not starved
            report(101.0, 5000, 0.0)]       # the last report: where it ends is unknown, it counts nothing
    # 0.5 wall s at time_scale 0.125 = 4 model s; the reports' order in the file does not matter
    assert starved_seconds(list(reversed(reps)), below_bps=100.0, scale=0.125) == 4.0
    assert starved_seconds([], below_bps=100.0, scale=1.0) == 0.0
    # a line without its numbers is skipped, not a failed summary
    assert starved_seconds([*reps, {"ts": 100.1, "queue_bytes": None}], below_bps=100.0, scale=0.125) == 4.0
