"""Append-only JSON-lines files of the run directory (node/schema.py documents the fields)."""
from __future__ import annotations

import json
import logging
import math
import os
import time
from pathlib import Path
from typing import IO

from node.errors import ConfigError

log = logging.getLogger("node.records")

# Test only: seconds added to the times this node's records stamp (`ts`, a delivery's `deliver_ts`), as if its
# machine's clock were that far ahead; the clock tests of a run over several machines need a known offset on
# one machine. Unset (the default) adds nothing. Times carried in a message (a delivery's `submit_ts`, the
# origin's) are not this node's and stay as the origin stamped them; the origin stamps them with its own offset
# (node/origination.py), as a machine whose clock runs ahead would.
TEST_CLOCK_OFFSET_ENV = "WANBED_TEST_CLOCK_OFFSET"
_STAMPED = ("deliver_ts",)


def offset_from_env(env: dict[str, str] | None = None) -> float:
    """The test-only offset from the environment, seconds (0 when unset); ConfigError when it is not a number."""
    text = (os.environ if env is None else env).get(TEST_CLOCK_OFFSET_ENV, "").strip()
    if not text:
        return 0.0
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise ConfigError(f"{TEST_CLOCK_OFFSET_ENV} must be a number of seconds, got {text!r}.")
    return value

FILES = {"submission": "submissions.jsonl", "delivery": "deliveries.jsonl",
         "metrics": "metrics.jsonl", "report": "reports.jsonl",
         "route": "routes.jsonl", "publication": "publications.jsonl",
         "rate": "rates.jsonl", "gateway": "gateway.jsonl", "pool": "pools.jsonl"}


class Records:
    """One open file per record kind; every line gets `ts` and `node` first."""

    def __init__(self, directory: Path, node: str, clock_offset: float | None = None) -> None:
        self.dir = Path(directory)
        self.node = node
        self.clock_offset = offset_from_env() if clock_offset is None else clock_offset
        self.dir.mkdir(parents=True, exist_ok=True)
        self._files: dict[str, IO[str]] = {}
        self.failed = 0      # record lines lost to a write error: Control Stats `records_failed` tells the testbed

    def write(self, kind: str, /, ts: float | None = None, **fields: object) -> dict:
        """Append one record. A record file that cannot be written (disk full) costs a log line, never the
        operation it records: the spool, not these files, is what the node's promises rest on."""
        rec = {"ts": time.time() if ts is None else ts, "node": self.node, **fields}
        if self.clock_offset:
            rec["ts"] += self.clock_offset
            for name in _STAMPED:
                if isinstance(rec.get(name), (int, float)):
                    rec[name] += self.clock_offset     # type: ignore[operator]
        try:
            f = self._files.get(kind)
            if f is None:
                f = self._files[kind] = open(self.dir / FILES[kind], "a", buffering=1)
            f.write(json.dumps(rec, separators=(",", ":")) + "\n")
        except OSError as exc:
            self.failed += 1
            if self.failed == 1 or self.failed % 1000 == 0:
                log.error("cannot write %s record to %s (%d failed so far): %s", kind, self.dir, self.failed, exc)
        return rec

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()
