"""Stall detection: nothing delivered for `stall_after` while copies are still held.

A store-and-forward deadlock (Brachman 1989 ch. 6: one shared transit pool, every
buffer full of messages waiting for the next MTA) does not lose a message: the
copies stay in the spools, so the loss checker calls them late. This tells the
deadlock apart from a slow network: the run is stalled when its last silent
stretch (from the last delivery, or the workload's start if there was none, to
the end of the run) reached `stall_after` wall seconds and copies were held at
the end. Times are wall seconds; the result reports model seconds as well.
"""
from __future__ import annotations

from typing import Any, Iterable


def stall(deliver_ts: Iterable[float], start: float, end: float, stall_after: float, held: int,
          held_where: dict[str, Any] | None = None, time_scale: float = 1.0) -> dict[str, Any]:
    """The stall verdict of one run.

    deliver_ts: wall times of the (first) deliveries; start: the workload's start; end: the end of the run
    (the drain's end); stall_after: wall seconds; held: copies still held at the end (the checker's late);
    held_where: per node and state, as summary.json's late_where. Returns {"stalled", "since_model_s"
    (model time after the workload's start of the last delivery), "silent_model_s", "stall_after_model_s",
    "held", "held_where"}."""
    scale = time_scale if time_scale > 0 else 1.0
    last = max((t for t in deliver_ts if t <= end), default=None)
    since = start if last is None or last < start else last
    silent = max(0.0, end - since)
    stalled = held > 0 and silent >= stall_after
    return {"stalled": stalled,
            "since_model_s": round((since - start) / scale, 3),
            "silent_model_s": round(silent / scale, 3),
            "stall_after_model_s": round(stall_after / scale, 3),
            "held": held,
            "held_where": dict(held_where or {}) if stalled else {}}


def text(info: dict[str, Any]) -> str:
    """One sentence for the console and the verdict; "" when not stalled."""
    if not info.get("stalled"):
        return ""
    where = info.get("held_where") or {}
    nodes = ", ".join(sorted(where)) if isinstance(where, dict) else ""
    return (f"STALLED: nothing delivered for the last {info.get('silent_model_s')} model s "
            f"(from model time {info.get('since_model_s')} s; stall_after {info.get('stall_after_model_s')} s) "
            f"while {info.get('held')} copies were held{' at ' + nodes if nodes else ''} "
            f"(late/held, not lost)")
