"""The root's allocation rule: each client's rate from the latest reports (pluggable, compared by name).

  decile           the paper's rule: R_i = R * w_i / sum(w). Two defects of the literal rule are resolved
                   here and in the protocol:
                   - sum(w) = 0 (every client below 10% full, the normal case outside a burst) is 0/0:
                     every client gets R/N;
                   - a client with w_i = 0 gets R_i = 0 and, if weights rode only on data frames, could never
                     report that it is filling: clients also report in a rate frame of their own whenever
                     the weight changes and at least every T/2 (node/rate/control.py).
                   Left as in the paper: while others have w > 0, a client below 10% sends nothing, so its
                   few messages wait until it passes 10% or everybody drops below it.
  decile_plus_one  w_i + 1 for a client whose queue is not empty (the other reading of the starvation
                   defect): nobody with messages is ever at rate 0
  backlog          proportional to the bytes each client holds (a finer signal than deciles)
  fixed            R/N whatever the reports say: the paper's "without control"
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass
class Report:
    """What the root knows of one client: its latest report."""
    weight: int = 0
    queue_bytes: int = 0
    queue_limit: int = 0
    heard: float = 0.0          # monotonic time of the report (0: never heard)


Rule = Callable[[float, dict[str, Report]], dict[str, float]]


def _share(total: float, signal: dict[str, float]) -> dict[str, float]:
    """total split in proportion to `signal`; an all-zero signal splits it evenly (the 0/0 case)."""
    s = sum(signal.values())
    if s <= 0:
        return {c: total / len(signal) for c in signal}
    return {c: total * v / s for c, v in signal.items()}


def decile_rule(total: float, reports: dict[str, Report]) -> dict[str, float]:
    return _share(total, {c: float(r.weight) for c, r in reports.items()})


def decile_plus_one_rule(total: float, reports: dict[str, Report]) -> dict[str, float]:
    return _share(total, {c: float(r.weight + 1 if r.queue_bytes > 0 else 0) for c, r in reports.items()})


def backlog_rule(total: float, reports: dict[str, Report]) -> dict[str, float]:
    return _share(total, {c: float(r.queue_bytes) for c, r in reports.items()})


def fixed_rule(total: float, reports: dict[str, Report]) -> dict[str, float]:
    return {c: total / len(reports) for c in reports}


RULES: dict[str, Rule] = {"decile": decile_rule, "decile_plus_one": decile_plus_one_rule,
                          "backlog": backlog_rule, "fixed": fixed_rule}


def allocate(policy: str, total: float, reports: dict[str, Report]) -> dict[str, float]:
    """Each client's rate (same unit as `total`); the rates always sum to `total`."""
    if not reports:
        return {}
    return RULES[policy](total, reports)
