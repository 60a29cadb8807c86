"""Workload planning and summary speed (no root needed).

1. schedule generation: 20 nodes x 1 model hour at Normal(50 s) interarrivals with the thesis
   Table 6.1 size mix (the chapter 6 set-up: 1440 submissions), and the same for 24 model hours
   (34,560) to see the steady rate. Bound: 100,000 planned submissions per second, so planning
   never delays the start of a cell noticeably.
2. summary: summarize() over a synthetic run directory of 20 nodes holding 100,000 accepted
   submissions and their deliveries. Bound: 50,000 records per second (a long run's summary in
   seconds, not minutes).
Prints `measured / bound = ratio` lines (ratio > 1 is better than the bound here).
"""
from __future__ import annotations

import json
import random
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from testbed.experiment import summary, workload  # noqa: E402
from testbed.scenario.loader import load_text  # noqa: E402
from testbed.scenario.spec import Scenario  # noqa: E402

NODES = 20
SCHEDULE_BOUND = 100_000.0       # planned submissions per second
SUMMARY_BOUND = 50_000.0         # records per second
SUMMARY_MESSAGES = 100_000
REPEATS = 5


def scenario(hours: float) -> Scenario:
    data = {"name": "bench-workload", "seed": 1, "duration": hours * 3600.0,
            "topology": {"generator": "ring", "params": {"n": NODES}},
            "workload": {"generators": [{"interarrival": {"dist": "normal", "mean": 50},
                                         "size": {"dist": "thesis", "fragment_size": 1000}}]}}
    return load_text(yaml.safe_dump(data), "bench")


def bench_schedule(hours: float) -> None:
    s = scenario(hours)
    names = [f"n{i}" for i in range(1, NODES + 1)]
    best = float("inf")
    count = 0
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        plan = workload.schedule(s, names)
        best = min(best, time.perf_counter() - t0)
        count = len(plan)
    rate = count / best
    print(f"workload schedule {NODES} nodes x {hours:g} model h at 50 s ({count} submissions): "
          f"measured {rate:,.0f}/s / bound {SCHEDULE_BOUND:,.0f}/s = ratio {rate / SCHEDULE_BOUND:.2f} "
          f"(best of {REPEATS}, {best * 1000:.1f} ms)")


def write_run(rep: Path, s: Scenario) -> int:
    """A synthetic run directory: every message submitted at one node and delivered at another."""
    rng = random.Random(5)
    names = [f"n{i}" for i in range(1, NODES + 1)]
    subs: dict[str, list[str]] = {n: [] for n in names}
    dels: dict[str, list[str]] = {n: [] for n in names}
    t0 = 1_700_000_000.0
    for i in range(SUMMARY_MESSAGES):
        src, dst = rng.sample(names, 2)
        size = workload.thesis_fragments(rng) * 1000
        at = t0 + i * 0.01
        subs[src].append(json.dumps({"ts": at, "node": src, "msg_id": f"m{i}", "src": src, "dst": dst,
                                     "size": size, "accepted": True, "reason": ""}))
        dels[dst].append(json.dumps({"ts": at + 2, "node": dst, "msg_id": f"m{i}", "src": src, "dst": dst,
                                     "size": size, "fragments": max(1, size // 1000), "mode": "fragmenting",
                                     "submit_ts": at, "deliver_ts": at + 2 + rng.random(), "hops": 3}))
    for n in names:
        d = rep / "nodes" / n
        d.mkdir(parents=True)
        (d / "submissions.jsonl").write_text("\n".join(subs[n]) + "\n")
        (d / "deliveries.jsonl").write_text("\n".join(dels[n]) + "\n")
    return 2 * SUMMARY_MESSAGES


def bench_summary() -> None:
    s = scenario(1)
    with tempfile.TemporaryDirectory(prefix="bench-summary-") as tmp:
        rep = Path(tmp) / "exp" / "cell" / "1"
        records = write_run(rep, s)
        best = float("inf")
        result: dict = {}
        for _ in range(3):
            t0 = time.perf_counter()
            result = summary.summarize(rep, s, complete=True, drain={"empty": True, "in_flight": 0})
            best = min(best, time.perf_counter() - t0)
        assert result["delivered"] == SUMMARY_MESSAGES and result["lost"] == 0, result
    rate = records / best
    print(f"summary {NODES} nodes, {records:,} records: measured {rate:,.0f} records/s / bound "
          f"{SUMMARY_BOUND:,.0f} records/s = ratio {rate / SUMMARY_BOUND:.2f} (best of 3, {best:.2f} s)")


def main() -> None:
    bench_schedule(1)
    bench_schedule(24)
    bench_summary()


if __name__ == "__main__":
    main()
