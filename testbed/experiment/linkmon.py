"""Traffic on the emulated links: links.jsonl.

The shapers count frames per link and direction (testbed/shaping/base.py); LinkMonitor reads every link's
counters in ONE batched call per sample (Shaper.counters_all()) every `interval` seconds, in a thread, and
appends one "link" record (node/schema.py) per link: the cumulative counters of each direction plus the bits
per second since the previous sample. The dashboard colours links by that rate against the configured one;
the report can use it when no pcap was captured. The cell runner runs it beside HostMonitor, and the
`testbed up` supervisor for as long as it holds the network.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import time
from pathlib import Path
from typing import Any, Callable

from testbed.experiment.sampler import Sampler
from testbed.shaping.base import DirectionCounters

log = logging.getLogger(__name__)

Counters = dict[str, tuple[DirectionCounters, DirectionCounters]]


def link_records(now: float, ends: dict[str, tuple[str, str]], current: Counters, previous: Counters | None,
                 seconds: float) -> list[dict[str, Any]]:
    """One "link" record per link in `current`; bps over `seconds` since `previous` (0 for the first sample
    and for a counter that went backwards: a link re-created by the shaper)."""
    out = []
    for link_id in sorted(current):
        a, b = ends.get(link_id, ("", ""))
        rec: dict[str, Any] = {"ts": now, "node": "testbed", "link": link_id, "a": a, "b": b,
                               "interval": round(seconds, 3)}
        for i, key in enumerate(("a_to_b", "b_to_a")):
            c = current[link_id][i]
            d = dataclasses.asdict(c)
            before = previous.get(link_id) if previous else None
            delta = c.bytes - before[i].bytes if before is not None else 0
            d["bps"] = round(8 * delta / seconds, 1) if seconds > 0 and delta > 0 else 0.0
            rec[key] = d
        out.append(rec)
    return out


class LinkMonitor(Sampler):
    """Append "link" records to `path` every `interval` seconds until stop()."""
    thread_name = "linkmon"

    def __init__(self, path: Path, read: Callable[[], Counters], ends: dict[str, tuple[str, str]],
                 interval: float = 1.0, name: str = "links") -> None:
        super().__init__(path, interval)
        self.read = read
        self.ends = dict(ends)
        self.log = logging.LoggerAdapter(log, {"node": name})

    def _run(self) -> None:
        try:
            out = open(self.path, "a")
        except OSError as exc:
            # a monitor that cannot work must not take the run down
            self.log.warning("link monitor not running: %s", exc)
            return
        previous: Counters | None = None
        t_prev = time.monotonic()
        warned = False
        with out:
            while True:
                try:
                    current = self.read()
                except Exception as exc:  # noqa: BLE001 - the shaper going away at teardown must not raise here
                    if not warned and not self._stop.is_set():
                        self.log.warning("link monitor: cannot read the shaper's counters: %s", exc)
                        warned = True
                    current = None
                t = time.monotonic()
                if current is not None:
                    for rec in link_records(time.time(), self.ends, current, previous, t - t_prev):
                        out.write(json.dumps(rec, separators=(",", ":")) + "\n")
                    out.flush()
                    self.samples += 1
                    previous, t_prev = current, t
                if self._stop.wait(self.interval):
                    return
